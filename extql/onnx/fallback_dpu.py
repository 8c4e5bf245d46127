"""The fallback function of Quark's DPU instance norm, as onnxscript source
(standard ONNX ops only): ``ExtendedInstanceNormalization`` (legacy
``VitisInstanceNormalization``) of
docs/operators/extended_instance_normalization.rst.

Each step of the operator page, with standard ops:

* ``bf(v)`` -- ``Cast`` to bfloat16 and back (round to nearest even, which
  is the page's rule on every float32 but a NaN: the Cast gives a NaN for
  every NaN, the page's rule turns the few NaNs ``0x7F800001..0x7F808000``
  and ``0x7FFF8000..0x7FFFFFFF`` (either sign) into an infinity or a zero;
  no standard op before opset 26 reads a NaN's bits, docs/differences.rst);
* the sequential sums -- the last element of a float32 ``CumSum`` along the
  instance (onnxruntime's and onnx.reference's CumSum add in index order,
  one float32 rounding per step: tests/dpu/test_in_fallback.py);
* the squares -- ``bf(x) * bf(x)`` in float32: exact (8 significant bits
  squared are 16), except below float32's normal range, where a square of a
  ``|bf(x)|`` under ``2^-67`` is rounded before it is added
  (docs/differences.rst);
* ``inv = float32(1 / S)`` -- a float64 division of the run-time ``S``;
* ``E(v)`` -- :func:`~extql.onnx.fallback_block_math.ExponentField` of
  ``|v|`` (255 for an infinity or NaN);
* ``rnd(v, m)`` -- ``X`` from its fields: the page's integer sum of the
  sign-and-exponent bits and ``(m - E(v)) << 23`` is the sign of v and the
  exponent field m, the sign flipped when m passes 255 (``m <= 383``); so
  ``X = ±2^(F - 127)`` with ``F = m mod 256`` (±0 for F = 0, ±inf for 255,
  :func:`~extql.onnx.fallback_block_math.Pow2`), then ``(v + X) - X``;
* ``powf(var + epsilon, -0.5)`` -- ``Pow`` (onnxruntime's is the C
  library's powf; onnx.reference's is NumPy's: docs/differences.rst).

Internal helpers (:data:`~extql.onnx.fallback_plan.INTERNAL_DOMAIN`) are
inlined into the operator function when it is flattened
(:func:`extql.onnx.fallback_protos.dpu_function_proto`).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnxscript import FLOAT, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from ..rules.dpu import DEFAULT_EPSILON
from ..rules.types import DOMAIN
from .fallback_block_math import ExponentField, Pow2, SignBit
from .fallback_plan import INTERNAL as _INTERNAL

__all__ = ["InstanceNorm", "HELPERS", "DPU_VARIANT"]

_QUARK = Opset(DOMAIN, 1)
_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE
_BF16 = TensorProto.BFLOAT16
_BIG = 2**62
_ONE64 = onnx.helper.make_tensor("one", _F64, [], [1.0])

#: The ``overload`` of a DPU node given its fallback function (one function
#: per operator: the instance norm has no variants).
DPU_VARIANT = "bfloat16"


@script(_INTERNAL, default_opset=op)
def BF(v: FLOAT) -> FLOAT:
    """float32 rounded to bfloat16 precision (nearest even), as float32."""
    return op.Cast(op.Cast(v, to=_BF16), to=_F32)


@script(_INTERNAL, default_opset=op)
def Field(v: FLOAT) -> FLOAT:
    """``E(v)`` of any float32: 0 for zeros and subnormals, 255 for an
    infinity or NaN (an integer-valued float32)."""
    a = op.Abs(v)
    finite = op.Not(op.Or(op.IsNaN(a), op.IsInf(a)))
    e = ExponentField(op.Where(finite, a, op.Constant(value_float=0.0)))
    return op.Where(finite, e, op.Constant(value_float=255.0))


@script(_INTERNAL, default_opset=op)
def Rnd(v: FLOAT, m: FLOAT) -> FLOAT:
    """``rnd(v, m)``: v rounded onto the grid of exponent field m
    (0 <= m <= 383)."""
    wrap = op.Not(op.Less(m, op.Constant(value_float=256.0)))
    f = op.Sub(m, op.Mul(op.Cast(wrap, to=_F32), op.Constant(value_float=256.0)))
    mag = op.Where(op.Equal(f, op.Constant(value_float=0.0)), op.Constant(value_float=0.0),
                   Pow2(op.Sub(f, op.Constant(value_float=127.0))))
    neg = op.Xor(SignBit(v), wrap)
    x = op.Mul(mag, op.Where(neg, op.Constant(value_float=-1.0), op.Constant(value_float=1.0)))
    return op.Sub(op.Add(v, x), x)


@script(_INTERNAL, default_opset=op)
def ProductField(a: FLOAT, b: FLOAT) -> FLOAT:
    """``E(a) + E(b) - 127``."""
    return op.Sub(op.Add(Field(a), Field(b)), op.Constant(value_float=127.0))


@script(_INTERNAL, default_opset=op)
def Mac32(a: FLOAT, b: FLOAT, c: FLOAT) -> FLOAT:
    """``mac32(a, b, c)``: ``rnd(c, m) + rnd(a * b, m)``."""
    m = op.Max(ProductField(a, b), Field(c))
    return op.Add(Rnd(c, m), Rnd(op.Mul(a, b), m))


@script(_INTERNAL, default_opset=op)
def Msc32(a: FLOAT, b: FLOAT, c: FLOAT) -> FLOAT:
    """The DPU's ``c - a * b`` (``msc32``): a in three bfloat16 parts, b
    likewise from ``-b``, seven ``mac32`` and an ``addmac32``."""
    a0 = BF(a)
    ra = op.Sub(a, a0)
    a1 = BF(ra)
    a2 = BF(op.Sub(ra, a1))
    nb = op.Neg(b)
    b0 = BF(nb)
    rb = op.Sub(nb, b0)
    b1 = BF(rb)
    b2 = BF(op.Sub(rb, b1))
    terms = op.Mul(a2, b2)
    terms = Mac32(a2, b1, terms)
    terms = Mac32(a1, b2, terms)
    terms = Mac32(a0, b2, terms)
    terms = Mac32(a1, b1, terms)
    terms = Mac32(a2, b0, terms)
    terms = Mac32(a1, b0, terms)
    terms = Mac32(a0, b1, terms)
    m = op.Max(op.Max(ProductField(a0, b0), Field(terms)), Field(c))
    return op.Add(op.Add(Rnd(terms, m), Rnd(c, m)), Rnd(op.Mul(a0, b0), m))


@script(_INTERNAL, default_opset=op)
def LastOfCumSum(v: FLOAT) -> FLOAT:
    """The sequential float32 sum along axis 2 of ``[N, C, S]``, kept as
    ``[N, C, 1]``: CumSum's last element."""
    total = op.CumSum(v, op.Constant(value_int=2))
    return op.Slice(total, op.Constant(value_ints=[-1]), op.Constant(value_ints=[_BIG]),
                    op.Constant(value_ints=[2]))


@script(_QUARK, default_opset=op)
def InstanceNorm(x: FLOAT, scale: FLOAT, B: FLOAT, epsilon: float = DEFAULT_EPSILON) -> FLOAT:
    shape = op.Shape(x)
    n = op.Gather(shape, op.Constant(value_ints=[0]))
    c = op.Gather(shape, op.Constant(value_ints=[1]))  # fails below rank 2
    view = op.Concat(n, c, op.Constant(value_ints=[-1]), axis=0)
    v = BF(op.Reshape(x, view))
    # γ and β as [1, C, 1]: a length other than C fails the Reshape.
    per_c = op.Concat(op.Constant(value_ints=[1]), c, op.Constant(value_ints=[1]), axis=0)
    g = BF(op.Reshape(scale, per_c))
    b = BF(op.Reshape(B, per_c))
    s = op.Cast(op.Slice(op.Shape(v), op.Constant(value_ints=[2]), op.Constant(value_ints=[3])),
                to=_F64)
    inv = op.Cast(op.Div(op.Constant(value=_ONE64), s), to=_F32)
    mean = op.Mul(LastOfCumSum(v), inv)
    msq = op.Mul(LastOfCumSum(op.Mul(v, v)), inv)
    var = Msc32(mean, mean, msq)
    mean_b = BF(mean)
    r = BF(op.Pow(op.Add(var, op.Constant(value_float=epsilon)), op.Constant(value_float=-0.5)))
    t = BF(op.Sub(BF(op.Mul(v, r)), BF(op.Mul(mean_b, r))))
    y = BF(op.Add(op.Mul(g, t), b))
    return op.Reshape(y, shape)


#: The internal helpers the function calls (inlined when it is flattened).
HELPERS = [BF, Field, Rnd, ProductField, Mac32, Msc32, LastOfCumSum]
