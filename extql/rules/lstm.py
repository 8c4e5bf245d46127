"""The rules of ExtendedLSTM: attributes, inputs, outputs, refusals.

Quark's DPU emulation of an LSTM (docs/operators/extended_lstm.rst) takes
its quantization from ten required attributes, and accepts less than ONNX's
``LSTM``: no ``sequence_lens`` / ``initial_h`` / ``initial_c`` / ``P``, no
activations or clip, ``input_forget`` 0.  This module is the one place those
rules are written for Python: the NumPy API, the reference op and
``extql check`` read it, so that a node is accepted or refused with the same
words everywhere.

Plain data and checks, no numpy.  The checks raise ``TypeError`` for a value
of the wrong kind and ``ValueError`` for a value outside the accepted ones;
each message names the operator (and the node, when given) and the problem.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._entrypoints import LSTM_CODES

__all__ = [
    "OP",
    "LEGACY_OP",
    "QPARAMS",
    "ATTRIBUTES",
    "REFUSED_ATTRIBUTES",
    "INPUTS",
    "REFUSED_INPUTS",
    "OUTPUTS",
    "DIRECTIONS",
    "LSTMAttrs",
    "check_lstm",
    "check_shapes",
    "shift_refusal",
    "output_shapes",
]

OP = "ExtendedLSTM"
#: The legacy name (com.vai.quantize); it computes the same.
LEGACY_OP = "VitisLSTM"
#: The quantized tensors, in the order of the kernels' scales / zero points.
QPARAMS: tuple[str, ...] = ("x", "w", "r", "b", "y")
#: The attributes: name -> (kind, default; None: required).
ATTRIBUTES: dict[str, tuple[str, Any]] = {
    "hidden_size": ("int", None),
    **{f"{p}_scale": ("float", None) for p in QPARAMS},
    **{f"{p}_zero_point": ("int", None) for p in QPARAMS},
    "direction": ("string", "bidirectional"),
    "layout": ("int", 0),
    "input_forget": ("int", 0),
}
#: ONNX LSTM attributes the DPU has no use for: refused when present.
REFUSED_ATTRIBUTES: dict[str, str] = {
    "activations": "the DPU's gates are fixed (sigmoid, tanh, tanh)",
    "activation_alpha": "the DPU's gates are fixed",
    "activation_beta": "the DPU's gates are fixed",
    "clip": "the DPU clips nothing",
}
#: The inputs, as ONNX's LSTM numbers them; B optional.
INPUTS: tuple[str, ...] = ("X", "W", "R", "B")
#: ONNX LSTM inputs refused when given (index -> name, why).
REFUSED_INPUTS: dict[int, tuple[str, str]] = {
    4: ("sequence_lens", "the DPU runs every sequence to its end"),
    5: ("initial_h", "the DPU starts h from its output zero point"),
    6: ("initial_c", "the DPU starts c from 0"),
    7: ("P", "the DPU has no peepholes"),
}
#: The outputs; every one optional.
OUTPUTS: tuple[str, ...] = ("Y", "Y_h", "Y_c")
#: direction -> number of directions.
DIRECTIONS: dict[str, int] = {"forward": 1, "reverse": 1, "bidirectional": 2}

#: What each refused shift depends on: code -> (shift, upper bound, what gives it).
_SHIFTS: dict[str, tuple[str, int, str]] = {
    "BAD_AX": ("ax", 31, "x_scale * w_scale"),
    "BAD_AH": ("ah", 31, "y_scale * r_scale"),
    "BAD_XWQ": ("xwq", 31, "x_scale * w_scale and the input size"),
    "BAD_HRQ": ("hrq", 31, "y_scale * r_scale and hidden_size"),
    "BAD_XS": ("xs", 31, "x_scale * w_scale * (w_zero_point - 32768)"),
    "BAD_HS": ("hs", 31, "y_scale * r_scale * (r_zero_point - 32768)"),
    "BAD_OH": ("oh", 32, "y_scale"),
}
_CODES = {code: name for name, code in LSTM_CODES}


def _where(op: str, node: str | None) -> str:
    return f"{op} node {node!r}" if node else op


def _f32(v: float) -> float:
    """v rounded to float32 (inf beyond its range, NaN stays)."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


@dataclass(frozen=True)
class LSTMAttrs:
    """A node's checked attributes (scales rounded to float32)."""

    hidden_size: int
    scales: tuple[float, ...]        # x, w, r, b, y
    zero_points: tuple[int, ...]     # x, w, r, b, y: uint16 values
    direction: str
    layout: int

    @property
    def dirs(self) -> int:
        return DIRECTIONS[self.direction]

    @property
    def reverse(self) -> int:
        return int(self.direction == "reverse")


def _int(where: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{where}: attribute {name} must be an integer, got {v!r}")
    return operator.index(v)


def check_lstm(attrs: Mapping[str, Any], op: str = OP, node: str | None = None) -> LSTMAttrs:
    """The attributes of an ExtendedLSTM / VitisLSTM node, checked: every
    required one present, hidden_size >= 1, scales positive finite float32,
    zero points in [0, 65535], direction one of three, layout 0 or 1,
    input_forget 0, none of ONNX's activations / clip, no unknown name."""
    where = _where(op, node)
    for name in attrs:
        if name in REFUSED_ATTRIBUTES:
            raise ValueError(f"{where}: attribute {name} is not supported: "
                             f"{REFUSED_ATTRIBUTES[name]}")
        if name not in ATTRIBUTES:
            raise ValueError(f"{where}: unknown attribute {name!r}")
    missing = [n for n, (_, default) in ATTRIBUTES.items()
               if default is None and attrs.get(n) is None]
    if missing:
        raise ValueError(f"{where}: missing required attribute(s) {', '.join(missing)}")
    hidden = _int(where, "hidden_size", attrs["hidden_size"])
    if hidden < 1:
        raise ValueError(f"{where}: hidden_size must be at least 1, got {hidden}")
    scales, zps = [], []
    for p in QPARAMS:
        s = attrs[f"{p}_scale"]
        if isinstance(s, (bool, str, bytes)) or not hasattr(s, "__float__"):
            raise TypeError(f"{where}: attribute {p}_scale must be a float, got {s!r}")
        s = float(s)
        s32 = _f32(s)
        if not (math.isfinite(s32) and s32 > 0):
            raise ValueError(f"{where}: attribute {p}_scale must be a positive finite "
                             f"float32, got {s!r}")
        z = _int(where, f"{p}_zero_point", attrs[f"{p}_zero_point"])
        if not 0 <= z <= 65535:
            raise ValueError(f"{where}: attribute {p}_zero_point must be a uint16 value "
                             f"in [0, 65535], got {z}")
        scales.append(s32)
        zps.append(z)
    direction = attrs.get("direction", "bidirectional")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in DIRECTIONS:
        raise ValueError(f"{where}: direction must be one of {sorted(DIRECTIONS)}, "
                         f"got {direction!r}")
    layout = _int(where, "layout", attrs.get("layout", 0))
    if layout not in (0, 1):
        raise ValueError(f"{where}: layout must be 0 or 1, got {layout}")
    forget = _int(where, "input_forget", attrs.get("input_forget", 0))
    if forget != 0:
        raise ValueError(f"{where}: input_forget must be 0, got {forget} (the DPU couples "
                         "no gates; Quark refuses it too)")
    return LSTMAttrs(hidden, tuple(scales), tuple(zps), direction, layout)


def check_shapes(a: LSTMAttrs, x: tuple[int, ...], w: tuple[int, ...], r: tuple[int, ...],
                 b: tuple[int, ...] | None, op: str = OP,
                 node: str | None = None) -> tuple[int, int, int]:
    """(seq, batch, input) of a node's input shapes, checked against its
    attributes: X rank 3 with input >= 1, W [dirs, 4H, input], R [dirs, 4H, H],
    B (when given) [dirs, 8H].  A dimension may be None (unknown: not
    checked)."""
    where = _where(op, node)
    H, dirs = a.hidden_size, a.dirs
    if len(x) != 3:
        raise ValueError(f"{where}: X must have rank 3 ([seq, batch, input], layout 1: "
                         f"[batch, seq, input]), got shape {list(x)}")
    seq, batch = (x[0], x[1]) if a.layout == 0 else (x[1], x[0])
    n_in = x[2]
    if n_in is not None and n_in < 1:
        raise ValueError(f"{where}: X's input size must be at least 1, got {n_in}")

    def same(got, want):
        return len(got) == len(want) and all(
            g is None or v is None or g == v for g, v in zip(got, want, strict=True))

    for name, got, want in (("W", w, (dirs, 4 * H, n_in)), ("R", r, (dirs, 4 * H, H)),
                            ("B", b, (dirs, 8 * H))):
        if got is not None and not same(tuple(got), want):
            shown = ["input" if v is None else v for v in want]
            raise ValueError(f"{where}: {name} must have shape {shown} (direction "
                             f"{a.direction!r}, hidden_size {H}), got {list(got)}")
    return seq, batch, n_in


def shift_refusal(code: int, params: Mapping[str, Any], op: str = OP,
                  node: str | None = None) -> str:
    """The words of a kernel refusal (extql_lstm_params's code, its parameters)."""
    where = _where(op, node)
    name = _CODES.get(code, str(code))
    if name == "BAD_SIZE":
        return (f"{where}: the input size and hidden_size must be below 2^22 (the exact "
                "integer dot products)")
    shift, hi, source = _SHIFTS.get(name, (name, 31, "the attributes"))
    value = params.get(shift)
    return (f"{where}: the fixed-point shift {shift} = {value} from {source} is outside "
            f"[0, {hi}]: Quark's kernel shifts a C int by it, which C leaves undefined")


def output_shapes(a: LSTMAttrs, seq: Any, batch: Any) -> tuple[tuple, tuple, tuple]:
    """The shapes of Y, Y_h, Y_c for the node's layout."""
    H, dirs = a.hidden_size, a.dirs
    if a.layout == 1:
        return (batch, seq, dirs, H), (batch, dirs, H), (batch, dirs, H)
    return (seq, dirs, batch, H), (dirs, batch, H), (dirs, batch, H)
