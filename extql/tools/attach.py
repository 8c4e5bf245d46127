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

from .. import fallbacks
from ..types import BY_ONNX, DEFAULT_QTYPE, OP_NAMES
from .check import raise_first_problem
from .graph import (
    ExtNode,
    TypeInfo,
    array_to_tensor,
    copy_model,
    extended_nodes,
    infer_types,
    model_opset,
    set_opset,
    static_shape,
    type_name,
    zero_point_type,
)

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


def _refuse_float_types(ext: ExtNode, types: dict[str, TypeInfo]) -> None:
    """The fallback functions compute with float32 x and scale: a node with
    float16 / bfloat16 ones (or the attributes precision / output_dtype,
    which only matter with those) is refused by name rather than given
    functions that onnxruntime would reject with a type error."""
    attrs = sorted(a.name for a in ext.node.attribute if a.name in ("precision", "output_dtype"))
    names = [ext.node.input[1]] + ([ext.node.input[0]] if ext.quantize else [])
    other = [f"{n!r} is {type_name(types[n].elem_type)}" for n in names
             if n in types and types[n].elem_type not in (0, onnx.TensorProto.FLOAT)]
    if attrs or other:
        what = ", ".join(other + [f"the attribute {a}" for a in attrs])
        raise ValueError(
            f"{ext.label}: {what}: the fallback functions compute with float32 x and scale "
            "only (extql's onnxruntime library and NumPy API run float16 / bfloat16 x, "
            "scales and outputs)"
        )


def attach_fallbacks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Add the fallback FunctionProtos for the Extended nodes of ``model``.

    One function per (operator, type) in use, named after the operator in its
    own domain (``com.amd.quark`` or ``com.vai.quantize``) and told apart by
    ``overload`` (the type name, or ``"default"`` without a zero point); each
    node gets the matching ``overload``.  onnxruntime resolves a model-local
    function by (domain, name, overload) and uses it only when no kernel is
    registered for the operator, so with the extql library registered the
    native kernel still runs.  ``onnx.reference`` (1.23) and onnxruntime
    releases before overload support (2026) ignore ``overload`` and use the
    last function of a name: when one operator is used with several types, a
    type-generic dispatcher with an empty overload is added last for it (needs
    ai.onnx opset >= 15; otherwise a warning says so), and the operator's
    nodes without a zero point get an explicit all-zero one (uint8 for
    quantize, x's type for dequantize, the scale's shape), which means the
    same and gives the dispatcher the output type.

    Nodes without a zero point get an explicit empty third input, and nodes
    without ``axis`` an explicit ``axis=1`` (the same meaning; onnx.reference
    needs both) so that every call matches the three-input functions.  The IR
    version is raised to 10 if lower (``overload`` needs it); opsets are not
    changed, the functions are stamped with the model's ai.onnx version
    (>= 13).  Existing fallback functions are replaced, so attaching twice is
    harmless.
    """
    out = copy_model(model)
    nodes = extended_nodes(out)
    if not nodes:
        return out
    opset = _default_opset_for_functions(out)
    types = infer_types(out)
    variant_of: dict[int, str] = {}
    groups: dict[tuple[str, bool], list[ExtNode]] = {}
    for ext in nodes:
        raise_first_problem(ext, types)
        if ext.block_size > 0:
            raise ValueError(
                f"{ext.label}: block_size {ext.block_size}: the fallback functions do not "
                "implement blocked quantization yet (extql's onnxruntime library and NumPy API "
                "run it)"
            )
        _refuse_float_types(ext, types)
        variant_of[id(ext.node)] = fallbacks.variant(zero_point_type(ext, types))
        if variant_of[id(ext.node)] not in fallbacks.VARIANTS:
            raise ValueError(
                f"{ext.label}: {variant_of[id(ext.node)]}: the fallback functions do not "
                "implement the sub-byte and small float types yet (extql's onnxruntime library "
                "and NumPy API run them; lower_to_standard turns them into the official "
                "operators where those are exact)"
            )
        groups.setdefault((ext.node.domain, ext.quantize), []).append(ext)
    # Runtimes that ignore ``overload`` run one (type-generic) function for
    # every node of an operator, and its output type comes from the zero
    # point: where an operator has several variants, nodes without a zero
    # point get an explicit zero (the meaning of an absent one).
    for members in groups.values():
        if len({variant_of[id(e.node)] for e in members}) < 2:
            continue
        for ext in members:
            if variant_of[id(ext.node)] == "default":
                code = _materialize_zero_point(out, ext, types)
                if code is not None:
                    variant_of[id(ext.node)] = fallbacks.variant(code)
    used: dict[tuple[str, bool], list[str]] = {}
    for ext in nodes:
        variant = variant_of[id(ext.node)]
        ext.node.overload = variant
        if not any(a.name == "axis" for a in ext.node.attribute):
            # onnx.reference ignores a function's attribute defaults.
            ext.node.attribute.append(helper.make_attribute("axis", 1))
        while len(ext.node.input) < 3:
            ext.node.input.append("")
        variants = used.setdefault((ext.node.domain, ext.quantize), [])
        if variant not in variants:
            variants.append(variant)
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
        elif "default" in variants:
            problem = ("a node without a zero point has a scale of unknown shape, so no "
                       "explicit zero could be given to it")
        if problem is None:
            # Listed last: onnx.reference and onnxruntime without overload
            # support keep the last function of a name.
            out.functions.append(fallbacks.dispatcher_proto(quantize, domain=domain, opset=opset))
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
    model: onnx.ModelProto, ext: ExtNode, types: dict[str, TypeInfo]
) -> int | None:
    """Give a node without zero point an explicit all-zero one (uint8 for
    quantize, x's type for dequantize) of the scale's shape, as an
    initializer of the node's graph; returns its type code, or None when the
    scale's shape or x's type is unknown."""
    node = ext.node
    s_shape = static_shape(node.input[1], types)
    if s_shape is None or not all(isinstance(d, int) for d in s_shape):
        return None
    if ext.quantize:
        code = DEFAULT_QTYPE.onnx
    else:
        x_info = types.get(node.input[0])
        if x_info is None or x_info.elem_type not in BY_ONNX:
            return None
        code = x_info.elem_type
    qt = BY_ONNX[code]
    name = f"{node.input[1]}__extql_zero_{qt.name}"
    graph = ext.graph
    if not any(i.name == name for i in graph.initializer):
        graph.initializer.append(array_to_tensor(name, np.zeros(s_shape, qt.dtype)))
    while len(node.input) < 3:
        node.input.append("")
    node.input[2] = name
    types[name] = TypeInfo(code, tuple(s_shape))
    return code
