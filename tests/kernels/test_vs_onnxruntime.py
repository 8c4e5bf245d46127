"""The NumPy API against onnxruntime's own QuantizeLinear / DequantizeLinear
(opset 21), bit for bit, for the types both support."""

from __future__ import annotations

import numpy as np
import pytest
from contract import TYPES, assert_same_bits

import extql

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32
SHARED_Q = ["int8", "uint8", "int16", "uint16"]
SHARED_DQ = SHARED_Q + ["int32"]


def _run_official(op: str, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, axis: int):
    """Run one official Q/DQ node (opset 21) in onnxruntime."""
    inputs = ["x", "s"] + (["zp"] if zp is not None else [])
    inits = [numpy_helper.from_array(scale, "s")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
    out_type = (
        TensorProto.FLOAT
        if op == "DequantizeLinear"
        else helper.np_dtype_to_tensor_dtype(zp.dtype if zp is not None else np.dtype(np.uint8))
    )
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], axis=axis)],
        "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
        [helper.make_tensor_value_info("y", out_type, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _inputs(shape, rng):
    x = (rng.standard_normal(shape) * 3000).astype(F32)
    flat = x.reshape(-1)
    special = np.array(
        [np.nan, -np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -0.5, -2.5, 1e30, -1e30, 3.4e38,
         127.5, -128.5, 255.5, 32767.5, -32768.5, 65535.5, 1e-45, -0.0],
        F32,
    )
    flat[: special.size] = special
    # Ties everywhere: integers + 0.5 at scale 1 become ties after division.
    flat[special.size : special.size + 200] = np.arange(-100, 100) + F32(0.5)
    return x


@pytest.mark.parametrize("name", SHARED_Q)
@pytest.mark.parametrize("scale", [1.0, 0.37, 12.5])
@pytest.mark.parametrize("n", [1000, 200_000])
def test_quantize_per_tensor(name, scale, n):
    rng = np.random.default_rng(n)
    x = _inputs((n,), rng)
    dt, lo, hi = TYPES[name]
    for zp in (np.array(0, dt), np.array((lo + hi) // 3, dt), np.array([hi // 2], dt)):
        s = np.array(scale, F32).reshape(zp.shape)
        want = _run_official("QuantizeLinear", x, s, zp, 1)
        assert_same_bits(extql.quantize_linear(x, s, zp), want, name)
    if name == "uint8":
        want = _run_official("QuantizeLinear", x, np.array(scale, F32), None, 1)
        assert_same_bits(extql.quantize_linear(x, F32(scale)), want, "no zero point")


@pytest.mark.parametrize("name", SHARED_Q)
@pytest.mark.parametrize("shape,axis", [((4, 6, 50), 1), ((4, 6, 50), -1), ((40, 3, 2000), 0)])
def test_quantize_per_axis(name, shape, axis):
    rng = np.random.default_rng(7)
    x = _inputs(shape, rng)
    dt, lo, hi = TYPES[name]
    d = shape[axis]
    s = (rng.random(d) * 4 + 0.05).astype(F32)
    zp = rng.integers(lo, hi, d, endpoint=True).astype(dt)
    want = _run_official("QuantizeLinear", x, s, zp, axis)
    assert_same_bits(extql.quantize_linear(x, s, zp, axis=axis), want, name)


@pytest.mark.parametrize("name", SHARED_DQ)
@pytest.mark.parametrize("shape,axis", [((100_000,), 0), ((4, 6, 50), 1), ((4, 6, 50), -1)])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize(name, shape, axis, per_axis):
    rng = np.random.default_rng(8)
    dt, lo, hi = TYPES[name]
    x = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    x.reshape(-1)[:2] = [lo, hi]
    d = shape[axis] if per_axis else 1
    pshape = (d,) if per_axis else ()
    s = (rng.random(pshape) * 0.1 + 1e-3).astype(F32)
    if name == "int32":
        zp = np.zeros(pshape, dt)  # onnxruntime's int32 dequantize takes zero point 0
    else:
        zp = rng.integers(lo, hi, pshape, endpoint=True).astype(dt)
    want = _run_official("DequantizeLinear", x, s, zp, axis)
    assert_same_bits(extql.dequantize_linear(x, s, zp, axis=axis), want, name)
    want = _run_official("DequantizeLinear", x, s, None, axis)
    assert_same_bits(extql.dequantize_linear(x, s, axis=axis), want, name + " no zero point")
