"""The arithmetic every fallback route shares (standard ONNX ops only): the
division in its precision, and sums whose signed zeros a runtime cannot fold
away.

* ``RoundTo`` / ``Quotient``: ``x / s`` in the precision ``precision``
  (float32, float16, bfloat16), through float32;
* ``Quotient64`` / ``RoundedQuotient64`` / ``ShiftedQuotient64``: the same
  for precision float64, and the one rounding to float32 of what each route
  takes;
* ``OpaqueZero`` / ``OpaqueCopy`` / ``AddSigned``: ``v + z`` with IEEE's
  sign of a zero sum at every optimisation level; ``Pick``: one of two tensors, every bit kept.

Internal helpers (:data:`~extql.onnx.fallback_plan.INTERNAL_DOMAIN`), always
inlined.
"""

from __future__ import annotations

from onnx import TensorProto
from onnxscript import DOUBLE, FLOAT, script
from onnxscript import opset21 as op

from .fallback_plan import INTERNAL as _INTERNAL

__all__ = [
    "RoundTo",
    "Quotient",
    "OpaqueZero",
    "OpaqueCopy",
    "AddSigned",
    "Quotient64",
    "RoundedQuotient64",
    "ShiftedQuotient64",
    "Pick",
]

_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE


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
    constant, so the Add / Sub that uses it stays.  O(1): whether one element
    of ``t`` (any type; none for an empty ``t``) is NaN, p, gives
    ``p and not p``, cast to float32: +0 without a multiplication by a
    constant 0, which a runtime may fold to 0 (tract did, and then dropped
    the Add of a float16 quantize with a zero point of 0).
    """
    first = op.Slice(op.Reshape(t, op.Constant(value_ints=[-1])),
                     op.Constant(value_ints=[0]), op.Constant(value_ints=[1]))
    probe = op.IsNaN(op.ReduceSum(op.Cast(first, to=_F32), keepdims=0))
    return op.Cast(op.And(probe, op.Not(probe)), to=_F32)


@script(_INTERNAL, default_opset=op)
def OpaqueCopy(z, t):
    """``z`` itself, every bit (-0 included), but not a constant: a runtime
    cannot compute it before it has ``t``'s data.  (Not ``z - OpaqueZero``:
    OpenVINO's CPU plugin rewrites ``0 - w`` as ``-w``, dropping the addition
    of the constant 0, which turns ``+0 - (+0)`` into -0.)  O(1): ``z``
    picked by Gather at an index computed from one element p of ``t``,
    ``isnan(p) and isinf(p)`` (never both, so always index 0, which no
    optimiser can prove without those ops' meaning)."""
    first = op.Slice(op.Reshape(t, op.Constant(value_ints=[-1])),
                     op.Constant(value_ints=[0]), op.Constant(value_ints=[1]))
    value = op.ReduceSum(op.Cast(first, to=_F32), keepdims=0)
    index = op.Cast(op.And(op.IsNaN(value), op.IsInf(value)), to=TensorProto.INT64)
    return op.Gather(op.Unsqueeze(z, op.Constant(value_ints=[0])), index, axis=0)


@script(_INTERNAL, default_opset=op)
def AddSigned(v: FLOAT, z: FLOAT) -> FLOAT:
    """``v + z`` in float32 with IEEE's sign of a zero sum at every
    optimisation level: ``z`` is made opaque first (see ``OpaqueCopy``), so
    no runtime removes ``Add(v, 0)`` (wrong for ``v = -0``)."""
    return op.Add(v, OpaqueCopy(z, v))


# --------------------------------------------------------------------------
# Precision float64 (the attribute ``precision`` 11; the default for an int32
# scale): the quotient of the exact values in float64, then one rounding to
# float32 of what each route takes (see extql.fallbacks).


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
