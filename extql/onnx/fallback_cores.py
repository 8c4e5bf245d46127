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
from .fallback_arith import AddSigned, OpaqueZero
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
_F64 = TensorProto.DOUBLE
_I64 = TensorProto.INT64


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


# The 32-bit types in 32-bit arithmetic only.  A runtime may run float64 as
# float32 and int64 as int32 (OpenVINO's CPU plugin), compute an integer Mod
# or a uint32 BitShift through float32 (OpenVINO): the wide routes use none
# of those.  A 32-bit integer (uint32 wrapped to int32, two's complement, as
# every runtime's Cast does) is split into halves that float32 holds exactly,
# ``t = h * 65536 + l`` with l in [0, 65535] (HalvesSigned).
_HALF = float(2**16)
_INV_HALF = float(2.0**-16)
_I32 = TensorProto.INT32
_ZERO32 = onnx.helper.make_tensor("zero32", _I32, [], [0])
_HALF32 = onnx.helper.make_tensor("half32", _I32, [], [65536])


@script(_INTERNAL, default_opset=op)
def HalvesSigned(t):
    """(h, l) as float32 of an int32 t: t = h * 65536 + l, l in [0, 65535].
    h0 = floor(float32(t) / 65536) (clamped to int32's) is h or one off (t
    was rounded); l0 = t - h0 * 65536 in int32 (no overflow) is then within
    one 65536 of [0, 65535], and one exact float32 step corrects both.
    (No BitwiseAnd: ai.onnx opset 18, and Quark's models are opset 17.)"""
    inv = op.Constant(value_float=_INV_HALF)
    half = op.Constant(value_float=_HALF)
    h0 = op.Clip(op.Floor(op.Mul(op.Cast(t, to=_F32), inv)), op.Constant(value_float=-32768.0),
                 op.Constant(value_float=32767.0))
    l0 = op.Cast(op.Sub(t, op.Mul(op.Cast(h0, to=_I32), op.Constant(value=_HALF32))), to=_F32)
    adj = op.Floor(op.Mul(l0, inv))
    return op.Add(h0, adj), op.Sub(l0, op.Mul(adj, half))


@script(_INTERNAL, default_opset=op)
def HalvesUnsigned(t):
    """(h, l) as float32 of a uint32 given as its int32 wrap (a uint32 of
    2**31 or more reads as a negative int32: its h is 65536 more)."""
    h, lo = HalvesSigned(t)
    wrap = op.Where(op.Less(t, op.Constant(value=_ZERO32)), op.Constant(value_float=_HALF),
                    op.Constant(value_float=0.0))
    return op.Add(h, wrap), lo


def _halves_script(unsigned: bool):
    return HalvesUnsigned if unsigned else HalvesSigned


#: The helpers the wide cores call (listed with the other internal helpers).
HALVES = (HalvesSigned, HalvesUnsigned)


def _quantize_wide_core(to: int, lo: int, hi: int):
    unsigned = lo == 0
    Halves = _halves_script(unsigned)
    # The result's high half saturates below h_lo or above h_hi (the low
    # half normalised to [0, 65535]).
    h_lo = float(lo // 2**16)
    h_hi = float(hi // 2**16)
    # The bounds as int32 (uint32's maximum as its wrap, -1), cast at the end.
    lo_t = onnx.helper.make_tensor("lo", _I32, [], [lo])
    hi_t = onnx.helper.make_tensor("hi", _I32, [], [hi if hi < 2**31 else hi - 2**32])

    @script(_INTERNAL, default_opset=op)
    def QuantizeWide(v: FLOAT, zp):
        # zp: int32 (uint32 wrapped).  r = Round(v), an integer in float32;
        # beyond +-2**32 every zero point saturates the same way, so r is
        # clamped there (NaN set aside: it gives lo).  r and zp are split
        # into float32 halves, summed exactly with one carry, and the result
        # saturated on its high half or composed in int32 (exact: a uint32
        # high half of 32768 or more is taken as its negative int32 wrap).
        lo_q = op.Constant(value=lo_t)
        hi_q = op.Constant(value=hi_t)
        half = op.Constant(value_float=_HALF)
        inv = op.Constant(value_float=_INV_HALF)
        nan = op.IsNaN(v)
        r = op.Clip(op.Round(v), op.Constant(value_float=-(2.0**32)),
                    op.Constant(value_float=2.0**32))
        r = op.Where(nan, op.Constant(value_float=0.0), r)
        rh = op.Floor(op.Mul(r, inv))
        rl = op.Sub(r, op.Mul(rh, half))
        zh, zl = Halves(op.Cast(zp, to=_I32))
        tl = op.Add(rl, zl)
        carry = op.Floor(op.Mul(tl, inv))
        tl = op.Sub(tl, op.Mul(carry, half))
        th = op.Add(op.Add(rh, zh), carry)
        below = op.Or(nan, op.Less(th, op.Constant(value_float=h_lo)))
        above = op.Greater(th, op.Constant(value_float=h_hi))
        tc = op.Clip(th, op.Constant(value_float=h_lo), op.Constant(value_float=h_hi))
        tc = op.Where(op.Less(tc, op.Constant(value_float=32768.0)), tc, op.Sub(tc, half))
        y = op.Add(op.Mul(op.Cast(tc, to=_I32), op.Constant(value=_HALF32)),
                   op.Cast(tl, to=_I32))
        return op.Cast(op.Where(below, lo_q, op.Where(above, hi_q, y)), to=to)

    return QuantizeWide


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
    # The zero point is made opaque (zp - (+0) is zp): OpenVINO rewrites
    # (x - constant) * constant as x * s - zp * s, two roundings.
    xf = op.Cast(x, to=_F32)
    return op.Mul(op.Sub(xf, op.Sub(op.Cast(zp, to=_F32), OpaqueZero(xf))), op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeFloat(x, s, zp) -> FLOAT:
    # float16 / bfloat16: x - zp with an opaque zero point, so
    # that a runtime cannot drop the subtraction of a constant -0 (x - (-0)
    # is x + 0).
    xf = op.Cast(x, to=_F32)
    return op.Mul(op.Sub(xf, op.Sub(op.Cast(zp, to=_F32), OpaqueZero(xf))),
                  op.Cast(s, to=_F32))


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


def _dequantize_wide_core(unsigned: bool):
    Halves = _halves_script(unsigned)

    @script(_INTERNAL, default_opset=op)
    def DequantizeWide(x, s, zp) -> FLOAT:
        # int32/uint32 (zp int32, uint32 wrapped): x - zp is exact as
        # (xh - zh) * 65536 + (xl - zl), two exact float32 terms, so their
        # float32 sum is the exact difference rounded once.
        xh, xl = Halves(op.Cast(x, to=_I32))
        zh, zl = Halves(op.Cast(zp, to=_I32))
        d = op.Add(op.Mul(op.Sub(xh, zh), op.Constant(value_float=_HALF)), op.Sub(xl, zl))
        return op.Mul(d, op.Cast(s, to=_F32))

    return DequantizeWide


_DEQUANTIZE_WIDE = {False: _dequantize_wide_core(False), True: _dequantize_wide_core(True)}


@script(_INTERNAL, default_opset=op)
def DequantizeDefault(x, s) -> FLOAT:
    return op.Mul(op.Cast(x, to=_F32), op.Cast(s, to=_F32))


def is_wide(name: str) -> bool:
    """The 32-bit integer types (int32/uint32), computed through float64 / int64."""
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
        return _quantize_wide_core(qt.onnx, int(qt.lo), int(qt.hi))
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
    if is_wide(variant):
        return _DEQUANTIZE_WIDE[int(qt.lo) == 0]
    return DequantizeNarrow


def zero_point_carrier(quantize: bool, variant: str) -> int:
    """The type a variant's zero point is cast to before it is spread to x's
    shape (small: one value per channel or block): a type that holds each of
    its values and that every runtime's Reshape / Expand / Slice take."""
    if is_wide(variant):
        return _I32
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
