"""Inputs and attributes of ExtendedLSTM cases: the grid that
tools/make_dpu_lstm_grid.py runs through Quark's library, and the cases the
tests of extql's own paths generate.

A case is the node's attributes (``hidden_size``, the ten quantization
attributes, ``direction``, ``layout``) and its float32 inputs X, W, R, B.  The
quantization parameters are chosen as a quantizer chooses them (scale from the
tensor's range over 65535 steps, or symmetric about 32768), with the choices
that reach the contract's lanes: X values on ties of the quantization and past
its range, W / R on the quantization grid as a DequantizeLinear gives them and
off it, y_zero_point below and above 32768, output scales that give every
output shift up to 32, power-of-two scale products (the wrapped factor) and
biases whose gate constants saturate int32.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _range_params(v: np.ndarray, symmetric: bool, shrink: float = 1.0) -> tuple[float, int]:
    """(scale, zero point) of a uint16 quantizer of v's range (``shrink`` < 1
    makes the range smaller than the data: some values saturate)."""
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    if symmetric:
        m = max(abs(lo), abs(hi), 1e-3) * shrink
        return float(F32(m / 32767.0)), 32768
    lo, hi = lo * shrink, max(hi * shrink, lo * shrink + 1e-3)
    s = float(F32((hi - lo) / 65535.0))
    return s, int(np.clip(round(-lo / s), 0, 65535))


def on_grid(v: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """v rounded onto its uint16 grid and dequantized (as a Q -> DQ pair gives it)."""
    q = np.clip(np.rint(v / F32(scale)) + zero_point, 0, 65535)
    return ((q - zero_point).astype(F32) * F32(scale)).astype(F32)


def plant_ties(rng: np.random.Generator, v: np.ndarray, scale: float, rate: float) -> None:
    """Make a share of v's elements exact ties k + 1/2 of the quantizer (in place)."""
    flat = v.reshape(-1)
    n = max(1, int(flat.size * rate))
    idx = rng.choice(flat.size, size=min(n, flat.size), replace=False)
    k = np.rint(flat[idx] / F32(scale))
    tie = ((k + 0.5) * np.float64(scale)).astype(F32)
    exact = (tie / F32(scale)) == (k + 0.5).astype(F32)
    flat[idx[exact]] = tie[exact]


def make_case(rng: np.random.Generator, seq: int, n_in: int, hidden: int, *,
              symmetric: bool = False, batch: int = 1, direction: str = "bidirectional",
              layout: int = 0, y_scale: float | None = None, y_zero_point: int | None = None,
              x_scale: float | None = None, w_scale: float | None = None,
              b_scale: float | None = None, specials: bool = False, grid_weights: bool = True,
              saturate: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """One case: (attributes, {"X", "W", "R", "B"})."""
    dirs = 2 if direction == "bidirectional" else 1
    spread_x = float(rng.choice([0.5, 1.0, 3.0]))
    x = rng.normal(0.0, spread_x, (seq, batch, n_in)).astype(F32)
    w = rng.normal(0.0, float(rng.choice([0.1, 0.3, 1.0])), (dirs, 4 * hidden, n_in)).astype(F32)
    r = rng.normal(0.0, float(rng.choice([0.1, 0.3, 1.0])), (dirs, 4 * hidden, hidden)).astype(F32)
    b = rng.normal(0.0, float(rng.choice([0.1, 0.5])), (dirs, 8 * hidden)).astype(F32)
    attrs: dict = {"hidden_size": hidden, "direction": direction, "layout": layout}
    shrink = 0.8 if saturate else 1.0
    for name, v in (("x", x), ("w", w), ("r", r), ("b", b)):
        s, z = _range_params(v, symmetric, shrink if name == "x" else 1.0)
        attrs[f"{name}_scale"], attrs[f"{name}_zero_point"] = s, z
    # A given scale keeps the data's codes: the tensor is scaled with it.
    given = {"x": x_scale, "w": w_scale, "b": b_scale}
    tensors = {"x": x, "w": w, "b": b}
    for name, scale in given.items():
        if scale is not None:
            ratio = float(F32(scale)) / attrs[f"{name}_scale"]
            tensors[name] *= F32(ratio)
            attrs[f"{name}_scale"] = float(F32(scale))
    if y_scale is None:
        y_scale = float(rng.choice([2.0 / 65535, 1.0 / 65535, 2.0**-15, 3.1e-5, 1.7e-4]))
    attrs["y_scale"] = float(F32(y_scale))
    if y_zero_point is None:
        y_zero_point = 32768 if symmetric else int(rng.integers(20000, 45000))
    attrs["y_zero_point"] = int(y_zero_point)
    if grid_weights:
        w = on_grid(w, attrs["w_scale"], attrs["w_zero_point"])
        r = on_grid(r, attrs["r_scale"], attrs["r_zero_point"])
        b = on_grid(b, attrs["b_scale"], attrs["b_zero_point"])
        if w.size <= 8192:  # a few off the grid
            w.reshape(-1)[:: max(1, w.size // 7)] *= F32(1.0001)
    plant_ties(rng, x, attrs["x_scale"], 0.05)
    if specials and x.size >= 4:
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=4, replace=False)
        flat[idx] = [np.nan, -np.inf, F32(-0.0), F32(1e6)]
    if layout == 1:
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
    return attrs, {"X": x, "W": w, "R": r, "B": b}
