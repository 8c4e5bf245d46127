"""Inputs of the fallback and graph-pass tests: x with the awkward float32
values, zero points and quantized x of every type, scales, and the
granularity forms (x shape, scale shape, axis) the models are built in.

Values come from tests/contract.py's type table (independent of extql).
"""

from __future__ import annotations

import numpy as np
from contract import BF16, FLOAT_TYPES, INT_TYPES, TYPES


def special_x(shape, rng, qtype: str) -> np.ndarray:
    """Random values around the type's range plus NaN (several payloads and
    both signs), +-inf, ties, huge and tiny values."""
    lo, hi = TYPES[qtype][1], TYPES[qtype][2]
    span = min(float(hi) - float(lo), 1e6) if qtype in INT_TYPES else 1e5
    x = np.asarray(rng.standard_normal(shape) * span, dtype=np.float32)
    specials = np.array(
        [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFD55555, 0x7F800000, 0xFF800000],
        np.uint32,
    ).view(np.float32)
    extra = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 128.5, -128.5, 255.5, 32767.5,
         65535.5, 1e30, -1e30, 3.4e38, -3.4e38, 65504.0, 65519.0, 65520.0, -65520.0,
         2147483520.0, -2147483648.0, 4294967040.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,
         1.00390625, 1.01171875, 1e-40, -1e-45, 3.3895314e38, 3.3961776e38, 0.0, -0.0],
        np.float32,
    )
    flat = x.reshape(-1)
    vals = np.concatenate([specials, extra])
    n = min(flat.size, vals.size)
    idx = rng.permutation(flat.size)[:n]
    flat[idx] = vals[:n]
    return x


def zero_points(qtype: str, n: int | None, rng) -> np.ndarray:
    dt, lo, hi = TYPES[qtype]
    shape = () if n is None else (n,)
    if qtype in FLOAT_TYPES:
        return (rng.standard_normal(shape) * 3).astype(np.float32).astype(dt)
    lo_, hi_ = max(int(lo), -(2**31)), min(int(hi), 2**32 - 1)
    return rng.integers(lo_, hi_, size=shape, endpoint=True, dtype=np.int64).astype(dt)


# granularity forms: (x shape, scale shape or None=scalar, axis attribute)
FORMS = {
    "tensor-scalar": ((2, 3, 5), None, None),
    "tensor-[1]": ((2, 3, 5), (1,), 1),
    "axis-1": ((2, 3, 5), (3,), 1),
    "axis-default": ((2, 3, 5), (3,), None),
    "axis-neg": ((2, 3, 5), (5,), -1),
    "axis-0": ((4, 3), (4,), 0),
    "rank1": ((7,), None, 0),
    "rank0": ((), None, None),
}


def random_scale(shape, rng) -> np.ndarray:
    """A scale of the shape (None: a scalar) drawn from a few values."""
    if shape is None:
        return np.float32(rng.choice([0.5, 1.0, 0.37, 3.0]))
    return rng.choice(np.array([0.5, 1.0, 2.0, 0.37, 3.0, 1e-3], np.float32), size=shape)


def quantized_x(qtype: str, shape, rng) -> np.ndarray:
    dt, lo, hi = TYPES[qtype]
    if qtype in FLOAT_TYPES:
        bits = rng.integers(0, 2**16, size=shape, dtype=np.uint16)
        x = bits.view(np.float16) if qtype == "float16" else bits.view(BF16)
        flat = x.reshape(-1)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, hi, lo], np.float32)
        n = min(flat.size, specials.size)
        flat[:n] = specials[:n].astype(dt)
        return x
    x = rng.integers(int(lo), int(hi), size=shape, endpoint=True, dtype=np.int64).astype(dt)
    flat = x.reshape(-1)
    n = min(flat.size, 2)
    flat[:n] = np.array([lo, hi])[:n].astype(dt)
    return x
