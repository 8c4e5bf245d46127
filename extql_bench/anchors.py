"""What each row is measured against: onnxruntime's own op or Cast, the NumPy
expression of the formula, or the model through the fallback functions (or
inlined to the standard ops of its fallbacks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from extql.rules.types import QTYPES, QuantizedType

from .config import DQ, Q

#: onnxruntime's own QuantizeLinear / DequantizeLinear (opset 21) types
#: (int4 / uint4 from onnxruntime 1.19).
_FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
ORT_Q_TYPES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", *_FLOAT8)
ORT_DQ_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "int4", "uint4", *_FLOAT8)

ANCHOR_NAME = {"ort": "onnxruntime {}", "cast": "Cast",
               "ort16": "onnxruntime {} to int16 (the same input)"}


def anchor_kind(op: str, qt: QuantizedType) -> str | None:
    """``cast`` (float16 / bfloat16), ``ort`` (a type onnxruntime's own op
    takes), ``ort16`` (quantize to int32 / uint32, which onnxruntime's
    QuantizeLinear does not take: its int16 quantize of the same input, the
    same division and rounding) or None (no onnxruntime op to compare
    with)."""
    if qt.name in QTYPES and qt.is_float:
        return "cast"
    if (op == Q and qt.name in ORT_Q_TYPES) or (op == DQ and qt.name in ORT_DQ_TYPES):
        return "ort"
    if op == Q and qt.name in ("int32", "uint32"):
        return "ort16"
    return None


def anchor_name(op: str, kind: str | None) -> str | None:
    """The anchor as the tables name it."""
    if kind is None:
        return None
    return ANCHOR_NAME[kind].format("QuantizeLinear" if op == Q else "DequantizeLinear")


def _per_axis(a: np.ndarray, s: np.ndarray, zp: np.ndarray, axis: int):
    if a.ndim > 1 and np.ndim(s) == 1:
        shape = [1] * a.ndim
        shape[axis] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    return s, zp


def numpy_quantize(x: np.ndarray, s: np.ndarray, zp: np.ndarray, qt: QuantizedType,
                   axis: int) -> np.ndarray:
    """The NumPy expression of quantize (the anchor of the numpy table)."""
    s, zp = _per_axis(x, s, zp, axis)
    if qt.is_float:
        v = x / s + zp.astype(np.float32)
        return np.where(np.isnan(v), v, np.clip(v, qt.lo, qt.hi)).astype(qt.dtype)
    if qt.name in ("int32", "uint32"):
        return np.clip(np.rint(x / s).astype(np.float64) + zp, qt.lo, qt.hi).astype(qt.dtype)
    return np.clip(np.rint(x / s) + zp, qt.lo, qt.hi).astype(qt.dtype)


def numpy_dequantize(q: np.ndarray, s: np.ndarray, zp: np.ndarray, qt: QuantizedType,
                     axis: int) -> np.ndarray:
    """The NumPy expression of dequantize."""
    s, zp = _per_axis(q, s, zp, axis)
    if qt.is_float:
        return (q.astype(np.float32) - zp.astype(np.float32)) * s
    return (q.astype(np.int64) - zp.astype(np.int64)).astype(np.float32) * s


def fallback_transform(name: str) -> Callable[[Any], Any] | None:
    """``extql.<name>`` (``attach_fallbacks``: the Extended nodes' fallback
    functions attached; ``inline_fallbacks``: every extql node replaced by
    standard ops), or None when this build has no such function."""
    try:
        import extql

        return getattr(extql, name)
    except (AttributeError, ImportError):
        return None


def attach_fallbacks() -> Callable[[Any], Any] | None:
    """``extql.attach_fallbacks``, or None when this build has no fallbacks."""
    return fallback_transform("attach_fallbacks")
