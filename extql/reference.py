"""``onnx.reference`` implementations of the Extended operators.

``ReferenceEvaluator(model, new_ops=extql.reference.OPS)`` runs any model with
ExtendedQuantizeLinear / ExtendedDequantizeLinear (``com.amd.quark``) or the
legacy VitisQuantizeLinear / VitisDequantizeLinear (``com.vai.quantize``)
nodes, computed by the extql kernels through the NumPy API, so the results are
the kernels' bits (bfloat16 as ``ml_dtypes.bfloat16``, which is what
onnx.reference uses).  Bad inputs raise the NumPy API's TypeError/ValueError,
whose messages name the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

from .numpy_api import dequantize_linear, quantize_linear
from .types import DOMAIN, LEGACY_DOMAIN

__all__ = [
    "OPS",
    "ExtendedQuantizeLinear",
    "ExtendedDequantizeLinear",
    "VitisQuantizeLinear",
    "VitisDequantizeLinear",
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


#: The classes to pass as ``new_ops`` to ``onnx.reference.ReferenceEvaluator``.
OPS: list[type[OpRun]] = [
    ExtendedQuantizeLinear,
    ExtendedDequantizeLinear,
    VitisQuantizeLinear,
    VitisDequantizeLinear,
]
