"""The fallbacks inlined (``extql.inline_fallbacks``) and run in OpenVINO
(CPU, ``INFERENCE_PRECISION_HINT`` f32) and tract, against the NumPy API,
bit for bit: one-node models of the eight v1 types, quantize and
dequantize, per tensor and per axis, with the special values of
tests/fallback_cases.py.

Run by the tox envs ``openvino`` and ``tract`` (each installs its runtime
and names it in ``EXTQL_RUNTIMES``, which makes a missing runtime an error);
elsewhere the cases of the runtimes that are installed run (none: no case).  What does not
hold yet is :data:`extql.tools.runtimes.LIMITS` (docs/guide/runtimes.rst shows it)
and is a strict xfail: a case that starts to hold fails the run until the
table says so.
"""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import onnx
import pytest
from contract import TYPES
from fallback_cases import quantized_x, special_x, zero_points
from onnx import helper, numpy_helper

import extql
from extql.tools import runtimes
from extql.tools.runtimes import limit_of

pytestmark = [pytest.mark.fallback, pytest.mark.usefixtures("kernel_isa")]

V1 = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)
CODE = {np.dtype(np.float32): 1, np.dtype(np.float16): 10, BF16: 16, np.dtype(np.int8): 3,
        np.dtype(np.uint8): 2, np.dtype(np.int16): 5, np.dtype(np.uint16): 4,
        np.dtype(np.int32): 6, np.dtype(np.uint32): 12}

# What does not hold yet is extql.tools.runtimes.LIMITS, the table the docs
# show and `extql inline --target` warns by: each such case is a strict xfail.


def why_not(runtime: str, direction: str, qtype: str, granularity: str, zero: bool) -> str | None:
    """The cause LIMITS gives for such a case, or None where it must hold."""
    lim = limit_of(runtime, direction, qtype, zero, granularity)
    return None if lim is None else f"{lim.verdict}: {lim.cause}"


def _tensor(name: str, a: np.ndarray) -> onnx.TensorProto:
    a = np.asarray(a)
    if a.dtype == BF16:
        return helper.make_tensor(name, 16, a.shape, a.view(np.uint16).reshape(-1).tolist())
    return numpy_helper.from_array(a, name)


def one_node(quantize: bool, x, s, z, axis) -> onnx.ModelProto:
    op = "ExtendedQuantizeLinear" if quantize else "ExtendedDequantizeLinear"
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node(op, ["x", "s", "z"], ["y"], domain="com.amd.quark", **attrs)
    y_code = CODE[z.dtype] if quantize else 1
    graph = helper.make_graph(
        [node], "one_node", [helper.make_tensor_value_info("x", CODE[x.dtype], x.shape)],
        [helper.make_tensor_value_info("y", y_code, x.shape)], [_tensor("s", s), _tensor("z", z)])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.amd.quark", 1)])


def _runner(runtime: str):
    """x -> y of a one-node model, run as ``extql run --runtime`` runs it."""
    def run(model: onnx.ModelProto, x: np.ndarray, tmp_path) -> np.ndarray:
        return runtimes.run(model, {"x": x}, runtime)["y"]
    return run


_WANTED = [n for n in os.environ.get("EXTQL_RUNTIMES", "").split(",") if n]
RUNTIMES = {name: _runner(name) for name in ("openvino", "tract")
            if name in _WANTED or importlib.util.find_spec(name) is not None}
for _name in _WANTED:
    assert _name in RUNTIMES, f"EXTQL_RUNTIMES names {_name!r}, which is not installed"


def same_bits(expected: np.ndarray, got: np.ndarray) -> bool:
    expected, got = np.asarray(expected), np.asarray(got)
    if expected.shape != got.shape:
        return False
    if expected.dtype.kind != "f" and expected.dtype != BF16:
        return bool((expected == got.astype(expected.dtype)).all())
    e = expected.astype(np.float32)
    g = got.astype(np.float32)
    nan = np.isnan(e)
    if (nan != np.isnan(g)).any():
        return False
    return bool((e[~nan].view(np.uint32) == g[~nan].view(np.uint32)).all())


def _case(direction: str, qtype: str, granularity: str, seed: int):
    rng = np.random.default_rng(seed)
    n = None if granularity == "tensor" else 4
    axis = None if n is None else 0
    if qtype in ("float16", "bfloat16"):
        s = np.float32(1.0) if n is None else np.full(4, 0.5, np.float32)
    else:
        s = (np.float32(0.37) if n is None
             else rng.choice(np.array([0.5, 1.0, 0.37, 3.0, 1e-3], np.float32), 4))
    z = zero_points(qtype, n, rng)
    if direction == "Q":
        x = special_x((4, 64), rng, qtype)
        return x, s, z, axis, extql.quantize_linear(x, s, z, axis=0 if n else 1)
    x = quantized_x(qtype, (4, 64), rng)
    return x, s, z, axis, extql.dequantize_linear(x, s, z, axis=0 if n else 1)


PARAMS = []
for _rt in RUNTIMES:
    for _d in ("Q", "DQ"):
        for _t in V1:
            for _g in ("tensor", "axis"):
                for _zero in (False, True):
                    _why = why_not(_rt, _d, _t, _g, _zero)
                    _marks = [pytest.mark.xfail(reason=_why, strict=True)] if _why else []
                    _id = f"{_rt}-{_d}-{_t}-{_g}-{'zp0' if _zero else 'zp'}"
                    PARAMS.append(pytest.param(_rt, _d, _t, _g, _zero, marks=_marks, id=_id))


@pytest.mark.parametrize(("runtime", "direction", "qtype", "granularity", "zero"), PARAMS)
def test_one_node_bits(runtime, direction, qtype, granularity, zero, tmp_path):
    """Every output bit of the inlined one-node model equals the NumPy API's."""
    x, s, z, axis, expected = _case(direction, qtype, granularity, seed=len(qtype) * 7 + zero)
    if zero:  # Quark's float16 / bfloat16 nodes: zero point 0 (the sign of zero matters)
        z = np.zeros_like(z)
        expected = (extql.quantize_linear if direction == "Q" else extql.dequantize_linear)(
            x, s, z, axis=0 if axis == 0 else 1)
    assert TYPES[qtype][0] == z.dtype
    model = extql.inline_fallbacks(one_node(direction == "Q", x, s, z, axis))
    got = RUNTIMES[runtime](model, x, tmp_path)
    assert same_bits(expected, got), f"{runtime} {direction} {qtype} {granularity}"
