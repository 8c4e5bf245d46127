"""Comparing the quantization nodes of a model between two paths, node by node.

extql promises that the native kernels and the fallback functions give the
same bits for the same inputs (docs/operators/index.rst).  It does not promise
that a whole model does: onnxruntime optimises a graph with custom nodes and
one with their standard-op decompositions differently (it folds a weight's
DequantizeLinear, pre-packs weights, fuses the decomposition's Mul into a
MatMul), so float ops downstream may round differently, and a quantization
node fed by them then sees other inputs.  So ``extql run --compare-fallback``
compares where the promise holds:

1. the model runs with the library, with every quantization node's inputs and
   output (Extended and com.microsoft Q/DQ of the main graph) exposed as
   extra outputs (:func:`expose`);
2. a model of those nodes alone, each with its own inputs
   (:func:`isolated_nodes`), runs through the fallback functions without the
   library on exactly the inputs the native run gave each node;
3. each node's two outputs are compared bit for bit (:func:`compare_arrays`).

The whole model's outputs are compared too, as information.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

from ..onnx.graph import ExtNode, TypeInfo, extended_nodes

__all__ = ["QuantNode", "quantization_nodes", "expose", "isolated_nodes", "compare_arrays"]


@dataclasses.dataclass
class QuantNode:
    """One quantization node of the main graph and the names of its values."""

    ext: ExtNode
    runtime_inputs: list[str]  # inputs that are not initializers (taken from the native run)
    output: str


def quantization_nodes(model: onnx.ModelProto) -> list[QuantNode]:
    """Extended and com.microsoft Q/DQ nodes of the main graph, in order."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for ext in extended_nodes(model, microsoft=True):
        if ext.graph is not model.graph:
            continue  # nodes in If/Loop bodies are not compared
        ins = [n for n in ext.node.input if n and n not in inits]
        out.append(QuantNode(ext, ins, ext.node.output[0]))
    return out


def _value_info(name: str, types: dict[str, TypeInfo]) -> onnx.ValueInfoProto | None:
    info = types.get(name)
    if info is None:
        return None
    shape = None if info.shape is None else list(info.shape)
    return helper.make_tensor_value_info(name, info.elem_type, shape)


def expose(
    model: onnx.ModelProto, nodes: list[QuantNode], types: dict[str, TypeInfo]
) -> tuple[onnx.ModelProto, list[QuantNode]]:
    """A copy of ``model`` whose outputs also include every value the
    comparison needs (each node's runtime inputs and its output); returns it
    and the nodes whose values could all be typed (the others are skipped)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph_inputs = {i.name for i in out.graph.input}
    present = {o.name for o in out.graph.output}
    kept = []
    for q in nodes:
        names = [n for n in [*q.runtime_inputs, q.output] if n not in graph_inputs]
        infos = [_value_info(n, types) for n in names]
        if any(i is None for i in infos):
            continue
        for name, info in zip(names, infos, strict=True):
            if name not in present:
                out.graph.output.append(info)
                present.add(name)
        kept.append(q)
    return out, kept


def isolated_nodes(
    model: onnx.ModelProto, nodes: list[QuantNode], types: dict[str, TypeInfo]
) -> tuple[onnx.ModelProto, dict[str, str], dict[str, str]]:
    """A model of the given nodes only, each reading its own graph inputs.

    Returns (model, graph input name -> value name in the original model,
    graph output name -> original output name).  Initializers the nodes read
    are copied; opset imports and IR version are the original's.
    """
    inits = {i.name: i for i in model.graph.initializer}
    new_nodes, g_inputs, g_outputs, g_inits = [], [], [], {}
    feed_of: dict[str, str] = {}
    out_of: dict[str, str] = {}
    for i, q in enumerate(nodes):
        node = onnx.NodeProto()
        node.CopyFrom(q.ext.node)
        for k, name in enumerate(node.input):
            if not name:
                continue
            if name in inits:
                g_inits[name] = inits[name]
                continue
            alias = f"extql_node{i}_in{k}"
            info = types[name]
            g_inputs.append(helper.make_tensor_value_info(
                alias, info.elem_type, None if info.shape is None else list(info.shape)))
            feed_of[alias] = name
            node.input[k] = alias
        alias = f"extql_node{i}_out"
        info = types[q.output]
        g_outputs.append(helper.make_tensor_value_info(
            alias, info.elem_type, None if info.shape is None else list(info.shape)))
        out_of[alias] = q.output
        node.output[0] = alias
        new_nodes.append(node)
    graph = helper.make_graph(new_nodes, "extql_quantization_nodes", g_inputs, g_outputs,
                              list(g_inits.values()))
    iso = helper.make_model(graph, opset_imports=list(model.opset_import),
                            ir_version=model.ir_version)
    return iso, feed_of, out_of


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype.kind in "fV" or a.dtype.name == "bfloat16":
        return a.view(f"u{a.dtype.itemsize}")
    return a


def _isnan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.isnan(a.astype(np.float32))
    return np.zeros(a.shape, bool)


def compare_arrays(a: np.ndarray, b: np.ndarray) -> str | None:
    """None when ``a`` and ``b`` have the same dtype, shape and bits (any NaN
    matches any NaN: payloads are not part of the contract); else one line
    saying how they differ."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if a.dtype == object:
        return None if np.array_equal(a, b) else "differs"
    both_nan = (_isnan(a) & _isnan(b)).reshape(-1)
    bad = np.flatnonzero((_bits(a).reshape(-1) != _bits(b).reshape(-1)) & ~both_nan)
    if not bad.size:
        return None
    i = bad[:5]
    text = (f"{bad.size} of {a.size} elements differ, e.g. at {i.tolist()}: "
            f"{a.reshape(-1)[i].tolist()} vs {b.reshape(-1)[i].tolist()}")
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        fa, fb = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
        finite = np.isfinite(fa) & np.isfinite(fb)
        if finite.any():
            text += f"; largest difference {float(np.max(np.abs(fa - fb)[finite])):.3g}"
    return text
