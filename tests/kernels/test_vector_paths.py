"""The kernels' vectorised loops (the compiler's, over tiles of 128 elements,
and the primitives of extql/src/extql_primitives.h: packing stores, widening
loads, the float16 / bfloat16 conversions) against the contract, bit for bit.

Vector instructions take 8, 16 or 32 elements at a time and leave a tile's
remainder to scalar code, so every special value is put at every lane
position, runs have every length around the step sizes, buffers start
misaligned, and the values are arbitrary float32 bit patterns (NaN payloads,
subnormals, huge magnitudes) with arbitrary scales and zero points.
conftest.py runs this module once per kernel variant.
"""

from __future__ import annotations

import capi
import numpy as np
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from vector_inputs import NAN_BITS, SPECIAL, misaligned, random_f32, zero_points

import extql
from extql.rules.types import QTYPES

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32
ALL_TYPES = list(TYPES)


def _scales(rng: np.random.Generator, n: int) -> np.ndarray:
    s = rng.choice(
        np.array([1.0, 0.5, -2.0, 0.37, 1 / 3, 3e-3, 1e-38, 1e-45, 3e38, 0.0, -0.0], F32), n
    )
    return np.where(rng.random(n) < 0.5, (rng.random(n) * 4 - 2).astype(F32), s).astype(F32)


def _random_q(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """Any bit pattern of the type (every float16 / bfloat16 class included)."""
    dt = TYPES[name][0]
    raw = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return raw.astype(f"u{dt.itemsize}").view(dt)


def _check(x, s, zp, axis, name, what):
    got = extql.quantize_linear(x, s, zp, axis=axis)
    want = quantize(x, s, zp, axis, None if zp is not None else np.uint8)
    assert_same_bits(got, want, f"quantize {what}")


def _check_dq(q, s, zp, axis, what):
    got = extql.dequantize_linear(q, s, zp, axis=axis)
    assert_same_bits(got, dequantize(q, s, zp, axis), f"dequantize {what}")


@pytest.mark.parametrize("name", ALL_TYPES)
def test_special_values_at_every_lane(name):
    """Each special value at each position of a 32-element step, per tensor."""
    rng = np.random.default_rng(20)
    k = SPECIAL.size
    # Row r holds SPECIAL rotated by r: value j lands at lane (j + r) % 32.
    x = np.stack([np.roll(np.resize(SPECIAL, 96), r) for r in range(32)]).astype(F32)
    for s in (F32(1.0), F32(0.37), F32(-3.0), F32(1e-30)):
        for zp in (None, zero_points(name, rng, 1).reshape(())):
            _check(x.reshape(-1), s, zp, 1, name, f"{name} s={s} zp={zp} ({k} specials)")


@pytest.mark.parametrize("name", ALL_TYPES)
def test_per_tensor_lengths_and_alignment(name):
    rng = np.random.default_rng(21)
    for n in list(range(0, 70)) + [95, 96, 97, 127, 128, 129, 1000, 4099]:
        x = random_f32(rng, n)
        x[rng.integers(0, max(n, 1), min(n, 3))] = NAN_BITS[: min(n, 3)] if n else x[:0]
        s = _scales(rng, 1)[0]
        zp = zero_points(name, rng, 1).reshape(())
        for offset in (0, 1, 3):
            xm = misaligned(x, offset)
            _check(xm, s, zp, 1, name, f"{name} n={n} offset={offset}")
            q = misaligned(_random_q(name, rng, n), offset)
            _check_dq(q, s, zp, 1, f"{name} n={n} offset={offset}")
        _check(x, s, None, 1, name, f"{name} n={n} no zp")
        _check_dq(_random_q(name, rng, n), s, None, 1, f"{name} n={n} no zp")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_conversions_at_every_alignment(name):
    """float16 / bfloat16 with the scale 1 and the zero point 0 (a conversion,
    both directions) from and into buffers that start at every 4-byte (x)
    and 2-byte (y) offset within a cache line, in lengths around two tiles
    and longer: the kernels choose which of x and y to align."""
    rng = np.random.default_rng(23)
    dt = TYPES[name][0]
    s, zp = F32(1.0), np.zeros((), dt)
    for n in (255, 256, 257, 300, 1000, 4099):
        x = random_f32(rng, n)
        x[:: max(n // 7, 1)] = -0.0
        want = quantize(x, s, zp, 1)
        q = _random_q(name, rng, n)
        want_dq = dequantize(q, s, zp, 1)
        for x_offset in range(16):
            xm = misaligned(x, x_offset)
            qm = misaligned(q, x_offset)
            for y_offset in range(0, 32, 3):
                out = misaligned(np.empty(n, dt), y_offset)
                extql.quantize_linear(xm, s, zp, out=out)
                assert_same_bits(out, want, f"quantize {name} n={n} x+{x_offset} y+{y_offset}")
                out = misaligned(np.empty(n, F32), y_offset)
                extql.dequantize_linear(qm, s, zp, out=out)
                assert_same_bits(out, want_dq, f"dequantize {name} n={n} x+{x_offset} "
                                               f"y+{y_offset}")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_per_axis_conversions(name):
    """float16 / bfloat16 per axis where the channels a range touches all
    have the scale 1 and the zero point +0 (converted as one run), or all
    but one: a channel with the scale 2, one with the zero point -0, and
    ranges that start and stop mid-channel with channel 0 not a conversion
    (the run takes the constants of the channels it touches), with and
    without streaming stores."""
    rng = np.random.default_rng(24)
    code = QTYPES[name].onnx
    dt = TYPES[name][0]
    for d, inner in [(3, 1), (16, 1), (5, 7), (64, 49), (4, 1024)]:
        size = 2 * d * inner
        x = random_f32(rng, size)
        x[:: max(size // 11, 1)] = -0.0
        picks = x[1:: max(size // 13, 1)]
        picks[...] = rng.choice(SPECIAL, picks.size) * rng.choice(F32([1, -1]), picks.size)
        x = x.reshape(2, d, inner)
        q = _random_q(name, rng, size).reshape(2, d, inner)
        ones = np.ones(d, F32)
        cases = {"all": (ones, np.zeros(d, dt)), "no zp": (ones, None)}
        s2 = ones.copy()
        s2[d // 2] = 2
        cases["one scale 2"] = (s2, np.zeros(d, dt))
        z2 = np.zeros(d, dt)
        z2[(d - 1) // 2] = -0.0
        cases["one zp -0"] = (ones, z2)
        s0 = ones.copy()
        s0[0] = 0.5
        cases["channel 0 scale 0.5"] = (s0, np.zeros(d, dt))
        for case, (s, zp) in cases.items():
            if zp is not None:  # (the NumPy API's type without one is uint8)
                _check(x, s, zp, 1, name, f"{name} d={d} inner={inner} {case}")
                _check_dq(q, s, zp, 1, f"{name} d={d} inner={inner} {case}")
            want_q = quantize(x, s, zp, 1, None if zp is not None else dt)
            want_d = dequantize(q, s, zp, 1)
            for start, stop in [(inner + inner // 2, size - inner // 2 - 1), (inner, d * inner)]:
                for flags in (0, _STREAM):
                    what = f"{name} d={d} inner={inner} {case} [{start}:{stop}] flags={flags}"
                    y = np.zeros(x.shape, dt)
                    assert _quantize_range(code, _ptr(x), _ptr(s), _ptr(zp), _ptr(y), d, inner,
                                           start, stop, flags) == 0
                    assert_same_bits(y.reshape(-1)[start:stop], want_q.reshape(-1)[start:stop],
                                     "quantize " + what)
                    out = np.zeros(x.shape, F32)
                    assert _dequantize_range(code, _ptr(q), _ptr(s), _ptr(zp), _ptr(out), d,
                                             inner, start, stop, flags) == 0
                    assert_same_bits(out.reshape(-1)[start:stop], want_d.reshape(-1)[start:stop],
                                     "dequantize " + what)


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("d", [1, 7, 8, 9, 16, 31, 32, 33, 40, 67, 256])
def test_per_axis_last_axis(name, d):
    """Per-axis along the last axis: the scale and zero point change every
    element (the "cols" loops), runs of length d."""
    rng = np.random.default_rng(22 + d)
    rows = 5
    x = random_f32(rng, rows * d).reshape(rows, d)
    s = _scales(rng, d)
    zp = zero_points(name, rng, d)
    for offset in (0, 1):
        _check(misaligned(x, offset), s, zp, 1, name, f"{name} d={d} offset={offset}")
        q = misaligned(_random_q(name, rng, rows * d).reshape(rows, d), offset)
        _check_dq(q, s, zp, 1, f"{name} d={d} offset={offset}")
    _check(x, s, None, 1, name, f"{name} d={d} no zp")
    _check_dq(_random_q(name, rng, rows * d).reshape(rows, d), s, None, 1, f"{name} d={d}")


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("inner", [2, 5, 8, 33, 100])
def test_per_axis_blocks(name, inner):
    """Per-axis along a leading axis: runs of `inner` elements share a scale."""
    rng = np.random.default_rng(23 + inner)
    d = 6
    x = random_f32(rng, 3 * d * inner).reshape(3, d, inner)
    s = _scales(rng, d)
    zp = zero_points(name, rng, d)
    _check(x, s, zp, 1, name, f"{name} inner={inner}")
    _check(x, s, None, 1, name, f"{name} inner={inner} no zp")
    q = _random_q(name, rng, x.size).reshape(x.shape)
    _check_dq(q, s, zp, 1, f"{name} inner={inner}")
    _check_dq(q, s, None, 1, f"{name} inner={inner} no zp")


def _nan_lanes(bits: list[int], dtype, n: int = 96) -> np.ndarray:
    """NaNs of the given bit patterns at every lane position, between numbers."""
    out = np.zeros(n, dtype=np.dtype(f"u{np.dtype(dtype).itemsize}"))
    out[:] = np.arange(n) % 7  # small numbers (as bits: tiny floats) between the NaNs
    for i, b in enumerate(bits):
        out[i::len(bits) + 3] = b
    return out.view(dtype)


def test_quantize_nan_payloads_at_every_lane():
    """Only x is NaN: float16 keeps sign | 0x7E00 | payload >> 13 (as NumPy),
    bfloat16 gives sign | 0x7FC0 (as ml_dtypes), in the vector loops too
    (contract.assert_same_bits lets any NaN match a NaN, so the bits are
    compared here directly)."""
    payloads = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFFFE000, 0x7F800001, 0xFF812345,
                0x7FFFFFFF, 0xFFFF8000]
    x = _nan_lanes(payloads, F32)
    u = x.view(np.uint32)
    isnan = np.isnan(x)
    quiet = u | 0x00400000  # the division quiets a signalling NaN
    sign16 = (u >> 16) & 0x8000
    for offset in (0, 1):
        xm = misaligned(x, offset)
        h = extql.quantize_linear(xm, F32(3), np.float16(1)).view(np.uint16)
        want_h = (sign16 | 0x7E00 | ((quiet >> 13) & 0x3FF)).astype(np.uint16)
        np.testing.assert_array_equal(h[isnan], want_h[isnan])
        b = extql.quantize_linear(xm, F32(3), np.zeros((), TYPES["bfloat16"][0]))
        want_b = (sign16 | 0x7FC0).astype(np.uint16)
        np.testing.assert_array_equal(b.view(np.uint16)[isnan], want_b[isnan])
        # Per axis along the last axis (the "cols" loops).
        x2 = xm.reshape(-1, 32)
        h2 = extql.quantize_linear(x2, np.full(32, 3, F32), np.ones(32, np.float16))
        np.testing.assert_array_equal(h2.view(np.uint16).reshape(-1)[isnan], want_h[isnan])
        b2 = extql.quantize_linear(x2, np.full(32, 3, F32), np.zeros(32, TYPES["bfloat16"][0]))
        np.testing.assert_array_equal(b2.view(np.uint16).reshape(-1)[isnan], want_b[isnan])


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_dequantize_nan_payloads_at_every_lane(name):
    """Only x is NaN: the float32 result is x's NaN widened and quieted."""
    if name == "float16":
        bits = [0x7E00, 0xFE00, 0x7E01, 0x7D00, 0xFC01, 0x7FFF, 0xFFFF, 0x7C3F]
        dt = np.dtype(np.float16)
    else:
        bits = [0x7FC0, 0xFFC0, 0x7FC1, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF, 0x7FA5]
        dt = TYPES["bfloat16"][0]
    q = _nan_lanes(bits, dt)
    h = q.view(np.uint16).astype(np.uint32)
    isnan = np.isnan(q.astype(F32))
    if name == "float16":
        want = ((h & 0x8000) << 16) | 0x7FC00000 | ((h & 0x3FF) << 13)
    else:
        want = (h << 16) | 0x00400000
    for offset in (0, 1):
        qm = misaligned(q, offset)
        y = extql.dequantize_linear(qm, F32(2), np.array(0.5, F32).astype(dt))
        np.testing.assert_array_equal(y.view(np.uint32)[isnan], want[isnan])
        y2 = extql.dequantize_linear(qm.reshape(-1, 32), np.full(32, 2, F32),
                                     np.full(32, 0.5, F32).astype(dt))
        np.testing.assert_array_equal(y2.view(np.uint32).reshape(-1)[isnan], want[isnan])


# ---------------------------------------------------------------------------
# Non-temporal stores (EXTQL_STREAM): the _ex range functions, called as a C
# caller would, on small buffers at every alignment.
# ---------------------------------------------------------------------------

_STREAM = capi.STREAM
_ptr = capi.ptr
_F32 = 1  # float32's code: x of quantize, y of dequantize


def _quantize_range(code, x, s, zp, y, D, inner, start, stop, flags):
    return capi.LIB.extql_quantize_range(code, _F32, _F32, x, s, zp, y, D, inner, 0, start,
                                         stop, flags)


def _dequantize_range(code, q, s, zp, y, D, inner, start, stop, flags):
    return capi.LIB.extql_dequantize_range(code, _F32, q, s, zp, y, D, inner, 0, start, stop,
                                           flags)


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("layout", ["tensor", "last", "blocks"])
def test_streaming_stores_give_the_same_bits(name, layout):
    rng = np.random.default_rng(30)
    code = QTYPES[name].onnx
    dt = TYPES[name][0]
    for n_rows, d in [(1, 1), (3, 40), (2, 129), (5, 64)]:
        inner = 7 if layout == "blocks" else 1
        if layout == "tensor":
            shape, axis, pshape = (n_rows * d * 3,), 0, ()
        elif layout == "last":
            shape, axis, pshape = (n_rows, d), 1, (d,)
        else:
            shape, axis, pshape = (n_rows, d, inner), 1, (d,)
        size = int(np.prod(shape))
        s = _scales(rng, max(1, int(np.prod(pshape)))).reshape(pshape)
        zp = zero_points(name, rng, s.size).reshape(pshape)
        D = 1 if layout == "tensor" else d
        inn = size if layout == "tensor" else inner
        for offset in range(0, 8, 3):
            x = misaligned(random_f32(rng, size).reshape(shape), offset)
            y = misaligned(np.zeros(shape, dt), (offset * 5) % 8)
            for start, stop in [(0, size), (size // 3, size)]:
                y[...] = 0
                rc = _quantize_range(code, _ptr(x), _ptr(s), _ptr(zp), _ptr(y), D,
                                                  inn, start, stop, _STREAM)
                assert rc == 0
                want = quantize(x, s, zp, axis)
                assert_same_bits(y.reshape(-1)[start:], want.reshape(-1)[start:],
                                 f"stream quantize {name} {layout} n={size} [{start}:]")
            q = misaligned(_random_q(name, rng, size).reshape(shape), offset)
            out = misaligned(np.zeros(shape, F32), (offset * 3) % 8)
            rc = _dequantize_range(code, _ptr(q), _ptr(s), _ptr(zp), _ptr(out), D,
                                                inn, 0, size, _STREAM)
            assert rc == 0
            assert_same_bits(out, dequantize(q, s, zp, axis),
                             f"stream dequantize {name} {layout} n={size}")


@pytest.mark.parametrize("name", ALL_TYPES)
def test_last_axis_ranges_wrap_around_the_axis(name):
    """Per-axis along the last axis over ranges that start mid-row and wrap
    around the axis many times (one pass with periodically extended scales
    for axes up to 1024, runs per row beyond), with and without streaming."""
    rng = np.random.default_rng(32)
    code = QTYPES[name].onnx
    dt = TYPES[name][0]
    for d in (2, 3, 7, 8, 17, 31, 32, 33, 100, 1024, 1025):
        rows = max(3, 3000 // d)
        x = random_f32(rng, rows * d).reshape(rows, d)
        q = _random_q(name, rng, rows * d).reshape(rows, d)
        s = _scales(rng, d)
        for zp in (zero_points(name, rng, d), None):
            want_q = quantize(x, s, zp, 1, None if zp is not None else dt)
            want_d = dequantize(q, s, zp, 1)
            size = rows * d
            for start, stop in [(0, size), (d // 2 + 1, size - 3), (5, size), (size - 2 * d, size)]:
                for flags in (0, _STREAM):
                    y = np.zeros((rows, d), dt)
                    rc = _quantize_range(code, _ptr(x), _ptr(s), _ptr(zp), _ptr(y),
                                                      d, 1, start, stop, flags)
                    assert rc == 0
                    what = f"{name} d={d} [{start}:{stop}] flags={flags} zp={zp is not None}"
                    assert_same_bits(y.reshape(-1)[start:stop], want_q.reshape(-1)[start:stop],
                                     "quantize " + what)
                    out = np.zeros((rows, d), F32)
                    rc = _dequantize_range(code, _ptr(q), _ptr(s), _ptr(zp),
                                                        _ptr(out), d, 1, start, stop, flags)
                    assert rc == 0
                    assert_same_bits(out.reshape(-1)[start:stop], want_d.reshape(-1)[start:stop],
                                     "dequantize " + what)


@pytest.mark.parametrize("name", ["int32", "uint32"])
def test_32bit_saturation_edges(name):
    """The 32-bit quantize in float32 (AVX2 per-tensor loop): r = round(x / s)
    near lo - zp and hi - zp, which float32 often cannot represent, and near
    +-2^31 and +-2^32, for zero points across the range."""
    dt, lo, hi = TYPES[name]
    zps = [lo, lo + 1, lo + 255, -1, 0, 1, 7, 12345, 2**24 + 1, 2**30 + 3, hi - 256, hi - 1, hi]
    zps = sorted({z for z in zps if lo <= z <= hi})
    edges = [2.0**31, -(2.0**31), 2.0**32, -(2.0**32), 2.0**24, 0.0, 0.5, -0.5, 1.5]
    for zp in zps:
        pts = []
        for c in [lo - zp, hi - zp] + edges:
            f = np.float32(c)
            for k in range(-3, 4):
                g = f
                for _ in range(abs(k)):
                    g = np.nextafter(g, np.float32(np.inf if k > 0 else -np.inf))
                pts += [g, g + np.float32(0.5), g - np.float32(0.5)]
        x = np.array(pts + [np.inf, -np.inf, np.nan, 3.4e38, -3.4e38], F32)
        x = np.concatenate([x, x[::-1], np.roll(x, 3)])
        for s in (F32(1), F32(0.5), F32(-1), F32(2)):
            for offset in (0, 1):
                xm = misaligned(x, offset)
                _check(xm, s, np.array(zp).astype(dt), 1, name, f"{name} zp={zp} s={s}")


@pytest.mark.parametrize("name", ["int32", "uint32"])
def test_32bit_saturation_edges_per_axis(name):
    """As test_32bit_saturation_edges along the last axis, where each channel
    has its own zero point (the bounds of the float32 path per channel)."""
    dt, lo, hi = TYPES[name]
    zps = [lo, lo + 1, lo + 255, -1, 0, 1, 7, 12345, 2**24 + 1, 2**30 + 3, hi - 256, hi - 1, hi]
    zps = np.array(sorted({z for z in zps if lo <= z <= hi}) * 2, np.int64)[:20]
    d = zps.size
    cols = []
    for zp in zps:
        pts = []
        for c in [lo - zp, hi - zp, 2.0**31, -(2.0**31), 2.0**32, -(2.0**32), 0.5]:
            g = np.float32(c)
            for k in range(-3, 4):
                h = g
                for _ in range(abs(k)):
                    h = np.nextafter(h, np.float32(np.inf if k > 0 else -np.inf))
                pts += [h, h + np.float32(0.5), h - np.float32(0.5)]
        cols.append(np.array(pts + [np.inf, -np.inf, np.nan], F32))
    x = np.stack(cols, axis=1)
    zp = zps.astype(dt)
    for s in (np.ones(d, F32), np.full(d, 0.5, F32), np.where(np.arange(d) % 2, 1, -1).astype(F32)):
        for offset in (0, 1):
            _check(misaligned(x, offset), s, zp, 1, name, f"{name} per axis s={s[:2]}")


@pytest.mark.parametrize("name", ["int16", "float16", "int32", "bfloat16"])
def test_streaming_to_an_unaligned_output(name):
    """An output that is not aligned to its element size (a C caller's
    choice) gets plain stores: no fault, the same bits."""
    rng = np.random.default_rng(33)
    code = QTYPES[name].onnx
    dt = TYPES[name][0]
    n = 1000
    x = random_f32(rng, n)
    s, zp = np.array(0.37, F32), zero_points(name, rng, 1).reshape(())
    raw = np.zeros(4 * n + 64, np.uint8)
    addr = raw.ctypes.data
    start = (-addr) % 32 + 1  # 32-byte aligned + 1: misaligned for every element size > 1
    rc = _quantize_range(code, _ptr(x), s.ctypes.data, _ptr(zp), addr + start, 1,
                                      n, 0, n, _STREAM)
    assert rc == 0
    got = raw[start:start + n * dt.itemsize].copy().view(dt)
    assert_same_bits(got, quantize(x, s, zp), f"unaligned {name}")
    q = _random_q(name, rng, n)
    rc = _dequantize_range(code, _ptr(q), s.ctypes.data, _ptr(zp), addr + start, 1,
                                        n, 0, n, _STREAM)
    assert rc == 0
    got = raw[start:start + 4 * n].copy().view(F32)
    assert_same_bits(got, dequantize(q, s, zp), f"unaligned dequantize {name}")
