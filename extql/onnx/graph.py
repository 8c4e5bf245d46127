"""What every ONNX-model tool of extql shares: finding the quantization nodes,
walking subgraphs, the static types of values, fresh names, tensors.

* :class:`ExtNode` / :func:`extended_nodes` -- the Extended (and legacy
  Vitis, optionally com.microsoft) Q/DQ nodes of a model, subgraphs included;
* :func:`subgraphs`, :func:`graphs` / :func:`walk_nodes` -- the one walk
  into If / Loop / Scan bodies (graphs of a model, nodes of a node list);
* :func:`infer_types` -- element type and shape of every value that can be
  known (onnx shape inference plus what the model states);
* :class:`Names`, :func:`tensor_to_array` / :func:`array_to_tensor`
  (bfloat16 as ``ml_dtypes.bfloat16``) and small graph edits.

The tools themselves are the other modules of :mod:`extql.tools`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import rules
from ..rules.types import EXTENDED_OPS, MS_DOMAIN, MS_QDQ, QTYPES, QUANTIZED, QUANTIZED_BY_ONNX
from .schemas import register_schemas

__all__ = [
    "ExtNode",
    "TypeInfo",
    "QDQ_OPS",
    "graphs",
    "subgraphs",
    "walk_nodes",
    "extended_nodes",
    "is_quantization_node",
    "node_axis",
    "node_label",
    "type_name",
    "model_opset",
    "set_opset",
    "infer_types",
    "static_shape",
    "zero_point_type",
    "copy_model",
    "Names",
    "constant_value",
    "replace_node",
    "drop_unused_imports",
    "tensor_to_array",
    "array_to_tensor",
    "INFER_KEEP_BYTES",
]

#: (domain, op_type) -> True for quantize, False for dequantize: the Extended,
#: legacy Vitis and com.microsoft QuantizeLinear / DequantizeLinear operators.
QDQ_OPS: dict[tuple[str, str], bool] = {
    **EXTENDED_OPS,
    **{(MS_DOMAIN, name): quantize for name, quantize in MS_QDQ.items()},
}

_BF16 = QTYPES["bfloat16"]


def node_axis(node: onnx.NodeProto) -> int:
    """The node's ``axis`` (when absent, its default: 1, of the Extended and
    the com.microsoft operators alike)."""
    for attr in node.attribute:
        if attr.name == "axis":
            return int(attr.i)
    return rules.DEFAULTS["axis"]


def node_block_size(node: onnx.NodeProto) -> int:
    """The node's ``block_size`` (when absent, its default: 0, per tensor or
    per axis)."""
    for attr in node.attribute:
        if attr.name == "block_size" and attr.type == onnx.AttributeProto.INT:
            return int(attr.i)
    return rules.DEFAULTS["block_size"]


def node_label(node: onnx.NodeProto) -> str:
    """``<op_type> node <name>`` for messages (the first output's name when
    the node has no name)."""
    if node.name:
        name = node.name
    elif node.output:
        name = f"(unnamed, output {node.output[0]!r})"
    else:
        name = "(unnamed)"
    return f"{node.op_type} node {name}"


def type_name(code: int) -> str:
    """An ONNX element type code as users read it: ``int8``, ``float``, ...
    (extql's own names for its types: an older onnx may not know int2)."""
    known = QUANTIZED_BY_ONNX.get(code)
    if known is not None:
        return known.name
    try:
        return helper.tensor_dtype_to_string(code).replace("TensorProto.", "").lower()
    except (KeyError, ValueError):
        return f"ONNX type {code}"


@dataclasses.dataclass
class ExtNode:
    """An Extended Q/DQ node and what is known about it."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    quantize: bool

    @property
    def microsoft(self) -> bool:
        """A com.microsoft QuantizeLinear / DequantizeLinear node."""
        return self.node.domain == MS_DOMAIN

    @property
    def has_zero_point(self) -> bool:
        return len(self.node.input) >= 3 and self.node.input[2] != ""

    @property
    def label(self) -> str:
        return node_label(self.node)

    @property
    def axis(self) -> int:
        return node_axis(self.node)

    @property
    def block_size(self) -> int:
        return node_block_size(self.node)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by the node's attributes (If branches, Loop / Scan bodies)."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph inside it (If / Loop / Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from graphs(sub)


def walk_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """Every node of ``nodes`` (a graph's or a function's), each followed by
    the nodes of its subgraphs."""
    for node in nodes:
        yield node
        for sub in subgraphs(node):
            yield from walk_nodes(sub.node)


def is_quantization_node(node: onnx.NodeProto) -> bool | None:
    """True for a quantize, False for a dequantize (Extended, legacy Vitis or
    com.microsoft), None for any other node."""
    return QDQ_OPS.get((node.domain, node.op_type))


def extended_nodes(model: onnx.ModelProto, *, microsoft: bool = False) -> list[ExtNode]:
    """Every ExtendedQuantizeLinear/ExtendedDequantizeLinear (and legacy Vitis)
    node of the model, subgraphs included, in graph order; with
    ``microsoft``, the com.microsoft QuantizeLinear / DequantizeLinear nodes
    too (see :mod:`extql.onnx.microsoft`)."""
    out = []
    for graph in graphs(model.graph):
        for node in graph.node:
            key = (node.domain, node.op_type)
            if key in EXTENDED_OPS:
                out.append(ExtNode(node, graph, EXTENDED_OPS[key]))
            elif microsoft and node.domain == MS_DOMAIN and node.op_type in MS_QDQ:
                out.append(ExtNode(node, graph, MS_QDQ[node.op_type]))
    return out


def model_opset(model: onnx.ModelProto, domain: str = "") -> int | None:
    """The version the model imports for ``domain`` ("" = ai.onnx), or None."""
    for imp in model.opset_import:
        if imp.domain == domain or (domain == "" and imp.domain == "ai.onnx"):
            return int(imp.version)
    return None


def set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    """Import ``domain`` at ``version`` unless the model imports it already."""
    if model_opset(model, domain) is None:
        model.opset_import.append(helper.make_opsetid(domain, version))


@dataclasses.dataclass
class TypeInfo:
    elem_type: int
    shape: tuple[int | str | None, ...] | None  # None: rank unknown


def _type_info(tp: onnx.TypeProto) -> TypeInfo | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if tt.elem_type == 0:
        return None
    shape = None
    if tt.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
        )
    return TypeInfo(tt.elem_type, shape)


#: Initializers larger than this are left out of what onnx serialises for
#: inference and inlining (their contents are not needed; 2 GiB limit).
INFER_KEEP_BYTES = 1 << 16


def infer_types(model: onnx.ModelProto) -> dict[str, TypeInfo]:
    """Element type and shape of every value that can be known, by name.

    Runs onnx shape inference (which knows the Extended operators: their
    schemas are registered first, :mod:`extql.onnx.schemas`) on a copy of
    the model and collects graph inputs, outputs, value_info, initializers
    and Constant outputs of the main graph and all subgraphs.  Inference
    errors are not fatal: what was known before is kept.
    """
    register_schemas()

    # Inference needs the initializers' types and shapes, not their contents:
    # large ones are emptied for the call (models over 2 GiB cannot be
    # serialised for it otherwise, and it is faster).
    stashed = []
    for graph in graphs(model.graph):
        for init in graph.initializer:
            if len(init.raw_data) > INFER_KEEP_BYTES:
                stashed.append((init, init.raw_data))
                init.ClearField("raw_data")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a model inference cannot handle is still usable
        inferred = model
    finally:
        for init, data in stashed:
            init.raw_data = data
    types: dict[str, TypeInfo] = {}
    for source in (model, inferred):
        for graph in graphs(source.graph):
            for vi in (*graph.input, *graph.value_info, *graph.output):
                info = _type_info(vi.type)
                if info is not None and (vi.name not in types or types[vi.name].shape is None):
                    types[vi.name] = info
            for init in graph.initializer:
                types[init.name] = TypeInfo(init.data_type, tuple(init.dims))
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    for attr in node.attribute:
                        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                            types[node.output[0]] = TypeInfo(attr.t.data_type, tuple(attr.t.dims))
    return types


def static_shape(name: str, types: dict[str, TypeInfo]) -> tuple | None:
    """The shape of a value where known (its rank at least), else None."""
    info = types.get(name)
    return None if info is None else info.shape


def zero_point_type(ext: ExtNode, types: dict[str, TypeInfo]) -> int | None:
    """ONNX type code of the zero point (for dequantize: of x when the zero
    point's own type is unknown); None without a zero point.  Raises
    ValueError when the type is needed but unknown."""
    node = ext.node
    if not ext.has_zero_point:
        return None
    info = types.get(node.input[2])
    if info is None and not ext.quantize:
        info = types.get(node.input[0])
    if info is None:
        raise ValueError(
            f"{ext.label}: cannot determine the element type of the zero point "
            f"{node.input[2]!r}; give the model a value_info (or graph input type) for it, "
            "or make it an initializer"
        )
    if info.elem_type not in QUANTIZED_BY_ONNX:
        raise ValueError(
            f"{ext.label}: the zero point {node.input[2]!r} has type "
            f"{type_name(info.elem_type)}, which is not one of "
            f"{', '.join(QUANTIZED)}"
        )
    return info.elem_type


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy (the tools never modify their input)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


class Names:
    """Fresh value names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.used: set[str] = set()
        for graph in graphs(model.graph):
            self.used.update(i.name for i in graph.input)
            self.used.update(i.name for i in graph.initializer)
            for node in graph.node:
                self.used.update(node.output)
                self.used.update(node.input)
                if node.name:
                    self.used.add(node.name)
        self.count = 0

    def __call__(self, base: str) -> str:
        while True:
            self.count += 1
            name = f"{base}__extql{self.count}"
            if name not in self.used:
                self.used.add(name)
                return name


def tensor_to_array(t: onnx.TensorProto) -> np.ndarray | None:
    """A TensorProto's value as NumPy (bfloat16 as ``ml_dtypes.bfloat16``);
    None when its data is external and not loaded."""
    if t.data_location == TensorProto.EXTERNAL and not t.raw_data:
        return None
    if t.data_type == _BF16.onnx:
        shape = tuple(t.dims)
        if t.raw_data:
            bits = np.frombuffer(t.raw_data, dtype=np.uint16)
        else:
            bits = np.asarray(t.int32_data, dtype=np.uint32).astype(np.uint16)
        return bits.reshape(shape).view(_BF16.dtype).copy()
    return numpy_helper.to_array(t)


def array_to_tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    """A TensorProto named ``name`` holding ``value`` (raw bytes for bfloat16)."""
    value = np.asarray(value)
    if value.dtype == _BF16.dtype:
        return helper.make_tensor(
            name, _BF16.onnx, value.shape, value.view(np.uint16).tobytes(), raw=True
        )
    return numpy_helper.from_array(value, name)


def constant_value(name: str, graph_stack: list[onnx.GraphProto]) -> np.ndarray | None:
    """The value of an initializer or Constant node output named ``name`` in
    the first graph of ``graph_stack`` that has one; None when not constant
    (or its data is external and not loaded)."""
    for graph in graph_stack:
        for init in graph.initializer:
            if init.name == name:
                return tensor_to_array(init)
        for node in graph.node:
            is_constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            if is_constant and name in node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        return tensor_to_array(attr.t)
    return None


def replace_node(graph: onnx.GraphProto, node: onnx.NodeProto,
                 new: list[onnx.NodeProto]) -> None:
    """Put the nodes ``new`` where ``node`` is in ``graph``."""
    for i, n in enumerate(graph.node):
        if n is node:
            del graph.node[i]
            for j, m in enumerate(new):
                graph.node.insert(i + j, m)
            return
    raise AssertionError("node not found in its graph")


def drop_unused_imports(model: onnx.ModelProto, domains: Iterable[str]) -> None:
    """Remove the opset imports of ``domains`` that no node (of the graphs or
    of a function) uses."""
    domains = set(domains)
    used = {n.domain for g in graphs(model.graph) for n in g.node}
    for f in model.functions:
        used.update(n.domain for n in f.node)
    keep = [o for o in model.opset_import if o.domain not in domains or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
