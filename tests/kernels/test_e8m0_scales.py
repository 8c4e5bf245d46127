"""float8e8m0 scales (QuantizeLinear-25 / DequantizeLinear-25): every code
is a power of two 2^(code - 127) or NaN (code 255), which extql widens to
float32 exactly, so the results are those of that float32 scale (the
contract's formulas, tests/contract.py).  Through the NumPy API, the
reference ops and the fallback functions (onnxruntime and onnx.reference);
extql's onnxruntime library does not take the type (onnxruntime refuses it
for a custom operator's input, naming the node's input)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import assert_same_bits, dequantize, quantize
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from packaging.version import Version

import extql
import extql.reference
from extql.onnx.check import check_node
from extql.onnx.graph import extended_nodes, infer_types

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
CODES = np.arange(256, dtype=np.uint8)
DOMAIN = "com.amd.quark"


def _as_float32(codes: np.ndarray) -> np.ndarray:
    """The float32 value of each code, computed from the format (not by
    ml_dtypes): 2^(code - 127), NaN for 255."""
    c = codes.astype(np.int64)
    out = np.ldexp(np.float64(1.0), np.minimum(c, 254) - 127).astype(np.float32)
    return np.where(c == 255, np.float32(np.nan), out).astype(np.float32)


X = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 3.0, 100.0, -300.0, 1e-38, 1e30, np.inf, -np.inf,
              np.nan, 6.0e4, 0.75], np.float32)


@pytest.mark.parametrize("qtype", ["int8", "uint16", "int32", "float16"])
def test_quantize_with_every_code(qtype):
    zp = np.zeros((), {"int8": np.int8, "uint16": np.uint16, "int32": np.int32,
                       "float16": np.float16}[qtype])
    for code in CODES:
        s = np.array(code, np.uint8).view(E8M0)
        got = extql.quantize_linear(X, s, zp)
        want = quantize(X, _as_float32(np.array(code)), zp)
        assert_same_bits(got, want, f"{qtype} code {code}")


@pytest.mark.parametrize("out", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dequantize_with_every_code_per_axis(out):
    q = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    q = np.repeat(q, 3, axis=0)  # (3, 256): axis 1 has one scale per code
    s = CODES.view(E8M0)
    zp = np.full(256, 3, np.int8)
    got = extql.dequantize_linear(q, s, zp, axis=1, output_dtype=out)
    assert_same_bits(got, dequantize(q, _as_float32(CODES), zp, axis=1, output_dtype=out))


def test_errors_name_the_operator_and_the_problem():
    s = np.array(127, np.uint8).view(E8M0)
    with pytest.raises(TypeError, match="ExtendedDequantizeLinear: a float8e8m0 x_scale needs "
                                        "output_dtype"):
        extql.dequantize_linear(np.array([1], np.int8), s)
    with pytest.raises(TypeError, match="y_scale must be one of float32, float16, bfloat16, "
                                        "float8e8m0, int32, got int64"):
        extql.quantize_linear(X, np.int64(2))


def _model(x_shape, codes, opset=25, output_dtype=TensorProto.FLOAT16, blocked=False):
    zp = np.zeros(codes.shape, np.int8)
    attrs = {"axis": 1} | ({"block_size": 2} if blocked else {})
    dq_attrs = dict(attrs) | ({"output_dtype": output_dtype} if output_dtype else {})
    nodes = [helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"], domain=DOMAIN,
                              **attrs),
             helper.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"], domain=DOMAIN,
                              **dq_attrs)]
    graph = helper.make_graph(
        nodes, "e8m0", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", output_dtype or TensorProto.FLOAT, x_shape)],
        [helper.make_tensor("s", TensorProto.FLOAT8E8M0, list(codes.shape), codes.tobytes(),
                            raw=True),
         onnx.numpy_helper.from_array(zp, "z")])
    return helper.make_model(graph, ir_version=11, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)]), zp


@pytest.mark.parametrize("blocked", [False, True])
def test_models_through_reference_ops_and_fallbacks(blocked):
    """The reference ops and the fallback functions (onnxruntime where its
    Cast takes the type, and onnx.reference) give the NumPy API's bits."""
    rng = np.random.default_rng(25)
    x = (rng.standard_normal((2, 6, 5)) * 50).astype(np.float32)
    x.reshape(-1)[:X.size] = X
    codes = np.array([120, 126, 127, 128, 131, 140], np.uint8)
    if blocked:
        codes = np.repeat(codes[None, :3, None], 2, 0).repeat(5, 2)  # (2, 3, 5): blocks of 2
    model, zp = _model(x.shape, codes, blocked=blocked)
    s = codes.view(E8M0)
    block = 2 if blocked else 0
    want = extql.dequantize_linear(extql.quantize_linear(x, s, zp, axis=1, block_size=block),
                                   s, zp, axis=1, block_size=block, output_dtype=np.float16)
    got = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, {"x": x})[0]
    assert_same_bits(got, want, "reference ops")
    standalone = extql.attach_fallbacks(model)
    assert_same_bits(ReferenceEvaluator(standalone).run(None, {"x": x})[0], want,
                     "fallbacks in onnx.reference")
    try:
        sess = ort.InferenceSession(standalone.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - an onnxruntime without opset 25 / the type
        assert Version(ort.__version__) < Version("1.32"), exc  # the newest runs it
        return
    assert_same_bits(sess.run(None, {"x": x})[0], want, "fallbacks in onnxruntime")


def test_check_attach_and_the_library_say_what_is_wrong():
    codes = np.array([127, 128, 129, 130, 131, 132], np.uint8)
    model, _ = _model((2, 6), codes, output_dtype=0)
    types = infer_types(model)
    problems = [p for ext in extended_nodes(model) for p in check_node(ext, types)]
    assert any("float8e8m0 scale 's' needs the attribute output_dtype" in p for p in problems)
    old, _ = _model((2, 6), codes, opset=21)
    with pytest.raises(ValueError, match="float8e8m0 scale: the fallback functions need a "
                                         r"default-domain \(ai.onnx\) opset >= 25"):
        extql.attach_fallbacks(old)
    model, _ = _model((2, 6), codes)
    so = ort.SessionOptions()
    extql.register(so)
    # (releases without IR version 11 refuse the model itself, as clearly)
    with pytest.raises(Exception, match=r"(?i)float8e8m0.*ExtendedQuantizeLinear|"
                                        r"ExtendedQuantizeLinear.*float8e8m0|IR version: 11"):
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
