"""``extql.inline_fallbacks``: replace every Extended node by standard ONNX ops.

The result needs neither extql's library nor any custom operator: each node
becomes the body of its fallback function (:mod:`extql.fallbacks`), with
the granularity fixed from the static shapes where they are known.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnx.inliner
from onnx import helper, numpy_helper

from .. import fallbacks
from ..onnx.blocks import BLOCK_OPS, BlockNode, block_nodes
from ..onnx.dpu import DPUNode, dpu_family, dpu_nodes, refuse_dpu_nodes
from ..onnx.graph import (
    INFER_KEEP_BYTES,
    ExtNode,
    Names,
    TypeInfo,
    drop_unused_imports,
    extended_nodes,
    graphs,
    infer_types,
    model_opset,
    replace_node,
    set_opset,
    static_shape,
)
from ..onnx.microsoft import to_extended
from ..rules.types import EXTENDED_OPS, MS_DOMAIN, OP_NAMES
from .attach import attach_fallbacks
from .attach_dpu import FALLBACK_FAMILIES, lstm_size_unknown

__all__ = ["inline_fallbacks"]


def _static_param_shape(ext: ExtNode, types: dict[str, TypeInfo]) -> list[int] | None:
    """The shape scale/zero point are reshaped to, when the static shapes fix
    it: [] per tensor, [D, 1, ...] per axis; None when unknown."""
    s_shape = static_shape(ext.node.input[1], types)
    if s_shape is None or len(s_shape) > 1 or ext.block_size > 0:
        return None
    if len(s_shape) == 0 or s_shape[0] == 1:
        return []
    x_shape = static_shape(ext.node.input[0], types)
    if x_shape is None or not isinstance(s_shape[0], int):
        return None
    rank = len(x_shape)
    axis = ext.axis % rank
    return [s_shape[0]] + [1] * (rank - 1 - axis)


def inline_fallbacks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every Extended (and legacy Vitis) node, and every block-format
    node (``BFPQuantizeDequantize`` / ``MXQuantizeDequantize`` and the legacy
    ``BFPFixNeuron`` / ``MXFixNeuron``), by standard ONNX ops.

    Where the static shapes fix the granularity (the usual case: the scale is
    an initializer and x's rank is known) the scale and zero point are
    reshaped by a constant shape; otherwise the run-time granularity logic of
    the fallback functions is inlined.  The type and shape of each replaced
    node's output, where known, are kept as value_info; onnx shape inference
    with ``data_prop=True`` also finds them from the ops alone.  A
    block-format node becomes the body of its variant's function
    (:data:`extql.fallbacks.BLOCK_VARIANTS`); its output keeps x's type and
    shape as value_info where they are known.  So does a DPU instance norm
    (``ExtendedInstanceNormalization`` / ``VitisInstanceNormalization``,
    :mod:`extql.onnx.fallback_dpu`); a DPU LSTM (``ExtendedLSTM`` /
    ``VitisLSTM``) becomes the body of its parameter set's function
    (:mod:`extql.onnx.fallback_lstm`: a Scan per direction; the kernels'
    bits but for the runtime's Tanh, docs/differences.rst), its outputs'
    inferred types and shapes kept as value_info; one whose input size no
    static shape gives is refused with a ``ValueError`` naming it.  The result
    has no ``com.amd.quark`` / ``com.vai.quantize`` node, function or opset
    import left (other model-local functions are kept).  The IR version is raised to 10 if lower.

    com.microsoft QuantizeLinear / DequantizeLinear nodes (which AMD Quark
    writes for the 8/16-bit types) are replaced too, so the result needs no
    contrib operator either: they are first renamed to the Extended operators
    where both mean the same bits (:func:`extql.onnx.microsoft.to_extended`,
    which raises a ``ValueError`` naming any other).
    """
    refuse_dpu_nodes(model)
    with warnings.catch_warnings():
        # (about runtimes that ignore overload: the functions are inlined here)
        warnings.filterwarnings("ignore", message=".* is used with several types",
                                category=UserWarning)
        warnings.filterwarnings("ignore", message=".* is used with .* parameter sets",
                                category=UserWarning)
        warnings.filterwarnings("ignore", message=".* left without a fallback function",
                                category=UserWarning)
        out = attach_fallbacks(to_extended(model))
    nodes = extended_nodes(out)
    blocks = block_nodes(out)
    dpus = [d for d in dpu_nodes(out) if d.family in FALLBACK_FAMILIES]
    for d in dpus:
        if d.family == "lstm" and not d.node.overload:
            raise ValueError(lstm_size_unknown(d.label))
    if not nodes and not blocks and not dpus:
        return out
    _raw_uint32(out)
    opset = model_opset(out, "")
    assert opset is not None
    types = infer_types(out)
    names = Names(out)
    cores: dict[str, onnx.FunctionProto] = {}
    for b in [*blocks, *dpus]:
        if isinstance(b, DPUNode) and b.family == "lstm":
            _record_lstm_output_types(b, types)
        else:
            _record_block_output_type(b, types)
    for ext in nodes:
        _record_output_type(ext, types)
        pshape = _static_param_shape(ext, types)
        if pshape is None:
            continue  # keep the call: the flat function is inlined below
        node = ext.node
        # (the overload attach_fallbacks gave: the variant, "-float64" for
        # a quantize of precision float64, whose core divides in float64)
        core = fallbacks.core_proto(ext.quantize, node.overload, opset=opset)
        cores[core.name] = core
        new_nodes = []
        args = [node.input[0]]
        has_zero_point = fallbacks.split_overload(node.overload)[0] != "default"
        params = [node.input[1]] + ([node.input[2]] if has_zero_point else [])
        shape_name = None
        for p in params:
            p_shape = static_shape(p, types)
            if p_shape is not None and list(p_shape) == pshape:
                args.append(p)
                continue
            if shape_name is None:
                shape_name = names("param_shape")
                new_nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [shape_name],
                        value=numpy_helper.from_array(np.array(pshape, np.int64)),
                    )
                )
            reshaped = names(p)
            new_nodes.append(helper.make_node("Reshape", [p, shape_name], [reshaped]))
            args.append(reshaped)
        call = helper.make_node(core.name, args, list(node.output), domain=core.domain)
        # The attributes the core reads (precision, saturate, output_dtype),
        # as attach_fallbacks spelled them out on the node.
        declared = {*core.attribute, *(a.name for a in core.attribute_proto)}
        call.attribute.extend(a for a in node.attribute if a.name in declared)
        new_nodes.append(call)
        replace_node(ext.graph, node, new_nodes)
    # Calls left (unknown static shapes) go to the flat per-variant function.
    # Give every function a unique name instead of relying on ``overload``
    # (not every inliner honours it) and drop the dispatchers.
    for node in [*(ext.node for ext in nodes), *(b.node for b in blocks),
                 *(d.node for d in dpus)]:
        if ((node.domain, node.op_type) in EXTENDED_OPS or (node.domain, node.op_type) in BLOCK_OPS
                or dpu_family(node) in FALLBACK_FAMILIES):
            node.op_type = _unique_name(node.op_type, node.overload)
            node.overload = ""
    functions = []
    for f in out.functions:
        if f.domain in OP_NAMES:
            if not f.overload:
                continue  # a dispatcher
            f.name = _unique_name(f.name, f.overload)
            f.overload = ""
        functions.append(f)
    functions.extend(cores.values())
    del out.functions[:]
    out.functions.extend(functions)
    if cores:
        set_opset(out, fallbacks.CORE_DOMAIN, 1)
    ours = (*OP_NAMES, fallbacks.CORE_DOMAIN)
    ids = sorted({(f.domain, f.name) for f in out.functions if f.domain in ours})
    # The inliner serialises the model: leave large tensor contents out of it
    # (2 GiB limit) and put them back by name afterwards.
    stashed: dict[str, bytes] = {}
    for graph in graphs(out.graph):
        for init in graph.initializer:
            if len(init.raw_data) > INFER_KEEP_BYTES and init.name not in stashed:
                stashed[init.name] = init.raw_data
                init.ClearField("raw_data")
    out = onnx.inliner.inline_selected_functions(out, ids, exclude=False)
    for graph in graphs(out.graph):
        for init in graph.initializer:
            if init.name in stashed and not init.raw_data:
                init.raw_data = stashed[init.name]
    kept = [f for f in out.functions if f.domain not in ours]
    del out.functions[:]
    out.functions.extend(kept)
    drop_unused_imports(out, (*ours, MS_DOMAIN))
    _static_block_casts(out, {b.node.output[0]: types.get(b.node.input[0]) for b in blocks})
    return out


def _raw_uint32(model: onnx.ModelProto) -> None:
    """uint32 initializers and Constant values held in ``uint64_data`` (the
    field ONNX gives them when not raw, as AMD Quark writes its uint32 zero
    points) re-encoded as ``raw_data``, the same values: tract 0.23 fails to
    load the first form (ShapeError/OutOfBounds)."""
    def fix(t: onnx.TensorProto) -> None:
        if t.data_type == onnx.TensorProto.UINT32 and len(t.uint64_data) and not t.raw_data:
            values = np.asarray(t.uint64_data, np.uint64).astype("<u4")
            t.ClearField("uint64_data")
            t.raw_data = values.tobytes()

    for graph in graphs(model.graph):
        for init in graph.initializer:
            fix(init)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    fix(attr.t)


def _static_block_casts(model: onnx.ModelProto, x_types: dict[str, TypeInfo | None]) -> None:
    """The last op of an inlined block-format node is ``CastLike(y, x)`` (x's
    type, float32 or float16): a ``Cast`` to that type where it is known, so
    that onnxruntime's constant folding (which has no CastLike kernel) folds
    a weight's whole decomposition."""
    for graph in graphs(model.graph):
        for node in graph.node:
            info = x_types.get(node.output[0]) if node.op_type == "CastLike" else None
            if info is None or not info.elem_type or node.domain not in ("", "ai.onnx"):
                continue
            node.op_type = "Cast"
            del node.input[1:]
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("to", info.elem_type))


def _unique_name(name: str, overload: str) -> str:
    """An operator's function name made unique by its overload
    (``ExtendedQuantizeLinear__int8``, ``..__int8_float64``)."""
    return f"{name}__{overload.replace('-', '_')}"


def _record_output_type(ext: ExtNode, types: dict[str, TypeInfo]) -> None:
    """Keep what is known of an Extended node's output as value_info, since
    parts of the inlined bodies (the float16 cast, run-time granularity) have
    shapes that onnx inference finds only with data propagation."""
    name = ext.node.output[0]
    info = types.get(name)
    graph = ext.graph
    if info is None or info.shape is None:
        return
    if any(v.name == name for v in (*graph.value_info, *graph.output, *graph.input)):
        return
    graph.value_info.append(helper.make_tensor_value_info(name, info.elem_type, info.shape))


def _record_block_output_type(b: BlockNode | DPUNode, types: dict[str, TypeInfo]) -> None:
    """A block-format node's (or a DPU instance norm's) output has x's type
    and shape: kept as value_info where x's are known (the inlined body's
    shapes come from Shape at run time)."""
    info = types.get(b.node.input[0])
    name = b.node.output[0]
    if info is None or info.shape is None or not info.elem_type:
        return
    if any(v.name == name for v in (*b.graph.value_info, *b.graph.output, *b.graph.input)):
        return
    b.graph.value_info.append(helper.make_tensor_value_info(name, info.elem_type, info.shape))


def _record_lstm_output_types(d: DPUNode, types: dict[str, TypeInfo]) -> None:
    """A DPU LSTM's outputs keep their inferred types and shapes (extql's
    schema infers them) as value_info: the inlined Scans' shapes come from
    Shape at run time."""
    for name in d.node.output:
        info = types.get(name) if name else None
        if info is None or info.shape is None or not info.elem_type:
            continue
        if any(v.name == name for v in (*d.graph.value_info, *d.graph.output, *d.graph.input)):
            continue
        d.graph.value_info.append(helper.make_tensor_value_info(name, info.elem_type, info.shape))
