"""The type-generic fallback functions ("dispatchers"), one per operator, for
runtimes that ignore ``NodeProto.overload`` (standard ONNX ops only).

``QuantizeDispatch`` (``QuantizeDispatch64`` for an operator that also has
nodes of precision float64) / ``DequantizeDispatch`` compute every type's
route and pick the one of the zero point's type; ``IsFloat`` / ``IntBounds``
find that type.  :func:`extql.fallbacks.dispatcher_proto` flattens them.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnxscript import FLOAT, INT64, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from ..rules.types import DOMAIN, QTYPES
from .fallback_arith import (
    AddSigned,
    OpaqueZero,
    Pick,
    Quotient,
    Quotient64,
    RoundedQuotient64,
    ShiftedQuotient64,
)
from .fallback_plan import INTERNAL as _INTERNAL
from .fallback_plan import SpreadParams, SpreadParams64

__all__ = [
    "IsFloat",
    "IntBounds",
    "DispatchRoutes",
    "QuantizeDispatch",
    "QuantizeDispatch64",
    "DequantizeDispatch",
]

_QUARK = Opset(DOMAIN, 1)
_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE
_I64 = TensorProto.INT64
# Clamp for Round(x / s) before the int64 cast on the 32-bit route: any |r|
# beyond 2**33 saturates for every zero point of int32/uint32.
_WIDE = float(2**33)


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
