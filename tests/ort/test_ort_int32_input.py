"""Quantize of int32 ``x`` in onnxruntime: through extql's library (every
optimisation level, one and two threads, scales and zero points as
initializers or inputs, per tensor / per axis on NCHW / blocked, the zero
point given, absent or an empty name, the attribute precision) and through
the fallback functions without the library (onnxruntime at every level and
onnx.reference, at Quark's opset 17 and at 21), against the contract, bit for
bit.  Plus what the tools say of such a node (check, lower_to_standard).
Run once per kernel variant (conftest.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import BF16, assert_same_bits, full_param, param_shape, quantize, zero_points
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from ortutil import LEVELS, ONNX_OF, Q, node_model, run, session, tensor
from packaging.version import Version

import extql
from extql import ort_io
from extql.cli.check import check_model

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

I32 = np.iinfo(np.int32)
SPECIAL = np.array([0, 1, -1, 3, -3, 5, 255, 65519, 65520, 2**24 + 1, 2**24 + 3,
                    2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 16777729, I32.max, I32.min],
                   np.int64).astype(np.int32)
CODE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        BF16: TensorProto.BFLOAT16}
# (x shape, axis, block size, granularity): NCHW activations per tensor and
# per channel, a blocked weight.
LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 3, 5, 7), 1, 0, "axis"),
           ((4, 64), 1, 16, "blocked")]
# Output types the library takes (int4 from onnxruntime 1.21: tests/ort/
# test_ort_subbyte.py) and Python can fetch (float8 from 1.20).
LIBRARY_TYPES = (["int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16"]
                 + (["float8e4m3fn"] if ort_io.has_typed_ortvalues() else [])
                 + (["int4"] if Version(ort.__version__) >= Version("1.21") else []))


def _inputs(rng, shape, axis, block, kind, s_dtype, zp_name, wide: bool):
    n = int(np.prod(shape))
    if wide:
        x = rng.integers(I32.min, I32.max, n, endpoint=True, dtype=np.int64)
    else:
        x = rng.integers(-2000, 2000, n, endpoint=True, dtype=np.int64)
    x[:SPECIAL.size] = SPECIAL
    x = x.astype(np.int32).reshape(shape)
    pshape = param_shape(shape, axis, block, kind)
    s = ((rng.random(pshape) + 0.05) * 3.7).astype(np.float32).astype(s_dtype)
    z = zero_points(rng, zp_name, pshape, bound=1000)
    return x, np.asarray(s), np.asarray(z)


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize(("s_type", "precision"), [
    (np.float32, None), (np.float16, None), (BF16, None), (np.float32, BF16),
    (np.float32, np.float16), (np.float16, np.float32),
])
@pytest.mark.parametrize("zp_name", LIBRARY_TYPES)
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_int32_quantize_in_the_library(level, s_type, precision, zp_name, shape, axis, block,
                                       kind):
    rng = np.random.default_rng(5)
    x, s, z = _inputs(rng, shape, axis, block, kind, s_type, zp_name, zp_name.endswith("32"))
    attrs = {} if precision is None else {"precision": CODE[np.dtype(precision)]}
    model, feeds, dtype = node_model(Q, x, s, z, axis=axis, block_size=block or None,
                                     params="input" if kind == "axis" else "const", attrs=attrs)
    sess = session(model, threads=2 if kind == "blocked" else 1, level=level)
    (y,) = run(sess, feeds, [dtype], [shape])
    want = quantize(x, full_param(s, shape, axis, block), full_param(z, shape, axis, block),
                    axis=axis, precision=precision)
    assert_same_bits(y, want, f"int32 x, s {np.dtype(s_type)} precision {precision} -> "
                              f"{zp_name} {kind}")


@pytest.mark.parametrize("zp_form", ["absent", "empty"])
@pytest.mark.parametrize("threads", [1, 2])
def test_int32_quantize_without_zero_point(zp_form, threads):
    """uint8 output (no zero point): onnxruntime types it from the
    registrations; a tensor large enough to be split between threads."""
    rng = np.random.default_rng(6)
    x = rng.integers(-400, 400, (8, 64, 28, 28), endpoint=True).astype(np.int32)
    s = np.float32(1.5)
    model, feeds, dtype = node_model(Q, x, s, None, zp_form=zp_form)
    assert np.dtype(dtype) == np.uint8
    (y,) = run(session(model, threads=threads), feeds, [dtype], [x.shape])
    assert_same_bits(y, quantize(x, s), f"int32 x, zero point {zp_form}")


def _fallback_model(x, s, z, opset: int, **attrs) -> onnx.ModelProto:
    node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["y"],
                            domain="com.amd.quark", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.INT32, x.shape)],
        [helper.make_tensor_value_info("y", ONNX_OF[z.dtype], x.shape)],
        initializer=[tensor("s", s), tensor("z", z)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.amd.quark", 1)])
    model.ir_version = 8
    return extql.attach_fallbacks(model)


@pytest.mark.fallback
@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize(("s_type", "precision"), [
    (np.float32, None), (np.float16, None), (BF16, None), (np.float32, BF16),
])
@pytest.mark.parametrize("zp_name", ["int8", "uint16", "int32", "uint32", "bfloat16"])
@pytest.mark.parametrize("kind", ["tensor", "axis"])
def test_int32_quantize_through_the_fallbacks(opset, s_type, precision, zp_name, kind):
    """Without the library: onnxruntime at every level and onnx.reference
    give the contract's bits (the fallback's Cast to float32 is the
    contract's conversion)."""
    rng = np.random.default_rng(7)
    shape = (2, 3, 5, 7)
    x, s, z = _inputs(rng, shape, 1, 0, kind, s_type, zp_name, zp_name.endswith("32"))
    attrs = {"axis": 1}
    if precision is not None:
        attrs["precision"] = CODE[np.dtype(precision)]
    model = _fallback_model(x, s, z, opset, **attrs)
    want = quantize(x, s, z, axis=1, precision=precision)
    if z.dtype != BF16 or Version(ort.__version__) >= Version("1.20"):
        for level in LEVELS:
            (y,) = run(session(model, register=False, level=level), {"x": x}, [z.dtype],
                       [shape])
            assert_same_bits(y, want, f"fallback in onnxruntime, level {level}")
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert_same_bits(ref, want, "fallback in onnx.reference")


def test_tools_on_an_int32_quantize():
    """check accepts int32 x (and names the types it takes for others);
    lower_to_standard leaves the node, saying why."""
    x = np.zeros((2, 3), np.int32)
    model = _fallback_model(x, np.float32(2), np.int8(0), 21)
    assert check_model(model) == (1, [])
    report: list[str] = []
    lowered = extql.lower_to_standard(model, report=report)
    assert [n.op_type for n in lowered.graph.node] == ["ExtendedQuantizeLinear"]
    assert any("x is int32" in r and "no kernel" in r for r in report), report
    bad = _fallback_model(x, np.float32(2), np.int8(0), 21)
    bad.graph.input[0].type.tensor_type.elem_type = TensorProto.INT64
    _, problems = check_model(bad)
    assert any("must be one of float32, float16, bfloat16, int32, it is int64" in p
               for p in problems), problems
