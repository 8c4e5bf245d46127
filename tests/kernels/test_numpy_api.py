"""The NumPy API against the independent expectation of the contract."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from contract import (
    BF16,
    FLOAT_TYPES,
    INT_TYPES,
    TYPES,
    assert_same_bits,
    dequantize,
    quantize,
)

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

ALL_TYPES = list(TYPES)
F32 = np.float32

# Values that exercise every rule: ties, NaN, infinities, signed zeros,
# subnormals, huge and tiny magnitudes, and the edges of each range.
SPECIAL = np.array(
    [
        0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 128.5, -128.5, -129.5,
        254.5, 255.5, 32766.5, 32767.5, -32768.5, 65534.5, 65535.5, 65536.0,
        2.0**24 + 2, 2.0**31, 2.0**31 - 128, -(2.0**31), 2.0**32, 2.0**32 - 256,
        1e-45, -1e-45, 1.17e-38, 1e30, -1e30, 3.4e38, -3.4e38,
        65504.0, 65519.0, 65520.0, -65520.0, 6e-8, 3e-8, 2.9e-8,
        3.3895313e38, 3.3961776e38, np.nan, -np.nan, np.inf, -np.inf,
    ],
    dtype=F32,
)


def _zero_point(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dt, lo, hi = TYPES[name]
    if name in FLOAT_TYPES:
        return (rng.standard_normal(shape) * 4).astype(dt)
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(dt)


def _check_both(x, s, zp, axis, name):
    """Quantize then dequantize, each against the contract."""
    got = extql.quantize_linear(x, s, zp, axis=axis)
    want = quantize(x, s, zp, axis, None if zp is not None else np.uint8)
    assert_same_bits(got, want, f"quantize {name} axis={axis}")
    back = extql.dequantize_linear(want, s, zp, axis=axis)
    assert_same_bits(back, dequantize(want, s, zp, axis), f"dequantize {name} axis={axis}")


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("scale", [1.0, 0.37, 3.0, -2.0, 1e-30, 1e30, 0.0])
def test_special_values_per_tensor(name, scale):
    rng = np.random.default_rng(0)
    zp = _zero_point(name, (), rng)
    for s in (F32(scale), np.array([scale], F32)):
        _check_both(SPECIAL, s, zp, 1, name)
        _check_both(SPECIAL, s, zp.reshape(1), 1, name)
    # No zero point: quantize gives uint8; dequantize reads zero point 0.
    got = extql.quantize_linear(SPECIAL, F32(scale))
    assert_same_bits(got, quantize(SPECIAL, F32(scale)), "no zero point")
    q = quantize(SPECIAL, F32(scale), zp)
    assert_same_bits(
        extql.dequantize_linear(q, F32(scale)), dequantize(q, F32(scale)), "no zero point"
    )


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize(
    "shape,axis",
    [((3, 5, 7), 0), ((3, 5, 7), 1), ((3, 5, 7), 2), ((3, 5, 7), -1), ((3, 5, 7), -3),
     ((4, 9), 1), ((9,), 0), ((2, 3, 4, 5), 2), ((1, 300, 1), 1)],
)
def test_per_axis(name, shape, axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 200).astype(F32)
    flat = x.reshape(-1)
    flat[: min(flat.size, SPECIAL.size)] = SPECIAL[: flat.size]
    d = shape[axis]
    s = (rng.random(d) * 2 + 0.01).astype(F32)
    s[0] = 0.5
    zp = _zero_point(name, (d,), rng)
    _check_both(x, s, zp, axis, name)
    _check_both(x, s, None, axis, name)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_ties_round_half_to_even(name):
    k = np.arange(-300, 300, dtype=F32)
    x = k + F32(0.5)
    dt = TYPES[name][0]
    got = extql.quantize_linear(x, F32(1.0), np.zeros((), dt))
    if name in INT_TYPES:
        lo, hi = TYPES[name][1:]
        expect = np.clip(np.where(k % 2 == 0, k, k + 1), lo, hi).astype(dt)
        np.testing.assert_array_equal(got, expect)
    assert_same_bits(got, quantize(x, F32(1.0), np.zeros((), dt)), name)


def test_division_is_not_a_reciprocal_multiply():
    # x = (k + 0.5) * s lands next to a tie, where x / s and x * (1 / s)
    # often round to different integers: the contract is the division.
    rng = np.random.default_rng(2)
    s = (rng.random(200_000) * 3 + 0.01).astype(F32)
    k = rng.integers(-1000, 1000, 200_000).astype(F32)
    x = ((k + F32(0.5)) * s).astype(F32)
    div = x / s
    mul = x * (F32(1) / s)
    differ = np.rint(div) != np.rint(mul)
    assert differ.sum() > 100, "test data must contain cases where the two differ"
    for i in np.flatnonzero(differ)[:200]:
        got = extql.quantize_linear(x[i : i + 1], s[i], np.int32(0))
        assert got[0] == np.rint(div[i]), (x[i], s[i])


@pytest.mark.parametrize(
    "name,r,zp,expected",
    [
        ("int32", 2.0**25, 1, 2**25 + 1),  # float32 r + zp would round to 2^25
        ("int32", -(2.0**25), -3, -(2**25) - 3),
        ("int32", 2.0**31 - 256, 200, 2**31 - 56),
        ("int32", 2.0**30, 2**31 - 1, 2**31 - 1),  # saturates
        ("int32", -(2.0**30), -(2**31), -(2**31)),
        ("uint32", 2.0**31, 2**31 - 1, 2**32 - 1),
        ("uint32", 2.0**31, 12345, 2**31 + 12345),
        ("uint32", -1.0, 2**32 - 1, 2**32 - 2),
        ("uint32", -(2.0**31), 2**31 + 7, 7),
    ],
)
def test_exact_zero_point_addition(name, r, zp, expected):
    dt = TYPES[name][0]
    got = extql.quantize_linear(np.array([r], F32), F32(1), np.array(zp, dt))
    assert int(got[0]) == expected
    assert_same_bits(got, quantize(np.array([r], F32), F32(1), np.array(zp, dt)), name)


@pytest.mark.parametrize(
    "name,x,zp,expected",
    [
        ("int32", 2**31 - 1, -(2**31), 4294967296.0),  # 2^32 - 1 rounds once
        ("int32", 16777217, 0, 16777216.0),
        ("uint32", 2**32 - 1, 0, 4294967296.0),
        ("uint32", 0, 2**32 - 1, -4294967296.0),
        ("uint32", 16777219, 2, 16777216.0),
    ],
)
def test_exact_zero_point_difference(name, x, zp, expected):
    dt = TYPES[name][0]
    got = extql.dequantize_linear(np.array([x], dt), F32(1), np.array(zp, dt))
    assert got.dtype == np.float32 and got[0] == F32(expected)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("offset", [0, 5])
def test_conversion_saturation_in_every_lane(name, offset):
    """The conversion (scale 1, zero point +0) of values at and past the
    type's largest finite value, infinities, NaNs and signed zeros, each in
    every lane of the vector bodies and of their tails (an input of 2053
    elements, read from an offset that misaligns it), against the
    contract."""
    specials = np.array([65504.0, 65519.0, 65520.0, 65536.0, 1e30, np.inf, np.nan, -0.0, 0.0,
                         3.3895314e38, 3.40282e38, 1.0, -1.5, 6e-8, 3e-5], F32)
    specials = np.concatenate([specials, -specials])
    base = np.resize(specials, 2053 + offset)
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = rng.permutation(base)[offset:]
        z = np.zeros((), TYPES[name][0])
        got = extql.quantize_linear(x, F32(1), z)
        assert_same_bits(got, quantize(x, F32(1), z, 1), f"{name} conversion offset={offset}")


def test_float16_bfloat16_saturation_and_nan():
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 65519.0, 65520.0, 3.4e38], F32)
    h = extql.quantize_linear(x, F32(1), np.float16(0))
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h[[0, 2, 5, 6]], np.float16(65504))
    np.testing.assert_array_equal(h[[1, 3]], np.float16(-65504))
    assert np.isnan(h[4])
    b = extql.quantize_linear(x, F32(1), np.zeros((), TYPES["bfloat16"][0]))
    big = np.array(0x7F7F, np.uint16).view(TYPES["bfloat16"][0])
    assert b[2] == big and b[3] == -big and b[7] == big and np.isnan(float(b[4]))


def test_float16_scale_is_used():
    # Quark's library ignores the scale for float16: extql must not.
    x = np.array([1.0, 2.0, 3.0], F32)
    got = extql.quantize_linear(x, F32(0.5), np.float16(1))
    np.testing.assert_array_equal(got, np.array([3.0, 5.0, 7.0], np.float16))


def test_subnormal_float16_rounding():
    # Every float16 subnormal and the ties between them.
    k = np.arange(0, 2048, dtype=np.float64)
    x = (k * 2.0**-25).astype(F32)  # half-steps of the float16 subnormal spacing
    x = np.concatenate([x, -x])
    assert_same_bits(
        extql.quantize_linear(x, F32(1), np.float16(0)),
        quantize(x, F32(1), np.float16(0)),
        "float16 subnormals",
    )


def test_every_float16_and_bfloat16_dequantizes_exactly():
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    for name in FLOAT_TYPES:
        q = bits.view(TYPES[name][0])
        for s in (F32(1), F32(0.3)):
            assert_same_bits(extql.dequantize_linear(q, s), dequantize(q, s), name)


@pytest.mark.parametrize("name", INT_TYPES)
def test_every_integer_input_dequantizes(name):
    dt, lo, hi = TYPES[name]
    if hi - lo < 2**17:
        q = np.arange(lo, hi + 1).astype(dt)
    else:
        rng = np.random.default_rng(3)
        q = np.concatenate([rng.integers(lo, hi, 100_000, endpoint=True), [lo, hi, 0]]).astype(dt)
    zp = _zero_point(name, (), np.random.default_rng(4))
    for s in (F32(1), F32(0.0123), F32(-7.5)):
        assert_same_bits(extql.dequantize_linear(q, s, zp), dequantize(q, s, zp), name)


@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "float16", "bfloat16"])
def test_layouts_and_array_likes(name):
    dt = TYPES[name][0]
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((6, 8, 10)) * 50).astype(F32)
    zp = _zero_point(name, (8,), rng)
    s = (rng.random(8) + 0.1).astype(F32)
    for x in (base[:, :, ::2], base.transpose(2, 1, 0).copy().transpose(2, 1, 0), base[::-1]):
        assert not x.flags.c_contiguous or x is base
        _check_both(x, s, zp, 1, name)
    # Strided scale and zero point.
    s2 = np.repeat(s, 2)[::2]
    _check_both(base, s2, zp, 1, name)
    # 0-d input, empty inputs, Python lists.
    zp0 = np.zeros((), dt)
    _check_both(np.array(3.7, F32), F32(0.5), zp0, 1, name)
    for shape, axis in [((0,), 0), ((2, 0, 3), 1), ((2, 3, 0), 1), ((0, 4), 1)]:
        x = np.zeros(shape, F32)
        ss = np.ones(shape[axis], F32) if shape[axis] != 1 else F32(1)
        z = np.zeros(np.shape(ss), dt)
        y = extql.quantize_linear(x, ss, z, axis=axis)
        assert y.shape == shape and y.dtype == dt
        back = extql.dequantize_linear(y, ss, z, axis=axis)
        assert back.shape == shape and back.dtype == F32
    y = extql.quantize_linear([1.0, 2.5, -3.5], 1.0, np.zeros((), dt))
    assert_same_bits(y, quantize(np.array([1.0, 2.5, -3.5], F32), F32(1), zp0), name)
    y = extql.quantize_linear([[1.0, 2.0], [3.0, 4.0]], [0.5, 2.0], np.zeros(2, dt), axis=1)
    assert y.shape == (2, 2)


def test_rank1_scalar_scale_ignores_axis():
    x = np.linspace(-10, 10, 11, dtype=F32)
    for axis in (0, 1, 5, -7):
        got = extql.quantize_linear(x, F32(0.5), np.int8(1), axis=axis)
        assert_same_bits(got, quantize(x, F32(0.5), np.int8(1)), f"axis={axis}")


def test_dequantize_python_number_zero_point():
    q = np.array([0, 10, 255], np.uint8)
    assert_same_bits(
        extql.dequantize_linear(q, F32(0.5), 128),
        dequantize(q, F32(0.5), np.uint8(128)),
        "python int zero point",
    )
    with pytest.raises(ValueError, match="ExtendedDequantizeLinear.*not representable"):
        extql.dequantize_linear(q, F32(0.5), 300)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("name", ALL_TYPES)
def test_parallel_split_is_exact(name, threads):
    # Large enough to run in parallel; shapes whose rows straddle the
    # per-thread split points, both per-tensor and per-axis (incl. last axis).
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 7, 9973)) * 500).astype(F32)
    x.reshape(-1)[::1001] = np.nan
    zp = _zero_point(name, (), rng)
    old = extql.get_num_threads()
    try:
        extql.set_num_threads(threads)
        assert extql.get_num_threads() == threads
        _check_both(x, F32(0.25), zp, 1, name)
        for axis in (1, 2, 0):
            d = x.shape[axis]
            s = (rng.random(d) + 0.05).astype(F32)
            _check_both(x, s, _zero_point(name, (d,), rng), axis, name)
    finally:
        extql.set_num_threads(0)
    assert extql.get_num_threads() == old


@pytest.mark.parametrize(
    "shape,scale_len,axis",
    list(itertools.product([(2, 3, 4)], [2, 3, 4], [0, 1, 2, -1, -2, -3])),
)
def test_scale_length_is_checked(shape, scale_len, axis):
    x = np.zeros(shape, F32)
    s = np.ones(scale_len, F32)
    if shape[axis] == scale_len:
        extql.quantize_linear(x, s, np.zeros(scale_len, np.int8), axis=axis)
    else:
        with pytest.raises(ValueError, match=r"ExtendedQuantizeLinear: the scale has"):
            extql.quantize_linear(x, s, np.zeros(scale_len, np.int8), axis=axis)
        with pytest.raises(ValueError, match=r"ExtendedDequantizeLinear: the scale has"):
            extql.dequantize_linear(np.zeros(shape, np.int8), s, axis=axis)


def test_kernel_rejects_unknown_type_code():
    # The kernels' own guard, below the NumPy API's validation.
    from extql import _kernels

    x = np.zeros(4, F32)
    xb = x.view(np.uint8)
    one = np.ones(1, F32)
    with pytest.raises(TypeError, match="unknown element type 1, 1"):
        _kernels.quantize(1, 1, 1, xb, one, None, np.zeros(4, np.uint8), 4, 1, 4)
    with pytest.raises(TypeError, match="unknown element type 3, 7 or precision 1"):
        _kernels.quantize(3, 7, 1, xb, one, None, np.zeros(4, np.uint8), 4, 1, 4)
    with pytest.raises(TypeError, match="unknown element type 3, 1 or precision 11"):
        _kernels.quantize(3, 1, 11, xb, one, None, np.zeros(4, np.uint8), 4, 1, 4)
    with pytest.raises(TypeError, match="unknown element type 11 or 1"):
        _kernels.dequantize(11, 1, np.zeros(4, np.uint8), one, None, xb, 4, 1, 4)
    with pytest.raises(TypeError, match="unknown element type 3 or 6"):
        _kernels.dequantize(3, 6, np.zeros(4, np.uint8), one, None, xb, 4, 1, 4)
    with pytest.raises(TypeError, match="unknown scale type 7"):
        _kernels.convert_scales(7, 1, xb, x)
    with pytest.raises(TypeError, match="unknown scale type 6 or precision 11"):
        _kernels.convert_scales(6, 11, xb, x)
    with pytest.raises(TypeError, match="unknown element type 3, 1 or scale type 7"):
        _kernels.quantize_f64(3, 1, 7, xb, xb, None, np.zeros(4, np.uint8), 4, 1, 4, 1)
    # int32 scales are rounded to nearest even into float32 (2^24 + 1: 2^24).
    wide = np.array([2**24 + 1, -3, 7, 2**31 - 1], np.int32)
    out = np.empty(4, F32)
    _kernels.convert_scales(6, 1, wide.view(np.uint8), out)
    np.testing.assert_array_equal(out, wide.astype(F32))
    assert isinstance(_kernels.have_openmp(), bool) and _kernels.cores() >= 1


def test_nan_payloads_survive_when_only_x_is_nan():
    # One NaN operand: IEEE propagates its (quieted) payload; the float16
    # result keeps the top payload bits as NumPy does, bfloat16 the
    # canonical quiet NaN as ml_dtypes does, and dequantize keeps x's NaN.
    payloads = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFFFE000, 0x7F800001],
                        np.uint32)
    x = payloads.view(F32)
    h = extql.quantize_linear(x, F32(3), np.float16(1))
    np.testing.assert_array_equal(h.view(np.uint16), [0x7E00, 0xFE00, 0x7E09, 0xFFFF, 0x7E00])
    b = extql.quantize_linear(x, F32(3), np.zeros((), TYPES["bfloat16"][0]))
    np.testing.assert_array_equal(b.view(np.uint16), [0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0, 0x7FC0])
    hb = np.array([0x7E01, 0xFD00, 0x7C01], np.uint16)
    y = extql.dequantize_linear(hb.view(np.float16), F32(2), np.float16(0.5))
    # (0xFD00 and 0x7C01 are signalling NaNs: arithmetic quiets them.)
    np.testing.assert_array_equal(y.view(np.uint32), [0x7FC02000, 0xFFE00000, 0x7FC02000])


def test_python_zero_point_is_checked_exactly():
    """Regression (found by tests/kernels/test_fuzz_numpy.py): a Python int zero point
    was compared with its conversion in float64, so 2**62 + 1 passed as the
    bfloat16 2**62; ints beyond int64 failed with NumPy's "Python int too
    large" TypeError.  Every element is now compared in exact arithmetic."""
    bf = np.zeros(2, BF16)
    with pytest.raises(ValueError, match="ExtendedDequantizeLinear.*not representable"):
        extql.dequantize_linear(bf, F32(1), 2**62 + 1)
    for value in (2**62, 2**70, -(2**100), float("inf"), float("nan")):
        want = dequantize(bf, F32(1), np.array(float(value)).astype(BF16))
        assert_same_bits(extql.dequantize_linear(bf, F32(1), value), want, repr(value))
    u32 = np.array([0, 7, 2**32 - 1], np.uint32)
    with pytest.raises(ValueError, match="not representable as uint32"):
        extql.dequantize_linear(u32, F32(1), 2**64 + 5)
    assert_same_bits(extql.dequantize_linear(u32, F32(1), [2**32 - 1]),
                     dequantize(u32, F32(1), np.array([2**32 - 1], np.uint32)), "list")
    with pytest.raises(ValueError, match="not representable as int8"):
        extql.dequantize_linear(np.zeros(2, np.int8), F32(1), 1e300)
    with pytest.raises(TypeError, match="x_zero_point must be numbers of type int8, got str"):
        extql.dequantize_linear(np.zeros(2, np.int8), F32(1), ["1"])
    # NumPy scalars inside a list are numbers too
    assert_same_bits(extql.dequantize_linear(u32, F32(1), [np.uint64(7)]),
                     dequantize(u32, F32(1), np.array([7], np.uint32)), "numpy scalar in list")


def _unaligned(a: np.ndarray) -> np.ndarray:
    raw = bytearray(a.nbytes + 1)
    out = np.frombuffer(memoryview(raw)[1:], dtype=a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("name", ALL_TYPES)
def test_kernels_get_aligned_buffers(name, monkeypatch):
    """Regression (found by the ASan/UBSan run of tests/kernels/test_fuzz_numpy.py):
    an unaligned contiguous array (np.frombuffer at an odd offset) went to
    the kernels as it was, a misaligned float/int pointer -- undefined
    behaviour that the compiler may turn into faulting aligned loads.  The
    API now copies such arrays; the kernels only ever see aligned buffers."""
    from extql.api import linear as numpy_api

    real = numpy_api._kernels
    seen = []

    class Spy:
        def __getattr__(self, attr):
            return getattr(real, attr)

        def _check(self, buffers, widths):
            for b, width in zip(buffers, widths, strict=True):
                if b is not None and b.size:
                    seen.append(np.asarray(b).ctypes.data % width == 0)

        def quantize(self, qtype, xtype, prec, x, s, zp, y, *rest, **kwargs):
            # x: a byte view of float32; s: float32; zp, y: byte views of the type
            q = TYPES[name][0].itemsize
            self._check((x, s, zp, y), (4, 4, q, q))
            return real.quantize(qtype, xtype, prec, x, s, zp, y, *rest, **kwargs)

        def dequantize(self, qtype, ytype, x, s, zp, y, *rest, **kwargs):
            q = TYPES[name][0].itemsize
            self._check((x, s, zp, y), (q, 4, q, 4))
            return real.dequantize(qtype, ytype, x, s, zp, y, *rest, **kwargs)

    monkeypatch.setattr(numpy_api, "_kernels", Spy())
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 70)) * 50).astype(F32)
    s = np.array([0.5, 1.0, 2.0], F32)
    zp = _zero_point(name, (3,), rng)
    q = quantize(x, s, zp, 0)
    ux, us, uz, uq = _unaligned(x), _unaligned(s), _unaligned(zp), _unaligned(q)
    assert not ux.flags.aligned and not us.flags.aligned
    assert_same_bits(extql.quantize_linear(ux, us, uz, axis=0), q, "unaligned quantize")
    assert_same_bits(extql.dequantize_linear(uq, us, uz, axis=0), dequantize(q, s, zp, 0),
                     "unaligned dequantize")
    assert seen and all(seen), seen
