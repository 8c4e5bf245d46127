"""The fallback functions of Quark's block formats, as onnxscript source
(standard ONNX ops only): ``BFPQuantizeDequantize`` and
``MXQuantizeDequantize`` of docs/operators, bit for bit.

One function per *variant* -- what a node's string attribute (and
``use_compiler_version_cpu_kernel``) selects, fixed when the function is
made: :data:`BFP_VARIANTS` (``"to_bfp"``, ``"to_bfp_compiler"``,
``"to_bfp_prime"``, which ``"to_bfp_prime_shared"`` nodes use too) and
:data:`MX_VARIANTS` (the element types).  The numeric attributes (``axis``,
``block_size``, ``bit_width``, ``rounding_mode``, ``sub_block_size``,
``sub_block_shift_bits``, ``convert_to_bfloat_before_bfp``) are read at run
time, so one function serves every node of its variant.  A value the
operator refuses makes a Reshape fail (:func:`BlockPlan`); attach_fallbacks
refuses it before, naming the node.

Every function: x (float32 or float16) widened to float32 (exact), cut into
blocks (:mod:`extql.onnx.fallback_block_math`), the math on magnitudes
``a = |x|`` (after the bfloat16 pre-rounding: ``Cast`` to bfloat16 and back,
round to nearest even, a NaN kept as it is) and the sign bit, the result
``magnitude * (+-1)`` put back in x's shape and cast to x's type
(``CastLike``: round to nearest even into float16).  Infinities and NaN
(to_bfp, MX) and the only element of a one-element tensor are passed through
as magnitude and sign.  With E the block's exponent field
(:func:`ExponentField` of the block's largest finite magnitude):

* to_bfp: ``s = 2^(E - 126 - m)``, ``M = (2^m - 1) * s`` (one float32
  multiply, exact), ``min(R(a / s) * s, M)``;
* the compiler-version kernel: the same on a scale doubled when an element
  whose exponent field is E rounds to 128 or more (positive) or beyond -128;
  the bounds ``2^(E' - 127) * (2^m - 1)`` and ``2^(E' - 127 + m)`` rounded
  to float32 (so +inf beyond its range);
* to_bfp_prime: E counts infinities and NaN (a block with one is NaN), a
  sub-block's shift ``min(E - E_j, 2^bits - 1)``, the element's integer
  mantissa with its dropped bits rounded as ``R(a / unit)`` with ``unit =
  2^(E - 126 - shift - m)`` (an exact quotient: ``a / unit`` is
  ``mu / 2^n``), a truncation that already is ``2^m - 1`` kept, subnormal
  inputs flushed;
* MX: ``X = 2^(E - 127 - emax)``, ``v = a / X``; int8 ``min(R(64 v), 128 or
  127) * 2^-6``, the float types ``Round(v / q) * q`` with the grid's
  quantum ``q = 2^(max(floor(log2 v), emin) - mbits)``, saturated; then
  ``X * element`` (one float32 multiply).

``R`` is :func:`RoundMagnitude` with the sign rules of the rounding modes
(:func:`SignFactor`): modes 0 and 1 keep the quotient's sign on a zero,
mode 2 gives +0 unless the quotient is -0; MX float elements give +0.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto
from onnxscript import FLOAT, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from ..rules.blocks import (
    BIT_WIDTH_RANGE,
    METHOD_TO_BFP,
    METHOD_TO_BFP_PRIME,
    MX_ELEMENTS,
    SIGN_AND_EXPONENT_BITS,
    SUB_BLOCK_SHIFT_BITS_RANGE,
)
from ..rules.types import DOMAIN
from .fallback_block_math import (
    Blocked,
    BlockMax,
    BlockPlan,
    ExponentField,
    Pow2,
    RoundMagnitude,
    SignBit,
    SignFactor,
    SubBlockMax,
    Unblock,
)
from .fallback_plan import INTERNAL as _INTERNAL

__all__ = [
    "BFP_VARIANTS",
    "MX_VARIANTS",
    "TO_BFP",
    "TO_BFP_COMPILER",
    "TO_BFP_PRIME",
    "make_bfp",
    "make_mx",
    "HELPERS",
    "block_variant",
]

_QUARK = Opset(DOMAIN, 1)
_F32 = TensorProto.FLOAT
_BF16 = TensorProto.BFLOAT16

#: BFPQuantizeDequantize's variants: one shared exponent (the default
#: kernel, and Quark's compiler-version kernel) or a shift per sub-block.
TO_BFP = "to_bfp"
TO_BFP_COMPILER = "to_bfp_compiler"
TO_BFP_PRIME = "to_bfp_prime"
BFP_VARIANTS: tuple[str, ...] = (TO_BFP, TO_BFP_COMPILER, TO_BFP_PRIME)
#: MXQuantizeDequantize's variants: its element types.
MX_VARIANTS: tuple[str, ...] = tuple(MX_ELEMENTS)

_BW_BFP = tuple(float(v) for v in BIT_WIDTH_RANGE[METHOD_TO_BFP])
_BW_PRIME = tuple(float(v) for v in BIT_WIDTH_RANGE[METHOD_TO_BFP_PRIME])
_SHIFT = tuple(float(v) for v in SUB_BLOCK_SHIFT_BITS_RANGE)
_SIGN_EXP = float(SIGN_AND_EXPONENT_BITS)
_TINY = float(2.0**-126)
_TRUE = onnx.helper.make_tensor("true", TensorProto.BOOL, [], [True])


@script(_INTERNAL, default_opset=op)
def Magnitude(xb: FLOAT, convert_to_bfloat_before_bfp: int = 0):
    """``(a, neg)`` of a float32 view: the magnitude (after the bfloat16
    pre-rounding when the attribute is non-zero; a NaN stays NaN) and the
    sign bit."""
    plain = op.Abs(xb)
    rounded = op.Abs(op.Cast(op.Cast(xb, to=_BF16), to=_F32))
    off = op.Equal(op.Constant(value_int=convert_to_bfloat_before_bfp), op.Constant(value_int=0))
    a = op.Where(op.Or(off, op.IsNaN(xb)), plain, rounded)
    return a, SignBit(xb)


@script(_INTERNAL, default_opset=op)
def ModeOk(rounding_mode: int = 0):
    """rounding_mode is 0, 1 or 2 (a scalar bool)."""
    mode = op.Constant(value_int=rounding_mode)
    return op.And(op.Not(op.Less(mode, op.Constant(value_int=0))),
                  op.Not(op.Greater(mode, op.Constant(value_int=2))))


@script(_INTERNAL, default_opset=op)
def KeepsSign(one, r: FLOAT, qa: FLOAT, rounding_mode: int = 0):
    """Where a rounded result keeps the quotient's sign: everywhere for modes
    0 and 1, and for mode 2 unless it is a zero from a non-zero quotient;
    the only element of a one-element tensor always."""
    zero = op.Constant(value_float=0.0)
    not_even = op.Not(op.Equal(op.Constant(value_int=rounding_mode), op.Constant(value_int=2)))
    return op.Or(op.Or(one, not_even), op.Or(op.Not(op.Equal(r, zero)), op.Equal(qa, zero)))


@script(_INTERNAL, default_opset=op)
def Finish(mag: FLOAT, sign: FLOAT, x, blocked, padded, dim):
    """``mag * sign`` back in x's shape and type."""
    y = Unblock(op.Mul(mag, sign), blocked, padded, dim, op.Shape(x))
    return op.CastLike(y, x)


@script(_INTERNAL, default_opset=op)
def BitWidthIn(bit_width: int, lo: float, hi: float):
    m = op.Cast(op.Constant(value_int=bit_width), to=_F32)
    return op.And(op.Not(op.Less(m, op.Constant(value_float=lo))),
                  op.Not(op.Greater(m, op.Constant(value_float=hi))))


@script(_INTERNAL, default_opset=op)
def MantissaBits(bit_width: int):
    """The bits of an element's mantissa: bit_width less the sign and the
    shared exponent's bits (a float32 scalar)."""
    return op.Sub(op.Cast(op.Constant(value_int=bit_width), to=_F32),
                  op.Constant(value_float=_SIGN_EXP))


@script(_INTERNAL, default_opset=op)
def BfpBlocks(x, ok, axis: int = 1, block_size: int = 8, convert_to_bfloat_before_bfp: int = 0):
    """The blocks of to_bfp (both kernels): ``(a, neg, one, finite, af, e,
    blocked, padded, dim)`` -- the magnitudes (after the bfloat16
    pre-rounding) and signs in the block view, whether x has one element,
    the finite magnitudes (0 elsewhere), the block's exponent field and what
    Finish needs to put the result back."""
    x32 = op.Cast(x, to=_F32)
    lines, blocked, cols, padded, pads, dim = BlockPlan(x32, ok, axis=axis,
                                                        block_size=block_size)
    xb = Blocked(x32, lines, blocked, cols, pads)
    a, neg = Magnitude(xb, convert_to_bfloat_before_bfp=convert_to_bfloat_before_bfp)
    one = op.Equal(op.Size(x), op.Constant(value_int=1))
    finite = op.Not(op.Or(op.IsNaN(a), op.IsInf(a)))
    af = op.Where(finite, a, op.Constant(value_float=0.0))
    e = ExponentField(BlockMax(af))
    return a, neg, one, finite, af, e, blocked, padded, dim


@script(_QUARK, default_opset=op)
def BFPToBfp(x, bfp_method: str = "to_bfp", axis: int = 1, bit_width: int = 16,
             block_size: int = 8, rounding_mode: int = 0, sub_block_size: int = 2,
             sub_block_shift_bits: int = 1, convert_to_bfloat_before_bfp: int = 0,
             use_compiler_version_cpu_kernel: int = 0):
    ok = op.And(ModeOk(rounding_mode=rounding_mode),
                BitWidthIn(bit_width=bit_width, lo=_BW_BFP[0], hi=_BW_BFP[1]))
    a, neg, one, finite, af, e, blocked, padded, dim = BfpBlocks(
        x, ok, axis=axis, block_size=block_size,
        convert_to_bfloat_before_bfp=convert_to_bfloat_before_bfp)
    m = MantissaBits(bit_width=bit_width)
    s = Pow2(op.Sub(op.Sub(e, op.Constant(value_float=126.0)), m))
    top = op.Mul(op.Sub(Pow2(m), op.Constant(value_float=1.0)), s)
    qa = op.Div(af, s)
    r = RoundMagnitude(qa, neg, rounding_mode=rounding_mode)
    mag = op.Min(op.Mul(r, s), top)
    mag = op.Where(op.Or(one, op.Not(finite)), a, mag)
    sign = SignFactor(neg, KeepsSign(one, r, qa, rounding_mode=rounding_mode))
    return Finish(mag, sign, x, blocked, padded, dim)


@script(_QUARK, default_opset=op)
def BFPToBfpCompiler(x, bfp_method: str = "to_bfp", axis: int = 1, bit_width: int = 16,
                     block_size: int = 8, rounding_mode: int = 0, sub_block_size: int = 2,
                     sub_block_shift_bits: int = 1, convert_to_bfloat_before_bfp: int = 0,
                     use_compiler_version_cpu_kernel: int = 1):
    ok = op.And(ModeOk(rounding_mode=rounding_mode),
                BitWidthIn(bit_width=bit_width, lo=_BW_BFP[0], hi=_BW_BFP[1]))
    a, neg, one, finite, af, e, blocked, padded, dim = BfpBlocks(
        x, ok, axis=axis, block_size=block_size,
        convert_to_bfloat_before_bfp=convert_to_bfloat_before_bfp)
    zero = op.Constant(value_float=0.0)
    one_f = op.Constant(value_float=1.0)
    m = MantissaBits(bit_width=bit_width)
    s = Pow2(op.Sub(op.Sub(e, op.Constant(value_float=126.0)), m))
    r = RoundMagnitude(op.Div(af, s), neg, rounding_mode=rounding_mode)
    # The elements whose exponent field is E (every finite one when E is 0)
    # that round to 128 or more, or below -128, raise the block's exponent.
    top = op.Or(op.Equal(e, zero),
                op.Not(op.Less(af, Pow2(op.Sub(e, op.Constant(value_float=127.0))))))
    over = op.Or(op.And(op.Not(neg), op.Not(op.Less(r, op.Constant(value_float=128.0)))),
                 op.And(neg, op.Greater(r, op.Constant(value_float=128.0))))
    bump = BlockMax(op.Cast(op.And(top, over), to=_F32))
    e2 = op.Add(e, bump)
    s2 = op.Mul(s, op.Add(one_f, bump))
    qa = op.Div(af, s2)
    r2 = RoundMagnitude(qa, neg, rounding_mode=rounding_mode)
    hi = op.Mul(op.Mul(op.Sub(Pow2(m), one_f), Pow2(op.Sub(e2, op.Constant(value_float=128.0)))),
                op.Constant(value_float=2.0))
    lo = Pow2(op.Add(op.Sub(e2, op.Constant(value_float=127.0)), m))
    mag = op.Min(op.Mul(r2, s2), op.Where(neg, lo, hi))
    mag = op.Where(op.Or(one, op.Not(finite)), a, mag)
    sign = SignFactor(neg, KeepsSign(one, r2, qa, rounding_mode=rounding_mode))
    return Finish(mag, sign, x, blocked, padded, dim)


@script(_QUARK, default_opset=op)
def BFPToBfpPrime(x, bfp_method: str = "to_bfp_prime", axis: int = 1, bit_width: int = 16,
                  block_size: int = 8, rounding_mode: int = 0, sub_block_size: int = 2,
                  sub_block_shift_bits: int = 1, convert_to_bfloat_before_bfp: int = 0,
                  use_compiler_version_cpu_kernel: int = 0):
    x32 = op.Cast(x, to=_F32)
    b0 = op.Constant(value_int=block_size)
    sub = op.Constant(value_int=sub_block_size)
    izero = op.Constant(value_int=0)
    ione = op.Constant(value_int=1)
    sub1 = op.Max(sub, ione)
    bits = op.Cast(op.Constant(value_int=sub_block_shift_bits), to=_F32)
    ok = op.And(op.And(ModeOk(rounding_mode=rounding_mode),
                       BitWidthIn(bit_width=bit_width, lo=_BW_PRIME[0], hi=_BW_PRIME[1])),
                op.And(op.And(op.Not(op.Less(sub, ione)), op.Equal(op.Mod(b0, sub1), izero)),
                       op.And(op.Not(op.Less(bits, op.Constant(value_float=_SHIFT[0]))),
                              op.Not(op.Greater(bits, op.Constant(value_float=_SHIFT[1]))))))
    lines, blocked, cols, padded, pads, dim = BlockPlan(x32, ok, axis=axis,
                                                        block_size=block_size)
    xb = Blocked(x32, lines, blocked, cols, pads)
    a, neg = Magnitude(xb, convert_to_bfloat_before_bfp=convert_to_bfloat_before_bfp)
    one = op.Equal(op.Size(x), op.Constant(value_int=1))
    zero = op.Constant(value_float=0.0)
    one_f = op.Constant(value_float=1.0)
    bad = op.Or(op.IsNaN(a), op.IsInf(a))
    af = op.Where(bad, zero, a)
    # [1, M]: the block holds an inf or NaN (E = 255); E.
    bad_block = op.Greater(BlockMax(op.Cast(bad, to=_F32)), zero)
    e = ExponentField(BlockMax(af))
    # The sub-block view [n_sub, sub_block_size, M]; a block's values [1, M]
    # broadcast against it as they are.
    one_v = op.Constant(value_ints=[1])
    sub_v = op.Reshape(sub1, one_v)
    b_v = op.Slice(cols, op.Constant(value_ints=[0]), one_v)
    view = op.Concat(op.Div(b_v, sub_v), sub_v,
                     op.Slice(cols, one_v, op.Constant(value_ints=[2])), axis=0)
    a5 = op.Reshape(af, view, allowzero=1)
    neg5 = op.Reshape(neg, view, allowzero=1)
    ej = ExponentField(SubBlockMax(a5))
    shift = op.Min(op.Sub(e, ej), op.Sub(Pow2(bits), one_f))
    m = MantissaBits(bit_width=bit_width)
    k = op.Sub(op.Sub(op.Sub(e, op.Constant(value_float=126.0)), shift), m)
    # (k is below -149 only for a sub-block of zeros and subnormals, above
    # 127 only for m = 0: both give r = 0, whatever the unit)
    unit = Pow2(op.Clip(k, op.Constant(value_float=-149.0), op.Constant(value_float=127.0)))
    q = op.Div(a5, unit)
    t = op.Floor(q)
    largest = op.Sub(Pow2(m), one_f)
    r = op.Where(op.Less(t, largest), RoundMagnitude(q, neg5, rounding_mode=rounding_mode), t)
    r = op.Min(r, largest)
    r = op.Where(op.Less(a5, op.Constant(value_float=_TINY)), zero, r)
    mag5 = op.Where(bad_block, op.Constant(value_float=float("nan")), op.Mul(r, unit))
    mag = op.Where(one, a, op.Reshape(mag5, cols, allowzero=1))
    sign = SignFactor(neg, op.Constant(value=_TRUE))
    return Finish(mag, sign, x, blocked, padded, dim)


def _mx_int8():
    @script(_QUARK, default_opset=op)
    def MXInt8(x, element_dtype: str = "int8", axis: int = 1, block_size: int = 32,
               rounding_mode: int = 0):
        x32 = op.Cast(x, to=_F32)
        lines, blocked, cols, padded, pads, dim = BlockPlan(
            x32, ModeOk(rounding_mode=rounding_mode), axis=axis, block_size=block_size)
        xb = Blocked(x32, lines, blocked, cols, pads)
        a = op.Abs(xb)
        neg = SignBit(xb)
        one = op.Equal(op.Size(x), op.Constant(value_int=1))
        finite = op.Not(op.Or(op.IsNaN(a), op.IsInf(a)))
        af = op.Where(finite, a, op.Constant(value_float=0.0))
        e = ExponentField(BlockMax(af))
        scale = Pow2(op.Sub(e, op.Constant(value_float=127.0)))
        q = op.Mul(op.Div(af, scale), op.Constant(value_float=64.0))
        r = RoundMagnitude(q, neg, rounding_mode=rounding_mode)
        k = op.Min(r, op.Where(neg, op.Constant(value_float=128.0),
                               op.Constant(value_float=127.0)))
        mag = op.Mul(scale, op.Mul(k, op.Constant(value_float=2.0**-6)))
        mag = op.Where(op.Or(one, op.Not(finite)), a, mag)
        sign = SignFactor(neg, KeepsSign(one, r, q, rounding_mode=rounding_mode))
        return Finish(mag, sign, x, blocked, padded, dim)

    return MXInt8


def _mx_float(name: str):
    el = MX_ELEMENTS[name]
    emax = float(el.emax)
    emin = float(2 - 2 ** (el.ebits - 1))
    mbits = float(el.mbits)
    largest = float(el.largest)
    smallest_normal = float(2.0**emin)

    @script(_QUARK, default_opset=op)
    def MXFloat(x, element_dtype: str = "int8", axis: int = 1, block_size: int = 32,
                rounding_mode: int = 0):
        x32 = op.Cast(x, to=_F32)
        lines, blocked, cols, padded, pads, dim = BlockPlan(
            x32, ModeOk(rounding_mode=rounding_mode), axis=axis, block_size=block_size)
        xb = Blocked(x32, lines, blocked, cols, pads)
        a = op.Abs(xb)
        neg = SignBit(xb)
        one = op.Equal(op.Size(x), op.Constant(value_int=1))
        finite = op.Not(op.Or(op.IsNaN(a), op.IsInf(a)))
        zero = op.Constant(value_float=0.0)
        af = op.Where(finite, a, zero)
        e = ExponentField(BlockMax(af))
        scale = Pow2(op.Sub(op.Sub(e, op.Constant(value_float=127.0)),
                            op.Constant(value_float=emax)))
        v = op.Div(af, scale)
        # The grid's quantum at v: 2^(max(floor(log2 v), emin) - mbits).
        ev = op.Sub(ExponentField(op.Max(v, op.Constant(value_float=smallest_normal))),
                    op.Constant(value_float=127.0))
        quantum = Pow2(op.Sub(ev, op.Constant(value_float=mbits)))
        element = op.Min(op.Mul(op.Round(op.Div(v, quantum)), quantum),
                         op.Constant(value_float=largest))
        mag = op.Where(op.Or(one, op.Not(finite)), a, op.Mul(scale, element))
        keep = op.Or(op.Or(one, op.Not(finite)), op.Greater(element, zero))
        return Finish(mag, SignFactor(neg, keep), x, blocked, padded, dim)

    return MXFloat


@functools.cache
def make_bfp(variant: str):
    """BFPQuantizeDequantize's function of one variant (:data:`BFP_VARIANTS`)."""
    return {TO_BFP: BFPToBfp, TO_BFP_COMPILER: BFPToBfpCompiler,
            TO_BFP_PRIME: BFPToBfpPrime}[variant]


@functools.cache
def make_mx(variant: str):
    """MXQuantizeDequantize's function of one element type (:data:`MX_VARIANTS`)."""
    if variant not in MX_ELEMENTS:
        raise KeyError(variant)
    return _mx_int8() if MX_ELEMENTS[variant].is_int else _mx_float(variant)


#: The internal helpers the functions call (inlined when they are flattened).
HELPERS = [Magnitude, ModeOk, KeepsSign, Finish, BitWidthIn, MantissaBits, BfpBlocks]


def block_variant(family: str, attrs) -> str:
    """The variant of a node of ``family`` from its checked attributes
    (:func:`extql.rules.blocks.check_bfp` / ``check_mx``)."""
    if family == "mx":
        return attrs.element.name
    if attrs.method == METHOD_TO_BFP_PRIME:
        return TO_BFP_PRIME
    return TO_BFP_COMPILER if attrs.compiler else TO_BFP
