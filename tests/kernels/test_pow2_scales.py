"""Power-of-two scales against the contract, bit for bit.

For a scale that is a power of two the AVX2 kernels compute x / s as
x * (1 / s) (the reciprocal is exact, so the product is the same correctly
rounded number); the baseline variant divides.  Quark writes power-of-two
scales for its NPU targets, and float16 / bfloat16 quantization uses the scale
1, so these are common.  Every special value sits at every lane position of a
vector step, with scales across the whole exponent range (subnormal scales,
reciprocals that are subnormal, and scales whose reciprocal would overflow,
which must take the division).  conftest.py runs this module once per kernel
variant.
"""

from __future__ import annotations

import numpy as np
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from vector_inputs import NAN_BITS, SPECIAL, misaligned, random_f32, zero_points

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32

#: Powers of two over the float32 range: subnormal (2^-149 .. 2^-127), the
#: smallest normal, ordinary, and the largest (whose reciprocal is subnormal).
EXPONENTS = [-149, -140, -128, -127, -126, -100, -24, -1, 0, 1, 8, 23, 24, 100, 126, 127]
POW2 = [F32(np.ldexp(1.0, e)) for e in EXPONENTS] + [F32(-np.ldexp(1.0, e)) for e in (-3, 0, 5)]
#: Next to powers of two: must not take the multiply.
NEAR = [np.nextafter(F32(1.0), F32(2.0)), np.nextafter(F32(0.5), F32(0.0)),
        F32(np.ldexp(3.0, -130))]


def _lanes(values: np.ndarray, rows: int = 32) -> np.ndarray:
    """values at every lane position of a 32-element step."""
    n = 32 * ((values.size + 31) // 32 + 1)
    return np.stack([np.roll(np.resize(values, n), r) for r in range(rows)]).astype(F32)


@pytest.mark.parametrize("name", list(TYPES))
def test_per_tensor_power_of_two_scales(name):
    rng = np.random.default_rng(31)
    x = np.concatenate([_lanes(np.concatenate([SPECIAL, NAN_BITS])).reshape(-1),
                        random_f32(rng, 4099)])
    for s in POW2 + NEAR:
        # Ties of the scale, and values around each type's range in units of s.
        with np.errstate(over="ignore", under="ignore"):
            ties = ((np.arange(-40, 40) + F32(0.5)) * s).astype(F32)
        xs = np.concatenate([x, ties])
        for zp in (None, zero_points(name, rng, 1).reshape(())):
            want = quantize(xs, s, zp, 1, None if zp is not None else np.uint8)
            for offset in (0, 1):
                got = extql.quantize_linear(misaligned(xs, offset), s, zp)
                assert_same_bits(got, want, f"quantize {name} s={s!r} zp={zp} offset={offset}")


@pytest.mark.parametrize("name", list(TYPES))
def test_per_channel_power_of_two_scales(name):
    """Axis 0 and a middle axis: runs of one scale each, some channels with a
    power of two and some without, in one tensor."""
    rng = np.random.default_rng(32)
    d = len(POW2) + len(NEAR)
    s = np.array(POW2 + NEAR, F32)
    zp = zero_points(name, rng, d)
    for shape, axis in (((d, 97), 0), ((2, d, 7, 9), 1)):
        x = random_f32(rng, int(np.prod(shape))).reshape(shape)
        want = quantize(x, s, zp, axis)
        assert_same_bits(extql.quantize_linear(x, s, zp, axis=axis), want,
                         f"quantize {name} shape={shape}")
        q = want
        assert_same_bits(extql.dequantize_linear(q, s, zp, axis=axis),
                         dequantize(q, s, zp, axis), f"dequantize {name} shape={shape}")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_nan_payloads_with_power_of_two_scales(name):
    """A NaN x keeps its payload through x * (1 / s) as through x / s: float16
    gives sign | 0x7E00 | payload >> 13 of the quieted NaN, bfloat16 sign |
    0x7FC0 (contract.assert_same_bits accepts any NaN, so the bits are
    compared here directly)."""
    payloads = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFFFE000, 0x7F800001,
                         0xFF812345, 0x7FFFFFFF, 0xFFFF8000], np.uint32)
    u = np.resize(payloads, 96)
    x = u.view(F32)
    quiet = u | 0x00400000
    sign16 = ((u >> 16) & 0x8000).astype(np.uint16)
    if name == "float16":
        want = (sign16 | 0x7E00 | ((quiet >> 13) & 0x3FF)).astype(np.uint16)
    else:
        want = (sign16 | 0x7FC0).astype(np.uint16)
    zp = np.zeros((), TYPES[name][0])
    for s in (F32(1.0), F32(0.5), F32(2.0), F32(-4.0)):
        for offset in (0, 1, 3):
            got = extql.quantize_linear(misaligned(x, offset), s, zp)
            np.testing.assert_array_equal(got.view(np.uint16), want, err_msg=f"s={s}")
