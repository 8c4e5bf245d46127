"""Inputs of the kernels' lane-by-lane tests: every special float32 value,
NaN payloads, random bit patterns, zero points near the type's ends, and
buffers that start misaligned (so that each value meets every lane position
of a vector step).

Types come from tests/contract.py (independent of extql).
"""

from __future__ import annotations

import numpy as np
from contract import FLOAT_TYPES, TYPES

F32 = np.float32


SPECIAL = np.array(
    [
        0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, 128.5, -128.5, -129.5, 254.5,
        255.5, 32767.5, -32768.5, 65535.5, 65536.0, 2.0**24 + 2, 2.0**31, 2.0**31 - 128,
        -(2.0**31), 2.0**32, 2.0**32 - 256, 1e-45, -1e-45, 1.17e-38, 1e30, -3.4e38,
        65504.0, 65519.0, 65520.0, -65520.0, 6e-8, 3e-8, 2.9e-8, 3.3895313e38, 3.3961776e38,
        np.nan, -np.nan, np.inf, -np.inf,
    ],
    dtype=F32,
)


NAN_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFFFE000, 0x7F800001, 0xFF812345],
                    np.uint32).view(F32)


def random_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    """Arbitrary bit patterns, values near the type ranges, and ties."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(F32)
    near = (rng.standard_normal(n) * rng.choice([1, 100, 3e4, 3e9], n)).astype(F32)
    ties = (rng.integers(-70000, 70000, n) + F32(0.5)).astype(F32)
    pick = rng.integers(0, 3, n)
    return np.where(pick == 0, bits, np.where(pick == 1, near, ties)).astype(F32)


def zero_points(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    dt, lo, hi = TYPES[name]
    if name in FLOAT_TYPES:
        with np.errstate(over="ignore"):
            v = np.where(rng.random(n) < 0.8, rng.standard_normal(n) * 8, rng.standard_normal(n)
                         * 1e6).astype(F32)
            return v.astype(dt)
    edge = rng.choice(np.array([lo, hi, 0, lo + 1, hi - 1], np.int64), n)
    v = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64)
    return np.where(rng.random(n) < 0.3, edge, v).astype(dt)


def misaligned(a: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of a that starts `offset` elements into a buffer."""
    flat = a.reshape(-1)
    buf = np.empty(flat.size + offset, a.dtype)
    out = buf[offset:]
    out[...] = flat
    return out.reshape(a.shape)
