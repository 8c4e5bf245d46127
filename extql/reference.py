"""``onnx.reference`` implementations of the Extended operators.

``ReferenceEvaluator(model, new_ops=extql.reference.OPS)`` runs any model with
ExtendedQuantizeLinear / ExtendedDequantizeLinear (``com.amd.quark``) or the
legacy VitisQuantizeLinear / VitisDequantizeLinear (``com.vai.quantize``)
nodes, computed by the extql kernels through the NumPy API, so the results are
the kernels' bits (bfloat16 as ``ml_dtypes.bfloat16``, which is what
onnx.reference uses).  Bad inputs raise the NumPy API's TypeError/ValueError,
whose messages name the operator.

``OPS`` also has onnxruntime's ``com.microsoft`` QuantizeLinear /
DequantizeLinear, which AMD Quark writes for its 8/16-bit nodes and which
``onnx.reference`` has no implementation of: int8/uint8/int16/uint16 through
the same kernels (the operators agree there), int32 dequantize with the
difference wrapping in 32 bits as onnxruntime computes it, and int4/uint4 in
NumPy (``x / s`` in float32, round half to even, ``+ zp``, saturate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

from .microsoft_ops import MS_DOMAIN, reference_dequantize_int32
from .numpy_api import dequantize_linear, quantize_linear
from .types import DOMAIN, LEGACY_DOMAIN

__all__ = [
    "OPS",
    "ExtendedQuantizeLinear",
    "ExtendedDequantizeLinear",
    "VitisQuantizeLinear",
    "VitisDequantizeLinear",
    "MicrosoftQuantizeLinear",
    "MicrosoftDequantizeLinear",
]


def _present(value: Any) -> bool:
    return value is not None


class _Quantize(OpRun):
    def _run(self, x, y_scale, y_zero_point=None, axis=1):  # type: ignore[override]
        zp = y_zero_point if _present(y_zero_point) else None
        return (quantize_linear(x, y_scale, zp, axis=int(axis)),)


class _Dequantize(OpRun):
    def _run(self, x, x_scale, x_zero_point=None, axis=1):  # type: ignore[override]
        zp = x_zero_point if _present(x_zero_point) else None
        return (np.asarray(dequantize_linear(x, x_scale, zp, axis=int(axis))),)


# onnx.reference finds a class by (op_domain, class name), so each operator
# name is its own class.


class ExtendedQuantizeLinear(_Quantize):
    """com.amd.quark ExtendedQuantizeLinear (version 1)."""

    op_domain = DOMAIN


class ExtendedDequantizeLinear(_Dequantize):
    """com.amd.quark ExtendedDequantizeLinear (version 1)."""

    op_domain = DOMAIN


class VitisQuantizeLinear(_Quantize):
    """com.vai.quantize VitisQuantizeLinear: the legacy name, same semantics."""

    op_domain = LEGACY_DOMAIN


class VitisDequantizeLinear(_Dequantize):
    """com.vai.quantize VitisDequantizeLinear: the legacy name, same semantics."""

    op_domain = LEGACY_DOMAIN


def _int4_kind(a: np.ndarray) -> tuple[int, int] | None:
    """(lo, hi) when ``a`` is int4 / uint4 (ml_dtypes), else None."""
    name = a.dtype.name
    if name == "int4":
        return -8, 7
    if name == "uint4":
        return 0, 15
    return None


def _param(p: np.ndarray, x_ndim: int, axis: int) -> np.ndarray:
    """A scale / zero point reshaped to broadcast against x along ``axis``."""
    p = np.asarray(p)
    if p.size == 1 or x_ndim == 0:
        return p.reshape(())
    return p.reshape([p.size] + [1] * (x_ndim - 1 - axis % x_ndim))


class _MicrosoftQuantize(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, y_scale, y_zero_point=None, axis=1, **_):  # type: ignore[override]
        # (onnx.reference adds the ai.onnx schema's other attributes' defaults.)
        zp = y_zero_point if _present(y_zero_point) else None
        bounds = None if zp is None else _int4_kind(np.asarray(zp))
        if bounds is None:
            return (quantize_linear(x, y_scale, zp, axis=int(axis)),)
        x = np.asarray(x, np.float32)
        v = x / _param(np.asarray(y_scale, np.float32), x.ndim, int(axis))
        r = np.rint(v) + _param(np.asarray(zp).astype(np.float32), x.ndim, int(axis))
        r = np.where(np.isnan(r), bounds[0], np.clip(r, *bounds))
        return (r.astype(np.asarray(zp).dtype),)


class _MicrosoftDequantize(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, x_scale, x_zero_point=None, axis=1, **_):  # type: ignore[override]
        zp = x_zero_point if _present(x_zero_point) else None
        x = np.asarray(x)
        if x.dtype == np.int32:
            return (np.asarray(reference_dequantize_int32(x, x_scale, zp, int(axis))),)
        if _int4_kind(x) is not None:
            s = np.asarray(x_scale, np.float32)
            d = x.astype(np.float32)
            if zp is not None:
                d = d - _param(np.asarray(zp).astype(np.float32), x.ndim, int(axis))
            return ((d * _param(s, x.ndim, int(axis))).astype(np.float32),)
        return (np.asarray(dequantize_linear(x, x_scale, zp, axis=int(axis))),)


# The com.microsoft operators carry the official names: classes made with type()
# so that this module's namespace keeps its own QuantizeLinear-free names.
MicrosoftQuantizeLinear = type(
    "QuantizeLinear", (_MicrosoftQuantize,),
    {"__doc__": "com.microsoft QuantizeLinear (onnxruntime contrib op), as onnxruntime runs it.",
     "__module__": __name__, "__qualname__": "MicrosoftQuantizeLinear"},
)
MicrosoftDequantizeLinear = type(
    "DequantizeLinear", (_MicrosoftDequantize,),
    {"__doc__": "com.microsoft DequantizeLinear (onnxruntime contrib op), as onnxruntime runs "
                "it.",
     "__module__": __name__, "__qualname__": "MicrosoftDequantizeLinear"},
)

#: The classes to pass as ``new_ops`` to ``onnx.reference.ReferenceEvaluator``.
OPS: list[type[OpRun]] = [
    ExtendedQuantizeLinear,
    ExtendedDequantizeLinear,
    VitisQuantizeLinear,
    VitisDequantizeLinear,
    MicrosoftQuantizeLinear,
    MicrosoftDequantizeLinear,
]
