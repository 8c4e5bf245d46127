"""The per-type math of the fallbacks (standard ONNX ops only): what each
type's route does with the quotient (quantize) or the difference (dequantize).

:func:`quantize_core` / :func:`dequantize_core` give the core of a variant
(a quantized type, or ``"default"``: no zero point) with its scale and zero
point already broadcastable against x; :func:`quantize_core64` the quantize
core of precision float64; :func:`zero_point_carrier` the type a zero point
is spread in.  The type ranges and codes come from the type table
(:mod:`extql.rules.types`).  Internal helpers, always inlined.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto
from onnxscript import FLOAT, script
from onnxscript import opset21 as op

from ..rules.types import DEFAULT_QTYPE, QUANTIZED, SMALLFLOAT, SmallFloatType, is_float8
from .fallback_arith import AddSigned, OpaqueCopy, OpaqueZero
from .fallback_plan import INTERNAL as _INTERNAL

__all__ = [
    "quantize_core",
    "quantize_core64",
    "dequantize_core",
    "zero_point_carrier",
    "overflow_from",
    "is_wide",
    "PACKED",
]

_F32 = TensorProto.FLOAT
_I64 = TensorProto.INT64
_I32 = TensorProto.INT32


# --------------------------------------------------------------------------
# Quantize cores: the float32 quotient v and the zero point (any type
# holding its values) already broadcastable against x.


def _quantize_narrow_core(to: int, lo: float, hi: float):
    @script(_INTERNAL, default_opset=op)
    def QuantizeNarrow(v: FLOAT, zp):
        lo_c = op.Constant(value_float=lo)
        hi_c = op.Constant(value_float=hi)
        t = op.Add(op.Round(v), op.Cast(zp, to=_F32))
        t = op.Where(op.IsNaN(t), lo_c, t)
        return op.Cast(op.Clip(t, lo_c, hi_c), to=to)

    return QuantizeNarrow


def _quantize_float_core(to: int, limit: float):
    # float16 / bfloat16 / float4e2m1: they saturate; NaN goes to the Cast
    # (NaN for float16 / bfloat16; float4e2m1, which has none, takes it to
    # a zero as ONNX's Cast says).
    @script(_INTERNAL, default_opset=op)
    def QuantizeFloat(v: FLOAT, zp):
        w = AddSigned(v, op.Cast(zp, to=_F32))
        c = op.Clip(w, op.Constant(value_float=-limit), op.Constant(value_float=limit))
        return op.Cast(op.Where(op.IsNaN(w), w, c), to=to)

    return QuantizeFloat


def _quantize_shifted_float_core(to: int, limit: float):
    # The float routes of precision float64: the zero point is already in
    # v (ShiftedQuotient64), so none is added here (x + (-0) would be x for
    # every x: nothing to add).
    @script(_INTERNAL, default_opset=op)
    def QuantizeFloatShifted(v: FLOAT):
        c = op.Clip(v, op.Constant(value_float=-limit), op.Constant(value_float=limit))
        return op.Cast(op.Where(op.IsNaN(v), v, c), to=to)

    return QuantizeFloatShifted


def overflow_from(t: SmallFloatType) -> float:
    """The smallest float32 magnitude that rounds (to nearest even) beyond
    the float8 type's largest finite value: half a unit past it, or the next
    float32 when that tie rounds back to the largest value (an even
    mantissa)."""
    exponent = int(np.floor(np.log2(t.max)))
    ulp = 2.0 ** (exponent - t.mbits)
    tie = np.float32(t.max + ulp / 2)
    if int(t.max / ulp) % 2 == 0:
        tie = np.nextafter(tie, np.float32(np.inf))
    return float(tie)


def _quantize_float8_core(t: SmallFloatType):
    limit = float(t.max)
    beyond = overflow_from(t)
    has_inf = t.special == "ieee"

    @script(_INTERNAL, default_opset=op)
    def QuantizeFloat8(v: FLOAT, zp, saturate: int = 1):
        # The zero point only gives the type (see the operator page).  Every
        # value the Cast sees is in range, an infinity (float8e5m2) or NaN,
        # so its own overflow rules (which differ between runtimes) never
        # apply: saturate=1 clamps; saturate=0 takes what rounds beyond the
        # range to +-inf (float8e5m2) or NaN (the other types).
        lim = op.Constant(value_float=limit)
        inf = op.Constant(value_float=float("inf"))
        over = op.Not(op.Less(op.Abs(v), op.Constant(value_float=beyond)))
        if has_inf:
            special = op.Where(op.Less(v, op.Constant(value_float=0.0)), op.Neg(inf), inf)
        else:
            special = op.Constant(value_float=float("nan"))
        # (No Where with the scalar condition over the values: onnxruntime's
        # gives +0 for -0 there.)
        sat = op.Equal(op.Constant(value_int=saturate), op.Constant(value_int=1))
        bound = op.Where(sat, lim, inf)
        c = op.Clip(v, op.Neg(bound), bound)
        w = op.Where(op.And(over, op.Not(sat)), special, c)
        return op.Cast(op.Where(op.IsNaN(v), v, w), to=t.onnx, saturate=0)

    return QuantizeFloat8


# Quantize without a zero point: the default type's range and code.
_DEFAULT_LO = float(DEFAULT_QTYPE.lo)
_DEFAULT_HI = float(DEFAULT_QTYPE.hi)
_DEFAULT_TO = DEFAULT_QTYPE.onnx


@script(_INTERNAL, default_opset=op)
def QuantizeDefault(v: FLOAT):
    lo_c = op.Constant(value_float=_DEFAULT_LO)
    hi_c = op.Constant(value_float=_DEFAULT_HI)
    r = op.Round(v)
    r = op.Where(op.IsNaN(r), lo_c, r)
    return op.Cast(op.Clip(r, lo_c, hi_c), to=_DEFAULT_TO)


# --------------------------------------------------------------------------
# Dequantize cores: float32 results (the public functions round them to
# output_dtype); the scale and zero point already broadcastable.


@script(_INTERNAL, default_opset=op)
def DequantizeNarrow(x, s, zp) -> FLOAT:
    # 8/16-bit and sub-byte integers: exact in float32, then float32 math.
    return op.Mul(op.Sub(op.Cast(x, to=_F32), op.Cast(zp, to=_F32)), op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeFloat(x, s, zp) -> FLOAT:
    # float16 / bfloat16: x - zp with an opaque zero point (OpaqueCopy), so
    # that a runtime cannot drop the subtraction of a constant zero (x - (-0)
    # is x + 0; OpenVINO turned the 0 - (+0) of an opaque +0 into -0).
    xf = op.Cast(x, to=_F32)
    return op.Mul(op.Sub(xf, OpaqueCopy(op.Cast(zp, to=_F32), xf)), op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeFloat4(x, s, zp) -> FLOAT:
    # float4e2m1: x - zp, where a zero point of 0 (either sign) leaves x as
    # it is (-0 included): the zero point plus an opaque +0 is +0 for +-0
    # and unchanged otherwise, and x - (+0) is x.
    xf = op.Cast(x, to=_F32)
    return op.Mul(op.Sub(xf, op.Add(op.Cast(zp, to=_F32), OpaqueZero(xf))),
                  op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeFloat8(x, s, zp) -> FLOAT:
    # A float8 zero point must be 0 (as the official operator's): another
    # value makes the Reshape below fail (its shape then has twice the
    # scale's size), never a silently different result.
    zf = op.Cast(zp, to=_F32)
    nonzero = op.Cast(op.Not(op.Equal(zf, op.Constant(value_float=0.0))), to=_I64)
    factor = op.Add(op.ReduceMax(op.Concat(op.Reshape(nonzero, op.Constant(value_ints=[-1])),
                                           op.Constant(value_ints=[0]), axis=0), keepdims=1),
                    op.Constant(value_ints=[1]))
    sf = op.Cast(s, to=_F32)
    checked = op.Reshape(sf, op.Concat(op.Shape(sf), factor, axis=0), allowzero=1)
    sf = op.Reshape(checked, op.Shape(sf), allowzero=1)
    return op.Mul(op.Cast(x, to=_F32), sf)


@script(_INTERNAL, default_opset=op)
def DequantizeWide(x, s, zp) -> FLOAT:
    # int32/uint32: the difference is exact in int64 and rounds once to
    # float32.  (OpenVINO runs int64 as int32, where x - zp wraps: an exact
    # decomposition in 32-bit parts costs about twice this in onnxruntime.)
    d = op.Cast(op.Sub(op.Cast(x, to=_I64), op.Cast(zp, to=_I64)), to=_F32)
    return op.Mul(d, op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeDefault(x, s) -> FLOAT:
    return op.Mul(op.Cast(x, to=_F32), op.Cast(s, to=_F32))


# --------------------------------------------------------------------------
# Quantize into the 32-bit integer types (int32 / uint32) in 32-bit
# arithmetic only: OpenVINO's CPU plugin runs int64 as int32 and float64 as
# float32, and tract's analysis refuses a float64 Where, so neither wide type
# is used.  r + zp (r the rounded float32 quotient, any magnitude) is carried
# as two float32 numbers that are each exact where it matters: a multiple of
# 65536 and a small integer (|l| < 2**18); sums of such parts are exact, the
# saturation clamps each part, and the int32 sum of the two parts (each cast
# from a float32 in range) is the result.  uint32 takes the int32 math on
# r + (zp - 2**31) and adds 2**31 back by int32's wrapping Add (then a Cast
# to uint32 keeps the bits).  Every float -> int Cast sees a value in its
# range (beyond it the runtimes differ: INT_MIN, saturation, 2**31), and
# the int32 Mul / Sub that wrap do so where the true result is small, so the
# wrap cancels.  The zero point is taken as int32 (uint32's bits kept: the
# Cast wraps); its split costs nothing per element (one value per tensor or
# channel): q = floor(float32(zp) / 65536), l = zp - q * 65536 in int32;
# uint32: where zp as int32 is negative (2**31 or more) q + 65536 is its
# high part, and the shift takes 32768 off.

def _i32(name: str, value: int) -> onnx.TensorProto:
    return onnx.helper.make_tensor(name, TensorProto.INT32, [], [value])


_H = 65536.0
_INV_H = 2.0**-16
_BIG = 2.0**33
# Quantize's saturation window: the high part is clamped to [A, B] and what
# is left to [LA, LB], A + LA = -2**31 and B + LB = 2**31 - 1, with room in
# both for every in-range low part.
_QA, _QB = -(2.0**31) + 131072.0, 2.0**31 - 196608.0
_QLA, _QLB = -131072.0, 196607.0
_SHIFT_T = _i32("shift", -(2**31))
_H_T = _i32("h", 65536)


@script(_INTERNAL, default_opset=op)
def QuantizeInt32(v: FLOAT, zp):
    # r = Round(v) (NaN: -2**33, below the range); HI = floor(r / 65536) *
    # 65536 + zh (exact while it is in [A, B], beyond it only clamped) is
    # clamped to [A, B], and what is left of T = r + zp, (r - (HC - zh)) +
    # zl, to [LA, LB]: exact wherever it lies in that window (both steps
    # then have small exact results), and beyond it rounded without
    # crossing the window's bounds.  +-inf and huge r saturate the same way.
    zi = op.Cast(zp, to=_I32)
    zq = op.Floor(op.Mul(op.Cast(zi, to=_F32), op.Constant(value_float=_INV_H)))
    zl = op.Cast(op.Sub(zi, op.Mul(op.Cast(zq, to=_I32), op.Constant(value=_H_T))), to=_F32)
    zh = op.Mul(zq, op.Constant(value_float=_H))
    r = op.Round(v)
    r = op.Where(op.IsNaN(r), op.Constant(value_float=-_BIG), r)
    hi = op.Add(op.Mul(op.Floor(op.Mul(r, op.Constant(value_float=_INV_H))),
                       op.Constant(value_float=_H)), zh)
    hc = op.Clip(hi, op.Constant(value_float=_QA), op.Constant(value_float=_QB))
    rest = op.Add(op.Sub(r, op.Sub(hc, zh)), zl)
    lc = op.Clip(rest, op.Constant(value_float=_QLA), op.Constant(value_float=_QLB))
    return op.Add(op.Cast(hc, to=_I32), op.Cast(lc, to=_I32))


@script(_INTERNAL, default_opset=op)
def QuantizeUint32(v: FLOAT, zp):
    # QuantizeInt32's math on r + (zp - 2**31), the result shifted back.
    zi = op.Cast(zp, to=_I32)
    zq = op.Floor(op.Mul(op.Cast(zi, to=_F32), op.Constant(value_float=_INV_H)))
    zl = op.Cast(op.Sub(zi, op.Mul(op.Cast(zq, to=_I32), op.Constant(value=_H_T))), to=_F32)
    zq = op.Add(zq, op.Where(op.Less(zq, op.Constant(value_float=0.0)),
                             op.Constant(value_float=32768.0),
                             op.Constant(value_float=-32768.0)))
    zh = op.Mul(zq, op.Constant(value_float=_H))
    r = op.Round(v)
    r = op.Where(op.IsNaN(r), op.Constant(value_float=-_BIG), r)
    hi = op.Add(op.Mul(op.Floor(op.Mul(r, op.Constant(value_float=_INV_H))),
                       op.Constant(value_float=_H)), zh)
    hc = op.Clip(hi, op.Constant(value_float=_QA), op.Constant(value_float=_QB))
    rest = op.Add(op.Sub(r, op.Sub(hc, zh)), zl)
    lc = op.Clip(rest, op.Constant(value_float=_QLA), op.Constant(value_float=_QLB))
    t = op.Add(op.Add(op.Cast(hc, to=_I32), op.Cast(lc, to=_I32)), op.Constant(value=_SHIFT_T))
    return op.Cast(t, to=TensorProto.UINT32)


def is_wide(name: str) -> bool:
    """The 32-bit integer types (int32/uint32), computed as two exact float32 parts."""
    qt = QUANTIZED[name]
    return not qt.is_float and qt.dtype.itemsize == 4


@functools.cache
def quantize_core(variant: str):
    """The quantize math of one variant after the division: (v[, zp]), v the
    float32 quotient, zp broadcastable against it."""
    if variant == "default":
        return QuantizeDefault
    qt = QUANTIZED[variant]
    if is_float8(variant):
        return _quantize_float8_core(qt)
    if qt.is_float:
        return _quantize_float_core(qt.onnx, float(qt.hi))
    if is_wide(variant):
        return QuantizeUint32 if variant == "uint32" else QuantizeInt32
    return _quantize_narrow_core(qt.onnx, float(qt.lo), float(qt.hi))


def dequantize_core(variant: str):
    """The dequantize math of one variant (x, s[, zp] broadcastable), float32."""
    if variant == "default":
        return DequantizeDefault
    qt = QUANTIZED[variant]
    if variant in SMALLFLOAT:
        return DequantizeFloat8 if qt.is_float8 else DequantizeFloat4
    if qt.is_float:
        return DequantizeFloat
    return DequantizeWide if is_wide(variant) else DequantizeNarrow


def zero_point_carrier(quantize: bool, variant: str) -> int:
    """The type a variant's zero point is cast to before it is spread to x's
    shape (small: one value per channel or block): a type that holds each of
    its values and that every runtime's Reshape / Expand / Slice take."""
    if is_wide(variant):
        return _I32 if quantize else _I64
    return _F32


# The types ONNX packs several to a byte (int4 / uint4 / int2 / uint2,
# float4e2m1).
PACKED = frozenset(t.onnx for t in QUANTIZED.values() if getattr(t, "bits", 8) < 8)



@functools.cache
def quantize_core64(variant: str):
    """The quantize math of one variant for precision float64, after
    :func:`Quotient64`: the integer and float8 cores as they are, the float
    types' without their zero-point addition (ShiftedQuotient64 made it)."""
    qt = QUANTIZED.get(variant)
    if qt is not None and qt.is_float and not is_float8(variant):
        return _quantize_shifted_float_core(qt.onnx, float(qt.hi))
    return quantize_core(variant)
