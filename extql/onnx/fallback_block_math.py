"""The arithmetic of the block formats' fallbacks (standard ONNX ops only):
exact powers of two, exponent fields, the sign of x, the three rounding
modes, and a block layout along any axis.

ONNX has no op that reads a float's bits, so every piece here is built from
float32 arithmetic that is exact:

* :func:`Pow2` -- ``2^k`` (k an integer-valued float32) from a table of the
  279 float32 values ``2^-150 .. 2^128`` rounded to float32 (0 and +inf at
  the ends): a Gather, exact for every k, subnormal results included;
* :func:`ExponentField` -- ``E(a)``, the biased float32 exponent field of a
  finite ``a >= 0`` (0 for zeros and subnormals): ``Floor(Log(a) / ln 2)``
  is within one of ``floor(log2 a)`` in any runtime's float32 Log, and is
  corrected exactly by comparing ``a`` with ``Pow2(e)`` and ``Pow2(e + 1)``;
* :func:`SignBit` -- the sign bit of x, -0 included (``1 / -0`` is -inf);
* :func:`RoundMagnitude` -- a rounding mode (0 half away from zero, 1 half
  toward +inf, 2 half to even) applied to a quotient given as its magnitude
  and sign: ``floor`` and the fraction (both exact in float32), a tie
  decided by the mode;
* :func:`SignFactor` -- -1 or +1: the sign a result takes, applied last by
  one multiplication.

Signed zeros: onnxruntime's ``Where`` gives +0 where it picks a -0 from its
second input (``X``), and its no-op elimination removes ``Add(v, 0)``.  So
the block formats' fallbacks compute magnitudes (never -0: they come from
``Abs``) and a sign factor of +-1 (never a zero), select only between those,
and multiply the two at the end: ``(+0) * (-1)`` is -0 in every runtime.

Block layout (:func:`BlockPlan`, :func:`Blocked`, :func:`Unblock`): x is
seen as ``[outer, D, inner]`` with the blocks along D (rank 0 and 1:
``[1, N, 1]``), padded with zeros to ``nb * block_size`` along D, reshaped to
``[outer, nb, block_size, inner]`` and transposed to ``[block_size, outer, nb,
inner]``, seen as ``[block_size, M]`` (M = outer * nb * inner): the
elements of a block are a column, and a block's values (its exponent, its
scale) are a row ``[1, M]`` that every operation broadcasts along the outer
axis.  Laid out so whatever the axis, no elementwise op meets a tensor whose
innermost dimension is 1 (along the last axis, inner is 1): onnxruntime's
broadcasting runs such a tensor against a scalar one element at a time (a
``Mul`` of ``[n, 1]`` by a scalar takes 30 times the ``[n]`` one), and a
block's value broadcast along the innermost axis goes a block at a time.  A
block's maximum is a ``ReduceMax`` along axis 0 (written with the axes as an
input, as from opset 18; the function protos of
:mod:`extql.onnx.fallback_protos` stamped for opsets 15-17 take them as the
attribute).  Its inputs are never NaN
(the callers give it finite magnitudes, 0 in place of an inf or NaN, or 0/1
flags), so how a runtime's ``ReduceMax`` treats NaN does not matter; nor
-0 (they come from ``Abs``).  onnxruntime's ``TopK`` of one along an outer
axis takes 2 to 3 times as long, and ``ArgMax`` + ``GatherElements`` twice
as long (and onnx.reference computes GatherElements with ``np.choose``,
limited to 32 choices on NumPy 1.x).  An axis out of range for a rank >= 2,
or a ``block_size`` < 1, makes the first Reshape fail: an error, never a
silently wrong answer.

Internal helpers (:data:`~extql.onnx.fallback_plan.INTERNAL_DOMAIN`), always
inlined into the operator functions of :mod:`extql.onnx.fallback_blocks`.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto
from onnxscript import FLOAT, INT64, script
from onnxscript import opset21 as op

from .fallback_plan import INTERNAL as _INTERNAL
from .fallback_plan import Choose

__all__ = [
    "POW2_LOW",
    "POW2_HIGH",
    "pow2_table",
    "Pow2",
    "ExponentField",
    "SignBit",
    "RoundMagnitude",
    "SignFactor",
    "BlockPlan",
    "Blocked",
    "Unblock",
    "BlockMax",
    "SubBlockMax",
    "HELPERS",
]

_F32 = TensorProto.FLOAT
_I64 = TensorProto.INT64
_BIG = 2**62

#: The exponents of the power-of-two table: 2^POW2_LOW (which rounds to +0 in
#: float32) to 2^POW2_HIGH (+inf); a k outside is clamped into it, which
#: rounds 2^k the same way.
POW2_LOW = -150
POW2_HIGH = 128


def pow2_table() -> np.ndarray:
    """float32 ``2^k`` for k = POW2_LOW .. POW2_HIGH, each rounded to float32
    (``2^-150`` is a tie between 0 and the smallest subnormal: +0; ``2^128``
    is beyond float32's range: +inf)."""
    k = np.arange(POW2_LOW, POW2_HIGH + 1)
    with np.errstate(over="ignore"):
        return np.ldexp(np.float64(1.0), k).astype(np.float32)


_POW2 = onnx.numpy_helper.from_array(pow2_table(), "pow2")
_LOW = float(POW2_LOW)
_HIGH = float(POW2_HIGH)
#: 1 / ln 2 as float32: Log(a) * this is log2(a) within far less than one.
_INV_LN2 = float(np.float32(1.0 / math.log(2.0)))
#: The smallest normal float32, 2^-126: E(a) is 0 below it.
_TINY = float(np.float32(2.0**-126))


@script(_INTERNAL, default_opset=op)
def Pow2(k: FLOAT) -> FLOAT:
    """``2^k`` rounded to float32, for an integer-valued float32 k: exact
    where it is a float32 (subnormals included), +0 below, +inf above."""
    table = op.Constant(value=_POW2)
    clamped = op.Clip(k, op.Constant(value_float=_LOW), op.Constant(value_float=_HIGH))
    index = op.Cast(op.Sub(clamped, op.Constant(value_float=_LOW)), to=_I64)
    return op.Gather(table, index)


@script(_INTERNAL, default_opset=op)
def ExponentField(a: FLOAT) -> FLOAT:
    """``E(a)`` of a finite float32 ``a >= 0`` as an integer-valued float32:
    ``floor(log2 a) + 127``, 0 for zeros and subnormals.  The Log estimate
    is corrected by comparing with exact powers of two, so the result is
    exact whatever the runtime's Log rounds to (within one)."""
    tiny = op.Constant(value_float=_TINY)
    b = op.Max(a, tiny)
    e0 = op.Floor(op.Mul(op.Log(b), op.Constant(value_float=_INV_LN2)))
    e0 = op.Clip(e0, op.Constant(value_float=-126.0), op.Constant(value_float=127.0))
    one = op.Constant(value_float=1.0)
    # 2^e0 > b: one less; then 2^(e1 + 1) <= b: one more.
    e1 = op.Sub(e0, op.Cast(op.Greater(Pow2(e0), b), to=_F32))
    e2 = op.Add(e1, op.Cast(op.Not(op.Greater(Pow2(op.Add(e1, one)), b)), to=_F32))
    field = op.Add(e2, op.Constant(value_float=127.0))
    return op.Where(op.Less(a, tiny), op.Constant(value_float=0.0), field)


@script(_INTERNAL, default_opset=op)
def SignBit(v: FLOAT):
    """The sign bit of each float32 v (True for -0 and negative values,
    False for +0, positive values and NaN): ``v < 0``, or ``1 / v < 0`` for
    -0 (which is -inf)."""
    zero = op.Constant(value_float=0.0)
    return op.Or(op.Less(v, zero),
                 op.Less(op.Div(op.Constant(value_float=1.0), v), zero))


@script(_INTERNAL, default_opset=op)
def RoundMagnitude(qa: FLOAT, neg, rounding_mode: int = 0) -> FLOAT:
    """The magnitude of ``R(q)`` for the quotient ``q`` given as its
    magnitude ``qa`` (>= 0) and sign ``neg``: ``floor(qa)`` plus one when
    the fraction is above 1/2, or exactly 1/2 and the mode rounds the tie
    away from zero (0: always; 1: for a positive q, half toward +inf; 2: when
    ``floor(qa)`` is odd, half to even).  Floor, the fraction and the sum
    are exact in float32."""
    t = op.Floor(qa)
    d = op.Sub(qa, t)
    half = op.Constant(value_float=0.5)
    mode = op.Constant(value_int=rounding_mode)
    odd = op.Not(op.Equal(op.Mul(op.Floor(op.Mul(t, half)), op.Constant(value_float=2.0)), t))
    tie_up = op.Or(op.Equal(mode, op.Constant(value_int=0)),
                   op.Or(op.And(op.Equal(mode, op.Constant(value_int=1)), op.Not(neg)),
                         op.And(op.Equal(mode, op.Constant(value_int=2)), odd)))
    up = op.Or(op.Greater(d, half), op.And(op.Equal(d, half), tie_up))
    return op.Add(t, op.Cast(up, to=_F32))


@script(_INTERNAL, default_opset=op)
def SignFactor(neg, keep) -> FLOAT:
    """-1 where x is negative (``neg``) and its result keeps x's sign
    (``keep``), else +1: the factor a magnitude is multiplied by last."""
    return op.Where(op.And(neg, keep), op.Constant(value_float=-1.0),
                    op.Constant(value_float=1.0))


@script(_INTERNAL, default_opset=op)
def BlockPlan(x, attrs_ok, axis: int = 1, block_size: int = 1):
    """How x is cut into blocks: the shapes ``lines`` ([outer, D, inner]),
    ``blocked`` ([outer, nb, block_size, inner]), ``cols`` ([block_size, M],
    the block view of :func:`Blocked`) and ``padded`` ([outer, nb *
    block_size, inner]), the Pad ``pads`` of the D axis, and ``D`` (a 1-D
    int64 of one).  An axis out of range for a rank >= 2, a ``block_size`` <
    1 or ``attrs_ok`` False (a scalar: attributes the caller found invalid)
    give ``lines`` a size that is not x's, so the Reshape fails."""
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    one_v = op.Constant(value_ints=[1])
    zero_v = op.Constant(value_ints=[0])
    xshape = op.Shape(x)
    rank = op.Size(xshape)
    n = op.Reshape(op.Size(x), one_v)
    a0 = op.Constant(value_int=axis)
    a = op.Where(op.Less(a0, zero), op.Add(a0, rank), a0)
    flat = op.Not(op.Greater(rank, one))
    axis_ok = op.Or(flat, op.And(op.Not(op.Less(a, zero)), op.Less(a, rank)))
    b0 = op.Constant(value_int=block_size)
    ok = op.And(op.And(axis_ok, op.Not(op.Less(b0, one))), attrs_ok)
    ai = op.Where(op.And(axis_ok, op.Not(flat)), a, zero)
    ai_v = op.Reshape(ai, one_v)
    after_v = op.Add(ai_v, one_v)
    shape = Choose(flat, n, xshape)
    outer = op.ReduceProd(op.Concat(one_v, op.Slice(shape, zero_v, ai_v), axis=0), keepdims=1)
    dim = op.Slice(shape, ai_v, after_v)
    inner = op.ReduceProd(op.Concat(one_v, op.Slice(shape, after_v,
                                                    op.Constant(value_ints=[_BIG])), axis=0),
                          keepdims=1)
    bad = op.Concat(op.Add(n, one_v), one_v, one_v, axis=0)
    lines = Choose(ok, op.Concat(outer, dim, inner, axis=0), bad)
    b = op.Reshape(op.Max(b0, one), one_v)
    nb = op.Div(op.Sub(op.Add(dim, b), one_v), b)
    pad = op.Sub(op.Mul(nb, b), dim)
    pads = op.Concat(zero_v, zero_v, zero_v, zero_v, pad, zero_v, axis=0)
    blocked = op.Concat(outer, nb, b, inner, axis=0)
    cols = op.Concat(b, op.Mul(op.Mul(outer, nb), inner), axis=0)
    padded = op.Concat(outer, op.Mul(nb, b), inner, axis=0)
    return lines, blocked, cols, padded, pads, dim


@script(_INTERNAL, default_opset=op)
def Blocked(v: FLOAT, lines: INT64, blocked: INT64, cols: INT64, pads: INT64) -> FLOAT:
    """A float32 tensor of x's shape as ``[block_size, M]``: each line padded
    with +0, cut into ``[outer, nb, block_size, inner]`` and transposed so
    that a block is a column."""
    v3 = op.Reshape(v, lines, allowzero=1)
    v4 = op.Reshape(op.Pad(v3, pads, op.Constant(value_float=0.0)), blocked, allowzero=1)
    return op.Reshape(op.Transpose(v4, perm=[2, 0, 1, 3]), cols, allowzero=1)


@script(_INTERNAL, default_opset=op)
def Unblock(vb: FLOAT, blocked: INT64, padded: INT64, dim: INT64, xshape: INT64) -> FLOAT:
    """The block view back to x's shape (the padding dropped)."""
    swapped = op.Concat(op.Slice(blocked, op.Constant(value_ints=[2]), op.Constant(value_ints=[3])),
                        op.Slice(blocked, op.Constant(value_ints=[0]), op.Constant(value_ints=[2])),
                        op.Slice(blocked, op.Constant(value_ints=[3]), op.Constant(value_ints=[4])),
                        axis=0)
    v4 = op.Transpose(op.Reshape(vb, swapped, allowzero=1), perm=[1, 2, 0, 3])
    v3 = op.Reshape(v4, padded, allowzero=1)
    cut = op.Slice(v3, op.Constant(value_ints=[0]), dim, op.Constant(value_ints=[1]))
    return op.Reshape(cut, xshape, allowzero=1)


@script(_INTERNAL, default_opset=op)
def BlockMax(v: FLOAT) -> FLOAT:
    """The largest value of each block of the block view ``[block_size, M]``
    (``[1, M]``); the values are magnitudes (no NaN, no -0)."""
    return op.ReduceMax(v, op.Constant(value_ints=[0]), keepdims=1)


@script(_INTERNAL, default_opset=op)
def SubBlockMax(v: FLOAT) -> FLOAT:
    """The largest value of each sub-block of a view ``[n_sub,
    sub_block_size, M]`` (along axis 1, kept: ``[n_sub, 1, M]``); magnitudes
    as for :func:`BlockMax`."""
    return op.ReduceMax(v, op.Constant(value_ints=[1]), keepdims=1)


#: Every helper here, for inlining (extql.onnx.fallback_protos).
HELPERS = [Pow2, ExponentField, SignBit, RoundMagnitude, SignFactor, BlockPlan, Blocked,
           Unblock, BlockMax, SubBlockMax]
