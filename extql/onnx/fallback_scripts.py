"""The fallback decompositions as functions a user's onnxscript code calls.

:data:`extql.fallbacks.QUANTIZE` / :data:`~extql.fallbacks.DEQUANTIZE` hold,
per variant (a quantized type name, or ``"default"`` for no zero point), a
:class:`FallbackFunction`: an onnxscript ``OnnxFunction`` with the operator's
signature ``(x, scale, zero_point, axis=1, block_size=0, ...)`` with its
other attributes (quantize: ``precision``, float8's ``saturate``,
``output_dtype``; dequantize: ``output_dtype``; ``precision`` and dequantize's
``output_dtype`` default to the scale's type, as for the operator) and any of
its types (``"default"`` ignores its third input).  Bound to a name, it is
called like any script function::

    import onnxscript
    from onnxscript import FLOAT, INT16, opset21 as op
    import extql.fallbacks

    q_int16 = extql.fallbacks.QUANTIZE["int16"]

    @onnxscript.script(default_opset=op)
    def f(x: FLOAT["N", 4], s: FLOAT[4], zp: INT16[4]) -> INT16["N", 4]:
        return q_int16(x, s, zp, axis=1)

* Converted (``f.to_model_proto()``), the call is a node of the domain
  :data:`~extql.onnx.script_export.FALLBACK_DOMAIN` (``ai.extql.fallbacks``),
  operator ``ExtendedQuantizeLinear_int16``, and the model carries its
  definition: the same flat body of standard ops that
  :func:`extql.attach_fallbacks` adds (:func:`extql.fallbacks.function_proto`),
  under a name of its own per variant, so one model can call several
  variants.  Such a model runs in any ONNX runtime, with or without extql's
  library.
* Called eagerly on NumPy arrays, the decomposition's ops run one by one in
  onnxscript's evaluator: the fallback's own bits, which are the kernels'.

Precision float64 (quantize's ``precision`` 11, which is also what an int32
scale without ``precision`` means): the same entry (``QUANTIZE["int8"]``)
takes it.  Eagerly it runs the precision-float64 decomposition
(:func:`extql.fallbacks.function_proto` of ``"int8-float64"``); converted,
:func:`extql.onnx.script_export.finish_model` points such calls at that
function (``ExtendedQuantizeLinear_int8-float64``, added to the model),
from a constant ``precision`` or the scale's static type; a quantize call
with neither is an error at conversion, never a float32 division by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnxscript.values import OnnxFunction, Opset

# extql.opset installs the conversion and eager hooks these functions rely on.
from .. import opset  # noqa: F401
from ..types import FLOAT64_CODE, FLOAT_CODES, is_float8
from .script_export import FALLBACK_DOMAIN, MODEL_OPSET

__all__ = ["FallbackFunction", "function_name", "fallback_proto"]


def function_name(quantize: bool, variant: str) -> str:
    """The operator name of one fallback in :data:`FALLBACK_DOMAIN`
    (``variant`` may be a precision-float64 overload, ``"int8-float64"``)."""
    return f"Extended{'Quantize' if quantize else 'Dequantize'}Linear_{variant}"


def fallback_proto(quantize: bool, variant: str, version: int) -> onnx.FunctionProto:
    """The flat definition of one fallback named for :data:`FALLBACK_DOMAIN`
    (:func:`function_name`), importing ai.onnx ``version``."""
    from ..fallbacks import function_proto

    proto = function_proto(quantize, variant, opset=version)
    proto.domain = FALLBACK_DOMAIN
    proto.name = function_name(quantize, variant)
    proto.overload = ""
    return proto


def _scale_code(scale: Any) -> int:
    """The ONNX code of an eager scale's type (float32 when it is not one of
    the float types)."""
    dtype = np.asarray(getattr(scale, "value", scale)).dtype
    return FLOAT_CODES.get(dtype, onnx.TensorProto.FLOAT)


def _precision_code(scale: Any) -> int:
    """The ``precision`` a quantize without one has, from an eager scale:
    float64 for an int32 scale (never a float type, which would round the
    scale), else the scale's type (float32 for float8e8m0)."""
    dtype = np.asarray(getattr(scale, "value", scale)).dtype
    return FLOAT64_CODE if dtype == np.int32 else _scale_code(scale)


def _eager_body(quantize: bool, variant: str, body: Callable) -> Callable:
    """The eager body of a fallback: the operator's attributes with their
    meaning -- ``precision`` / ``output_dtype`` 0 stand for the scale's type,
    as for the operator, ``precision`` float64 for an int32 scale (the
    converted call gets the same from
    :func:`extql.onnx.script_export.finish_model`) -- and, for the "default"
    variants, the zero point optional (the decomposition ignores it), so
    that ``f(x, scale)`` is a valid call.  Precision float64 runs the
    variant's precision-float64 decomposition."""
    float8 = is_float8(variant)
    if quantize:

        def ExtendedQuantizeLinear(x, y_scale, y_zero_point=None, axis: int = 1,
                                   block_size: int = 0, precision: int = 0, saturate: int = 1,
                                   output_dtype: int = 0):
            precision = precision or _precision_code(y_scale)
            attrs = {"axis": axis, "block_size": block_size, "precision": precision,
                     "output_dtype": output_dtype}
            if float8:
                attrs["saturate"] = saturate
            if precision == FLOAT64_CODE:
                from ..fallbacks import quantize64_script

                return quantize64_script(variant).function(x, y_scale, y_zero_point, **attrs)
            return body(x, y_scale, y_zero_point, **attrs)

        return ExtendedQuantizeLinear

    def ExtendedDequantizeLinear(x, x_scale, x_zero_point=None, axis: int = 1,
                                 block_size: int = 0, output_dtype: int = 0):
        return body(x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                    output_dtype=output_dtype or _scale_code(x_scale))

    return ExtendedDequantizeLinear


class FallbackFunction(OnnxFunction):
    """One fallback decomposition as an onnxscript function: its definition
    is the flat FunctionProto of :func:`extql.fallbacks.function_proto`,
    named per variant in :data:`FALLBACK_DOMAIN`; its eager body is the
    onnxscript source of the decomposition."""

    def __init__(self, quantize: bool, variant: str, body: OnnxFunction) -> None:
        from ..fallbacks import variant_opset

        proto = fallback_proto(quantize, variant, max(MODEL_OPSET, variant_opset(variant)))
        self._proto = proto
        self.quantize = quantize
        self.variant = variant
        pyfun = _eager_body(quantize, variant, body.function)
        super().__init__(
            Opset(FALLBACK_DOMAIN, 1), pyfun, ir.serde.deserialize_function(proto), body.source, {}
        )

    def to_function_proto(self) -> onnx.FunctionProto:
        """The function definition (standard ops only, ai.onnx opset 21)."""
        out = onnx.FunctionProto()
        out.CopyFrom(self._proto)
        return out

    def to_model_proto(self, **kwargs: Any) -> onnx.ModelProto:
        raise TypeError(
            f"{self.name} is a function to call from a @onnxscript.script function; for a "
            "model of one operator, script one that calls it (or the extql.quark op)"
        )

    def __repr__(self) -> str:
        kind = "QUANTIZE" if self.quantize else "DEQUANTIZE"
        return f"<extql fallback {kind}[{self.variant!r}]: {FALLBACK_DOMAIN}::{self.name}>"
