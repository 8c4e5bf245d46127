"""The fallback functions as FunctionProtos: flat, named and versioned for a model.

The onnxscript source of the decompositions (:mod:`extql.onnx.fallback_plan`,
:mod:`~extql.onnx.fallback_arith`, :mod:`~extql.onnx.fallback_cores`,
:mod:`~extql.onnx.fallback_functions`, :mod:`~extql.onnx.fallback_dispatch`)
calls internal helpers; here every call is inlined, so that a function has
ops of the default ONNX domain only, and the result is named after the
operator (its ``overload`` the variant) and stamped with the model's ai.onnx
version.  :mod:`extql.fallbacks` is the public face of these functions and
describes what they compute.

Variants (:mod:`extql.onnx.variants`): a quantized type name, or
``"default"`` (no zero point); for quantize also ``"<variant>-float64"``, the
function of precision float64.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import onnx
import onnx.inliner

from ..rules.types import DOMAIN, OP_NAMES, type_opset
from . import fallback_arith as arith
from . import fallback_block_math as block_math
from . import fallback_blocks as blocks
from . import fallback_cores as cores
from . import fallback_dispatch as dispatch
from . import fallback_dpu as dpu
from . import fallback_functions as functions
from . import fallback_plan as plan
from .blocks import BLOCK_OP_NAMES
from .graph import walk_nodes
from .variants import (
    FLOAT64,
    FLOAT64_VARIANTS,
    VARIANTS,
    float64_overload,
    split_overload,
    variant,
)

__all__ = [
    "VARIANTS",
    "FLOAT64",
    "FLOAT64_VARIANTS",
    "float64_overload",
    "split_overload",
    "MIN_OPSET",
    "DISPATCH_MIN_OPSET",
    "MODEL_OPSET",
    "FALLBACK_DOMAIN",
    "CORE_DOMAIN",
    "ByVariant",
    "operator_script",
    "function_proto",
    "core_proto",
    "dispatcher_proto",
    "function_name",
    "fallback_proto",
    "variant",
    "variant_opset",
    "BLOCK_MIN_OPSET",
    "BLOCK_VARIANTS",
    "block_script",
    "block_function_proto",
    "block_fallback_proto",
    "block_function_name",
    "DPU_MIN_OPSET",
    "DPU_VARIANT",
    "dpu_function_proto",
]

#: The oldest default-domain opset the functions can be stamped with: every op
#: in their bodies exists there with the same meaning for the types used.
MIN_OPSET = 13
#: The dispatchers (type-generic bodies for runtimes that ignore ``overload``)
#: use CastLike.
DISPATCH_MIN_OPSET = 15
#: The ``ai.onnx`` opset the functions are written for, and given to models
#: whose nodes do not pin one: the newest that onnxruntime 1.18 (the oldest
#: extql supports) loads.
MODEL_OPSET = 21
#: Domain of the fallback functions that script functions call
#: (:mod:`extql.onnx.fallback_scripts`), one operator name per variant
#: (:func:`function_name`).
FALLBACK_DOMAIN = "ai.extql.fallbacks"

#: The block formats' variants by family ("bfp", "mx"): what a node's
#: string attribute (and BFP's use_compiler_version_cpu_kernel) selects.
BLOCK_VARIANTS: dict[str, tuple[str, ...]] = {"bfp": blocks.BFP_VARIANTS,
                                              "mx": blocks.MX_VARIANTS}

def variant_opset(variant: str) -> int:
    """The oldest ai.onnx opset a variant's function can be stamped with:
    :data:`MIN_OPSET`, or the opset whose Cast takes its type (int4 / uint4
    21, float8 19, float4e2m1 23, int2 / uint2 25).  A precision-float64
    overload (``"int8-float64"``) needs what its variant needs."""
    variant = split_overload(variant)[0]
    return MIN_OPSET if variant == "default" else max(MIN_OPSET, type_opset(variant))


class ByVariant(dict):
    """A dict of variant -> OnnxFunction that makes each function on first use
    (onnxscript parses source, so building them all at import is slow)."""

    def __init__(self, maker: Callable[[str], Any]) -> None:
        super().__init__()
        self._maker = maker

    def __missing__(self, key: str):
        if key not in VARIANTS:
            raise KeyError(f"{key!r}: expected one of {', '.join(VARIANTS)}")
        value = self[key] = self._maker(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in VARIANTS

    def __iter__(self) -> Iterator[str]:
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
_QUANTIZE_SCRIPTS: dict = ByVariant(functions.make_quantize)
_DEQUANTIZE_SCRIPTS: dict = ByVariant(functions.make_dequantize)
# The same for the quantize functions of precision float64 (keyed by variant).
_QUANTIZE64_SCRIPTS: dict = ByVariant(functions.make_quantize64)


def operator_script(quantize: bool, overload: str):
    """The onnxscript source of one fallback, with the operator's signature:
    what :func:`function_proto` flattens and what
    :class:`~extql.onnx.fallback_scripts.FallbackFunction` runs eagerly (a
    precision-float64 overload, ``"int8-float64"``: quantize's function of
    precision float64)."""
    variant, float64 = split_overload(overload)
    if float64:
        return _QUANTIZE64_SCRIPTS[variant]
    return (_QUANTIZE_SCRIPTS if quantize else _DEQUANTIZE_SCRIPTS)[variant]


# --------------------------------------------------------------------------
# FunctionProtos for models.

def _flatten(fn, callees) -> onnx.FunctionProto:
    """The FunctionProto of ``fn`` with every call into the internal domain inlined."""
    protos = [c.to_function_proto() for c in callees]
    main = fn.to_function_proto()
    model = onnx.helper.make_model(
        onnx.helper.make_graph([], "flatten", [], []),
        opset_imports=[onnx.helper.make_opsetid("", MODEL_OPSET)],
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
    flat.opset_import.extend(imports or [onnx.helper.make_opsetid("", MODEL_OPSET)])
    for node in walk_nodes(flat.node):
        if node.domain not in ("", "ai.onnx"):
            raise AssertionError(f"extql internal error: {node.op_type} left in a fallback body")
    return flat


_PLAN = [plan.ParamShape, plan.Choose, plan.ParamPlan, plan.Spread, plan.SpreadScale,
         plan.SpreadParams, arith.RoundTo, arith.Quotient, arith.AddSigned, arith.OpaqueZero,
         arith.OpaqueCopy]
# The helpers of precision float64.
_PLAN64 = [plan.SpreadScale64, plan.SpreadParams64, arith.Quotient64, arith.RoundedQuotient64,
           arith.ShiftedQuotient64]


def _callees(variant: str, quantize: bool, float64: bool = False) -> list:
    if float64:
        return [*_PLAN, *_PLAN64, cores.quantize_core64(variant),
                functions.make_static_quantize64(variant)]
    if quantize:
        return [*_PLAN, cores.quantize_core(variant), functions.make_static_quantize(variant)]
    return [*_PLAN, cores.dequantize_core(variant), functions.make_static_dequantize(variant)]


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
    if opset < 18:
        _axes_to_attributes(out)
    out.doc_string = (
        f"extql fallback for {domain}::{name} ({overload or 'any type'}): standard ONNX ops "
        "only, bit-identical to the extql kernels."
    )
    return out


#: The reductions whose ``axes`` are an attribute before opset 18 and an
#: input from 18 (ReduceSum moved in 13, which every function imports).
_AXES_MOVED_IN_18 = frozenset({"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                               "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
                               "ReduceSumSquare"})


def _axes_to_attributes(proto: onnx.FunctionProto) -> None:
    """Rewrite, in place, a body written for opset 18 and later for an
    opset before 18: each reduction of :data:`_AXES_MOVED_IN_18` that takes
    its axes as an input (always a Constant of the body) takes them as the
    ``axes`` attribute, and a Constant nothing else reads is dropped.  The
    same reductions, the form each opset defines."""
    consts = {n.output[0]: n for n in proto.node if n.op_type == "Constant"}
    moved = set()
    for node in walk_nodes(proto.node):
        if node.op_type not in _AXES_MOVED_IN_18 or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.input) < 2 or not node.input[1]:
            continue
        const = consts.get(node.input[1])
        if const is None:
            raise AssertionError(f"extql internal error: {node.op_type} with axes that are "
                                 "not a Constant of the body")
        attr = const.attribute[0]
        if attr.name == "value_ints":
            axes = list(attr.ints)
        elif attr.name == "value":
            axes = [int(a) for a in onnx.numpy_helper.to_array(attr.t).reshape(-1)]
        else:
            raise AssertionError(f"extql internal error: {node.op_type} axes from a "
                                 f"Constant's {attr.name}")
        moved.add(node.input[1])
        del node.input[1:]
        node.attribute.append(onnx.helper.make_attribute("axes", axes))
    read = {i for n in walk_nodes(proto.node) for i in n.input} | set(proto.output)
    kept = [n for n in proto.node
            if not (n.op_type == "Constant" and n.output[0] in moved and n.output[0] not in read)]
    del proto.node[:]
    proto.node.extend(kept)


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
    return _flatten(operator_script(quantize, overload), _callees(variant, quantize, float64))


def _check_overload(quantize: bool, overload: str) -> None:
    variant, float64 = split_overload(overload)
    if variant not in VARIANTS:
        raise ValueError(f"unknown fallback variant {overload!r}: expected one of {VARIANTS}"
                         + (f" or {', '.join(FLOAT64_VARIANTS)}" if quantize else ""))
    if float64 and not quantize:
        raise ValueError(f"fallback variant {overload!r}: precision float64 is quantize's "
                         "(dequantize has no precision)")


def function_proto(
    quantize: bool, variant: str, *, domain: str = DOMAIN, opset: int = MODEL_OPSET
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
CORE_DOMAIN = plan.INTERNAL_DOMAIN


def core_proto(quantize: bool, variant: str, *, opset: int = MODEL_OPSET) -> onnx.FunctionProto:
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
    helpers = [arith.RoundTo, arith.Quotient, arith.AddSigned, arith.OpaqueZero,
               arith.OpaqueCopy]
    if float64:
        return _flatten(functions.make_static_quantize64(variant),
                        [*helpers, arith.Quotient64, arith.RoundedQuotient64,
                         arith.ShiftedQuotient64, cores.quantize_core64(variant)])
    if quantize:
        core = cores.quantize_core(variant)
        fn = functions.make_static_quantize(variant)
    else:
        core = cores.dequantize_core(variant)
        fn = functions.make_static_dequantize(variant)
    return _flatten(fn, [*helpers, core])


@functools.cache
def _flat_dispatch(quantize: bool, float64: bool = False) -> onnx.FunctionProto:
    tail = [dispatch.DispatchRoutes, dispatch.IntBounds, dispatch.IsFloat]
    if float64:
        return _flatten(dispatch.QuantizeDispatch64, [*_PLAN, *_PLAN64, arith.Pick, *tail])
    if quantize:
        return _flatten(dispatch.QuantizeDispatch, [*_PLAN, *tail])
    return _flatten(dispatch.DequantizeDispatch, _PLAN)


def dispatcher_proto(
    quantize: bool, *, domain: str = DOMAIN, opset: int = MODEL_OPSET, float64: bool = False
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


def function_name(quantize: bool, variant: str) -> str:
    """The operator name of one fallback in :data:`FALLBACK_DOMAIN`
    (``variant`` may be a precision-float64 overload, ``"int8-float64"``)."""
    return f"Extended{'Quantize' if quantize else 'Dequantize'}Linear_{variant}"


def fallback_proto(quantize: bool, variant: str, version: int) -> onnx.FunctionProto:
    """The flat definition of one fallback named for :data:`FALLBACK_DOMAIN`
    (:func:`function_name`), importing ai.onnx ``version``."""
    proto = function_proto(quantize, variant, opset=version)
    proto.domain = FALLBACK_DOMAIN
    proto.name = function_name(quantize, variant)
    proto.overload = ""
    return proto


# --------------------------------------------------------------------------
# The block formats (BFPQuantizeDequantize / MXQuantizeDequantize).

#: The oldest ai.onnx opset the block formats' functions can be stamped with:
#: CastLike (15) gives y x's type (float32 or float16).
BLOCK_MIN_OPSET = 15


def _block_callees() -> list:
    return [plan.Choose, *block_math.HELPERS, *blocks.HELPERS]


def block_script(family: str, variant: str):
    """The onnxscript source of one block format's fallback: ``family``
    "bfp" or "mx", ``variant`` one of :data:`BLOCK_VARIANTS` of it."""
    if variant not in BLOCK_VARIANTS.get(family, ()):
        raise ValueError(f"unknown {family} fallback variant {variant!r}: expected one of "
                         f"{', '.join(BLOCK_VARIANTS.get(family, ()))}")
    return (blocks.make_bfp if family == "bfp" else blocks.make_mx)(variant)


@functools.cache
def _flat_block(family: str, variant: str) -> onnx.FunctionProto:
    flat = _flatten(block_script(family, variant), _block_callees())
    # The string attribute's default: the variant's (the body does not read it).
    string = "bfp_method" if family == "bfp" else "element_dtype"
    value = (variant if family == "mx" or variant != blocks.TO_BFP_COMPILER
             else blocks.TO_BFP).encode()
    for attr in flat.attribute_proto:
        if attr.name == string:
            attr.s = value
    return flat


def block_function_proto(family: str, variant: str, *, domain: str = DOMAIN,
                         opset: int = MODEL_OPSET) -> onnx.FunctionProto:
    """The flat FunctionProto of one block format's fallback, named after
    the operator of ``domain`` (``BFPQuantizeDequantize`` / ``BFPFixNeuron``,
    ``MXQuantizeDequantize`` / ``MXFixNeuron``) with ``overload=variant``,
    importing ai.onnx ``opset`` (>= :data:`BLOCK_MIN_OPSET`)."""
    _check_domain(domain)
    _check_opset(opset, BLOCK_MIN_OPSET, "the block formats' fallback functions")
    name = BLOCK_OP_NAMES[domain][0 if family == "bfp" else 1]
    return _stamp(_flat_block(family, variant), domain, name, variant, opset)


def block_fallback_proto(family: str, variant: str, version: int) -> onnx.FunctionProto:
    """The flat definition of one block format's fallback named for
    :data:`FALLBACK_DOMAIN` (``BFPQuantizeDequantize_to_bfp``, ...)."""
    proto = block_function_proto(family, variant, opset=version)
    proto.domain = FALLBACK_DOMAIN
    proto.name = block_function_name(family, variant)
    proto.overload = ""
    return proto


def block_function_name(family: str, variant: str) -> str:
    """The operator name of one block fallback in :data:`FALLBACK_DOMAIN`."""
    return f"{BLOCK_OP_NAMES[DOMAIN][0 if family == 'bfp' else 1]}_{variant}"


# --------------------------------------------------------------------------
# The DPU-emulation operators (ExtendedInstanceNormalization).

#: The oldest ai.onnx opset the DPU fallbacks can be stamped with: Cast to
#: bfloat16 (13) and CumSum (11, 14 for bfloat16; float32 here).
DPU_MIN_OPSET = 13
#: The ``overload`` the DPU nodes and their functions carry.
DPU_VARIANT = dpu.DPU_VARIANT


@functools.cache
def _flat_dpu(family: str) -> onnx.FunctionProto:
    if family != "in":
        raise ValueError(f"no standard-ops fallback for the DPU family {family!r}")
    return _flatten(dpu.InstanceNorm, [plan.Choose, *block_math.HELPERS, *dpu.HELPERS])


def dpu_function_proto(family: str, name: str, domain: str, *,
                       opset: int = MODEL_OPSET) -> onnx.FunctionProto:
    """The flat FunctionProto of a DPU-emulation operator's fallback
    (``family`` "in": ExtendedInstanceNormalization / the legacy
    VitisInstanceNormalization, ``name`` in ``domain``), with
    ``overload=DPU_VARIANT``, importing ai.onnx ``opset`` (>=
    :data:`DPU_MIN_OPSET`)."""
    _check_domain(domain)
    _check_opset(opset, DPU_MIN_OPSET, "the DPU operators' fallback functions")
    return _stamp(_flat_dpu(family), domain, name, DPU_VARIANT, opset)
