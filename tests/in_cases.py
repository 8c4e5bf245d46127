"""Inputs for ExtendedInstanceNormalization cases: shared by the Quark grid
generator (tools/make_dpu_in_grid.py) and the tests that make their own
inputs.  Values come in kinds that reach the contract's lanes: plain normal
values, large offsets over a small spread (the DPU's variance cancels),
constant instances (a variance of 0 or a little below), bfloat16 rounding
ties of both parities, NaN / +-inf, values whose squares overflow float32,
and subnormals."""

from __future__ import annotations

import numpy as np

F32 = np.float32

KINDS = ("normal", "offset", "constant", "ties", "specials", "huge", "tiny")


def ties(rng: np.random.Generator, shape) -> np.ndarray:
    """float32 values whose low 16 bits are exactly 0x8000 (a bfloat16 tie),
    half with bit 16 set (rounds up) and half clear (rounds down)."""
    v = rng.normal(0, 3, size=shape).astype(F32).view(np.uint32)
    v = (v & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    return v.view(F32)


def values(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    """x of ``shape`` (N, C, ...) of one kind (see KINDS)."""
    shape = tuple(int(d) for d in shape)
    if kind == "normal":
        x = rng.normal(rng.uniform(-2, 2), rng.uniform(0.1, 4), size=shape)
    elif kind == "offset":
        off = rng.choice([1e3, -4e4, 1e6, 3e7])
        x = off + rng.normal(0, rng.choice([0.01, 1.0, 30.0]), size=shape)
    elif kind == "constant":
        x = np.broadcast_to(rng.normal(0, 100, size=shape[:2] + (1,) * (len(shape) - 2)),
                            shape).copy()
    elif kind == "ties":
        x = ties(rng, shape)
    elif kind == "huge":
        x = rng.normal(0, 1, size=shape) * rng.choice([1e19, 3e25, 1e38])
    elif kind == "tiny":
        x = rng.normal(0, 1, size=shape) * rng.choice([1e-20, 1e-39, 1e-44])
    elif kind == "specials":
        x = rng.normal(0, 2, size=shape).astype(F32)
        flat = x.reshape(shape[0] * shape[1], -1)
        specials = [np.nan, np.inf, -np.inf]
        for i in range(flat.shape[0]):
            if rng.random() < 0.6:
                k = int(rng.integers(0, flat.shape[1]))
                flat[i, k] = specials[i % 3]
                if i % 4 == 3 and flat.shape[1] > 1:
                    flat[i, (k + 1) % flat.shape[1]] = -flat[i, k]
        x = flat.reshape(shape)
    else:
        raise ValueError(kind)
    with np.errstate(over="ignore"):  # "huge" may overflow to +-inf: kept
        return np.asarray(x, dtype=F32)


def params(rng: np.random.Generator, c: int, special: bool = False) -> tuple[np.ndarray, ...]:
    """γ and β of length c, with ties (and, if ``special``, NaN / inf)."""
    g = rng.normal(1, 0.5, size=c).astype(F32)
    b = rng.normal(0, 0.5, size=c).astype(F32)
    if c > 2:
        g[:: 3] = ties(rng, g[:: 3].shape)
        b[1:: 3] = ties(rng, b[1:: 3].shape)
    if special and c > 3:
        g[0], b[1], g[2] = np.nan, np.inf, -np.inf
    return g, b
