"""The fallback functions of each variant, as onnxscript source (standard
ONNX ops only).

* :func:`make_static_quantize` / :func:`make_static_dequantize` /
  :func:`make_static_quantize64`: one operator with its granularity known
  (x, s[, zp] broadcastable; for graph passes that fix the granularity
  statically);
* :func:`make_quantize` / :func:`make_dequantize` / :func:`make_quantize64`:
  the operator's signature, the granularity decided at run time from the
  scale's shape and ``block_size`` (:mod:`extql.onnx.fallback_plan`).

:mod:`extql.onnx.fallback_protos` flattens them into the FunctionProtos that
models carry; :mod:`extql.fallbacks` describes what they compute.
"""

from __future__ import annotations

import functools

from onnx import TensorProto
from onnxscript import opset21 as op
from onnxscript import script
from onnxscript.values import Opset

from ..rules.types import DOMAIN, QUANTIZED, is_float8
from .fallback_arith import Quotient, Quotient64, RoundedQuotient64, ShiftedQuotient64
from .fallback_cores import (
    PACKED,
    dequantize_core,
    quantize_core,
    quantize_core64,
    zero_point_carrier,
)
from .fallback_plan import INTERNAL as _INTERNAL
from .fallback_plan import SpreadParams, SpreadParams64, SpreadScale, SpreadScale64

__all__ = [
    "make_static_quantize",
    "make_static_quantize64",
    "make_static_dequantize",
    "make_quantize",
    "make_quantize64",
    "make_dequantize",
]

_QUARK = Opset(DOMAIN, 1)
_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE


# --------------------------------------------------------------------------
# One operator with its granularity known: x, s[, zp] broadcastable, the
# attributes as the operator's (for graph passes that fix the granularity
# statically, and the public functions below).


@functools.cache
def make_static_quantize(variant: str):
    """Quantize (x, s[, zp]) of one variant, s and zp broadcastable."""
    core = quantize_core(variant)
    if variant == "default":

        @script(_INTERNAL, default_opset=op)
        def Quantize(x, s, precision: int = 1):
            return core(Quotient(x, s, precision=precision))

    elif is_float8(variant):

        @script(_INTERNAL, default_opset=op)
        def Quantize(x, s, zp, precision: int = 1, saturate: int = 1):
            return core(Quotient(x, s, precision=precision), zp, saturate=saturate)

    else:

        @script(_INTERNAL, default_opset=op)
        def Quantize(x, s, zp, precision: int = 1):
            return core(Quotient(x, s, precision=precision), zp)

    return Quantize



@functools.cache
def make_static_quantize64(variant: str):
    """Quantize (x, s[, zp]) of one variant with precision float64, s and zp
    broadcastable: q = x / s in float64 (:func:`Quotient64`), then

    * integer types and "default": ``float32(Round(q))`` into the integer core;
    * float8: ``float32(q)`` into the float8 core (no zero point);
    * float16 / bfloat16 / float4e2m1: ``float32(q + zp)``
      (:func:`ShiftedQuotient64`) into the core, which adds nothing more.

    No ``precision`` attribute: this is the float64 one."""
    core = quantize_core64(variant)
    if variant == "default":

        @script(_INTERNAL, default_opset=op)
        def Quantize64(x, s):
            return core(RoundedQuotient64(Quotient64(x, s)))

    elif is_float8(variant):

        @script(_INTERNAL, default_opset=op)
        def Quantize64(x, s, zp, saturate: int = 1):
            return core(op.Cast(Quotient64(x, s), to=_F32), zp, saturate=saturate)

    elif QUANTIZED[variant].is_float:

        @script(_INTERNAL, default_opset=op)
        def Quantize64(x, s, zp):
            return core(ShiftedQuotient64(Quotient64(x, s), zp))

    else:

        @script(_INTERNAL, default_opset=op)
        def Quantize64(x, s, zp):
            return core(RoundedQuotient64(Quotient64(x, s)), zp)

    return Quantize64


@functools.cache
def make_static_dequantize(variant: str):
    """Dequantize (x, s[, zp]) of one variant, s and zp broadcastable; the
    float32 result rounded to ``output_dtype``."""
    core = dequantize_core(variant)
    if variant == "default":

        @script(_INTERNAL, default_opset=op)
        def Dequantize(x, s, output_dtype: int = 1):
            return op.Cast(core(x, s), to=output_dtype)

    else:

        @script(_INTERNAL, default_opset=op)
        def Dequantize(x, s, zp, output_dtype: int = 1):
            return op.Cast(core(x, s, zp), to=output_dtype)

    return Dequantize


# --------------------------------------------------------------------------
# Public functions: the operator signature, granularity decided at run time.
# The scale (float32, exactly) and zero point (its carrier) are spread to
# x's shape before the math.


def make_quantize(variant: str):
    """ExtendedQuantizeLinear of one variant: the operator's signature, the
    granularity decided at run time from the scale's shape and
    ``block_size``.  ``precision`` (an ONNX float type code) is the
    division's: :func:`extql.attach_fallbacks` sets it on every node (the
    scale's type when the node has none), since onnx.reference ignores a
    function's attribute defaults.  ``output_dtype`` only repeats the zero
    point's type here."""
    static = make_static_quantize(variant)
    if variant == "default":

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                                   precision: int = 1, output_dtype: int = 0):
            s = SpreadScale(x, y_scale, axis=axis, block_size=block_size)
            return static(x, s, precision=precision)

        return ExtendedQuantizeLinear
    carrier = zero_point_carrier(True, variant)
    if is_float8(variant):

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                                   precision: int = 1, saturate: int = 1, output_dtype: int = 0):
            s, z = SpreadParams(x, y_scale, op.Cast(y_zero_point, to=carrier),
                                axis=axis, block_size=block_size)
            return static(x, s, z, precision=precision, saturate=saturate)

        return ExtendedQuantizeLinear

    @script(_QUARK, default_opset=op)
    def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                               precision: int = 1, output_dtype: int = 0):
        s, z = SpreadParams(x, y_scale, op.Cast(y_zero_point, to=carrier),
                            axis=axis, block_size=block_size)
        return static(x, s, z, precision=precision)

    return ExtendedQuantizeLinear


def make_quantize64(variant: str):
    """ExtendedQuantizeLinear of one variant with precision float64 (the
    attribute ``precision`` 11, which :func:`extql.attach_fallbacks` spells
    out on such nodes: the functions of the float precisions stay as they
    are).  The scale is spread as float64 (:func:`SpreadParams64`, exact for
    an int32 scale too), the zero point in its route's carrier; the math is
    :func:`make_static_quantize64`'s.  ``precision`` is declared for the
    operator's signature and not read; ``output_dtype`` only repeats the
    zero point's type."""
    static = make_static_quantize64(variant)
    if variant == "default":

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                                   precision: int = _F64, output_dtype: int = 0):
            s = SpreadScale64(x, y_scale, axis=axis, block_size=block_size)
            return static(x, s)

        return ExtendedQuantizeLinear
    carrier = zero_point_carrier(True, variant)
    if is_float8(variant):

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                                   precision: int = _F64, saturate: int = 1,
                                   output_dtype: int = 0):
            s, z = SpreadParams64(x, y_scale, op.Cast(y_zero_point, to=carrier),
                                  axis=axis, block_size=block_size)
            return static(x, s, z, saturate=saturate)

        return ExtendedQuantizeLinear

    @script(_QUARK, default_opset=op)
    def ExtendedQuantizeLinear(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                               precision: int = _F64, output_dtype: int = 0):
        s, z = SpreadParams64(x, y_scale, op.Cast(y_zero_point, to=carrier),
                              axis=axis, block_size=block_size)
        return static(x, s, z)

    return ExtendedQuantizeLinear


def make_dequantize(variant: str):
    """ExtendedDequantizeLinear of one variant (as :func:`make_quantize`);
    the float32 result rounded to ``output_dtype`` (set by
    :func:`extql.attach_fallbacks` on every node: the scale's type when the
    node has none)."""
    static = make_static_dequantize(variant)
    if variant == "default":

        @script(_QUARK, default_opset=op)
        def ExtendedDequantizeLinear(x, x_scale, x_zero_point, axis: int = 1,
                                     block_size: int = 0, output_dtype: int = 1):
            s = SpreadScale(x, x_scale, axis=axis, block_size=block_size)
            return static(x, s, output_dtype=output_dtype)

        return ExtendedDequantizeLinear
    carrier = zero_point_carrier(False, variant)
    if QUANTIZED[variant].onnx in PACKED:

        @script(_QUARK, default_opset=op)
        def ExtendedDequantizeLinear(x, x_scale, x_zero_point, axis: int = 1,
                                     block_size: int = 0, output_dtype: int = 1):
            # Packed x is widened first (exact): onnxruntime's Shape has no
            # kernel for the packed types.
            xf = op.Cast(x, to=_F32)
            s, z = SpreadParams(xf, x_scale, op.Cast(x_zero_point, to=carrier),
                                axis=axis, block_size=block_size)
            return static(xf, s, z, output_dtype=output_dtype)

        return ExtendedDequantizeLinear

    @script(_QUARK, default_opset=op)
    def ExtendedDequantizeLinear(x, x_scale, x_zero_point, axis: int = 1, block_size: int = 0,
                                 output_dtype: int = 1):
        s, z = SpreadParams(x, x_scale, op.Cast(x_zero_point, to=carrier),
                            axis=axis, block_size=block_size)
        return static(x, s, z, output_dtype=output_dtype)

    return ExtendedDequantizeLinear
