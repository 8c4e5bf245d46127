"""``extql.attach_fallbacks``: give a model the fallback functions of its Extended nodes.

With them the model runs without the extql library (onnxruntime,
onnx.reference), while the native kernel still wins where the library is
registered.  The function bodies are :mod:`extql.fallbacks`'.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper

from .. import fallbacks, rules
from ..onnx.blocks import block_nodes
from ..onnx.check import raise_first_problem
from ..onnx.dpu import dpu_nodes
from ..onnx.graph import (
    ExtNode,
    TypeInfo,
    copy_model,
    extended_nodes,
    infer_types,
    model_opset,
    set_opset,
    static_shape,
    type_name,
    zero_point_type,
)
from ..rules.types import (
    DEFAULT_QTYPE,
    E8M0_CODE,
    E8M0_NAME,
    FLOAT64_CODE,
    OP_NAMES,
    QTYPES,
    QUANTIZED_BY_ONNX,
    default_precision,
    is_float8,
    type_opset,
)
from .attach_blocks import attach_block_fallbacks
from .attach_dpu import FALLBACK_FAMILIES, attach_dpu_fallbacks

__all__ = ["attach_fallbacks", "FUNCTION_IR_VERSION"]

#: NodeProto.overload needs IR version 10; attach raises older models to it.
FUNCTION_IR_VERSION = 10


def _default_opset_for_functions(model: onnx.ModelProto) -> int:
    version = model_opset(model, "")
    if version is None:
        # No default-domain import means no default-domain node: importing one
        # cannot change the meaning of anything.
        model.opset_import.append(helper.make_opsetid("", 21))
        return 21
    if version < fallbacks.MIN_OPSET:
        raise ValueError(
            f"the fallback functions need a default-domain (ai.onnx) opset >= "
            f"{fallbacks.MIN_OPSET}, the model imports {version}; convert it first, e.g. "
            f"onnx.version_converter.convert_version(model, {fallbacks.MIN_OPSET})"
        )
    return version


def _attr(node: onnx.NodeProto, name: str) -> int | None:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return None


def _set_attr(node: onnx.NodeProto, name: str, value: int) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])


def _drop_attr(node: onnx.NodeProto, name: str) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)


def _scale_type(ext: ExtNode, types: dict[str, TypeInfo], what: str) -> int:
    info = types.get(ext.node.input[1])
    if info is None or info.elem_type == 0:
        raise ValueError(
            f"{ext.label}: cannot determine the element type of the scale "
            f"{ext.node.input[1]!r}, which gives {what}; give the model a value_info (or graph "
            "input type) for it, or make it an initializer"
        )
    return info.elem_type


def _precision(ext: ExtNode, types: dict[str, TypeInfo]) -> int:
    """A quantize node's ``precision``: its attribute, else what the
    operator takes without one (:func:`extql.rules.linear.default_precision`) --
    the scale's type, float32 for a float8e8m0 scale (which widens to
    float32 exactly), float64 for an int32 scale (never a float type: that
    would round the scale, and the library reads the attribute too)."""
    given = _attr(ext.node, "precision")
    if given is not None:
        return given
    return default_precision(_scale_type(ext, types, "the division's precision"))


def _spell_out(ext: ExtNode, variant: str, types: dict[str, TypeInfo]) -> None:
    """Give the node every attribute its function reads, with the meaning
    the node has: ``axis`` and ``block_size`` (their defaults, 1 and 0),
    quantize's ``precision`` (:func:`_precision`: the scale's type, float64
    for an int32 scale) and float8 ``saturate`` (1), dequantize's
    ``output_dtype`` (the scale's type).
    onnx.reference ignores a function's attribute defaults, and the function
    cannot read the scale's type itself.  ``saturate`` is dropped where it
    means nothing (every type but float8 saturates)."""
    node = ext.node
    for name in ("axis", "block_size"):
        if _attr(node, name) is None:
            _set_attr(node, name, rules.DEFAULTS[name])
    if ext.quantize:
        if _attr(node, "precision") is None:
            _set_attr(node, "precision", _precision(ext, types))
        if is_float8(variant):
            if _attr(node, "saturate") is None:
                _set_attr(node, "saturate", rules.DEFAULTS["saturate"])
        else:
            _drop_attr(node, "saturate")
    elif not _attr(node, "output_dtype"):
        _set_attr(node, "output_dtype", _scale_type(ext, types, "the output type"))


def _check_variant_opset(ext: ExtNode, variant: str, opset: int,
                         types: dict[str, TypeInfo]) -> None:
    needed = fallbacks.variant_opset(variant)
    info = types.get(ext.node.input[1])
    if info is not None and info.elem_type == E8M0_CODE and opset < type_opset(E8M0_NAME):
        needed, variant = type_opset(E8M0_NAME), f"a {E8M0_NAME} scale"
    if opset < needed:
        raise ValueError(
            f"{ext.label}: {variant}: the fallback functions need a default-domain (ai.onnx) "
            f"opset >= {needed} for it (ONNX's Cast takes {variant} from opset {needed}), the "
            f"model imports {opset}; convert it first, e.g. "
            f"onnx.version_converter.convert_version(model, {needed})"
        )


def attach_fallbacks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Add the fallback FunctionProtos for the Extended nodes of ``model``.

    One function per (operator, type) in use, named after the operator in its
    own domain (``com.amd.quark`` or ``com.vai.quantize``) and told apart by
    ``overload`` (the type name, or ``"default"`` without a zero point); each
    node gets the matching ``overload``.  Quantize nodes of precision
    float64 (``precision`` 11, which a node with an int32 scale and no
    ``precision`` is given explicitly) use a function of their own,
    ``overload`` ``"<type>-float64"`` (:data:`extql.fallbacks.FLOAT64`), so
    the functions of the float precisions stay as they are.  onnxruntime
    resolves a model-local function by (domain, name, overload) and uses it
    only when no kernel is registered for the operator, so with the extql
    library registered the native kernel still runs.  ``onnx.reference``
    (1.23) and onnxruntime releases before overload support (2026) ignore
    ``overload`` and use the last function of a name: when one operator is
    used with several types (or a type with a float and a float64
    precision), a type-generic dispatcher with an empty overload is added
    last for it (needs ai.onnx opset >= 15; otherwise a warning says so),
    and the operator's nodes without a zero point get an explicit all-zero
    one (uint8 for quantize, x's type for dequantize, the scale's shape),
    which means the same and gives the dispatcher the output type.

    Nodes without a zero point get an explicit empty third input (a
    quantize with ``output_dtype`` and no zero point an explicit zero of that
    type), and every node the attributes its function reads, with the meaning
    the node has: ``axis`` 1, ``block_size`` 0, quantize's ``precision`` (the
    scale's type; 11, float64, for an int32 scale) and float8's ``saturate``
    1, dequantize's ``output_dtype`` (the scale's type); ``saturate`` goes
    from nodes of other types, where it means nothing.  (onnx.reference
    ignores a function's attribute defaults, and a function cannot read the
    scale's type.)  The IR version is raised to 10 if lower (``overload``
    needs it); opsets are not changed, the functions are stamped with the
    model's ai.onnx version, which must be one whose Cast takes each node's
    type (>= 13; float8 19, int4 / uint4 21, float4e2m1 23, int2 / uint2 25:
    else a ``ValueError`` names the node).
    Existing fallback functions are replaced, so attaching twice is
    harmless.

    ``ExtendedInstanceNormalization`` / ``VitisInstanceNormalization``
    nodes get their function too (:mod:`extql.tools.attach_dpu`:
    ``overload`` ``bfloat16``, ``epsilon`` spelled out), and so do
    ``ExtendedLSTM`` / ``VitisLSTM`` nodes (one function per parameter set,
    ``overload`` ``lstm_<digest>``; one whose input size is not known
    statically is left without a function, with a warning).
    """
    out = copy_model(model)
    nodes = extended_nodes(out)
    if not nodes:
        if block_nodes(out) or any(d.family in FALLBACK_FAMILIES for d in dpu_nodes(out)):
            opset = _default_opset_for_functions(out)
            types = infer_types(out)
            attach_block_fallbacks(out, opset, types)
            attach_dpu_fallbacks(out, opset, types)
            out.ir_version = max(out.ir_version, FUNCTION_IR_VERSION)
        return out
    opset = _default_opset_for_functions(out)
    types = infer_types(out)
    attach_block_fallbacks(out, opset, types)
    attach_dpu_fallbacks(out, opset, types)
    variant_of: dict[int, str] = {}
    float64: set[int] = set()  # the quantize nodes of precision float64
    groups: dict[tuple[str, bool], list[ExtNode]] = {}
    for ext in nodes:
        raise_first_problem(ext, types)
        if ext.quantize and _precision(ext, types) == FLOAT64_CODE:
            float64.add(id(ext.node))
        code = zero_point_type(ext, types)
        out_code = _attr(ext.node, "output_dtype") if ext.quantize else None
        if code is None and out_code:
            # output_dtype without a zero point: an explicit zero of that type.
            code = _materialize_zero_point(out, ext, types, code=out_code)
            if code is None:
                raise ValueError(
                    f"{ext.label}: output_dtype {type_name(out_code)} without a zero point and a "
                    "scale of unknown shape: give the node a zero point of that type"
                )
        variant_of[id(ext.node)] = fallbacks.variant(code)
        _check_variant_opset(ext, variant_of[id(ext.node)], opset, types)
        groups.setdefault((ext.node.domain, ext.quantize), []).append(ext)

    def overload(ext: ExtNode) -> str:
        variant = variant_of[id(ext.node)]
        return fallbacks.float64_overload(variant) if id(ext.node) in float64 else variant

    # Runtimes that ignore ``overload`` run one (type-generic) function for
    # every node of an operator, and its output type comes from the zero
    # point: where an operator has several variants (several functions: a
    # precision-float64 one and a float one of one type are two), nodes
    # without a zero point get an explicit zero (the meaning of an absent one).
    for members in groups.values():
        if len({overload(e) for e in members}) < 2:
            continue
        for ext in members:
            if variant_of[id(ext.node)] == "default":
                code = _materialize_zero_point(out, ext, types)
                if code is not None:
                    variant_of[id(ext.node)] = fallbacks.variant(code)
    used: dict[tuple[str, bool], list[str]] = {}
    for ext in nodes:
        variant = variant_of[id(ext.node)]
        ext.node.overload = overload(ext)
        _spell_out(ext, variant, types)
        while len(ext.node.input) < 3:
            ext.node.input.append("")
        variants = used.setdefault((ext.node.domain, ext.quantize), [])
        if ext.node.overload not in variants:
            variants.append(ext.node.overload)
    names = {(d, OP_NAMES[d][0 if q else 1]) for d, q in used}
    kept = [f for f in out.functions if (f.domain, f.name) not in names]
    del out.functions[:]
    out.functions.extend(kept)
    for (domain, quantize), variants in sorted(used.items()):
        set_opset(out, domain, 1)
        for variant in variants:
            out.functions.append(
                fallbacks.function_proto(quantize, variant, domain=domain, opset=opset)
            )
    for (domain, quantize), variants in sorted(used.items()):
        if len(variants) < 2:
            continue
        op_name = OP_NAMES[domain][0 if quantize else 1]
        problem = None
        if opset < fallbacks.DISPATCH_MIN_OPSET:
            problem = f"the model's ai.onnx opset {opset} is below {fallbacks.DISPATCH_MIN_OPSET}"
        elif any(fallbacks.split_overload(v)[0] not in (*QTYPES, "default") for v in variants):
            problem = ("the type-generic dispatcher computes the eight types of "
                       f"{', '.join(QTYPES)} only")
        elif any(fallbacks.split_overload(v)[0] == "default" for v in variants):
            problem = ("a node without a zero point has a scale of unknown shape, so no "
                       "explicit zero could be given to it")
        if problem is None:
            # Listed last: onnx.reference and onnxruntime without overload
            # support keep the last function of a name.
            float64 = any(fallbacks.split_overload(v)[1] for v in variants)
            out.functions.append(fallbacks.dispatcher_proto(quantize, domain=domain, opset=opset,
                                                            float64=float64))
        else:
            warnings.warn(
                f"{op_name} is used with several types ({', '.join(variants)}) and {problem}: "
                "onnxruntime with overload support runs the per-type functions, but "
                "onnx.reference (use new_ops=extql.reference.OPS) and older onnxruntime "
                "releases, which ignore NodeProto.overload, cannot run this model's fallbacks",
                stacklevel=2,
            )
    if out.ir_version < FUNCTION_IR_VERSION:
        out.ir_version = FUNCTION_IR_VERSION
    return out


def _materialize_zero_point(
    model: onnx.ModelProto, ext: ExtNode, types: dict[str, TypeInfo], code: int | None = None
) -> int | None:
    """Give a node without zero point an explicit all-zero one (of type
    ``code``; by default uint8 for quantize, x's type for dequantize) of the
    scale's shape, as an initializer of the node's graph; returns its type
    code, or None when the scale's shape or x's type is unknown."""
    node = ext.node
    s_shape = static_shape(node.input[1], types)
    if s_shape is None or not all(isinstance(d, int) for d in s_shape):
        return None
    if code is None and ext.quantize:
        code = DEFAULT_QTYPE.onnx
    elif code is None:
        x_info = types.get(node.input[0])
        if x_info is None or x_info.elem_type not in QUANTIZED_BY_ONNX:
            return None
        code = x_info.elem_type
    qt = QUANTIZED_BY_ONNX[code]
    name = f"{node.input[1]}__extql_zero_{qt.name}"
    graph = ext.graph
    if not any(i.name == name for i in graph.initializer):
        # Zero bits are the value 0 (+0) of every type, packed or not.
        count = int(np.prod(s_shape, dtype=np.int64))
        bits = getattr(qt, "bits", 8 * qt.dtype.itemsize)
        graph.initializer.append(helper.make_tensor(
            name, code, list(s_shape), bytes(-(-count * bits // 8)), raw=True))
    while len(node.input) < 3:
        node.input.append("")
    node.input[2] = name
    types[name] = TypeInfo(code, tuple(s_shape))
    return code
