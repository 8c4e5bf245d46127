"""int32 inputs of the quantize tests: int32 x (the official operator's
integer input) and int32 scales, with the values where the conversion to
float32 and the float64 division matter, and a hypothesis strategy of whole
problems (x, scale, zero point, axis, precision, saturate) of any output type.

Types and zero points come from tests/contract.py (independent of extql).
"""

from __future__ import annotations

import numpy as np
from contract import ALL_TYPES, REAL_TYPES
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

I32 = np.iinfo(np.int32)
REALS = list(REAL_TYPES)


# Where the conversion and the division matter: the ends of int32, float32's
# exact range (2^24) and its first inexact values, a float32 tie, odd values
# (ties after a division by 2), a double-rounding case (12582914).
CONVERSION_X = np.array(
    [0, 1, -1, 2, 3, 5, -5, 7, 127, 128, -128, 255, 256, 32767, 32768, 65504, 65519, 65520,
     2**24 - 1, 2**24, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 2, 2**30 + 2**22 + 1,
     -(2**30 + 2**22 + 1), 12582914, I32.max, I32.max - 64, I32.min, I32.min + 1],
    np.int64,
).astype(np.int32)


# Scales: any float32 (NaN, +-inf, +-0, subnormals), with the interesting
# ones drawn often.
SCALES = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from([float(np.float32(v))  # (float32 values: hypothesis takes exact ones only)
                     for v in (0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e-45, 1e-38, 3e38, 1 / 3, 1024.0)]),
)


@st.composite
def int32_problems(draw):
    """(x int32, scale, zero point, axis, precision, saturate) with
    consistent shapes: per tensor or per axis, any output type."""
    name = draw(st.sampled_from(list(ALL_TYPES)))
    dt, lo, hi = ALL_TYPES[name]
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
    per_axis = rank > 0 and draw(st.booleans())
    axis = draw(st.integers(-rank, rank - 1)) if per_axis else 0
    pshape = (shape[axis],) if per_axis else ()
    values = st.one_of(st.integers(I32.min, I32.max), st.sampled_from(CONVERSION_X.tolist()))
    x = draw(arrays(np.int64, shape, elements=values)).astype(np.int32)
    s_type = draw(st.sampled_from(REALS))
    with np.errstate(over="ignore", under="ignore"):
        scale = draw(arrays(np.float32, pshape, elements=SCALES)).astype(REAL_TYPES[s_type])
    if name in ("float16", "bfloat16"):
        zp = draw(arrays(np.float32, pshape, elements=st.floats(-1e5, 1e5, width=32)))
        with np.errstate(over="ignore"):  # (beyond 65504: an infinite float16 zero point)
            zp = zp.astype(dt)
    elif name.startswith("float"):
        zp = np.zeros(pshape, dt)
    else:
        zp = draw(arrays(np.int64, pshape, elements=st.integers(int(lo), int(hi)))).astype(dt)
    precision = draw(st.sampled_from([None, *REALS]))
    return x, scale, zp, axis, precision, draw(st.booleans()), name


# x values where the float64 quotient matters: the int32 ends, 2^24 +- 1,
# odd values above 2^24 (halves after a division by 2), small ties.
SPECIAL_X = np.array([0, 1, -1, 5, -5, 7, 2**24 - 1, 2**24 + 1, 2**25 + 1, 2**25 + 3,
                      2**30 + 2**22 + 1, 16777729, I32.max, I32.min, I32.max - 1, -(2**31 - 3)],
                     np.int64).astype(np.int32)


# int32 scales: 1, -1, small odd ones, a power of two, one above 2^24 and
# one far above (inexact in float32), 0 (division by zero).
SPECIAL_S = np.array([1, -1, 2, 3, -3, 7, 1000, 1024, 65537, 2**24 + 1, 2**30 + 3, -(2**31),
                      I32.max, 0], np.int64).astype(np.int32)


def make_x(rng: np.random.Generator, shape, xtype: np.dtype) -> np.ndarray:
    """x of a type (int32 over its whole range, floats of a spread of
    3000) with the special values (SPECIAL_X) first."""
    n = int(np.prod(shape))
    if xtype == np.int32:
        x = rng.integers(I32.min, I32.max, n, endpoint=True, dtype=np.int64)
        x[: SPECIAL_X.size] = SPECIAL_X
        return x.astype(np.int32).reshape(shape)
    x = rng.standard_normal(n) * 3000
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 2.5]
    with np.errstate(over="ignore"):
        return x.astype(np.float32).astype(xtype).reshape(shape)


def int32_scales(rng: np.random.Generator, pshape) -> np.ndarray:
    """int32 scales of the shape, drawn from SPECIAL_S (0 included)."""
    return rng.choice(SPECIAL_S, pshape).astype(np.int32)
