"""onnxscript fallbacks: both operators decomposed into standard ONNX ops.

Every function here computes exactly what the kernels compute (the numeric
contract of docs/operators: one float32 division, round half to even, exact
zero-point addition, saturation), bit for bit, with ops of the default ONNX domain only, so a
model that carries these definitions runs in any runtime that lacks the extql
library.  The decompositions never depend on what a platform does when it
casts NaN or an out-of-range float to an integer: NaN is replaced with
``Where(IsNaN(...))`` and values are clamped into range *before* any Cast.

Quantize to an integer type T with range [lo, hi]:

* 8/16-bit: ``t = Round(x / s) + float(zp)`` in float32, NaN -> lo,
  ``Cast(Clip(t, lo, hi))``.  The sum is exact while ``|r| < 2**24``; beyond
  that it is far out of range and saturates whatever its rounding.
* int32/uint32: ``t = float64(Round(x / s)) + float64(zp)``, exact whenever
  it can matter (float64 holds every float32 and 32-bit integer), NaN -> lo,
  clamped to [lo, hi] in float64 and cast (an exact integer in range).
  (Not int64: onnxruntime's Min/Max/Clip on int64 are wrong beyond 2**32.)

Quantize to float16/bfloat16: ``w = x / s + float(zp)`` in float32, clamped to
the largest finite value of the type (NaN kept), then one Cast (round to
nearest even).  NaN stays NaN; which NaN (its payload) is not part of the
contract.  The sum is made with ``AddSigned``: the zero point goes through
``OpaqueZero`` (unchanged, but no longer a constant), so a runtime cannot
remove ``Add(v, 0)`` as a no-op (onnxruntime does for a constant zero point
of 0, which is wrong for ``v = -0``: ``-0 + 0`` is ``+0``).  The float16 /
bfloat16 dequantize subtracts its zero point the same way.

Dequantize: ``float32(x) - float32(zp)`` for the 8/16-bit and float types (the
conversion and difference are exact in float32 for the integers, and float32
arithmetic for the float types), ``float32(int64(x) - int64(zp))`` for
int32/uint32 (one rounding), then ``* s``.  Without a zero point: ``float32(x) * s``.

Granularity is decided at run time from the scale's shape, as the kernels do:
the scale and zero point are reshaped to ``[]`` (per tensor) or
``[D, 1, ..., 1]`` (per axis) so that broadcasting lines them up with ``axis``.
An invalid combination (axis out of range, scale length not ``D[axis]``,
scale of rank >= 2) makes the Reshape fail, so it is an error, never a
silently wrong answer.

Public objects:

* :data:`QUANTIZE` / :data:`DEQUANTIZE` -- dict: type name (``"int8"`` ...
  ``"bfloat16"``) or ``"default"`` (no zero point) -> onnxscript function
  with the signature of the operator ``(x, scale, zero_point, axis=1)``, to
  call from ``@onnxscript.script`` functions and eagerly
  (:mod:`extql.fallback_scripts`; ``to_function_proto()`` gives the flat
  definition).  The ``"default"`` functions ignore their third input.
* :func:`function_proto` -- a flat ``FunctionProto`` (no nested calls) for one
  (operator, variant), named and versioned for a model: this is what
  :func:`extql.attach_fallbacks` adds to models.

The operator opset for *authoring* graphs that call the Extended ops is
:mod:`extql.opset` (``extql.quark``).
"""

from __future__ import annotations

import functools

import onnx
import onnx.inliner
from onnx import TensorProto
from onnxscript import FLOAT, INT64, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from .types import DOMAIN, LEGACY_DOMAIN, QTYPES

__all__ = [
    "QUANTIZE",
    "DEQUANTIZE",
    "VARIANTS",
    "MIN_OPSET",
    "DISPATCH_MIN_OPSET",
    "OP_NAMES",
    "function_proto",
    "core_proto",
    "CORE_DOMAIN",
    "dispatcher_proto",
    "quantize_variant",
    "dequantize_variant",
]

#: The oldest default-domain opset the functions can be stamped with: every op
#: in their bodies exists there with the same meaning for the types used.
MIN_OPSET = 13
#: The dispatchers (type-generic bodies for runtimes that ignore ``overload``)
#: use CastLike.
DISPATCH_MIN_OPSET = 15

#: (domain, quantize op, dequantize op) for the current and the legacy names.
OP_NAMES: dict[str, tuple[str, str]] = {
    DOMAIN: ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear"),
    LEGACY_DOMAIN: ("VitisQuantizeLinear", "VitisDequantizeLinear"),
}

#: Variant names: one per quantized type, plus "default" (no zero point).
VARIANTS: tuple[str, ...] = (*QTYPES, "default")

# Internal functions live in a private domain and are always inlined into the
# public bodies (see _flatten), so no model ever refers to this domain.
_INTERNAL_DOMAIN = "ai.extql.internal"
_INTERNAL = Opset(_INTERNAL_DOMAIN, 1)
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


@script(_INTERNAL, default_opset=op)
def QuantizeDefault(x: FLOAT, s: FLOAT):
    lo_c = op.Constant(value_float=0.0)
    hi_c = op.Constant(value_float=255.0)
    r = op.Round(op.Div(x, s))
    r = op.Where(op.IsNaN(r), lo_c, r)
    return op.Cast(op.Clip(r, lo_c, hi_c), to=TensorProto.UINT8)


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
    return name in ("int32", "uint32")


@functools.cache
def _quantize_core(variant: str):
    if variant == "default":
        return QuantizeDefault
    qt = QTYPES[variant]
    if qt.is_float:
        return _quantize_float_core(qt.onnx, qt.hi)
    if _is_wide(variant):
        return _quantize_wide_core(qt.onnx, int(qt.lo), int(qt.hi))
    return _quantize_narrow_core(qt.onnx, float(qt.lo), float(qt.hi))


def _dequantize_core(variant: str):
    if variant == "default":
        return DequantizeDefault
    if QTYPES[variant].is_float:
        return DequantizeFloat
    return DequantizeWide if _is_wide(variant) else DequantizeNarrow


# --------------------------------------------------------------------------
# Public functions: the operator signature, granularity decided at run time.


def _make_quantize(variant: str):
    core = _quantize_core(variant)
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


def _make_dequantize(variant: str):
    core = _dequantize_core(variant)
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


class _LazyFunctions(dict):
    """A dict of variant -> OnnxFunction that converts each function on first use
    (onnxscript parses source, so building all sixteen at import is slow)."""

    def __init__(self, maker):
        super().__init__()
        self._maker = maker

    def __missing__(self, key: str):
        if key not in VARIANTS:
            raise KeyError(f"{key!r}: expected one of {', '.join(VARIANTS)}")
        value = self[key] = self._maker(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in VARIANTS

    def __iter__(self):
        return iter(VARIANTS)

    def __len__(self) -> int:
        return len(VARIANTS)

    def keys(self):  # type: ignore[override]
        return list(VARIANTS)

    def items(self):  # type: ignore[override]
        return [(k, self[k]) for k in VARIANTS]

    def values(self):  # type: ignore[override]
        return [self[k] for k in VARIANTS]


# variant -> the onnxscript source of each decomposition (the bodies that
# function_proto flattens; their callees' names are shared between variants,
# so they are not for user scripts).
_QUANTIZE_SCRIPTS: dict = _LazyFunctions(_make_quantize)
_DEQUANTIZE_SCRIPTS: dict = _LazyFunctions(_make_dequantize)


def _user_function(quantize: bool, variant: str):
    from .fallback_scripts import FallbackFunction

    scripts = _QUANTIZE_SCRIPTS if quantize else _DEQUANTIZE_SCRIPTS
    return FallbackFunction(quantize, variant, scripts[variant])


#: variant -> onnxscript function for ExtendedQuantizeLinear, to call from a
#: user's script functions and eagerly (extql.fallback_scripts).
QUANTIZE: dict = _LazyFunctions(functools.partial(_user_function, True))
#: variant -> onnxscript function for ExtendedDequantizeLinear (the same).
DEQUANTIZE: dict = _LazyFunctions(functools.partial(_user_function, False))


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
_BF16_MAX = float(QTYPES["bfloat16"].hi)
_INT_MAXES = (127, 255, 32767, 65535, 2**31 - 1, 2**32 - 1)


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
    limit = op.Where(is_f16, op.Constant(value_float=65504.0), op.Constant(value_float=_BF16_MAX))
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


# --------------------------------------------------------------------------
# FunctionProtos for models.

_INTERNAL_FUNCTIONS = (ParamShape, IntBounds, IsFloat, AddSigned, OpaqueZero)


def _flatten(fn, callees) -> onnx.FunctionProto:
    """The FunctionProto of ``fn`` with every call into the internal domain inlined."""
    protos = [c.to_function_proto() for c in callees]
    main = fn.to_function_proto()
    model = onnx.helper.make_model(
        onnx.helper.make_graph([], "flatten", [], []),
        opset_imports=[onnx.helper.make_opsetid("", 21)],
        functions=[*protos, main],
    )
    ids = [(p.domain, p.name) for p in protos]
    model = onnx.inliner.inline_selected_functions(model, ids, exclude=False)
    flat = next(f for f in model.functions if f.domain == main.domain and f.name == main.name)
    # Keep only the default domain: nothing from the internal one is left.
    imports = [o for o in flat.opset_import if o.domain in ("", "ai.onnx")]
    del flat.opset_import[:]
    flat.opset_import.extend(imports)
    for node in _walk(flat.node):
        if node.domain not in ("", "ai.onnx"):
            raise AssertionError(f"extql internal error: {node.op_type} left in a fallback body")
    return flat


def _walk(nodes):
    for node in nodes:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk(attr.g.node)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _walk(g.node)


def _callees(variant: str, quantize: bool) -> list:
    core = _quantize_core(variant) if quantize else _dequantize_core(variant)
    return [ParamShape, AddSigned, OpaqueZero, core]


def _stamp(
    proto: onnx.FunctionProto, domain: str, name: str, overload: str, opset: int
) -> onnx.FunctionProto:
    out = onnx.FunctionProto()
    out.CopyFrom(proto)
    out.domain = domain
    out.name = name
    out.overload = overload
    for imp in out.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = opset
    out.doc_string = (
        f"extql fallback for {domain}::{name} ({overload or 'any type'}): standard ONNX ops "
        "only, bit-identical to the extql kernels."
    )
    return out


def _check_domain(domain: str) -> None:
    if domain not in OP_NAMES:
        raise ValueError(f"unknown operator domain {domain!r}: expected one of {list(OP_NAMES)}")


def _check_opset(opset: int, minimum: int, what: str) -> None:
    if opset < minimum:
        raise ValueError(
            f"{what} need a default-domain (ai.onnx) opset >= {minimum}, the model imports "
            f"{opset}; convert the model first, e.g. onnx.version_converter.convert_version"
            f"(model, {minimum})"
        )


@functools.cache
def _flat(quantize: bool, variant: str) -> onnx.FunctionProto:
    fn = _QUANTIZE_SCRIPTS[variant] if quantize else _DEQUANTIZE_SCRIPTS[variant]
    return _flatten(fn, _callees(variant, quantize))


def function_proto(
    quantize: bool, variant: str, *, domain: str = DOMAIN, opset: int = 21
) -> onnx.FunctionProto:
    """The flat FunctionProto of one fallback, ready to be added to a model.

    ``quantize`` selects the operator, ``variant`` is a type name or
    ``"default"`` (no zero point).  The function is named after the operator
    of ``domain`` (``com.amd.quark`` or the legacy ``com.vai.quantize``) and
    carries ``overload=variant``; its default-domain opset import is
    ``opset`` (that of the model it goes into, >= :data:`MIN_OPSET`), since
    ONNX requires a model-local function to import the model's version.
    """
    _check_domain(domain)
    if variant not in VARIANTS:
        raise ValueError(f"unknown fallback variant {variant!r}: expected one of {VARIANTS}")
    _check_opset(opset, MIN_OPSET, "extql fallback functions")
    name = OP_NAMES[domain][0 if quantize else 1]
    return _stamp(_flat(quantize, variant), domain, name, variant, opset)


#: Private domain of the per-variant math cores (used while inlining only).
CORE_DOMAIN = _INTERNAL_DOMAIN


def core_proto(quantize: bool, variant: str, *, opset: int = 21) -> onnx.FunctionProto:
    """The math of one variant without the granularity logic: inputs
    ``(x, scale, zero_point)`` (``(x, scale)`` for ``"default"``) already
    broadcastable against x.  Named ``Quantize_<variant>`` /
    ``Dequantize_<variant>`` in :data:`CORE_DOMAIN`; for graph passes that
    know the granularity statically and inline the result."""
    name = f"{'Quantize' if quantize else 'Dequantize'}_{variant}"
    return _stamp(_flat_core(quantize, variant), CORE_DOMAIN, name, "", opset)


@functools.cache
def _flat_core(quantize: bool, variant: str) -> onnx.FunctionProto:
    core = _quantize_core(variant) if quantize else _dequantize_core(variant)
    return _flatten(core, [AddSigned, OpaqueZero])


@functools.cache
def _flat_dispatch(quantize: bool) -> onnx.FunctionProto:
    if quantize:
        return _flatten(QuantizeDispatch, [ParamShape, IntBounds, IsFloat, AddSigned, OpaqueZero])
    return _flatten(DequantizeDispatch, [ParamShape, OpaqueZero])


def dispatcher_proto(
    quantize: bool, *, domain: str = DOMAIN, opset: int = 21
) -> onnx.FunctionProto:
    """The type-generic FunctionProto of one operator (``overload`` empty).

    For runtimes that ignore ``NodeProto.overload`` and find a function by
    (domain, name) only, such as ``onnx.reference`` 1.23 and onnxruntime
    before overload support: a model that uses several variants of one
    operator lists this one last.  Every call must pass a zero point.  Needs
    opset >= :data:`DISPATCH_MIN_OPSET`.
    """
    _check_domain(domain)
    _check_opset(opset, DISPATCH_MIN_OPSET, "the type-generic extql dispatchers")
    name = OP_NAMES[domain][0 if quantize else 1]
    return _stamp(_flat_dispatch(quantize), domain, name, "", opset)


def quantize_variant(zero_point_type: int | None) -> str:
    """The variant of ExtendedQuantizeLinear for a zero point's ONNX type code
    (None: no zero point)."""
    return _variant(zero_point_type)


def dequantize_variant(zero_point_type: int | None) -> str:
    """The variant of ExtendedDequantizeLinear for a zero point's ONNX type code."""
    return _variant(zero_point_type)


def _variant(code: int | None) -> str:
    if code is None:
        return "default"
    from .types import BY_ONNX

    qt = BY_ONNX.get(code)
    if qt is None:
        raise ValueError(
            f"zero point type {onnx.helper.tensor_dtype_to_string(code)} is not one of "
            f"{', '.join(QTYPES)}"
        )
    return qt.name
