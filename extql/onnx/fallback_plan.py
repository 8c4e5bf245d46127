"""The fallback decompositions' granularity plan: a scale and zero point
lined up with x, decided at run time (standard ONNX ops only).

``ParamShape`` / ``ParamPlan`` / ``Spread`` reshape and expand a scale (or
zero point) so that broadcasting lines it up with ``axis``: per tensor, per
axis, or block by block (``block_size``); ``SpreadScale`` / ``SpreadParams``
spread the scale as float32 and the zero point in its carrier,
``SpreadScale64`` / ``SpreadParams64`` the scale as float64 (precision
float64).  An invalid granularity makes a Reshape fail.

Like every internal helper of the fallbacks they live in the private domain
:data:`INTERNAL_DOMAIN` and are always inlined into the public functions
(:mod:`extql.onnx.fallback_protos`), so no model refers to that domain.
"""

from __future__ import annotations

from onnx import TensorProto
from onnxscript import DOUBLE, FLOAT, INT64, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

__all__ = [
    "INTERNAL_DOMAIN",
    "ParamShape",
    "Choose",
    "ParamPlan",
    "Spread",
    "SpreadScale",
    "SpreadParams",
    "SpreadScale64",
    "SpreadParams64",
]

# Internal functions live in a private domain and are always inlined into the
# public bodies (see extql.onnx.fallback_protos), so no model ever refers to
# this domain.
INTERNAL_DOMAIN = "ai.extql.internal"
INTERNAL = Opset(INTERNAL_DOMAIN, 1)
_INTERNAL = INTERNAL

_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE
_I64 = TensorProto.INT64
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


# --------------------------------------------------------------------------
# Precision float64: the scale spread as float64 (exact for an int32 scale).


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
