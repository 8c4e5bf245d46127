"""The onnxscript fallbacks, run by onnxruntime (without the extql library)
and by onnx.reference, against the independent contract (tests/contract.py).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxscript
import pytest
from contract import TYPES, assert_same_bits, case_rng, dequantize, quantize
from fallback_cases import FORMS, quantized_x, random_scale, special_x, zero_points
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx_helpers import (
    DOMAIN,
    LEGACY,
    ONNX_OF,
    make_model,
    qdq_model,
    run_ort,
    run_reference,
    value_info,
)
from onnxscript import FLOAT, INT16
from onnxscript import opset21 as op

import extql
from extql import fallbacks
from extql.opset import quark

# These run models through the fallback functions with the library not
# registered: while they run, registering a library is refused (conftest.py).
pytestmark = pytest.mark.fallback

RUNNERS = ["onnxruntime", "reference"]


def run(runner: str, model: onnx.ModelProto, feeds: dict) -> dict:
    if runner == "onnxruntime":
        return run_ort(model, feeds)
    return run_reference(model, feeds)


@functools.cache
def _model(kind, qtype, form, with_zp, domain=DOMAIN):
    rng = case_rng(kind, qtype, form, with_zp)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    n = None if s_shape is None else s_shape[0]
    zp = zero_points(qtype, n, rng) if with_zp else None
    model = qdq_model(
        qtype if with_zp else None, x_shape, scale, zp, axis=axis, domain=domain,
        chain="q" if kind == "q" else "dq",
    )
    return extql.attach_fallbacks(model), scale, zp, axis


# Without a zero point the output is uint8: one "default" case per form.
QUANTIZE_CASES = [(t, True) for t in TYPES] + [("uint8", False)]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize(
    "qtype,with_zp", QUANTIZE_CASES, ids=[t if z else "default" for t, z in QUANTIZE_CASES]
)
def test_quantize_function(qtype, form, with_zp, runner):
    model, scale, zp, axis = _model("q", qtype, form, with_zp)
    rng = np.random.default_rng(1)
    x = special_x(FORMS[form][0], rng, qtype)
    got = run(runner, model, {"x": x})["y"]
    expected = quantize(x, scale, zp, axis=1 if axis is None else axis)
    assert_same_bits(got, expected, f"{runner} quantize {qtype} {form}")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "nozp"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", list(TYPES))
def test_dequantize_function(qtype, form, with_zp, runner):
    rng = np.random.default_rng(2)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    n = None if s_shape is None else s_shape[0]
    zp = zero_points(qtype, n, rng) if with_zp else None
    model = extql.attach_fallbacks(
        qdq_model(qtype, x_shape, scale, zp, axis=axis, chain="dq")
    )
    x = quantized_x(qtype, x_shape, rng)
    got = run(runner, model, {"x": x})["z"]
    expected = dequantize(x, scale, zp, axis=1 if axis is None else axis)
    assert_same_bits(got, expected, f"{runner} dequantize {qtype} {form}")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("qtype", ["int32", "uint32"])
def test_wide_zero_point_addition_is_exact(qtype, runner):
    """r + zp is not representable in float32: the fallback must add exactly."""
    dt = TYPES[qtype][0]
    x = np.array([16777217.0, 2147483520.0, -2147483520.0, 4294967040.0, 1e9, 3.0], np.float32)
    zps = [dt.type(123456789), dt.type(7)] if qtype == "uint32" else [dt.type(-123456789),
                                                                      dt.type(101)]
    for zp in zps:
        zp = np.asarray(zp)
        model = extql.attach_fallbacks(qdq_model(qtype, [6], np.float32(1.0), zp, chain="q"))
        got = run(runner, model, {"x": x})["y"]
        assert_same_bits(got, quantize(x, np.float32(1.0), zp), f"{runner} {qtype} zp={zp}")
        # And the value is really the exact sum (not a float32 rounding of it).
        exact = np.clip(np.rint(x.astype(np.float64)) + int(zp), *TYPES[qtype][1:])
        assert got.astype(np.float64).tolist() == exact.tolist()


def _near(values: list[float], steps: int = 3) -> np.ndarray:
    """Every float32 within ``steps`` representable values of each value."""
    out = []
    for v in values:
        f = np.float32(v)
        lo = hi = f
        out.append(f)
        for _ in range(steps):
            lo, hi = np.nextafter(lo, np.float32(-np.inf)), np.nextafter(hi, np.float32(np.inf))
            out.extend([lo, hi])
    return np.array(out, np.float32)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("qtype", ["int32", "uint32"])
def test_wide_saturation_window(qtype, runner):
    """The 32-bit quantize carries r + zp in two float32 parts and clamps
    each: every r near the saturation bounds (lo - zp, hi - zp), near the
    parts' grid (multiples of 65536, 2**31, 2**32, 2**33), ties, +-inf, NaN
    and huge values, with zero points at the type's extremes, against the
    contract."""
    dt, lo, hi = TYPES[qtype]
    if qtype == "uint32":
        zps = [0, 1, 65535, 65536, 2**31 - 1, 2**31, 3000000000, 2**32 - 1]
    else:
        zps = [0, 1, -1, 65536, -65537, 2**31 - 1, -(2**31), 123456789, -987654321]
    grid = [k * 65536.0 + d for k in (-32769, -32768, -1, 0, 1, 32767, 32768, 65535, 65536)
            for d in (-0.5, 0.0, 0.5, 1.5)]
    base = [0.0, 2.0**31, -(2.0**31), 2.0**32, -(2.0**32), 2.0**33, -(2.0**33), 1e30, -1e30,
            np.inf, -np.inf, np.nan, 16777217.0, 8388608.5, -8388609.5, *grid]
    for zp in zps:
        zp = np.asarray(zp, dt)
        x = _near(base + [float(lo) - int(zp), float(hi) - int(zp)])
        model = extql.attach_fallbacks(qdq_model(qtype, [x.size], np.float32(1.0), zp,
                                                 chain="q"))
        got = run(runner, model, {"x": x})["y"]
        assert_same_bits(got, quantize(x, np.float32(1.0), zp), f"{runner} {qtype} zp={zp}")
        inlined = run(runner, extql.inline_fallbacks(model), {"x": x})["y"]
        assert_same_bits(inlined, got, f"{runner} {qtype} zp={zp} inlined")


@pytest.mark.parametrize("runner", RUNNERS)
def test_float_nan_stays_nan(runner):
    """NaN quantizes to a NaN for float16 / bfloat16 (any NaN: the payload is
    not part of the contract), whatever its payload and sign and wherever it
    sits (13 elements: onnxruntime casts blocks of 8 and the rest one by one);
    the other elements keep their exact bits."""
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFD55555, 0x7FFFFFFF], np.uint32)
    x = np.concatenate([bits, np.full(3, 0x3F800000, np.uint32), bits]).view(np.float32)
    for qtype, one in (("float16", 0x3C00), ("bfloat16", 0x3F80)):
        zp = np.zeros((), TYPES[qtype][0])
        model = extql.attach_fallbacks(qdq_model(qtype, [13], np.float32(1.0), zp, chain="q"))
        got = run(runner, model, {"x": x})["y"]
        nan = np.isnan(x)
        assert np.isnan(got[nan].astype(np.float32)).all(), qtype
        assert got.view(np.uint16)[~nan].tolist() == [one] * 3, qtype
        assert_same_bits(got, quantize(x, np.float32(1.0), zp), qtype)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("qtype", list(TYPES))
def test_zero_scale_channel(qtype, runner):
    """x / 0 is +-inf or NaN: saturation / NaN rules apply per element."""
    dt = TYPES[qtype][0]
    scale = np.array([0.0, 1.0], np.float32)
    zp = np.zeros(2, dt)
    x = np.array([[1.0, 1.0], [-1.0, 2.5], [0.0, -0.0]], np.float32)
    model = extql.attach_fallbacks(qdq_model(qtype, [3, 2], scale, zp, axis=1, chain="q"))
    got = run(runner, model, {"x": x})["y"]
    assert_same_bits(got, quantize(x, scale, zp, axis=1), f"{runner} {qtype}")


@pytest.mark.parametrize("runner", RUNNERS)
def test_empty_tensor(runner):
    zp = np.zeros(3, np.int16)
    scale = np.ones(3, np.float32)
    model = extql.attach_fallbacks(qdq_model("int16", [0, 3, 2], scale, zp, axis=1))
    got = run(runner, model, {"x": np.zeros((0, 3, 2), np.float32)})
    assert got["y"].shape == (0, 3, 2) and got["y"].dtype == np.int16
    assert got["z"].shape == (0, 3, 2) and got["z"].dtype == np.float32


# --------------------------------------------------------------------------
# Scale and zero point as graph inputs: the granularity is decided at run time.


@functools.cache
def _dynamic_model(qtype: str, rank: int, axis: int):
    elem = ONNX_OF[qtype]
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp"], ["y"], domain=DOMAIN,
                         axis=axis),
        helper.make_node("ExtendedDequantizeLinear", ["y", "s", "zp"], ["z"], domain=DOMAIN,
                         axis=axis),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, [None] * rank),
         value_info("s", TensorProto.FLOAT, None), value_info("zp", elem, None)],
        [value_info("y", elem, [None] * rank), value_info("z", TensorProto.FLOAT, [None] * rank)],
    )
    return extql.attach_fallbacks(model)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    qtype=st.sampled_from(list(TYPES)),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    per_axis=st.booleans(),
    axis_seed=st.integers(0, 5),
    seed=st.integers(0, 2**31),
    runner=st.sampled_from(RUNNERS),
)
def test_random_granularity(qtype, shape, per_axis, axis_seed, seed, runner):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    axis = axis_seed % (2 * rank) - rank  # in [-rank, rank - 1]
    x = special_x(tuple(shape), rng, qtype)
    n = shape[axis] if per_axis else None
    scale = np.asarray(random_scale(None if n is None else (n,), rng), np.float32)
    zp = zero_points(qtype, n, rng)
    model = _dynamic_model(qtype, rank, axis)
    feeds = {"x": x, "s": scale, "zp": zp}
    if runner == "onnxruntime":
        got = run_ort(model, feeds, output_shapes={"y": x.shape, "z": x.shape})
    else:
        got = run_reference(model, feeds)
    q = quantize(x, scale, zp, axis=axis)
    assert_same_bits(got["y"], q, f"{runner} quantize {qtype} axis={axis}")
    assert_same_bits(got["z"], dequantize(q, scale, zp, axis=axis), f"{runner} dequantize")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    "x_shape,s_shape,axis",
    [((2, 3, 4), (4,), 1), ((2, 3, 4), (3,), 3), ((2, 3, 4), (3,), -4), ((2, 3, 4), (1, 3), 1)],
    ids=["wrong-length", "axis-too-big", "axis-too-small", "scale-rank-2"],
)
def test_bad_granularity_is_an_error(x_shape, s_shape, axis, runner):
    """The fallback must fail, not broadcast silently along another axis."""
    model = _dynamic_model("int8", len(x_shape), axis)
    feeds = {
        "x": np.ones(x_shape, np.float32),
        "s": np.ones(s_shape, np.float32),
        "zp": np.zeros(s_shape, np.int8),
    }
    with pytest.raises(Exception):  # noqa: B017 - any runtime's own error type
        if runner == "onnxruntime":
            run_ort(model, feeds, output_shapes={"y": x_shape, "z": x_shape})
        else:
            run_reference(model, feeds)


# --------------------------------------------------------------------------
# The function objects themselves.


def test_function_protos_use_standard_ops_only():
    for quantize_ in (True, False):
        for variant in fallbacks.VARIANTS:
            for domain in (DOMAIN, LEGACY):
                opset = max(17, fallbacks.variant_opset(variant))
                fp = fallbacks.function_proto(quantize_, variant, domain=domain, opset=opset)
                assert fp.domain == domain and fp.overload == variant
                assert {n.domain for n in fp.node} <= {""}
                assert [(o.domain, o.version) for o in fp.opset_import] == [("", opset)]
                assert list(fp.input)[:2] and len(fp.input) == 3
                # The operator's attributes and their defaults (precision and
                # output_dtype: float32's code; attach spells the scale's out).
                expected = [("axis", 1), ("block_size", 0)]
                if quantize_:
                    expected.append(("precision", 1))
                    if variant.startswith("float8"):
                        expected.append(("saturate", 1))
                    expected.append(("output_dtype", 0))
                else:
                    expected.append(("output_dtype", 1))
                assert [(a.name, a.i) for a in fp.attribute_proto] == expected
                ops = {n.op_type for n in fp.node}
                assert not ops & {"CastLike", "Min", "Max"}  # opset >= 13 and ORT-safe


def test_function_proto_rejects_bad_arguments():
    with pytest.raises(ValueError, match="variant"):
        fallbacks.function_proto(True, "float32")
    with pytest.raises(ValueError, match="opset >= 13"):
        fallbacks.function_proto(True, "int8", opset=12)
    with pytest.raises(ValueError, match="domain"):
        fallbacks.function_proto(True, "int8", domain="com.example")


def test_onnxscript_functions_are_exposed():
    assert set(fallbacks.QUANTIZE) == set(fallbacks.VARIANTS)
    fn = fallbacks.QUANTIZE["int16"]
    proto = fn.to_function_proto()
    # One name per variant (tests/fallbacks/test_onnxscript.py calls them from scripts).
    assert (proto.domain, proto.name) == ("ai.extql.fallbacks", "ExtendedQuantizeLinear_int16")
    assert {n.domain for n in proto.node} == {""}
    assert fallbacks.DEQUANTIZE["bfloat16"].to_function_proto().name == (
        "ExtendedDequantizeLinear_bfloat16"
    )


def test_onnxscript_authoring_with_the_quark_opset():
    @onnxscript.script(default_opset=op)
    def qdq(x: FLOAT[2, 8], s: FLOAT, zp: INT16) -> FLOAT[2, 8]:
        q = quark.ExtendedQuantizeLinear(x, s, zp)
        return quark.ExtendedDequantizeLinear(q, s, zp)

    model = extql.to_model_proto(qdq)
    imports = [o if o.domain else helper.make_opsetid("", 21) for o in model.opset_import]
    del model.opset_import[:]
    model.opset_import.extend(imports)
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    q_type = next(v for v in inferred.graph.value_info if v.name == "q").type.tensor_type
    assert q_type.elem_type == TensorProto.INT16
    assert [d.dim_value for d in q_type.shape.dim] == [2, 8]
    # The authored model runs through the fallbacks.
    x = special_x((2, 8), np.random.default_rng(3), "int16")
    s, zp = np.float32(0.25), np.int16(-7)
    attached = extql.attach_fallbacks(model)
    for runner in RUNNERS:
        got = run(runner, attached, {"x": x, "s": np.asarray(s), "zp": np.asarray(zp)})
        expected = dequantize(quantize(x, s, zp), s, zp)
        assert_same_bits(next(iter(got.values())), expected, runner)


def test_quark_opset_checks_types():
    @onnxscript.script(default_opset=op)
    def bad(x: FLOAT[4], s: FLOAT, zp: FLOAT) -> FLOAT[4]:
        return quark.ExtendedQuantizeLinear(x, s, zp)

    # extql checks the types when onnxscript converts (tests/fallbacks/test_onnxscript.py).
    with pytest.raises(TypeError, match="ExtendedQuantizeLinear .*zero point 'zp'.* float"):
        extql.to_model_proto(bad)
    with pytest.raises(Exception, match="attribute"):

        @onnxscript.script(default_opset=op)
        def bad_call(x: FLOAT[4], s: FLOAT) -> FLOAT[4]:
            return quark.ExtendedQuantizeLinear(x, s, s, s)


def test_public_names_are_lazy():
    """The tools are reachable from the package, and ``import extql`` alone
    still does not import onnx or onnxscript."""
    from childproc import run_python

    code = (
        "import sys, extql\n"
        "assert 'onnx' not in sys.modules and 'onnxscript' not in sys.modules\n"
        "names = ['attach_fallbacks', 'inline_fallbacks', 'lower_to_standard', 'reference',"
        " 'quark', 'fallbacks', 'opset']\n"
        "assert all(n in dir(extql) for n in names)\n"
        "assert callable(extql.attach_fallbacks) and extql.reference.OPS\n"
        "assert extql.quark.domain == 'com.amd.quark'\n"
    )
    run_python("-c", code)


def test_inline_reencodes_uint32_held_in_uint64_data():
    """A uint32 zero point held in ONNX's uint64_data field (as Quark writes
    it; tract 0.23 cannot load that form) comes out of inline_fallbacks as
    raw data with the same values, and the model computes the same."""
    zp = np.asarray(3000000000, np.uint32)
    model = qdq_model("uint32", [4], np.float32(0.5), zp, chain="q")
    for init in model.graph.initializer:
        if init.data_type == TensorProto.UINT32:
            init.CopyFrom(helper.make_tensor(init.name, TensorProto.UINT32, init.dims,
                                             [int(zp)], raw=False))
            assert len(init.uint64_data) == 1
    inlined = extql.inline_fallbacks(model)
    held = [i for i in inlined.graph.initializer if i.data_type == TensorProto.UINT32]
    assert held and all(not i.uint64_data and i.raw_data for i in held)
    assert all(onnx.numpy_helper.to_array(i).tolist() == int(zp) for i in held)
    x = np.array([1.0, -1e30, 1e30, 7.25], np.float32)
    assert_same_bits(run_ort(inlined, {"x": x})["y"], quantize(x, np.float32(0.5), zp))
