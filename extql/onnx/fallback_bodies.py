"""The onnxscript bodies of the fallback decompositions (standard ONNX ops only).

The numeric contract they implement, route by route, is described in
:mod:`extql.fallbacks`, which turns these bodies into the flat
FunctionProtos that models carry.  Here:

* the internal helpers (``ParamShape`` / ``ParamPlan`` / ``Spread``:
  granularity at run time; ``Quotient``: the division in its precision;
  ``SpreadParams64`` / ``Quotient64`` / ``RoundedQuotient64`` /
  ``ShiftedQuotient64``: the same for precision float64; ``Pick``: one of
  two tensors, every bit kept;
  ``OpaqueZero`` / ``AddSigned``: signed zeros a runtime cannot fold away;
  ``IsFloat`` / ``IntBounds``: the zero point's type for the dispatchers),
  in the private domain :data:`INTERNAL_DOMAIN`, always inlined;
* the per-type math cores (:func:`quantize_core` / :func:`dequantize_core`)
  and the operator-signature wrappers (:func:`make_quantize` /
  :func:`make_dequantize`), and quantize's of precision float64
  (:func:`quantize_core64`, :func:`make_static_quantize64`,
  :func:`make_quantize64`);
* the type-generic dispatchers ``QuantizeDispatch`` (``QuantizeDispatch64``
  where an operator also has nodes of precision float64) /
  ``DequantizeDispatch``.

Every body takes ``x`` and the scale in float32, float16 or bfloat16 (and
quantize's ``x`` and scale in int32, which ``Quotient``'s Cast rounds to
float32 as the contract does; the arithmetic is float32's, the division
rounded to ``precision``, a dequantize's result to ``output_dtype``; the
precision-float64 bodies divide the exact values in float64), and any quantized
type's zero point as the ONNX opset of the model can express it
(:func:`extql.types.type_opset`).  The type ranges and codes come from the
type table (:mod:`extql.types`).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto
from onnxscript import DOUBLE, FLOAT, INT64, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from ..types import (
    DEFAULT_QTYPE,
    DOMAIN,
    QTYPES,
    QUANTIZED,
    SMALLFLOAT,
    SmallFloatType,
    is_float8,
)

__all__ = [
    "INTERNAL_DOMAIN",
    "ParamShape",
    "ParamPlan",
    "Spread",
    "SpreadScale",
    "SpreadParams",
    "SpreadScale64",
    "SpreadParams64",
    "Quotient",
    "Quotient64",
    "RoundedQuotient64",
    "ShiftedQuotient64",
    "Pick",
    "OpaqueZero",
    "AddSigned",
    "IsFloat",
    "IntBounds",
    "quantize_core",
    "quantize_core64",
    "dequantize_core",
    "zero_point_carrier",
    "make_static_quantize",
    "make_static_quantize64",
    "make_static_dequantize",
    "make_quantize",
    "make_quantize64",
    "make_dequantize",
    "QuantizeDispatch",
    "QuantizeDispatch64",
    "DequantizeDispatch",
]

# Internal functions live in a private domain and are always inlined into the
# public bodies (see extql.fallbacks._flatten), so no model ever refers to this domain.
INTERNAL_DOMAIN = "ai.extql.internal"
_INTERNAL = Opset(INTERNAL_DOMAIN, 1)
_QUARK = Opset(DOMAIN, 1)

_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE
_I64 = TensorProto.INT64
# Clamp for Round(x / s) before the int64 cast on the 32-bit route: any |r|
# beyond 2**33 saturates for every zero point of int32/uint32.
_WIDE = float(2**33)
# An end beyond every dimension, for Slice.
_BIG = 2**62


@script(_INTERNAL, default_opset=op)
def ParamShape(x, scale, axis: int = 1) -> INT64:
    """The shape to reshape scale/zero point to: [] per tensor, [D, 1, ..] per axis.

    An invalid granularity yields a shape whose size differs from the
    scale's, so the following Reshape fails.
    """
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    one_v = op.Constant(value_ints=[1])
    xshape = op.Shape(x)
    rank = op.Size(xshape)
    n = op.Size(scale)
    a0 = op.Constant(value_int=axis)
    a = op.Where(op.Less(a0, zero), op.Add(a0, rank), a0)
    srank_ok = op.Not(op.Greater(op.Size(op.Shape(scale)), one))
    per_tensor = op.And(srank_ok, op.Equal(n, one))
    axis_ok = op.And(op.Not(op.Less(a, zero)), op.Less(a, rank))
    padded = op.Concat(xshape, op.Constant(value_ints=[-1]), axis=0)
    dim = op.Gather(padded, op.Where(axis_ok, a, rank))
    ok = op.And(srank_ok, op.Or(per_tensor, op.And(axis_ok, op.Equal(dim, n))))
    head = op.Reshape(op.Where(ok, n, op.Add(n, one)), one_v)
    ones = op.Expand(one_v, op.Reshape(rank, one_v))
    length = op.Where(per_tensor, zero, op.Where(ok, op.Sub(rank, a), one))
    return op.Slice(
        op.Concat(head, ones, axis=0), op.Constant(value_ints=[0]), op.Reshape(length, one_v)
    )


@script(_INTERNAL, default_opset=op)
def Choose(cond, u: INT64, v: INT64) -> INT64:
    """``u`` if the scalar ``cond`` holds, else ``v``: 1-D int64 vectors of
    any lengths (which Where cannot pick between)."""
    nu = op.Shape(u)
    start = op.Where(cond, op.Constant(value_ints=[0]), nu)
    end = op.Where(cond, nu, op.Add(nu, op.Shape(v)))
    return op.Slice(op.Concat(u, v, axis=0), start, end)


@script(_INTERNAL, default_opset=op)
def ParamPlan(x, scale, axis: int = 1, block_size: int = 0):
    """How :func:`Spread` lines a scale (or zero point) up with ``x``, for
    every granularity, decided at run time: the shapes ``first``, ``wide``,
    ``merged`` and ``final`` and the Slice ``axes`` / ``ends`` of
    ``Reshape(Slice(Reshape(Expand(Reshape(p, first), wide), merged), 0,
    ends, axes), final)``.

    * per tensor / per axis: ``first = wide = merged`` = ParamShape's shape
      and a trailing 1, the Slice a no-op, ``final`` ParamShape's shape;
    * blocked (``block_size`` > 0): the scale has x's shape with
      ``nb = ceil(D / block_size)`` along the axis; it is reshaped to
      ``[.., nb, 1, ..]``, expanded to ``[.., nb, block_size, ..]``, merged
      to ``[.., nb * block_size, ..]`` and cut to ``D`` along the axis.

    An invalid combination (axis out of range, a scale shape that is not the
    granularity's) makes ``first`` a shape of the wrong size, so the first
    Reshape fails.  The Reshapes are meant to keep zero dimensions as they
    are (``allowzero``; see :func:`Spread`).
    """
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    one_v = op.Constant(value_ints=[1])
    zero_v = op.Constant(value_ints=[0])
    big_v = op.Constant(value_ints=[_BIG])
    xshape = op.Shape(x)
    rank = op.Size(xshape)
    sshape = op.Shape(scale)
    b = op.Constant(value_int=block_size)
    blocked = op.Greater(b, zero)
    # Per tensor / per axis.
    pshape = ParamShape(x, scale, axis=axis)
    plain = op.Concat(pshape, one_v, axis=0)
    # Blocked: the scale's expected shape is x's with nb along the axis.
    a0 = op.Constant(value_int=axis)
    a = op.Where(op.Less(a0, zero), op.Add(a0, rank), a0)
    axis_ok = op.And(op.Not(op.Less(a, zero)), op.Less(a, rank))
    ai = op.Where(axis_ok, a, zero)
    ai_v = op.Reshape(ai, one_v)
    dim = op.Gather(op.Concat(xshape, one_v, axis=0), op.Where(axis_ok, a, rank))
    b1 = op.Where(blocked, b, one)
    nb = op.Div(op.Sub(op.Add(dim, b1), one), b1)
    nb_v = op.Reshape(nb, one_v)
    after_v = op.Add(ai_v, one_v)
    expected = op.Concat(op.Slice(xshape, zero_v, ai_v), nb_v,
                         op.Slice(xshape, after_v, big_v), axis=0)
    # (equal lengths and Concat(s, e) == Concat(e, s): s == e, without a
    # broadcast error when the lengths differ)
    same = op.Equal(op.Concat(sshape, expected, axis=0), op.Concat(expected, sshape, axis=0))
    mismatches = op.ReduceSum(op.Cast(op.Not(same), to=_I64), keepdims=0)
    shape_ok = op.And(op.Equal(op.Size(sshape), rank), op.Equal(mismatches, zero))
    head = op.Slice(sshape, zero_v, ai_v)
    tail = op.Slice(sshape, after_v, big_v)
    b_v = op.Reshape(b1, one_v)
    bad = op.Reshape(op.Add(op.Size(scale), one), one_v)
    first_b = Choose(op.And(axis_ok, shape_ok), op.Concat(head, nb_v, one_v, tail, axis=0), bad)
    wide_b = op.Concat(head, nb_v, b_v, tail, axis=0)
    merged_b = op.Concat(head, op.Mul(nb_v, b_v), tail, axis=0)
    first = Choose(blocked, first_b, plain)
    wide = Choose(blocked, wide_b, plain)
    merged = Choose(blocked, merged_b, plain)
    axes = op.Where(blocked, ai_v, zero_v)
    ends = op.Where(blocked, op.Reshape(dim, one_v), big_v)
    final = Choose(blocked, xshape, pshape)
    return first, wide, merged, axes, ends, final


@script(_INTERNAL, default_opset=op)
def Spread(p, first: INT64, wide: INT64, merged: INT64, axes: INT64, ends: INT64,
           final: INT64):
    """``p`` (a scale or zero point) broadcastable against x, by the plan of
    :func:`ParamPlan`."""
    e = op.Reshape(op.Expand(op.Reshape(p, first, allowzero=1), wide), merged, allowzero=1)
    return op.Reshape(op.Slice(e, op.Constant(value_ints=[0]), ends, axes), final, allowzero=1)


@script(_INTERNAL, default_opset=op)
def SpreadScale(x, scale, axis: int = 1, block_size: int = 0) -> FLOAT:
    """The scale as float32 (exactly), broadcastable against x."""
    s32 = op.Cast(scale, to=_F32)
    first, wide, merged, axes, ends, final = ParamPlan(x, s32, axis=axis, block_size=block_size)
    return Spread(s32, first, wide, merged, axes, ends, final)


@script(_INTERNAL, default_opset=op)
def SpreadParams(x, scale, zp, axis: int = 1, block_size: int = 0):
    """The scale as float32 (exactly) and ``zp`` (already in its carrier),
    both broadcastable against x, by one plan."""
    s32 = op.Cast(scale, to=_F32)
    first, wide, merged, axes, ends, final = ParamPlan(x, s32, axis=axis, block_size=block_size)
    return (Spread(s32, first, wide, merged, axes, ends, final),
            Spread(zp, first, wide, merged, axes, ends, final))


@script(_INTERNAL, default_opset=op)
def RoundTo(v, precision: int = 1) -> FLOAT:
    """A float32 ``v`` rounded to nearest even into ``precision`` (float32,
    float16, bfloat16; beyond its range +-inf, NaN stays NaN), as float32."""
    return op.Cast(op.Cast(v, to=precision), to=_F32)


@script(_INTERNAL, default_opset=op)
def Quotient(x, s, precision: int = 1) -> FLOAT:
    """``x / s`` in ``precision``: both rounded to it, one float32 division,
    the quotient rounded to it; as float32.  (float32 has more than twice
    float16's / bfloat16's precision plus two bits: the float32 quotient
    rounded again is the correctly rounded quotient.)  x and s of any of the
    three types (widened to float32 exactly first); x may be int32 (rounded
    to nearest even into float32 by the Cast, the contract's conversion)."""
    xp = RoundTo(op.Cast(x, to=_F32), precision=precision)
    sp = RoundTo(op.Cast(s, to=_F32), precision=precision)
    return RoundTo(op.Div(xp, sp), precision=precision)


@script(_INTERNAL, default_opset=op)
def OpaqueZero(t) -> FLOAT:
    """A scalar +0.0 that a runtime cannot compute before it has ``t``'s data.

    onnxruntime removes ``Add(v, 0)`` / ``Sub(v, 0)`` when the 0 is a constant
    (its no-op elimination), which is wrong for signed zeros: ``-0 + +0`` is
    ``+0``, ``-0 - (-0)`` is ``+0``.  A zero point passed through
    ``Sub(zp, OpaqueZero(t))`` keeps its value and sign exactly
    (``z - (+0) = z`` for every z, ``-0`` included) but is no longer a
    constant, so the Add / Sub that uses it stays.  O(1): one element of
    ``t`` (any type; none for an empty ``t``) as float32 through IsNaN, cast
    to 0 or 1, times +0.
    """
    first = op.Slice(op.Reshape(t, op.Constant(value_ints=[-1])),
                     op.Constant(value_ints=[0]), op.Constant(value_ints=[1]))
    probe = op.ReduceSum(op.Cast(first, to=_F32), keepdims=0)
    return op.Mul(op.Cast(op.IsNaN(probe), to=_F32), op.Constant(value_float=0.0))


@script(_INTERNAL, default_opset=op)
def AddSigned(v: FLOAT, z: FLOAT) -> FLOAT:
    """``v + z`` in float32 with IEEE's sign of a zero sum at every
    optimisation level: ``z`` is made opaque first (see ``OpaqueZero``)."""
    return op.Add(v, op.Sub(z, OpaqueZero(v)))


# --------------------------------------------------------------------------
# Precision float64 (the attribute ``precision`` 11; the default for an int32
# scale): the quotient of the exact values in float64, then one rounding to
# float32 of what each route takes (see extql.fallbacks).


@script(_INTERNAL, default_opset=op)
def SpreadScale64(x, scale, axis: int = 1, block_size: int = 0) -> DOUBLE:
    """The scale as float64 (exactly: every value of int32, float32,
    float16, bfloat16 and float8e8m0 is one), broadcastable against x.
    (Not float32 as :func:`SpreadScale`: that Cast would round an int32
    scale.)"""
    s64 = op.Cast(scale, to=_F64)
    first, wide, merged, axes, ends, final = ParamPlan(x, s64, axis=axis, block_size=block_size)
    return Spread(s64, first, wide, merged, axes, ends, final)


@script(_INTERNAL, default_opset=op)
def SpreadParams64(x, scale, zp, axis: int = 1, block_size: int = 0):
    """The scale as float64 (exactly, as :func:`SpreadScale64`) and ``zp``
    (already in its carrier), both broadcastable against x, by one plan."""
    s64 = op.Cast(scale, to=_F64)
    first, wide, merged, axes, ends, final = ParamPlan(x, s64, axis=axis, block_size=block_size)
    return (Spread(s64, first, wide, merged, axes, ends, final),
            Spread(zp, first, wide, merged, axes, ends, final))


@script(_INTERNAL, default_opset=op)
def Quotient64(x, s) -> DOUBLE:
    """``x / s`` in float64: x (float32, float16, bfloat16 or int32) and s
    (any of those, or already float64) are exact in float64, so this is one
    correctly rounded float64 division of the exact values -- the division
    onnx.reference does with NumPy for an int32 scale."""
    return op.Div(op.Cast(x, to=_F64), op.Cast(s, to=_F64))


@script(_INTERNAL, default_opset=op)
def RoundedQuotient64(q: DOUBLE) -> FLOAT:
    """The integer routes' quotient: ``q`` rounded to an integer in float64
    (half to even), then to float32 (nearest even; an integer stays one,
    beyond float32's range +-inf, NaN stays NaN).  The integer cores round
    it again, which changes nothing."""
    return op.Cast(op.Round(q), to=_F32)


@script(_INTERNAL, default_opset=op)
def ShiftedQuotient64(q: DOUBLE, zp) -> FLOAT:
    """The float16 / bfloat16 / float4e2m1 routes' value: ``q + zp`` in
    float64 (the zero point of any float type, exact there), rounded once to
    float32.  The zero point goes through :func:`OpaqueZero` as in
    :func:`AddSigned`, so that ``-0 + (+0)`` is ``+0`` at every optimisation
    level."""
    z = op.Sub(op.Cast(zp, to=_F64), op.Cast(OpaqueZero(q), to=_F64))
    return op.Cast(op.Add(q, z), to=_F32)


@script(_INTERNAL, default_opset=op)
def Pick(cond, a, b):
    """``a`` if the scalar ``cond`` holds, else ``b`` (of one shape), every
    bit kept.  (Not Where: onnxruntime's Where gives +0 where it picks a -0
    from its second input.)"""
    zero_v = op.Constant(value_ints=[0])
    both = op.Concat(op.Unsqueeze(a, zero_v), op.Unsqueeze(b, zero_v), axis=0)
    return op.Gather(both, op.Where(cond, op.Constant(value_int=0), op.Constant(value_int=1)))


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


def _quantize_wide_core(to: int, lo: int, hi: int):
    lo_t = onnx.helper.make_tensor("lo", TensorProto.DOUBLE, [], [float(lo)])
    hi_t = onnx.helper.make_tensor("hi", TensorProto.DOUBLE, [], [float(hi)])

    @script(_INTERNAL, default_opset=op)
    def QuantizeWide(v: FLOAT, zp):
        # float64 holds every float32 and every 32-bit integer exactly, so
        # r + zp is exact while it matters (|r| < 2**53) and saturates right
        # beyond; NaN is replaced first, then one clamp in float64 (not int64:
        # onnxruntime's int64 Min/Max/Clip are wrong beyond 2**32).
        lo_d = op.Constant(value=lo_t)
        hi_d = op.Constant(value=hi_t)
        r = op.Cast(op.Round(v), to=TensorProto.DOUBLE)
        t = op.Add(r, op.Cast(zp, to=TensorProto.DOUBLE))
        t = op.Where(op.IsNaN(t), lo_d, t)
        return op.Cast(op.Clip(t, lo_d, hi_d), to=to)

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
    return op.Mul(op.Sub(op.Cast(x, to=_F32), op.Cast(zp, to=_F32)), op.Cast(s, to=_F32))


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


@script(_INTERNAL, default_opset=op)
def DequantizeWide(x, s, zp) -> FLOAT:
    # int32/uint32: the difference is exact in int64 and rounds once to float32.
    d = op.Cast(op.Sub(op.Cast(x, to=_I64), op.Cast(zp, to=_I64)), to=_F32)
    return op.Mul(d, op.Cast(s, to=_F32))


@script(_INTERNAL, default_opset=op)
def DequantizeDefault(x, s) -> FLOAT:
    return op.Mul(op.Cast(x, to=_F32), op.Cast(s, to=_F32))


def _is_wide(name: str) -> bool:
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
    if _is_wide(variant):
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
    return DequantizeWide if _is_wide(variant) else DequantizeNarrow


def zero_point_carrier(quantize: bool, variant: str) -> int:
    """The type a variant's zero point is cast to before it is spread to x's
    shape (small: one value per channel or block): a type that holds each of
    its values and that every runtime's Reshape / Expand / Slice take."""
    if _is_wide(variant):
        return _F64 if quantize else _I64
    return _F32


# The types ONNX packs several to a byte (int4 / uint4 / int2 / uint2,
# float4e2m1).
_PACKED = frozenset(t.onnx for t in QUANTIZED.values() if getattr(t, "bits", 8) < 8)


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
def quantize_core64(variant: str):
    """The quantize math of one variant for precision float64, after
    :func:`Quotient64`: the integer and float8 cores as they are, the float
    types' without their zero-point addition (ShiftedQuotient64 made it)."""
    qt = QUANTIZED.get(variant)
    if qt is not None and qt.is_float and not is_float8(variant):
        return _quantize_shifted_float_core(qt.onnx, float(qt.hi))
    return quantize_core(variant)


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
    if QUANTIZED[variant].onnx in _PACKED:

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


# --------------------------------------------------------------------------
# Dispatchers: one type-generic body per operator, for runtimes that look a
# function up by (domain, name) and ignore the node's ``overload``:
# onnx.reference (1.23) and onnxruntime before overload support (added in
# 2026, PR microsoft/onnxruntime#28275; 1.18 uses the last function of a
# name).  They need a zero point (its type is the output type: attach gives
# nodes without one an explicit zero when a model needs a dispatcher), use no
# If (old onnxruntime cannot infer types through If inside functions) and
# are valid for every type: both routes are computed, cast to the zero
# point's type and one is picked with Gather (DispatchRoutes).  An operator
# that also has nodes of precision float64 (11) gets QuantizeDispatch64,
# which computes that quotient and the float precision's and picks one; the
# others keep QuantizeDispatch, which computes only the latter.
# The zero point's type is found with in-range CastLike round trips and, for
# the integer width, int64 -> int wrap-around (two's complement truncation,
# as onnxruntime's static_cast and NumPy's astype do).

_F16_PROBE = 1.0 + 2.0**-10  # exact in float16, rounds to 1.0 in bfloat16
_F16_MAX = float(QTYPES["float16"].hi)
_BF16_MAX = float(QTYPES["bfloat16"].hi)
# The integer types' maxima, ascending (IntBounds tests each one in turn).
_INT_MAXES = tuple(sorted(int(t.hi) for t in QTYPES.values() if not t.is_float))
assert len(_INT_MAXES) == 6, "IntBounds tests six integer maxima"


@script(_INTERNAL, default_opset=op)
def IsFloat(zp):
    half = op.Constant(value_float=0.5)
    return op.Equal(op.Cast(op.CastLike(half, zp), to=_F32), half)


@script(_INTERNAL, default_opset=op)
def IntBounds(zp) -> INT64:
    """[lo, hi] of zp's integer type.  Candidate maxima that survive an
    int64 -> T -> float64 round trip form a prefix of _INT_MAXES; hi is the
    last of them (picked with Where: onnxruntime's int64 Max/ReduceMax are not
    trusted beyond 2**32)."""
    cands = op.Constant(value_ints=list(_INT_MAXES))
    as_double = op.Cast(cands, to=TensorProto.DOUBLE)
    fits = op.Equal(op.Cast(op.CastLike(cands, zp), to=TensorProto.DOUBLE), as_double)
    hi = op.Constant(value_int=_INT_MAXES[0])
    hi = op.Where(op.Gather(fits, op.Constant(value_int=1)), op.Constant(value_int=_INT_MAXES[1]),
                  hi)
    hi = op.Where(op.Gather(fits, op.Constant(value_int=2)), op.Constant(value_int=_INT_MAXES[2]),
                  hi)
    hi = op.Where(op.Gather(fits, op.Constant(value_int=3)), op.Constant(value_int=_INT_MAXES[3]),
                  hi)
    hi = op.Where(op.Gather(fits, op.Constant(value_int=4)), op.Constant(value_int=_INT_MAXES[4]),
                  hi)
    hi = op.Where(op.Gather(fits, op.Constant(value_int=5)), op.Constant(value_int=_INT_MAXES[5]),
                  hi)
    minus_one = op.Constant(value_int=-1)
    signed = op.Equal(
        op.Cast(op.CastLike(minus_one, zp), to=TensorProto.DOUBLE),
        op.Constant(value=onnx.helper.make_tensor("m1", TensorProto.DOUBLE, [], [-1.0])),
    )
    lo = op.Where(signed, op.Sub(minus_one, hi), op.Constant(value_int=0))
    return op.Concat(
        op.Reshape(lo, op.Constant(value_ints=[1])),
        op.Reshape(hi, op.Constant(value_ints=[1])),
        axis=0,
    )


_D_WIDE = onnx.helper.make_tensor("wide", TensorProto.DOUBLE, [], [_WIDE])
_D_ZERO = onnx.helper.make_tensor("zero", TensorProto.DOUBLE, [], [0.0])


@script(_INTERNAL, default_opset=op)
def DispatchRoutes(w: FLOAT, r: FLOAT, zd, zp):
    """The type-generic end of a quantize: ``w``, the float16 / bfloat16
    route's value (the quotient with its zero point), and ``r``, the integer
    route's rounded quotient, both float32; ``zd`` the zero point's values
    in float64; ``zp`` gives the output type."""
    # float16 / bfloat16 route
    probe = op.Constant(value_float=_F16_PROBE)
    is_f16 = op.Equal(op.Cast(op.CastLike(probe, zp), to=_F32), probe)
    limit = op.Where(is_f16, op.Constant(value_float=_F16_MAX), op.Constant(value_float=_BF16_MAX))
    wf = op.Where(op.IsNaN(w), w, op.Clip(w, op.Neg(limit), limit))
    # integer route (a float zero point is made finite and small first, so
    # that no cast below sees NaN or an out-of-range value)
    lo_r = op.Constant(value_float=-_WIDE)
    hi_r = op.Constant(value_float=_WIDE)
    r = op.Clip(op.Where(op.IsNaN(r), lo_r, r), lo_r, hi_r)
    zero_d = op.Constant(value=_D_ZERO)
    wide_d = op.Constant(value=_D_WIDE)
    zd = op.Where(op.Or(op.IsNaN(zd), op.IsInf(zd)), zero_d, zd)
    zd = op.Where(op.Greater(zd, wide_d), wide_d, op.Where(op.Less(zd, op.Neg(wide_d)),
                                                          op.Neg(wide_d), zd))
    t = op.Add(op.Cast(r, to=_I64), op.Cast(zd, to=_I64))
    bounds = IntBounds(zp)
    lo = op.Gather(bounds, op.Constant(value_int=0))
    hi = op.Gather(bounds, op.Constant(value_int=1))
    t = op.Where(op.Less(t, lo), lo, t)
    t = op.Where(op.Greater(t, hi), hi, t)
    # Cast both routes to the zero point's type and pick one with Gather
    # (type-generic, unlike Where in onnxruntime).  The float route is zeroed
    # for integer types (no NaN reaches an integer cast).
    is_float = IsFloat(zp)
    wf = op.Where(is_float, wf, op.Constant(value_float=0.0))
    as_float = op.CastLike(wf, zp)
    as_int = op.CastLike(t, zp)
    zero_v = op.Constant(value_ints=[0])
    both = op.Concat(op.Unsqueeze(as_float, zero_v), op.Unsqueeze(as_int, zero_v), axis=0)
    return op.Gather(
        both, op.Where(is_float, op.Constant(value_int=0), op.Constant(value_int=1))
    )


@script(_QUARK, default_opset=op)
def QuantizeDispatch(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                     precision: int = 1, output_dtype: int = 0):
    # The zero point's values, spread in float64 (which holds every value of
    # every type here); y_zero_point itself only gives the type.  The float
    # precisions only: see QuantizeDispatch64.
    s, zd = SpreadParams(x, y_scale, op.Cast(y_zero_point, to=TensorProto.DOUBLE), axis=axis,
                         block_size=block_size)
    v = Quotient(x, s, precision=precision)
    return DispatchRoutes(AddSigned(v, op.Cast(zd, to=_F32)), op.Round(v), zd, y_zero_point)


@script(_QUARK, default_opset=op)
def QuantizeDispatch64(x, y_scale, y_zero_point, axis: int = 1, block_size: int = 0,
                       precision: int = 1, output_dtype: int = 0):
    # QuantizeDispatch for an operator that also has nodes of precision
    # float64 (11): both quotients are computed and one is picked.  The
    # scale is spread in float64 (exact for an int32 one too); the float32
    # scale is rounded from it, the same single rounding as SpreadParams'
    # Cast.
    s64, zd = SpreadParams64(x, y_scale, op.Cast(y_zero_point, to=TensorProto.DOUBLE),
                             axis=axis, block_size=block_size)
    as_double = op.Equal(op.Constant(value_int=precision), op.Constant(value_int=_F64))
    v = Quotient(x, op.Cast(s64, to=_F32), precision=precision)
    q = Quotient64(x, s64)
    w = Pick(as_double, ShiftedQuotient64(q, zd), AddSigned(v, op.Cast(zd, to=_F32)))
    # (the sign of a zero r does not matter to the integer route: Where may
    # pick)
    r = op.Where(as_double, RoundedQuotient64(q), op.Round(v))
    return DispatchRoutes(w, r, zd, y_zero_point)


@script(_QUARK, default_opset=op)
def DequantizeDispatch(x, x_scale, x_zero_point, axis: int = 1, block_size: int = 0,
                       output_dtype: int = 1):
    # The difference in float64 is exact for every integer type and rounds
    # once to float32 like the kernels' (float16/bfloat16 differences that
    # float64 cannot hold are far below float32's precision: same result).
    s, zd = SpreadParams(x, x_scale, op.Cast(x_zero_point, to=TensorProto.DOUBLE), axis=axis,
                         block_size=block_size)
    opaque = op.Cast(OpaqueZero(x), to=TensorProto.DOUBLE)
    zd = op.Sub(zd, opaque)  # see OpaqueZero
    d = op.Sub(op.Cast(x, to=TensorProto.DOUBLE), zd)
    return op.Cast(op.Mul(op.Cast(d, to=_F32), s), to=output_dtype)
