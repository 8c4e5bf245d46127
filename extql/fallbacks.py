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

The division: x and the scale are widened to float32 (exactly), rounded to
the precision P (the attribute ``precision``, which attach_fallbacks sets to
the scale's type where the node has none) with ``Cast(Cast(., P), float)``,
divided in float32 and the quotient rounded to P the same way (float32 has
more than twice float16's / bfloat16's precision plus two bits, so this is
the division in P; with P float32 every Cast is a no-op).  The routes above
then take that quotient in place of ``x / s``:

* int4 / uint4 / int2 / uint2: the 8/16-bit route with their ranges, cast
  to the packed type (ONNX's Cast takes them from opset 21 / 25).
* float8: the zero point is not added (see the operator page); the quotient
  is clamped to the type's largest value (``saturate`` 1) or, without
  saturation, what rounds beyond the range becomes ±inf (float8e5m2) or NaN
  *before* the Cast, so that the runtime's own overflow rule (onnxruntime's
  differs from ONNX's table) never applies; then one Cast (nearest even).
* float4e2m1: the float16 route with its largest value, 6; its Cast takes
  NaN to a zero as ONNX's table says.

Precision float64 (``precision`` 11, which attach_fallbacks sets on a
quantize with an int32 scale and no ``precision``, as onnx.reference divides
such a one with NumPy): functions of their own, ``overload``
``"<variant>-float64"`` (:data:`FLOAT64_VARIANTS`), so that the functions
of the float precisions above keep every op they have.  The scale is spread
as float64 (``Cast(scale, DOUBLE)``: exact for int32 and every float type,
where the float functions' Cast to float32 would round an int32 scale), x
is cast to float64 (exact, int32 included) and ``q = x / s`` is one float64
division.  Then one rounding to float32 of what each route takes, and the
route above from there:

* integer types and ``"default"``: ``v = float32(Round(q))`` (Round in
  float64, half to even; an integer stays one in float32), the quotient of
  the 8/16-bit, 32-bit or sub-byte route with its zero point as usual;
* float8: ``v = float32(q)`` (beyond float32's range +-inf), the float8
  route (no zero point; ``saturate`` as usual);
* float16 / bfloat16 / float4e2m1: ``v = float32(q + float64(zp))``, the sum
  made as ``AddSigned`` makes it (``-0 + +0`` is ``+0`` at every
  optimisation level), then the route's clamp and Cast with nothing more
  added (the contract's ``v + (-0)``, which is v).

With a float ``precision`` an int32 scale takes the functions above: their
Cast rounds it to nearest even into float32, then to the precision.

Dequantize: ``float32(x) - float32(zp)`` for the 8/16-bit, sub-byte and
float types (the conversion and difference are exact in float32 for the
integers, and float32 arithmetic for the float types; float4e2m1 with a
zero point of 0 leaves x as it is, -0 included),
``float32(int64(x) - int64(zp))`` for int32/uint32 (one rounding), then ``*
s``, then one Cast to ``output_dtype`` (the scale's type unless the node
says otherwise).  float8 takes no zero point but 0: another value makes a
Reshape fail.  Without a zero point: ``float32(x) * s``.

Granularity is decided at run time from the scale's shape and
``block_size``, as the kernels do: the scale and zero point are reshaped to
``[]`` (per tensor) or ``[D, 1, ..., 1]`` (per axis), or expanded block by
block to x's shape (blocked: reshaped to ``[.., nb, 1, ..]``, expanded to
``[.., nb, block_size, ..]``, merged and cut to ``D`` along the axis), so
that broadcasting lines them up with ``axis``.  They are spread as float32
(the scale, exactly) or their route's carrier (the zero point), which every
runtime's shape ops take.  An invalid combination (axis out of range, scale
length not ``D[axis]``, scale of rank >= 2 without ``block_size``, a blocked
scale whose shape is not x's with ``ceil(D / block_size)`` along the axis)
makes a Reshape fail, so it is an error, never a silently wrong answer.

Public objects:

* :data:`QUANTIZE` / :data:`DEQUANTIZE` -- dict: type name (``"int8"`` ...
  ``"float4e2m1"``) or ``"default"`` (no zero point) -> onnxscript function
  with the signature of the operator ``(x, scale, zero_point, axis=1,
  block_size=0, ...)``, to
  call from ``@onnxscript.script`` functions and eagerly
  (:mod:`extql.onnx.fallback_scripts`; ``to_function_proto()`` gives the flat
  definition).  The ``"default"`` functions ignore their third input.  A
  quantize call of precision float64 (an int32 scale, ``precision=11``)
  runs the variant's precision-float64 function, eagerly and converted.
* :func:`function_proto` -- a flat ``FunctionProto`` (no nested calls) for one
  (operator, variant), named and versioned for a model: this is what
  :func:`extql.attach_fallbacks` adds to models.  Quantize's variants
  include the precision-float64 ones (:data:`FLOAT64_VARIANTS`,
  :func:`float64_overload`, :func:`split_overload`).
* :func:`variant` -- the variant of a node from its zero point's type.

The onnxscript source of the decompositions is :mod:`extql.onnx.fallback_bodies`;
this module builds, flattens and names their FunctionProtos.  The operator
opset for *authoring* graphs that call the Extended ops is :mod:`extql.opset`
(``extql.quark``).
"""

from __future__ import annotations

import functools

import onnx
import onnx.inliner

from .onnx import fallback_bodies as bodies
from .onnx.graph import type_name, walk_nodes
from .types import DOMAIN, OP_NAMES, QUANTIZED, QUANTIZED_BY_ONNX, type_opset

__all__ = [
    "QUANTIZE",
    "DEQUANTIZE",
    "VARIANTS",
    "FLOAT64",
    "FLOAT64_VARIANTS",
    "float64_overload",
    "split_overload",
    "MIN_OPSET",
    "DISPATCH_MIN_OPSET",
    "OP_NAMES",
    "function_proto",
    "core_proto",
    "CORE_DOMAIN",
    "dispatcher_proto",
    "variant",
    "variant_opset",
]

#: The oldest default-domain opset the functions can be stamped with: every op
#: in their bodies exists there with the same meaning for the types used.
MIN_OPSET = 13
#: The dispatchers (type-generic bodies for runtimes that ignore ``overload``)
#: use CastLike.
DISPATCH_MIN_OPSET = 15

#: Variant names: one per quantized type, plus "default" (no zero point).
VARIANTS: tuple[str, ...] = (*QUANTIZED, "default")


#: The suffix of the quantize functions of precision float64 (the attribute
#: ``precision`` 11, the default for an int32 scale): their ``overload`` is
#: ``"<variant>-float64"`` (``"int8-float64"``, ``"default-float64"``, ...).
FLOAT64 = "-float64"
#: The overloads of the precision-float64 quantize functions, one per variant.
FLOAT64_VARIANTS: tuple[str, ...] = tuple(f"{v}{FLOAT64}" for v in VARIANTS)


def float64_overload(variant: str) -> str:
    """The overload of a variant's precision-float64 quantize function."""
    return f"{variant}{FLOAT64}"


def split_overload(overload: str) -> tuple[str, bool]:
    """``(variant, float64)`` of an overload: ``"int8"`` -> ``("int8",
    False)``, ``"int8-float64"`` -> ``("int8", True)``."""
    if overload.endswith(FLOAT64):
        return overload[: -len(FLOAT64)], True
    return overload, False


def variant_opset(variant: str) -> int:
    """The oldest ai.onnx opset a variant's function can be stamped with:
    :data:`MIN_OPSET`, or the opset whose Cast takes its type (int4 / uint4
    21, float8 19, float4e2m1 23, int2 / uint2 25).  A precision-float64
    overload (``"int8-float64"``) needs what its variant needs."""
    variant = split_overload(variant)[0]
    return MIN_OPSET if variant == "default" else max(MIN_OPSET, type_opset(variant))


class _LazyFunctions(dict):
    """A dict of variant -> OnnxFunction that converts each function on first use
    (onnxscript parses source, so building them all at import is slow)."""

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
_QUANTIZE_SCRIPTS: dict = _LazyFunctions(bodies.make_quantize)
_DEQUANTIZE_SCRIPTS: dict = _LazyFunctions(bodies.make_dequantize)
# The same for the quantize functions of precision float64 (keyed by variant).
_QUANTIZE64_SCRIPTS: dict = _LazyFunctions(bodies.make_quantize64)


def _user_function(quantize: bool, variant: str):
    from .onnx.fallback_scripts import FallbackFunction

    scripts = _QUANTIZE_SCRIPTS if quantize else _DEQUANTIZE_SCRIPTS
    return FallbackFunction(quantize, variant, scripts[variant])


def quantize64_script(variant: str):
    """The onnxscript source of a variant's precision-float64 quantize
    function (what :class:`~extql.onnx.fallback_scripts.FallbackFunction` runs
    eagerly for ``precision`` 11 or an int32 scale)."""
    return _QUANTIZE64_SCRIPTS[variant]


#: variant -> onnxscript function for ExtendedQuantizeLinear, to call from a
#: user's script functions and eagerly (extql.onnx.fallback_scripts).
QUANTIZE: dict = _LazyFunctions(functools.partial(_user_function, True))
#: variant -> onnxscript function for ExtendedDequantizeLinear (the same).
DEQUANTIZE: dict = _LazyFunctions(functools.partial(_user_function, False))


# --------------------------------------------------------------------------
# FunctionProtos for models.

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
    # Keep only the default domain (imported even where the body before
    # inlining called internal functions only): nothing from the internal
    # one is left.
    imports = [o for o in flat.opset_import if o.domain in ("", "ai.onnx")]
    del flat.opset_import[:]
    flat.opset_import.extend(imports or [onnx.helper.make_opsetid("", 21)])
    for node in walk_nodes(flat.node):
        if node.domain not in ("", "ai.onnx"):
            raise AssertionError(f"extql internal error: {node.op_type} left in a fallback body")
    return flat


_PLAN = [bodies.ParamShape, bodies.Choose, bodies.ParamPlan, bodies.Spread, bodies.SpreadScale,
         bodies.SpreadParams, bodies.RoundTo, bodies.Quotient, bodies.AddSigned,
         bodies.OpaqueZero]
# The helpers of precision float64.
_PLAN64 = [bodies.SpreadScale64, bodies.SpreadParams64, bodies.Quotient64,
           bodies.RoundedQuotient64, bodies.ShiftedQuotient64]


def _callees(variant: str, quantize: bool, float64: bool = False) -> list:
    if float64:
        return [*_PLAN, *_PLAN64, bodies.quantize_core64(variant),
                bodies.make_static_quantize64(variant)]
    if quantize:
        return [*_PLAN, bodies.quantize_core(variant), bodies.make_static_quantize(variant)]
    return [*_PLAN, bodies.dequantize_core(variant), bodies.make_static_dequantize(variant)]


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
    if opset < 14:
        # Reshape-13 has no allowzero: there a zero in a shape copies the
        # input's dimension, which gives the same shapes for every tensor
        # with no zero dimension (an empty blocked scale may then fail).
        for node in walk_nodes(out.node):
            if node.op_type == "Reshape":
                kept = [a for a in node.attribute if a.name != "allowzero"]
                del node.attribute[:]
                node.attribute.extend(kept)
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
def _flat(quantize: bool, overload: str) -> onnx.FunctionProto:
    variant, float64 = split_overload(overload)
    if float64:
        fn = _QUANTIZE64_SCRIPTS[variant]
    else:
        fn = _QUANTIZE_SCRIPTS[variant] if quantize else _DEQUANTIZE_SCRIPTS[variant]
    return _flatten(fn, _callees(variant, quantize, float64))


def _check_overload(quantize: bool, overload: str) -> None:
    variant, float64 = split_overload(overload)
    if variant not in VARIANTS:
        raise ValueError(f"unknown fallback variant {overload!r}: expected one of {VARIANTS}"
                         + (f" or {', '.join(FLOAT64_VARIANTS)}" if quantize else ""))
    if float64 and not quantize:
        raise ValueError(f"fallback variant {overload!r}: precision float64 is quantize's "
                         "(dequantize has no precision)")


def function_proto(
    quantize: bool, variant: str, *, domain: str = DOMAIN, opset: int = 21
) -> onnx.FunctionProto:
    """The flat FunctionProto of one fallback, ready to be added to a model.

    ``quantize`` selects the operator, ``variant`` is a type name or
    ``"default"`` (no zero point), for quantize also one of
    :data:`FLOAT64_VARIANTS` (``"int8-float64"``: the function of precision
    float64).  The function is named after the operator of ``domain``
    (``com.amd.quark`` or the legacy ``com.vai.quantize``) and carries
    ``overload=variant``; its default-domain opset import is ``opset`` (that
    of the model it goes into, >= :data:`MIN_OPSET`), since ONNX requires a
    model-local function to import the model's version.
    """
    _check_domain(domain)
    _check_overload(quantize, variant)
    _check_opset(opset, variant_opset(variant),
                 "extql fallback functions" if variant_opset(variant) == MIN_OPSET
                 else f"the {variant} fallback functions")
    name = OP_NAMES[domain][0 if quantize else 1]
    return _stamp(_flat(quantize, variant), domain, name, variant, opset)


#: Private domain of the per-variant math cores (used while inlining only).
CORE_DOMAIN = bodies.INTERNAL_DOMAIN


def core_proto(quantize: bool, variant: str, *, opset: int = 21) -> onnx.FunctionProto:
    """The math of one variant without the granularity logic: inputs
    ``(x, scale, zero_point)`` (``(x, scale)`` for ``"default"``) already
    broadcastable against x, the attributes ``precision`` (and ``saturate``
    for float8) / ``output_dtype`` as the operator's.  Named
    ``Quantize_<variant>`` / ``Dequantize_<variant>`` in :data:`CORE_DOMAIN`;
    for graph passes that know the granularity statically and inline the
    result.  A precision-float64 overload (``"int8-float64"``, quantize
    only) gives ``Quantize_int8_float64``, which has no ``precision``
    attribute (it is float64's)."""
    _check_overload(quantize, variant)
    _check_opset(opset, variant_opset(variant), f"the {variant} fallback functions")
    base, float64 = split_overload(variant)
    name = f"{'Quantize' if quantize else 'Dequantize'}_{base}{'_float64' if float64 else ''}"
    return _stamp(_flat_core(quantize, variant), CORE_DOMAIN, name, "", opset)


@functools.cache
def _flat_core(quantize: bool, overload: str) -> onnx.FunctionProto:
    variant, float64 = split_overload(overload)
    helpers = [bodies.RoundTo, bodies.Quotient, bodies.AddSigned, bodies.OpaqueZero]
    if float64:
        return _flatten(bodies.make_static_quantize64(variant),
                        [*helpers, bodies.Quotient64, bodies.RoundedQuotient64,
                         bodies.ShiftedQuotient64, bodies.quantize_core64(variant)])
    if quantize:
        core = bodies.quantize_core(variant)
        fn = bodies.make_static_quantize(variant)
    else:
        core = bodies.dequantize_core(variant)
        fn = bodies.make_static_dequantize(variant)
    return _flatten(fn, [*helpers, core])


@functools.cache
def _flat_dispatch(quantize: bool, float64: bool = False) -> onnx.FunctionProto:
    tail = [bodies.DispatchRoutes, bodies.IntBounds, bodies.IsFloat]
    if float64:
        return _flatten(bodies.QuantizeDispatch64, [*_PLAN, *_PLAN64, bodies.Pick, *tail])
    if quantize:
        return _flatten(bodies.QuantizeDispatch, [*_PLAN, *tail])
    return _flatten(bodies.DequantizeDispatch, _PLAN)


def dispatcher_proto(
    quantize: bool, *, domain: str = DOMAIN, opset: int = 21, float64: bool = False
) -> onnx.FunctionProto:
    """The type-generic FunctionProto of one operator (``overload`` empty).

    For runtimes that ignore ``NodeProto.overload`` and find a function by
    (domain, name) only, such as ``onnx.reference`` 1.23 and onnxruntime
    before overload support: a model that uses several variants of one
    operator lists this one last.  Every call must pass a zero point.  Needs
    opset >= :data:`DISPATCH_MIN_OPSET`.  ``float64`` (quantize): the
    dispatcher that also computes nodes of precision float64 (both
    quotients, one picked), for an operator that has such nodes; the other
    one computes the float precisions only.
    """
    _check_domain(domain)
    _check_opset(opset, DISPATCH_MIN_OPSET, "the type-generic extql dispatchers")
    if float64 and not quantize:
        raise ValueError("precision float64 is quantize's (dequantize has no precision)")
    name = OP_NAMES[domain][0 if quantize else 1]
    return _stamp(_flat_dispatch(quantize, float64), domain, name, "", opset)


def variant(zero_point_type: int | None) -> str:
    """The variant for a zero point's ONNX type code: its type name, or
    ``"default"`` for None (no zero point).  Raises ``ValueError`` for a
    type that is not a quantized type."""
    if zero_point_type is None:
        return "default"
    qt = QUANTIZED_BY_ONNX.get(zero_point_type)
    if qt is None:
        raise ValueError(
            f"zero point type {type_name(zero_point_type)} is not one "
            f"of {', '.join(QUANTIZED)}"
        )
    return qt.name
