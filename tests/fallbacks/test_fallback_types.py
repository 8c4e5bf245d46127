"""The fallback functions for the official operators' features: float16 /
bfloat16 x and scales, ``precision``, ``output_dtype``, blocked quantization
(ragged tails), the sub-byte types (int4 / uint4 / int2 / uint2), float8
with ``saturate`` and float4e2m1.

Each model is an Extended quantize -> dequantize pair given the fallback
functions (``attach_fallbacks``) and run without the library: in
onnxruntime at every optimisation level where it has every op the functions
use (its Cast takes int4 from 1.23 and no release here float4e2m1), and in
onnx.reference.  The expected bits are the NumPy API's (the kernels, tested
against the contract and the official operators in tests/kernels).
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import BF16, assert_same_bits, normal_with_specials
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from ortutil import LEVELS, ONNX_OF, bfloat16_io_fallback, ort_casts_to, run, session, tensor
from packaging.version import Version

import extql
from extql import fallbacks, ort_io
from extql.onnx.fallback_cores import overflow_from
from extql.rules.types import FLOAT_CODES, QUANTIZED, SMALLFLOAT, quantized_type_of, type_opset

pytestmark = pytest.mark.fallback

DOMAIN = "com.amd.quark"
# (the ones the installed onnx knows: onnx 1.19 has no int2 / uint2)
NEW_TYPES = [n for n in ("int4", "uint4", "int2", "uint2", "float8e4m3fn", "float8e4m3fnuz",
                         "float8e5m2", "float8e5m2fnuz", "float4e2m1")
             if hasattr(TensorProto, n.upper())]
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, 7.5,
                    -8.5, 1e30, -1e30, 1e-30, 240.0, 248.0, 464.0, 465.0, 480.0, 496.0,
                    57344.0, 61440.0, 65520.0, 3.4e38], np.float32)


def _code(dtype) -> int:
    return ONNX_OF[np.dtype(dtype)]


def qdq_model(x, s, z, *, opset: int, q_attrs: dict, dq_attrs: dict,
              params: str = "const") -> onnx.ModelProto:
    """x -> ExtendedQuantizeLinear -> q -> ExtendedDequantizeLinear -> y
    (outputs q and y); params "const": scale and zero point are
    initializers, "input": graph inputs."""
    nodes = [helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"], domain=DOMAIN,
                              **q_attrs),
             helper.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"], domain=DOMAIN,
                              **dq_attrs)]
    y_code = dq_attrs.get("output_dtype") or _code(s.dtype)
    inputs = [helper.make_tensor_value_info("x", _code(x.dtype), x.shape)]
    inits = []
    for name, value in (("s", s), ("z", z)):
        if params == "input":
            inputs.append(helper.make_tensor_value_info(name, _code(value.dtype), value.shape))
        else:
            inits.append(tensor(name, value))
    graph = helper.make_graph(
        nodes, "fallback_types", inputs,
        [helper.make_tensor_value_info("q", _code(z.dtype), x.shape),
         helper.make_tensor_value_info("y", y_code, x.shape)], inits)
    return helper.make_model(graph, ir_version=11 if opset >= 23 else 10, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)])


def ort_runs(name: str, opset: int, *arrays: np.ndarray) -> bool:
    """Whether onnxruntime can run (and this test bind) the model's types."""
    if not ort_io.has_typed_ortvalues() and any(a.dtype.name.startswith("float8")
                                                for a in arrays):
        return False  # (bfloat16 is widened at the graph's edge: bfloat16_io_fallback)
    return ort_casts_to(QUANTIZED[name].onnx, opset)


def check(x, s, z, *, opset=25, axis=1, block=0, precision=None, dq_out=None, saturate=None,
          params="const", levels=True):
    """The fallback model's q and y, in every runtime that runs it, are the
    NumPy API's bits.  Returns the runtimes that ran."""
    name = quantized_type_of(z.dtype).name
    q_attrs = {"axis": axis}
    dq_attrs = {"axis": axis}
    if block:
        q_attrs["block_size"] = dq_attrs["block_size"] = block
    if precision is not None:
        q_attrs["precision"] = FLOAT_CODES[np.dtype(precision)]
    if saturate is not None:
        q_attrs["saturate"] = int(saturate)
    if dq_out is not None:
        dq_attrs["output_dtype"] = FLOAT_CODES[np.dtype(dq_out)]
    model = extql.attach_fallbacks(qdq_model(x, s, z, opset=opset, q_attrs=q_attrs,
                                             dq_attrs=dq_attrs, params=params))
    want_q = extql.quantize_linear(x, s, z, axis=axis, block_size=block, precision=precision,
                                   saturate=True if saturate is None else bool(saturate))
    want_y = extql.dequantize_linear(want_q, s, z, axis=axis, block_size=block,
                                     output_dtype=dq_out)
    feeds = {"x": x} if params == "const" else {"x": x, "s": s, "z": z}
    ran = []
    got = ReferenceEvaluator(model).run(None, feeds)
    assert_same_bits(np.asarray(got[0]).astype(np.float32), want_q.astype(np.float32),
                     f"reference q {name}")
    assert_same_bits(np.asarray(got[1]), want_y, f"reference y {name}")
    ran.append("reference")
    if ort_runs(name, opset, x, s, z):
        m, f = bfloat16_io_fallback(model, feeds)
        for level in LEVELS if levels else [None]:
            sess = session(m, register=False, level=level)
            q, y = run(sess, f, [want_q.dtype, want_y.dtype], [x.shape, x.shape])
            assert_same_bits(q.astype(np.float32), want_q.astype(np.float32),
                             f"onnxruntime q {name} level {level}")
            assert_same_bits(y, want_y, f"onnxruntime y {name} level {level}")
        ran.append("onnxruntime")
    return ran


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _params(rng, name: str, shape: tuple[int, ...]):
    qt = QUANTIZED[name]
    s = np.asarray((rng.random(shape) + 0.05) * 0.37, np.float32)
    s = np.where(rng.random(shape) < 0.2, -s, s).astype(np.float32)
    if name.startswith("float8"):
        z = np.zeros(shape, qt.dtype)
    elif qt.is_float:
        z = np.asarray(rng.choice([0.0, 0.5, -1.0, -0.0], shape)).astype(qt.dtype)
    else:
        z = np.asarray(rng.integers(int(qt.lo), int(qt.hi), shape, endpoint=True)).astype(qt.dtype)
    return s, z


@np.errstate(over="ignore")
def _x(rng, shape, scale: float = 30.0) -> np.ndarray:
    return normal_with_specials(rng, shape, scale, SPECIAL)


GRANULARITIES = [("tensor", 1, 0), ("axis", 1, 0), ("axis", -1, 0), ("blocked", 1, 3),
                 ("blocked", -1, 4), ("blocked", 0, 32)]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", NEW_TYPES)
@pytest.mark.parametrize("granularity", GRANULARITIES, ids=lambda g: f"{g[0]}{g[1]}b{g[2]}")
def test_new_types_every_granularity(name, granularity):
    kind, axis, block = granularity
    rng = _rng(name, granularity)
    shape = (3, 6, 37)
    a = axis % len(shape)
    pshape = {"tensor": (), "axis": (shape[a],)}.get(
        kind, shape[:a] + (-(-shape[a] // max(block, 1)),) + shape[a + 1:])
    s, z = _params(rng, name, pshape)
    ran = check(_x(rng, shape), s, z, axis=axis, block=block, opset=type_opset(name) + (
        2 if name.startswith("float8") else 0), levels=kind != "tensor")
    if Version(ort.__version__) >= Version("1.32") and name != "float4e2m1":
        assert "onnxruntime" in ran, "the newest onnxruntime runs every type's fallbacks but float4"


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", [n for n in NEW_TYPES if n.startswith("float8")])
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_saturate_around_the_range_end(name, saturate):
    """Every float32 near the largest value, the overflow threshold and its
    neighbours, both signs, infinities and NaN: saturate=1 clamps, 0 gives
    inf (float8e5m2) or NaN from the first value that rounds beyond."""
    t = SMALLFLOAT[name]
    thr = np.float32(overflow_from(t))
    near = [t.max, np.nextafter(np.float32(t.max), np.float32(np.inf)), thr,
            np.nextafter(thr, np.float32(0)), np.nextafter(thr, np.float32(np.inf)),
            thr * 2, 480.0, 496.0, 61440.0, np.inf, np.nan, 0.0, -0.0, 1e-30]
    x = np.array(near, np.float32)
    x = np.concatenate([x, -x]).astype(np.float32)
    ran = check(x, np.float32(1.0), np.zeros((), t.dtype), axis=0, saturate=saturate, opset=21)
    assert "reference" in ran


@pytest.mark.parametrize("name", [n for n in NEW_TYPES if n.startswith("float8")])
def test_overflow_threshold_is_where_rounding_leaves_the_range(name):
    """overflow_from (the fallback's saturate=0 bound) against ml_dtypes'
    non-saturating conversion: the threshold overflows, the float32 below it
    does not."""
    t = SMALLFLOAT[name]
    thr = np.float32(overflow_from(t))
    below = np.nextafter(thr, np.float32(0))
    dtype = getattr(ml_dtypes, t.ml_name)
    assert not np.isfinite(np.array([thr], np.float32).astype(dtype).astype(np.float32))[0]
    assert np.array([below], np.float32).astype(dtype).astype(np.float32)[0] == t.max


REALS = [np.float32, np.float16, BF16]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("x_type", REALS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("s_type", REALS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "float16", "bfloat16", "int4",
                                  "float8e4m3fn"])
def test_float16_bfloat16_x_and_scales(x_type, s_type, name):
    rng = _rng(x_type, s_type, name)
    shape = (2, 5, 9)
    s, z = _params(rng, name, (5,))
    with np.errstate(over="ignore"):
        x = _x(rng, shape).astype(x_type)
        s = s.astype(s_type)
    check(x, s, z, axis=1, opset=max(21, type_opset(name)), levels=False)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("precision", REALS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("s_type", REALS, ids=lambda t: np.dtype(t).name)
def test_precision_attribute(precision, s_type):
    """The division in ``precision`` whatever the scale's type (ties of the
    float16 / bfloat16 quotient included: a scale of 3 makes many)."""
    rng = _rng(precision, s_type)
    x = np.concatenate([_x(rng, (60,)), np.arange(-300, 300, 0.75, dtype=np.float32)])
    s = np.asarray(np.float32(3.0)).astype(s_type)
    for name in ("int16", "float16", "int8"):
        check(x, s, np.zeros((), QUANTIZED[name].dtype), axis=0, precision=precision, opset=23,
              levels=False)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("dq_out", REALS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("s_type", REALS, ids=lambda t: np.dtype(t).name)
def test_dequantize_output_dtype(dq_out, s_type):
    rng = _rng(dq_out, s_type)
    s, z = _params(rng, "int16", (4,))
    check(_x(rng, (3, 4, 5), 3000.0), s.astype(s_type), z, axis=1, dq_out=dq_out, opset=23,
          levels=False)


@pytest.mark.usefixtures("kernel_isa")
def test_blocked_scales_from_graph_inputs_and_ragged_tails():
    """Blocked parameters that are graph inputs (the shapes known only at
    run time) and block sizes that leave a short last block."""
    rng = _rng("inputs")
    for shape, axis, block in [((5, 33), 1, 32), ((7, 3), 0, 2), ((2, 3, 10), -1, 3),
                               ((1, 1), 1, 4), ((4, 0, 3), 0, 3)]:
        a = axis % len(shape)
        pshape = shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]
        s, z = _params(rng, "int4", pshape)
        check(_x(rng, shape) if 0 not in shape else np.zeros(shape, np.float32), s, z,
              axis=axis, block=block, params="input", levels=False)


def test_a_bad_blocked_scale_fails_at_run_time():
    """A blocked scale whose shape is not x's with ceil(D / block) along the
    axis (known only at run time) makes the run fail, in both runtimes."""
    x = np.ones((4, 8), np.float32)
    s, z = np.ones((4, 3), np.float32), np.zeros((4, 3), np.int8)  # 8 / 4 = 2 blocks, not 3
    model = qdq_model(x, s, z, opset=21, q_attrs={"axis": 1, "block_size": 4},
                      dq_attrs={"axis": 1, "block_size": 4}, params="input")
    for value in [*model.graph.input, *model.graph.output]:  # shapes unknown before the run
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            dim.dim_param = f"{value.name}{i}"
    model = extql.attach_fallbacks(model)
    feeds = {"x": x, "s": s, "z": z}
    with pytest.raises(Exception, match="(?i)reshape|shape|size"):
        run(session(model, register=False), feeds, [np.int8, np.float32], [x.shape, x.shape])
    with pytest.raises(Exception):  # noqa: B017, PT011 - onnx.reference's own error
        ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.usefixtures("kernel_isa")
def test_a_nonzero_float8_zero_point_fails_at_run_time():
    """A float8 dequantize's zero point must be 0: another value (a graph
    input, unknown before the run) makes the fallback fail, never a
    silently different result."""
    code = QUANTIZED["float8e4m3fn"].onnx
    dtype = QUANTIZED["float8e4m3fn"].dtype
    node = helper.make_node("ExtendedDequantizeLinear", ["x", "s", "z"], ["y"], domain=DOMAIN)
    graph = helper.make_graph([node], "dq", [helper.make_tensor_value_info("x", code, [3]),
                                             helper.make_tensor_value_info("z", code, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [2.0])])
    model = extql.attach_fallbacks(helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]))
    x = np.array([1.0, -2.0, 0.5], np.float32).astype(dtype)
    good = ReferenceEvaluator(model).run(None, {"x": x, "z": np.zeros((), dtype)})[0]
    assert_same_bits(good, extql.dequantize_linear(x, np.float32(2.0), np.zeros((), dtype)))
    with pytest.raises(Exception):  # noqa: B017, PT011 - onnx.reference's own error
        ReferenceEvaluator(model).run(None, {"x": x, "z": np.ones((), np.float32).astype(dtype)})
    if ort_io.has_typed_ortvalues():
        sess = session(model, register=False)
        with pytest.raises(Exception, match="(?i)reshape|size"):
            run(sess, {"x": x, "z": np.ones((), np.float32).astype(dtype)}, [np.float32], [(3,)])


@pytest.mark.parametrize("name", NEW_TYPES)
def test_attach_refuses_an_opset_that_cannot_express_the_type(name):
    rng = _rng("opset", name)
    s, z = _params(rng, name, ())
    model = qdq_model(np.ones((2, 3), np.float32), s, z, opset=type_opset(name) - 1,
                      q_attrs={}, dq_attrs={})
    with pytest.raises(ValueError, match=rf"ExtendedQuantizeLinear.*{name}.*opset >= "
                                         rf"{type_opset(name)}.*imports {type_opset(name) - 1}"):
        extql.attach_fallbacks(model)


@pytest.mark.usefixtures("kernel_isa")
def test_quantize_output_dtype_without_a_zero_point():
    """output_dtype names the output type when there is no zero point: the
    node gets an explicit zero of that type."""
    x = _x(_rng("out"), (4, 6))
    node = helper.make_node("ExtendedQuantizeLinear", ["x", "s"], ["q"], domain=DOMAIN,
                            output_dtype=QUANTIZED["int4"].onnx, axis=0)
    graph = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("q", QUANTIZED["int4"].onnx, x.shape)],
        [tensor("s", np.array([0.5, 1, 2, 3], np.float32))])
    model = extql.attach_fallbacks(helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]))
    assert model.graph.node[0].input[2]  # the explicit zero point
    want = extql.quantize_linear(x, np.array([0.5, 1, 2, 3], np.float32), axis=0,
                                 output_dtype=ml_dtypes.int4)
    got = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert_same_bits(np.asarray(got).astype(np.float32), want.astype(np.float32))


def test_several_variants_with_new_types_warn_about_runtimes_without_overload():
    """The type-generic dispatcher covers the eight types only: an operator
    used with int8 and int4 gets per-type functions and a warning."""
    x = np.ones((2, 4), np.float32)
    nodes = [helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z8"], ["q8"], domain=DOMAIN),
             helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z4"], ["q4"], domain=DOMAIN)]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("q8", TensorProto.INT8, x.shape),
         helper.make_tensor_value_info("q4", QUANTIZED["int4"].onnx, x.shape)],
        [tensor("s", np.float32(0.5)), tensor("z8", np.int8(1)),
         tensor("z4", np.zeros((), ml_dtypes.int4))])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    with pytest.warns(UserWarning, match="eight types"):
        out = extql.attach_fallbacks(model)
    assert {f.overload for f in out.functions} == {"int8", "int4"}


@pytest.mark.usefixtures("kernel_isa")
def test_inline_fallbacks_with_blocked_and_float16():
    """inline_fallbacks leaves no Extended node and gives the same bits for
    the new features (blocked via the flat function, float16 statically)."""
    rng = _rng("inline")
    with np.errstate(over="ignore"):
        x = _x(rng, (3, 40)).astype(np.float16)
    s, z = _params(rng, "int4", (3, 2))
    s = s.astype(np.float16)
    model = qdq_model(x, s, z, opset=21, q_attrs={"axis": 1, "block_size": 32},
                      dq_attrs={"axis": 1, "block_size": 32})
    inlined = extql.inline_fallbacks(model)
    assert not [n for n in inlined.graph.node if n.domain == DOMAIN]
    want_q = extql.quantize_linear(x, s, z, axis=1, block_size=32)
    got = ReferenceEvaluator(inlined).run(None, {"x": x})
    assert_same_bits(np.asarray(got[0]).astype(np.float32), want_q.astype(np.float32))
    assert_same_bits(np.asarray(got[1]),
                     extql.dequantize_linear(want_q, s, z, axis=1, block_size=32))


@pytest.mark.usefixtures("kernel_isa")
def test_opset13_model_blocked_float32():
    """At ai.onnx opset 13 (Reshape without allowzero) blocked quantization
    of non-empty tensors still runs."""
    rng = _rng("opset13")
    s, z = _params(rng, "int8", (4, 3))
    check(_x(rng, (4, 10)), s, z, axis=1, block=4, opset=13, levels=False)


def test_every_variant_function_at_its_oldest_opset():
    for name in fallbacks.VARIANTS:
        for quantize in (True, False):
            proto = fallbacks.function_proto(quantize, name, opset=fallbacks.variant_opset(name))
            assert {n.domain for n in proto.node} <= {""}
            if fallbacks.variant_opset(name) > fallbacks.MIN_OPSET:
                with pytest.raises(ValueError, match=f"opset >= {fallbacks.variant_opset(name)}"):
                    fallbacks.function_proto(quantize, name,
                                             opset=fallbacks.variant_opset(name) - 1)
