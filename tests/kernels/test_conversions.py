"""float16 / bfloat16 nodes as Quark writes them (scale 1, zero point 0) are
conversions, computed in one pass by the conversion primitives
(``extql_cast_*`` / ``extql_widen_*`` of extql/src/extql_primitives.h) instead
of the tiles: checked against the contract bit for bit.

Quantize is still ``x / 1 + 0`` saturated and rounded: -0 becomes +0, values
from the largest finite value up (infinities included) saturate, NaN stays
NaN; dequantize is exact.  Every special value sits at every lane position,
runs have every length around the vector steps, buffers start misaligned,
channels with other constants sit beside converted ones (the choice is per
channel), outputs are streamed, and a quantize may write over its own input.
conftest.py runs the module once per kernel variant.
"""

from __future__ import annotations

import capi
import numpy as np
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize

import extql
from extql.rules.types import QTYPES

pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32

#: float32 values at the edges of the conversions: zeros of both signs, the
#: largest finite float16 / bfloat16 and the values around their rounding to
#: infinity, subnormals of all three types, NaNs with payloads, infinities.
EDGES = np.concatenate([
    np.array([0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.996, 65520.0, -65520.0, 7e4,
              6.0e-8, 2.98e-8, 2.9802322e-8, 5.96e-8, 1e-40, -1e-40, 1e-45, 1.17549435e-38,
              3.3895314e38, -3.3895314e38, 3.3961776e38, 3.4028235e38, np.inf, -np.inf],
             F32),
    np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7F800001, 0xFF812345, 0x7F7F8000,
              0x7F7F7FFF, 0x00008000, 0x80017FFF], np.uint32).view(F32),
])


def _lanes(values: np.ndarray, step: int = 32) -> np.ndarray:
    """values at every lane position of a step-element vector loop."""
    n = step * ((values.size + step - 1) // step + 1)
    return np.concatenate([np.roll(np.resize(values, n), r) for r in range(step)]).astype(F32)


def _random_bits(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    return rng.integers(0, 2 ** (8 * size), n, dtype=np.uint64).astype(
        np.dtype(f"u{size}")).view(dtype)


def _misaligned(a: np.ndarray, offset: int) -> np.ndarray:
    buf = np.empty(a.size + offset, a.dtype)
    out = buf[offset:]
    out[...] = a.reshape(-1)
    return out.reshape(a.shape)


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_quantize_with_scale_1_and_zero_point_0(name):
    rng = np.random.default_rng(40)
    dt = TYPES[name][0]
    x_all = np.concatenate([_lanes(EDGES), _random_bits(rng, 3000, F32),
                            (rng.standard_normal(3000) * 3e4).astype(F32)])
    s = F32(1.0)
    for zp in (None, np.zeros((), dt)):
        for n in list(range(0, 70)) + [127, 128, 129, 255, 256, 257, x_all.size]:
            x = x_all[:n]
            want = quantize(x, s, zp if zp is not None else np.zeros((), dt), 1)
            for offset in (0, 1, 3):
                got = extql.quantize_linear(_misaligned(x, offset), s,
                                            zp if zp is not None else np.zeros((), dt))
                assert_same_bits(got, want, f"quantize {name} n={n} offset={offset}")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_dequantize_with_scale_1_and_zero_point_0(name):
    rng = np.random.default_rng(41)
    dt = TYPES[name][0]
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN on purpose
        edges = EDGES.astype(dt)
    q_all = np.concatenate([_random_bits(rng, 5000, dt), np.resize(edges, 320)])
    s = F32(1.0)
    zp = np.zeros((), dt)
    for n in list(range(0, 70)) + [127, 128, 129, 255, 256, 257, q_all.size]:
        q = q_all[:n]
        want = dequantize(q, s, zp, 1)
        for offset in (0, 1, 3):
            got = extql.dequantize_linear(_misaligned(q, offset), s, zp)
            assert_same_bits(got, want, f"dequantize {name} n={n} offset={offset}")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_converted_channels_beside_others(name):
    """Per channel: scale 1 with zero point +0 (converted), -0 and 0.5 (the
    tiles), and scales 2 and 0.37 (the multiply, the division)."""
    rng = np.random.default_rng(42)
    dt = TYPES[name][0]
    s = np.array([1, 1, 1, 2, 0.37, 1, 1], F32)
    zp = np.array([0.0, -0.0, 0.5, 0.0, 0.0, 0.0, 0.0], F32).astype(dt)
    for shape, axis in (((7, 301), 0), ((2, 7, 97), 1), ((3, 7, 65), 1)):
        n = int(np.prod(shape))
        x = np.resize(np.concatenate([_lanes(EDGES)[:n // 2], _random_bits(rng, n, F32)]),
                      n).reshape(shape)
        assert_same_bits(extql.quantize_linear(x, s, zp, axis=axis), quantize(x, s, zp, axis),
                         f"quantize {name} {shape}")
        q = _random_bits(rng, n, dt).reshape(shape)
        assert_same_bits(extql.dequantize_linear(q, s, zp, axis=axis),
                         dequantize(q, s, zp, axis), f"dequantize {name} {shape}")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_streamed_and_in_place_conversions(name):
    """Through the C entry points: streamed outputs at every alignment and
    from ranges that start anywhere, and a quantize whose output is its own
    input's memory."""
    rng = np.random.default_rng(43)
    code = QTYPES[name].onnx
    dt = TYPES[name][0]
    s = np.ones((), F32)
    zp = np.zeros((), dt)
    n = 5000
    x = np.concatenate([_lanes(EDGES), _random_bits(rng, n, F32)])[:n]
    q = _random_bits(rng, n, dt)
    want_q = quantize(x, s, zp, 1)
    want_d = dequantize(q, s, zp, 1)
    for offset in range(0, 8, 3):
        for start in (0, 5, 1001):
            y = _misaligned(np.zeros(n, dt), offset)
            assert capi.LIB.extql_quantize_range(code, 1, 1, capi.ptr(x), capi.ptr(s),
                                                 capi.ptr(zp), capi.ptr(y), 1, n, 0, start, n,
                                                 capi.STREAM) == 0
            assert_same_bits(y[start:], want_q[start:], f"streamed quantize {name} [{start}:]")
            out = _misaligned(np.zeros(n, F32), offset)
            assert capi.LIB.extql_dequantize_range(code, 1, capi.ptr(q), capi.ptr(s),
                                                   capi.ptr(zp), capi.ptr(out), 1, n, 0, start,
                                                   n, capi.STREAM) == 0
            assert_same_bits(out[start:], want_d[start:], f"streamed dequantize {name}")
    buf = x.copy()
    assert capi.LIB.extql_quantize_range(code, 1, 1, capi.ptr(buf), capi.ptr(s), capi.ptr(zp),
                                         capi.ptr(buf), 1, n, 0, 0, n, 0) == 0
    assert_same_bits(buf.view(dt)[:n], want_q, f"in-place quantize {name}")
