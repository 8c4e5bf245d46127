"""The fallbacks inlined (``extql.inline_fallbacks``) and run in OpenVINO
(CPU, ``INFERENCE_PRECISION_HINT`` f32) and tract, against the NumPy API,
bit for bit: one-node models of the eight v1 types, quantize and
dequantize, per tensor and per axis, with the special values of
tests/fallback_cases.py.

Run by the tox envs ``openvino`` and ``tract`` (each installs its runtime
and names it in ``EXTQL_RUNTIMES``, which makes a missing runtime an error);
elsewhere the cases of the runtimes that are installed run (none: no case).  What does not
hold yet is listed in ``NOT_YET`` with its cause (docs/guide/runtimes.rst) and is
a strict xfail: a case that starts to hold fails the run until it is moved
out of the list.
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

pytestmark = [pytest.mark.fallback, pytest.mark.usefixtures("kernel_isa")]

V1 = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)
CODE = {np.dtype(np.float32): 1, np.dtype(np.float16): 10, BF16: 16, np.dtype(np.int8): 3,
        np.dtype(np.uint8): 2, np.dtype(np.int16): 5, np.dtype(np.uint16): 4,
        np.dtype(np.int32): 6, np.dtype(np.uint32): 12}

# (runtime, "Q"/"DQ", type) -> the cause; see docs/guide/runtimes.rst.
_DIVISION = "Div is a * (1 / b) there, not correctly rounded: the 32-bit quotient differs"
_BF16_CAST = "OpenVINO's Cast to bfloat16 truncates; bfloat16 inputs are not taken as such"
_NO_BF16 = "tract has no bfloat16 type (unsupported)"
# float16 with a zero point of 0: the sign of zero (-0 where the contract
# gives +0) is lost where these runtimes simplify the opaque +0 away.
_SIGNED_ZERO_WHY = "float16, zero point 0: the sign of zero is lost (x + 0 simplified)"
_REWRITE = ("OpenVINO rewrites (x - zp) * s as x * s - zp * s (two roundings) when zp is "
            "not 0")
_WIDE = "uint32 >= 2**31 through int64 narrowed (OpenVINO runs int64 as int32; tract too)"
# (runtime, direction, type, zero point 0?) -> the cause
NOT_YET_ZP = {
    **{("openvino", "DQ", t, False): _REWRITE
       for t in ("int8", "uint8", "int16", "uint16", "int32")},
    **{(rt, "DQ", "uint32", zero): _WIDE for rt in ("openvino", "tract")
       for zero in (False, True)},
    ("tract", "Q", "float16", True): _SIGNED_ZERO_WHY,
    ("openvino", "DQ", "float16", True): _SIGNED_ZERO_WHY,
}
# (runtime, direction, type, granularity, zero point 0?) -> the cause
NOT_YET_ONE = {("openvino", "Q", "float16", "tensor", True): _SIGNED_ZERO_WHY}
NOT_YET = {
    **{(rt, "Q", t): _DIVISION for rt in ("openvino", "tract") for t in ("int32", "uint32")},
    **{("openvino", d, "bfloat16"): _BF16_CAST for d in ("Q", "DQ")},
    **{("tract", d, "bfloat16"): _NO_BF16 for d in ("Q", "DQ")},
}


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


def run_openvino(model: onnx.ModelProto, x: np.ndarray, tmp_path) -> np.ndarray:
    import openvino as ov
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    out = compiled([x])
    return np.asarray(out[compiled.outputs[0]])


def run_tract(model: onnx.ModelProto, x: np.ndarray, tmp_path) -> np.ndarray:
    import tract
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    runnable = tract.onnx().load(str(path)).into_model().into_runnable()
    return runnable.run([x])[0].to_numpy()


_WANTED = [n for n in os.environ.get("EXTQL_RUNTIMES", "").split(",") if n]
RUNTIMES = {name: run for name, run in (("openvino", run_openvino), ("tract", run_tract))
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
                    _why = (NOT_YET.get((_rt, _d, _t)) or NOT_YET_ZP.get((_rt, _d, _t, _zero))
                            or NOT_YET_ONE.get((_rt, _d, _t, _g, _zero)))
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
