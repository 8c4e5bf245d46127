"""Quark's DPU-emulation nodes as points where error enters a quantized model.

An ``ExtendedInstanceNormalization`` (``VitisInstanceNormalization``) or
``ExtendedLSTM`` (``VitisLSTM``) node computes a float operator in the DPU's
arithmetic (bfloat16 for the instance norm, 16-bit fixed point for the
LSTM): ``extql analyze`` reports it as an ``activation`` point whose local
error is the node's output against the float operator ONNX defines
(``InstanceNormalization`` / ``LSTM``) on the same inputs, computed here in
float64 with NumPy.  Its type is ``bfloat16`` (instance norm) or ``int16``
(LSTM); its clipped fraction the share of the LSTM's outputs at the bounds
of its uint16 output type (0 for the instance norm, whose bfloat16 rounding
saturates nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ..onnx.dpu import dpu_family, lstm_attributes
from ..rules.dpu import DEFAULT_EPSILON

__all__ = ["DPU_TYPES", "dpu_output", "float_reference", "dpu_clipped_count"]

#: The family's arithmetic, as a point's ``type``.
DPU_TYPES: dict[str, str] = {"in": "bfloat16", "lstm": "int16"}


def dpu_output(node: onnx.NodeProto) -> tuple[int, str] | None:
    """(index, name) of the node's output a point compares: its first
    non-empty one (Y; or Y_h, Y_c for an LSTM without Y)."""
    for i, name in enumerate(node.output):
        if name:
            return i, name
    return None


def _float_in(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """ONNX InstanceNormalization in float64: per (n, c), over the rest."""
    xd = np.asarray(x, np.float64)
    axes = tuple(range(2, xd.ndim))
    mean = xd.mean(axis=axes, keepdims=True) if axes else xd
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True) if axes else np.zeros_like(xd)
    shape = (1, -1) + (1,) * (xd.ndim - 2)
    y = (xd - mean) / np.sqrt(var + eps) * np.reshape(scale, shape) + np.reshape(bias, shape)
    return y.astype(np.float32)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * v) + 1.0)


def _float_lstm(node: onnx.NodeProto, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                b: np.ndarray | None) -> list[np.ndarray]:
    """ONNX LSTM (sigmoid, tanh, tanh; h and c from 0; gates i, o, f, c) in
    float64 with the node's hidden_size, direction and layout: [Y, Y_h, Y_c]."""
    a = lstm_attributes(node)
    H = a.hidden_size
    xs = np.asarray(x, np.float64)
    if a.layout == 1:
        xs = xs.transpose(1, 0, 2)
    seq, batch, _ = xs.shape
    reverse = [a.direction == "reverse"] if a.dirs == 1 else [False, True]
    y = np.zeros((seq, a.dirs, batch, H))
    y_h = np.zeros((a.dirs, batch, H))
    y_c = np.zeros((a.dirs, batch, H))
    for d, backwards in enumerate(reverse):
        wd, rd = np.asarray(w[d], np.float64), np.asarray(r[d], np.float64)
        bd = np.zeros(8 * H) if b is None else np.asarray(b[d], np.float64)
        bias = bd[:4 * H] + bd[4 * H:]
        h = np.zeros((batch, H))
        c = np.zeros((batch, H))
        for t in (range(seq - 1, -1, -1) if backwards else range(seq)):
            g = xs[t] @ wd.T + h @ rd.T + bias
            gi, go, gf, gc = (g[:, k * H:(k + 1) * H] for k in range(4))
            c = _sigmoid(gf) * c + _sigmoid(gi) * np.tanh(gc)
            h = _sigmoid(go) * np.tanh(c)
            y[t, d] = h
        y_h[d], y_c[d] = h, c
    if a.layout == 1:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
    return [v.astype(np.float32) for v in (y, y_h, y_c)]


def float_reference(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    """The float operator's output the node's point compares with: ONNX's
    InstanceNormalization / LSTM on the node's own input values."""
    family = dpu_family(node)
    if family == "in":
        eps = DEFAULT_EPSILON
        for attr in node.attribute:
            if attr.name == "epsilon":
                eps = float(np.float32(attr.f))
        return _float_in(inputs[0], inputs[1], inputs[2], eps)
    if family != "lstm":
        raise ValueError(f"{node.op_type}: not a DPU-emulation node")
    index = dpu_output(node)
    b = inputs[3] if len(inputs) > 3 else None
    return _float_lstm(node, *inputs[:3], b)[0 if index is None else index[0]]


def dpu_clipped_count(node: onnx.NodeProto, out: np.ndarray) -> int:
    """How many of the node's output values sit at its output type's bounds:
    for an LSTM's Y / Y_h, the uint16 codes 0 and 65535 dequantized with
    y_scale / y_zero_point; 0 otherwise."""
    if dpu_family(node) != "lstm" or (dpu_output(node) or (0, ""))[0] == 2:
        return 0
    a = lstm_attributes(node)
    s, zp = np.float32(a.scales[-1]), a.zero_points[-1]
    bounds = [np.float32(0 - zp) * s, np.float32(65535 - zp) * s]
    return int(np.isin(np.asarray(out, np.float32), bounds).sum())
