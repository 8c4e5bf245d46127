"""Quantize with an int32 scale, and with the attribute precision float64, on
every path: the NumPy API (the kernels' float64 stage) and extql's onnxruntime
library (every optimisation level, one and two threads, the scale and zero
point as initializers or inputs, the legacy name).

The official QuantizeLinear takes an int32 scale (opsets 19 / 21 bind it to
an int32 x; from 23 the scale's type T2 includes int32), and ONNX's
reference then divides with NumPy, in float64.  The contract
(tests/contract.py): without ``precision`` an int32 scale divides in
float64 -- the quotient of the exact values, rounded there to an integer
(integer types) or added to the zero point (float16, bfloat16, float4e2m1),
rounded once to float32, then the float32 formula with a scale of 1 --; with a
float precision the scale is rounded to float32 first, as an int32 x is.
Checked against the contract for every output type, x type, scale type,
layout and precision, against onnx.reference's official QuantizeLinear (at
opsets 21, 23 and 25, where its int32 conversion is defined), and on values
where the float64 division gives other bits than a float32 one would.
"""

from __future__ import annotations

import capi
import ml_dtypes
import numpy as np
import pytest
from contract import (
    ALL_TYPES,
    BF16,
    FLOAT_TYPES,
    SMALLFLOAT_TYPES,
    assert_same_bits,
    case_rng,
    full_param,
    param_shape,
    quantize,
    zero_points,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from int32_cases import I32, SPECIAL_S, int32_problems, int32_scales, make_x
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from paths import (
    LEVEL_IDS,
    LIBRARY,
    LIBRARY_LAYOUTS,
    LIBRARY_TYPES,
    NUMPY,
    dequantize_via,
    quantize_via,
)

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = [pytest.mark.usefixtures("kernel_isa"), pytest.mark.usefixtures("kernel_isa")]

X_TYPES = {"int32": np.dtype(np.int32), "float32": np.dtype(np.float32),
           "float16": np.dtype(np.float16), "bfloat16": BF16}
LAYOUTS = [((2, 6, 3, 5), 1, 0, "tensor"), ((2, 6, 3, 5), 1, 0, "axis"),
           ((2, 6, 3, 5), 1, 4, "blocked"), ((6, 40), -1, 0, "axis")]



CONTRACT_CASES = [
    pytest.param(NUMPY, name, xname, layout, precision, None,
                 id=f"numpy-{name}-{xname}-{layout_id}-{precision_id}")
    for precision, precision_id in [(None, "default"), (np.float64, "float64"),
                                    (np.float32, "float32"), (BF16, "bfloat16")]
    for layout, layout_id in zip(LAYOUTS, ["tensor", "nchw-axis", "blocked", "last-axis"],
                                 strict=True)
    for xname in X_TYPES for name in ALL_TYPES
] + [
    pytest.param(LIBRARY, name, xname, layout, precision, level,
                 id=f"library-{name}-{xname}-{layout[3]}-{precision_id}-{level_id}")
    for layout in LIBRARY_LAYOUTS for name in LIBRARY_TYPES
    for xname in ("int32", "float32", "float16")
    for precision, precision_id in [(None, "float64"), (BF16, "bfloat16")]
    for level_id, level in LEVEL_IDS.items()
]


@pytest.mark.parametrize(("path", "name", "xname", "layout", "precision", "level"),
                         CONTRACT_CASES)
def test_int32_scale_matches_the_contract(path, name, xname, layout, precision, level):
    shape, axis, block, kind = layout
    rng = case_rng("int32-scale", path, name, xname, kind, str(precision))
    x = make_x(rng, shape, X_TYPES[xname])
    pshape = param_shape(shape, axis, block, kind)
    s = int32_scales(rng, pshape)
    z = zero_points(rng, name, pshape, bound=1000)
    y = quantize_via(path, x, s, z, axis=axis, block_size=block, precision=precision,
                     level=level, threads=2 if kind == "blocked" else 1,
                     params="input" if kind == "axis" else "const")
    want = quantize(x, full_param(s, shape, axis, block), full_param(z, shape, axis, block),
                    axis=axis, precision=precision)
    assert_same_bits(y, want, f"{path}: {xname} x, int32 scale, {kind}, precision {precision} "
                              f"-> {name}")


# precision as a dtype and as its ONNX code (the NumPy API takes both).
FLOAT64_CASES = [
    pytest.param(NUMPY, name, xname, sname, layout, (np.float64, TensorProto.DOUBLE), False,
                 id=f"numpy-{name}-{xname}-{sname}-{layout[3]}")
    for layout in LAYOUTS[:3] for sname in ["float32", "float16", "bfloat16", "float8e8m0"]
    for xname in X_TYPES for name in ALL_TYPES
] + [
    pytest.param(LIBRARY, name, "float32", sname, LIBRARY_LAYOUTS[1], (TensorProto.DOUBLE,),
                 legacy, id=f"library-{name}-{sname}-{'vitis' if legacy else 'extended'}")
    for legacy in (False, True) for name in ["int8", "uint16", "int32", "float16", "bfloat16"]
    for sname in ["float32", "float16", "bfloat16"]
]


@pytest.mark.parametrize(("path", "name", "xname", "sname", "layout", "precisions", "legacy"),
                         FLOAT64_CASES)
def test_precision_float64_with_float_scales(path, name, xname, sname, layout, precisions,
                                             legacy):
    """precision float64 with a float scale (np.float64 or its ONNX code,
    TensorProto.DOUBLE): the same float64 stage (the scale exact in float64);
    a float8e8m0 scale as the float32 it widens to; the Extended and the
    legacy name."""
    shape, axis, block, kind = layout
    rng = case_rng("float64-precision", path, name, xname, sname, kind)
    x = make_x(rng, shape, X_TYPES[xname])
    pshape = param_shape(shape, axis, block, kind)
    mag = rng.choice(np.array([2.0 ** -20, 1 / 3, 0.75, 3.0, 2.0 ** 10, 1e5]), pshape)
    s = (mag * rng.choice([-1.0, 1.0], pshape)).astype(np.float32)
    if sname == "float8e8m0":
        s = np.abs(s).astype(ml_dtypes.float8_e8m0fnu)
        wide = s.astype(np.float32)
    else:
        with np.errstate(over="ignore"):
            s = s.astype(X_TYPES[sname] if sname != "float32" else np.float32)
        wide = s
    z = zero_points(rng, name, pshape, bound=1000)
    want = quantize(x, full_param(wide, shape, axis, block), full_param(z, shape, axis, block),
                    axis=axis, precision=np.float64)
    for precision in precisions:
        y = quantize_via(path, x, s, z, axis=axis, block_size=block, precision=precision,
                         legacy=legacy)
        assert_same_bits(y, want, f"{path}: {xname} x, {sname} scale, precision {precision} "
                                  f"-> {name}")


SPLIT_CASES = [pytest.param(NUMPY, threads, "given", id=f"numpy-{threads}-threads")
               for threads in (1, 2)] + [
    pytest.param(LIBRARY, threads, zp_form, id=f"library-{threads}-threads-zero-point-{zp_form}")
    for threads in (1, 2) for zp_form in ("absent", "empty")]


@pytest.mark.parametrize(("path", "threads", "zp_form"), SPLIT_CASES)
def test_a_large_tensor_split_between_threads(path, threads, zp_form):
    """A tensor large enough to be split between threads: an int16 zero
    point per channel, or none (uint8 output; its input absent or an empty
    name)."""
    rng = np.random.default_rng(11)
    if zp_form == "given":
        x = rng.integers(I32.min, I32.max, (4, 64, 96, 96), endpoint=True).astype(np.int32)
        s = int32_scales(rng, (64,))
        z = rng.integers(-30000, 30000, 64).astype(np.int16)
    else:
        x = rng.integers(-4000, 4000, (8, 64, 28, 28), endpoint=True).astype(np.int32)
        s, z = np.int32(7), None
    extql.set_num_threads(threads)
    try:
        y = quantize_via(path, x, s, z, axis=1, threads=threads, zp_form=zp_form)
    finally:
        extql.set_num_threads(None)
    assert y.dtype == (np.uint8 if z is None else np.int16)
    assert_same_bits(y, quantize(x, s, z, axis=1), f"{path}, {threads} threads, zero point "
                                                   f"{zp_form}")


def test_float64_gives_other_bits_than_float32():
    """The float64 stage is not the float32 division in disguise: on wide
    int32 x and scales many quotients differ, and extql gives the float64
    ones (concrete cases included)."""
    assert extql.quantize_linear(np.int32(2**25 + 3), np.int32(2), np.int32(0)) == 16777218
    # float32 would first round x to 2^25 + 4: 16777218 too; and 2^25 + 1:
    # float64 16777216.5 -> 16777216 (even), float32 2^25 / 2 = 16777216.
    x = np.array([5, 7, -5, 2**30 + 2**22 + 1, 1073741825], np.int32)
    s = np.array(2, np.int32)
    y = extql.quantize_linear(x, s, np.int32(0))
    np.testing.assert_array_equal(y, [2, 4, -2, 538968064, 536870912])
    rng = np.random.default_rng(12)
    x = rng.integers(I32.min, I32.max, 100_000, endpoint=True).astype(np.int32)
    s = np.int32(3)
    wide = extql.quantize_linear(x, s, np.int32(0))
    narrow = extql.quantize_linear(x, s, np.int32(0), precision=np.float32)
    assert_same_bits(wide, quantize(x, s, np.int32(0)), "float64")
    assert_same_bits(narrow, quantize(x, s, np.int32(0), precision=np.float32), "float32")
    assert np.count_nonzero(wide != narrow) > 1000
    # An int32 scale above 2^24 in a float precision is rounded first:
    # 2^24 + 1 becomes 2^24.
    assert extql.quantize_linear(np.int32(2**24), np.int32(2**24 + 1), np.int8(0),
                                 precision=np.float32) == 1
    assert extql.quantize_linear(np.int32(2**24), np.int32(2**24 + 1), np.int8(0)) == 1
    # 25165825 / (2^24 + 1) is just below 1.5 in float64; in float32 both
    # round (to 1.5 * 2^24 and 2^24), and 1.5 rounds to the even 2.
    assert extql.quantize_linear(np.int32(25165825), np.int32(2**24 + 1), np.int8(0),
                                 precision=np.float32) == 2
    assert extql.quantize_linear(np.int32(25165825), np.int32(2**24 + 1), np.int8(0)) == 1


def test_division_by_a_zero_int32_scale():
    x = np.array([3, -3, 0], np.int32)
    assert_same_bits(extql.quantize_linear(x, np.int32(0), np.int8(1)),
                     np.array([127, -128, -128], np.int8), "int8")
    y = extql.quantize_linear(x, np.int32(0), np.float16(0))
    assert_same_bits(y, np.array([65504, -65504, np.nan], np.float16), "float16")


def _reference_model(x, s, z, opset: int) -> ReferenceEvaluator:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    zt = helper.np_dtype_to_tensor_dtype(z.dtype)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape),
         helper.make_tensor_value_info("s", TensorProto.INT32, s.shape),
         helper.make_tensor_value_info("z", zt, z.shape)],
        [helper.make_tensor_value_info("y", zt, x.shape)])
    return ReferenceEvaluator(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]))


# The output types of the official operator (no int32 / uint32 / float16 /
# bfloat16) that this onnx has.
OFFICIAL = [n for n in ALL_TYPES
            if n not in ("int32", "uint32", *FLOAT_TYPES) and hasattr(TensorProto, n.upper())]


# (opset, output type, x type): opset 21 binds the scale's type to x's (an
# int32 scale means int32 x), float4e2m1 is QuantizeLinear's from 23, int2 /
# uint2 from 25.
REFERENCE_CASES = [
    (opset, name, xname) for opset in (21, 23, 25) for name in OFFICIAL for xname in X_TYPES
    if (opset > 21 or xname == "int32")
    and opset >= {"int2": 25, "uint2": 25, "float4e2m1": 23}.get(name, 21)
]


@pytest.mark.parametrize(("opset", "name", "xname"), REFERENCE_CASES)
@pytest.mark.parametrize("kind", ["tensor", "axis"])
def test_against_onnx_reference(opset, name, xname, kind):
    """onnx.reference's official QuantizeLinear with an int32 scale (x int32
    at opset 21, where the scale has x's type; any x from 23), judged where
    its int32 arithmetic is defined: |rint(q) + zp| < 2^31 (beyond, NumPy's
    cast is undefined and the sum with the zero point wraps)."""
    rng = case_rng("int32-scale-reference", opset, name, xname, kind)
    shape = (2, 6, 3, 5)
    x = make_x(rng, shape, X_TYPES[xname])
    if xname != "int32":
        x = np.where(np.isfinite(x.astype(np.float32)), x, np.zeros_like(x))
    pshape = param_shape(shape, 1, 0, kind)
    s = rng.choice(SPECIAL_S[SPECIAL_S != 0], pshape).astype(np.int32)
    if name in SMALLFLOAT_TYPES:
        z = np.zeros(pshape, ALL_TYPES[name][0])
    else:
        z = zero_points(rng, name, pshape, bound=1000)
    got = extql.quantize_linear(x, s, z, axis=1)
    ref = _reference_model(x, np.asarray(s), np.asarray(z), opset).run(
        None, {"x": x, "s": np.asarray(s), "z": np.asarray(z)})[0]
    along = (-1, 1, 1) if kind == "axis" else ()
    with np.errstate(all="ignore"):
        q = np.rint(x.astype(np.float64) / np.asarray(s).reshape(along))
        q = q + np.asarray(z).astype(np.float64).reshape(along)
    judged = np.abs(q) < 2.0**31
    assert judged.mean() > 0.5
    assert_same_bits(got[judged], np.asarray(ref)[judged],
                     f"{xname} x, int32 scale -> {name}, opset {opset}")
    assert_same_bits(got, quantize(x, full_param(s, shape, 1, 0), full_param(z, shape, 1, 0),
                                   axis=1), "contract")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"y_scale": np.int64(2)}, TypeError,
     "y_scale must be one of float32, float16, bfloat16, float8e8m0, int32, got int64"),
    ({"precision": np.int32}, TypeError,
     "precision must be one of float32, float16, bfloat16, float64, got <class 'numpy.int32'>"),
    ({"precision": 7}, TypeError, "precision must be one of float32, float16, bfloat16, float64"),
])
def test_errors_name_the_operator(kwargs, error, message):
    args = {"x": np.zeros(3, np.int32), "y_scale": np.int32(2), "y_zero_point": np.int8(0),
            **kwargs}
    with pytest.raises(error, match="^ExtendedQuantizeLinear: ") as info:
        extql.quantize_linear(args.pop("x"), args.pop("y_scale"), args.pop("y_zero_point"),
                              **args)
    assert message in str(info.value)


# (the library takes no float8e8m0 scale: docs/differences.rst)
DEQUANTIZE_SCALE_MESSAGES = {
    NUMPY: "^ExtendedDequantizeLinear: x_scale must be one of float32, float16, bfloat16, "
           "float8e8m0, got int32",
    LIBRARY: "ExtendedDequantizeLinear.*x_scale must be one of float32, float16, bfloat16, "
             "got int32",
}


@pytest.mark.parametrize("path", [NUMPY, LIBRARY])
def test_dequantize_takes_no_int32_scale(path):
    with pytest.raises(Exception, match=DEQUANTIZE_SCALE_MESSAGES[path]) as info:
        dequantize_via(path, np.zeros((2, 3), np.int8), np.int32(2), np.int8(0))
    if path == NUMPY:
        assert info.type is TypeError


def test_the_library_names_a_precision_of_no_float_type():
    with pytest.raises(Exception, match="ExtendedQuantizeLinear.*the attribute precision must be "
                                        "one of float32, float16, bfloat16, float64, got int32"):
        quantize_via(LIBRARY, np.zeros((2, 3), np.float32), np.float32(2), np.int8(0),
                     precision=TensorProto.INT32)


_LIB = capi.LIB
_ptr = capi.ptr


@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "float16", "bfloat16"])
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS[:3],
                         ids=["tensor", "nchw-axis", "blocked"])
def test_c_ranges_compose_to_the_whole_tensor(name, shape, axis, block, kind):
    """The C entry point the onnxruntime library calls, range by range
    (ranges of every length, as a thread split makes them), with the
    parameters extql_f64_params makes, gives the NumPy API's bits; an
    unknown scale type is an error code."""
    rng = case_rng("int32-scale-c", name, kind)
    x = make_x(rng, shape, X_TYPES["int32"])
    pshape = param_shape(shape, axis, block, kind)
    s = np.ascontiguousarray(int32_scales(rng, pshape))
    z = np.ascontiguousarray(zero_points(rng, name, pshape, bound=1000))
    want = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
    a = axis % len(shape)
    D = shape[a] if kind != "tensor" else 1
    inner = int(np.prod(shape[a + 1:])) if kind != "tensor" else x.size
    qtype = TensorProto.BFLOAT16 if name == "bfloat16" else getattr(TensorProto, name.upper())
    count = max(s.size, 1)
    ones, zero2 = np.empty(count, np.float32), np.empty(count, np.float32)
    zp = z if _LIB.extql_f64_params(qtype, _ptr(ones), _ptr(zero2), count) == 0 else zero2
    y = np.empty(x.shape, want.dtype)
    cuts = sorted({0, x.size, *rng.integers(0, x.size, 5).tolist()})
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        rc = _LIB.extql_quantize_f64_range(
            qtype, TensorProto.INT32, TensorProto.INT32, _ptr(x), _ptr(s), _ptr(z), _ptr(y),
            D, inner, block, start, stop, 0, _ptr(ones), _ptr(zp))
        assert rc == 0
    assert_same_bits(y, want, f"C ranges {cuts}")
    assert _LIB.extql_quantize_f64_range(
        qtype, TensorProto.INT32, TensorProto.INT64, _ptr(x), _ptr(s), _ptr(z), _ptr(y),
        D, inner, block, 0, x.size, 0, _ptr(ones), _ptr(zp)) == -1


INT32_SCALES = st.one_of(st.integers(I32.min, I32.max),
                         st.sampled_from([0, 1, -1, 2, 3, -3, 1024, 2**24 + 1, I32.max, I32.min]))


@settings(max_examples=300, deadline=None)
@given(int32_problems(), st.data())
def test_int32_scale_property(problem, data):
    """Any int32 x, any int32 scale (0 and the ends included), any output
    type, zero point, axis, precision (float64 by default, or a float one)
    and saturate: the contract's bits."""
    x, float_scale, zp, axis, _, saturate, name = problem
    s = data.draw(arrays(np.int64, float_scale.shape, elements=INT32_SCALES)).astype(np.int32)
    precision = data.draw(st.sampled_from([None, np.float64, np.float32, BF16]))
    got = extql.quantize_linear(x, s, zp, axis=axis, precision=precision, saturate=saturate)
    want = quantize(x, s, zp, axis, precision=precision, saturate=saturate)
    assert_same_bits(got, want, f"{name} axis={axis} precision={precision} saturate={saturate}")
