"""The onnxscript bodies of the fallback decompositions (standard ONNX ops only).

The numeric contract they implement, route by route, is described in
:mod:`extql.fallbacks`, which turns these bodies into the flat
FunctionProtos that models carry.  Here:

* the internal helpers (``ParamShape``: granularity at run time;
  ``OpaqueZero`` / ``AddSigned``: signed zeros a runtime cannot fold away;
  ``IsFloat`` / ``IntBounds``: the zero point's type for the dispatchers),
  in the private domain :data:`INTERNAL_DOMAIN`, always inlined;
* the per-type math cores (:func:`quantize_core` / :func:`dequantize_core`)
  and the operator-signature wrappers (:func:`make_quantize` /
  :func:`make_dequantize`);
* the type-generic dispatchers ``QuantizeDispatch`` / ``DequantizeDispatch``.

The type ranges and codes come from the type table (:mod:`extql.types`).
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto
from onnxscript import FLOAT, INT64, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from .types import DEFAULT_QTYPE, DOMAIN, QTYPES

__all__ = [
    "INTERNAL_DOMAIN",
    "ParamShape",
    "OpaqueZero",
    "AddSigned",
    "IsFloat",
    "IntBounds",
    "quantize_core",
    "dequantize_core",
    "make_quantize",
    "make_dequantize",
    "QuantizeDispatch",
    "DequantizeDispatch",
]

# Internal functions live in a private domain and are always inlined into the
# public bodies (see extql.fallbacks._flatten), so no model ever refers to this domain.
INTERNAL_DOMAIN = "ai.extql.internal"
_INTERNAL = Opset(INTERNAL_DOMAIN, 1)
_QUARK = Opset(DOMAIN, 1)

_F32 = TensorProto.FLOAT
_I64 = TensorProto.INT64
# Clamp for Round(x / s) before the int64 cast on the 32-bit route: any |r|
# beyond 2**33 saturates for every zero point of int32/uint32.
_WIDE = float(2**33)


@script(_INTERNAL, default_opset=op)
def ParamShape(x: FLOAT, scale: FLOAT, axis: int = 1) -> INT64:
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


# --------------------------------------------------------------------------
# Quantize cores: (x, s, zp) already broadcastable against x.


def _quantize_narrow_core(to: int, lo: float, hi: float):
    @script(_INTERNAL, default_opset=op)
    def QuantizeNarrow(x: FLOAT, s: FLOAT, zp):
        lo_c = op.Constant(value_float=lo)
        hi_c = op.Constant(value_float=hi)
        t = op.Add(op.Round(op.Div(x, s)), op.Cast(zp, to=_F32))
        t = op.Where(op.IsNaN(t), lo_c, t)
        return op.Cast(op.Clip(t, lo_c, hi_c), to=to)

    return QuantizeNarrow


def _quantize_wide_core(to: int, lo: int, hi: int):
    lo_t = onnx.helper.make_tensor("lo", TensorProto.DOUBLE, [], [float(lo)])
    hi_t = onnx.helper.make_tensor("hi", TensorProto.DOUBLE, [], [float(hi)])

    @script(_INTERNAL, default_opset=op)
    def QuantizeWide(x: FLOAT, s: FLOAT, zp):
        # float64 holds every float32 and every 32-bit integer exactly, so
        # r + zp is exact while it matters (|r| < 2**53) and saturates right
        # beyond; NaN is replaced first, then one clamp in float64 (not int64:
        # onnxruntime's int64 Min/Max/Clip are wrong beyond 2**32).
        lo_d = op.Constant(value=lo_t)
        hi_d = op.Constant(value=hi_t)
        r = op.Cast(op.Round(op.Div(x, s)), to=TensorProto.DOUBLE)
        t = op.Add(r, op.Cast(zp, to=TensorProto.DOUBLE))
        t = op.Where(op.IsNaN(t), lo_d, t)
        return op.Cast(op.Clip(t, lo_d, hi_d), to=to)

    return QuantizeWide


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


def _quantize_float_core(to: int, limit: float):
    @script(_INTERNAL, default_opset=op)
    def QuantizeFloat(x: FLOAT, s: FLOAT, zp):
        w = AddSigned(op.Div(x, s), op.Cast(zp, to=_F32))
        c = op.Clip(w, op.Constant(value_float=-limit), op.Constant(value_float=limit))
        return op.Cast(op.Where(op.IsNaN(w), w, c), to=to)

    return QuantizeFloat


# Quantize without a zero point: the default type's range and code.
_DEFAULT_LO = float(DEFAULT_QTYPE.lo)
_DEFAULT_HI = float(DEFAULT_QTYPE.hi)
_DEFAULT_TO = DEFAULT_QTYPE.onnx


@script(_INTERNAL, default_opset=op)
def QuantizeDefault(x: FLOAT, s: FLOAT):
    lo_c = op.Constant(value_float=_DEFAULT_LO)
    hi_c = op.Constant(value_float=_DEFAULT_HI)
    r = op.Round(op.Div(x, s))
    r = op.Where(op.IsNaN(r), lo_c, r)
    return op.Cast(op.Clip(r, lo_c, hi_c), to=_DEFAULT_TO)


# --------------------------------------------------------------------------
# Dequantize cores.


@script(_INTERNAL, default_opset=op)
def DequantizeNarrow(x, s: FLOAT, zp) -> FLOAT:
    # 8/16-bit integers and float16/bfloat16: exact in float32, then float32 math.
    return op.Mul(op.Sub(op.Cast(x, to=_F32), op.Cast(zp, to=_F32)), s)


@script(_INTERNAL, default_opset=op)
def DequantizeFloat(x, s: FLOAT, zp) -> FLOAT:
    # float16/bfloat16: x - zp with an opaque zero point, so that a runtime
    # cannot drop the subtraction of a constant -0 (x - (-0) is x + 0).
    xf = op.Cast(x, to=_F32)
    return op.Mul(op.Sub(xf, op.Sub(op.Cast(zp, to=_F32), OpaqueZero(xf))), s)


@script(_INTERNAL, default_opset=op)
def DequantizeWide(x, s: FLOAT, zp) -> FLOAT:
    # int32/uint32: the difference is exact in int64 and rounds once to float32.
    return op.Mul(op.Cast(op.Sub(op.Cast(x, to=_I64), op.Cast(zp, to=_I64)), to=_F32), s)


@script(_INTERNAL, default_opset=op)
def DequantizeDefault(x, s: FLOAT) -> FLOAT:
    return op.Mul(op.Cast(x, to=_F32), s)


def _is_wide(name: str) -> bool:
    """The 32-bit integer types (int32/uint32), computed through float64 / int64."""
    qt = QTYPES[name]
    return not qt.is_float and qt.dtype.itemsize == 4


@functools.cache
def quantize_core(variant: str):
    """The quantize math of one variant (x, s[, zp] already broadcastable)."""
    if variant == "default":
        return QuantizeDefault
    qt = QTYPES[variant]
    if qt.is_float:
        return _quantize_float_core(qt.onnx, qt.hi)
    if _is_wide(variant):
        return _quantize_wide_core(qt.onnx, int(qt.lo), int(qt.hi))
    return _quantize_narrow_core(qt.onnx, float(qt.lo), float(qt.hi))


def dequantize_core(variant: str):
    """The dequantize math of one variant (x, s[, zp] already broadcastable)."""
    if variant == "default":
        return DequantizeDefault
    if QTYPES[variant].is_float:
        return DequantizeFloat
    return DequantizeWide if _is_wide(variant) else DequantizeNarrow


# --------------------------------------------------------------------------
# Public functions: the operator signature, granularity decided at run time.


def make_quantize(variant: str):
    """ExtendedQuantizeLinear of one variant: the operator's signature, the
    granularity decided at run time from the scale's shape."""
    core = quantize_core(variant)
    if variant == "default":

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x: FLOAT, y_scale: FLOAT, y_zero_point, axis: int = 1):
            pshape = ParamShape(x, y_scale, axis=axis)
            return core(x, op.Reshape(y_scale, pshape))

    else:

        @script(_QUARK, default_opset=op)
        def ExtendedQuantizeLinear(x: FLOAT, y_scale: FLOAT, y_zero_point, axis: int = 1):
            pshape = ParamShape(x, y_scale, axis=axis)
            return core(x, op.Reshape(y_scale, pshape), op.Reshape(y_zero_point, pshape))

    return ExtendedQuantizeLinear


def make_dequantize(variant: str):
    """ExtendedDequantizeLinear of one variant (as :func:`make_quantize`)."""
    core = dequantize_core(variant)
    if variant == "default":

        @script(_QUARK, default_opset=op)
        def ExtendedDequantizeLinear(x, x_scale: FLOAT, x_zero_point, axis: int = 1) -> FLOAT:
            pshape = ParamShape(x, x_scale, axis=axis)
            return core(x, op.Reshape(x_scale, pshape))

    else:

        @script(_QUARK, default_opset=op)
        def ExtendedDequantizeLinear(x, x_scale: FLOAT, x_zero_point, axis: int = 1) -> FLOAT:
            pshape = ParamShape(x, x_scale, axis=axis)
            return core(x, op.Reshape(x_scale, pshape), op.Reshape(x_zero_point, pshape))

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
# point's type and one is picked with Gather.
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


@script(_QUARK, default_opset=op)
def QuantizeDispatch(x: FLOAT, y_scale: FLOAT, y_zero_point, axis: int = 1):
    pshape = ParamShape(x, y_scale, axis=axis)
    s = op.Reshape(y_scale, pshape)
    zp = op.Reshape(y_zero_point, pshape)
    v = op.Div(x, s)
    # float16 / bfloat16 route
    probe = op.Constant(value_float=_F16_PROBE)
    is_f16 = op.Equal(op.Cast(op.CastLike(probe, zp), to=_F32), probe)
    limit = op.Where(is_f16, op.Constant(value_float=_F16_MAX), op.Constant(value_float=_BF16_MAX))
    w = AddSigned(v, op.Cast(zp, to=_F32))
    wf = op.Where(op.IsNaN(w), w, op.Clip(w, op.Neg(limit), limit))
    # integer route (a float zero point is made finite and small first, so
    # that no cast below sees NaN or an out-of-range value)
    lo_r = op.Constant(value_float=-_WIDE)
    hi_r = op.Constant(value_float=_WIDE)
    r = op.Round(v)
    r = op.Clip(op.Where(op.IsNaN(r), lo_r, r), lo_r, hi_r)
    zd = op.Cast(zp, to=TensorProto.DOUBLE)
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
def DequantizeDispatch(x, x_scale: FLOAT, x_zero_point, axis: int = 1) -> FLOAT:
    # The difference in float64 is exact for every integer type and rounds
    # once to float32 like the kernels' (float16/bfloat16 differences that
    # float64 cannot hold are far below float32's precision: same result).
    pshape = ParamShape(x, x_scale, axis=axis)
    s = op.Reshape(x_scale, pshape)
    zp = op.Reshape(x_zero_point, pshape)
    opaque = op.Cast(OpaqueZero(x), to=TensorProto.DOUBLE)
    zd = op.Sub(op.Cast(zp, to=TensorProto.DOUBLE), opaque)  # see OpaqueZero
    d = op.Sub(op.Cast(x, to=TensorProto.DOUBLE), zd)
    return op.Mul(op.Cast(d, to=_F32), s)
