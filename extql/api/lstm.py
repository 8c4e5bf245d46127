"""The NumPy API of ExtendedLSTM: Quark's DPU emulation of an LSTM in 16-bit fixed point.

:func:`extended_lstm` checks its arguments (with :mod:`extql.rules.lstm`, the
words every path shares), then the kernels quantize W, R and B once and run
every batch element in every direction on its own, in parallel.  The math is
docs/operators/extended_lstm.rst's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernels
from ..rules.lstm import OP, check_lstm, check_shapes, output_shapes, shift_refusal

__all__ = ["extended_lstm"]


def _float32(name: str, v: Any, rank: int | None = None) -> np.ndarray:
    """v as a C-contiguous float32 array; NumPy arrays must be float32
    already (no silent conversion of float64 weights), Python sequences are
    converted."""
    if isinstance(v, (np.ndarray, np.generic)) or hasattr(v, "dtype"):
        arr = np.asarray(v)
        if arr.dtype != np.float32:
            raise TypeError(f"{OP}: {name} must be float32, got {arr.dtype}")
    else:
        try:
            arr = np.asarray(v, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{OP}: {name} must be float32 numbers: {exc}") from None
    if rank is not None and arr.ndim != rank:
        raise ValueError(f"{OP}: {name} must have rank {rank}, got shape {list(arr.shape)}")
    return np.ascontiguousarray(arr)


def extended_lstm(
    x: Any, w: Any, r: Any, b: Any = None, *, hidden_size: int, x_scale: float,
    x_zero_point: int, w_scale: float, w_zero_point: int, r_scale: float, r_zero_point: int,
    b_scale: float, b_zero_point: int, y_scale: float, y_zero_point: int,
    direction: str = "bidirectional", layout: int = 0, outputs: str = "Y",
) -> np.ndarray | tuple[np.ndarray, ...]:
    """ExtendedLSTM: the LSTM of a Vitis DPU, in 16-bit fixed point, bit for bit
    Quark 0.13's emulation.

    ``x`` float32 [seq, batch, input] (``layout=1``: [batch, seq, input]),
    ``w`` [dirs, 4H, input], ``r`` [dirs, 4H, H], ``b`` [dirs, 8H] or None
    (zeros); ``dirs`` 2 for ``direction="bidirectional"``, 1 for "forward" /
    "reverse"; gates in ONNX's order i, o, f, c.  X, W, R, B are quantized to
    uint16 with their scale and zero point; the result is the uint16 h
    dequantized with ``y_scale`` / ``y_zero_point``: Y float32
    [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]).  Every batch
    element runs as its own batch-1 sequence (Quark's kernel computes batch 1
    only).

    ``outputs``: "Y" (the default) returns Y; any other combination of "Y",
    "Y_h", "Y_c" joined by commas (``"Y,Y_h,Y_c"``) returns a tuple of them in
    that order: Y_h is each direction's last h dequantized, Y_c its last
    cell state, both [dirs, batch, H] (layout 1: [batch, dirs, H]).

    A bad argument raises ``TypeError`` / ``ValueError`` naming the operator
    and the problem (a missing or out-of-range attribute, a shape not fitting
    hidden_size and direction, a parameter whose fixed-point shift Quark's
    kernel leaves undefined).
    """
    a = check_lstm({
        "hidden_size": hidden_size, "x_scale": x_scale, "x_zero_point": x_zero_point,
        "w_scale": w_scale, "w_zero_point": w_zero_point, "r_scale": r_scale,
        "r_zero_point": r_zero_point, "b_scale": b_scale, "b_zero_point": b_zero_point,
        "y_scale": y_scale, "y_zero_point": y_zero_point, "direction": direction,
        "layout": layout,
    })
    wanted = [s.strip() for s in outputs.split(",")] if isinstance(outputs, str) else None
    if not wanted or any(n not in ("Y", "Y_h", "Y_c") for n in wanted) or len(
            set(wanted)) != len(wanted):
        raise ValueError(f"{OP}: outputs must name some of Y, Y_h, Y_c once each, "
                         f"got {outputs!r}")
    xa = _float32("X", x, 3)
    wa, ra = _float32("W", w), _float32("R", r)
    ba = None if b is None else _float32("B", b)
    seq, batch, n_in = check_shapes(a, xa.shape, wa.shape, ra.shape,
                                    None if ba is None else ba.shape)
    code, params = _kernels.lstm_params(a.scales, a.zero_points, n_in, a.hidden_size,
                                        a.dirs, a.reverse)
    if code != 0:
        raise ValueError(shift_refusal(code, params))
    y_shape, h_shape, c_shape = output_shapes(a, seq, batch)
    y = np.empty(y_shape, np.float32) if "Y" in wanted else None
    y_h = np.empty(h_shape, np.float32) if "Y_h" in wanted else None
    y_c = np.empty(c_shape, np.float32) if "Y_c" in wanted else None
    _kernels.lstm_run(a.scales, a.zero_points, n_in, a.hidden_size, a.dirs, a.reverse,
                      wa.reshape(-1), ra.reshape(-1), None if ba is None else ba.reshape(-1),
                      xa.reshape(-1), None if y is None else y.reshape(-1),
                      None if y_h is None else y_h.reshape(-1),
                      None if y_c is None else y_c.reshape(-1), seq, batch, a.layout,
                      _kernels.get_num_threads())
    got = {"Y": y, "Y_h": y_h, "Y_c": y_c}
    if wanted == ["Y"]:
        return y
    return tuple(got[n] for n in wanted)
