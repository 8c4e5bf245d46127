"""Constant folding of quantization nodes with extql's kernels.

onnxruntime never constant-folds a custom operator, and it deliberately
leaves its own DequantizeLinear nodes unfolded (its QDQ fusion needs them), so
a weight stored quantized behind an Extended dequantize is dequantized again on
every run.  :func:`fold_constants` computes such nodes once, offline, with the
same kernels the library runs, and stores the result as an initializer: the
bits are the ones the node would have produced.

Folded: ExtendedQuantizeLinear / ExtendedDequantizeLinear (``com.amd.quark``),
the legacy VitisQuantizeLinear / VitisDequantizeLinear (``com.vai.quantize``)
and ``com.microsoft`` QuantizeLinear / DequantizeLinear, and Quark's block
formats BFPQuantizeDequantize / MXQuantizeDequantize (legacy BFPFixNeuron /
MXFixNeuron), whenever every input is a constant: an initializer (one that is
not also a graph input, which a caller could override), a ``Constant`` node,
or the folded output of another such node -- in the node's own graph or an
enclosing one (If / Loop / Scan bodies see the constants of the graphs
around them).

Quark stores the weights of its BFP16 / MX models as float32 initializers
with a block-format node after each, which onnxruntime quantizes again on
every run: folded, they become the float32 (or float16) initializer of the
values the node gives, and the node is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np
import onnx
from onnx import TensorProto, helper

from .. import rules
from ..api.linear import dequantize_linear, quantize_linear
from ..onnx import blocks
from ..onnx.graph import (
    Names,
    array_to_tensor,
    graphs,
    is_quantization_node,
    node_axis,
    node_label,
    subgraphs,
    tensor_to_array,
)
from ..onnx.microsoft import int32_wraps
from ..rules.types import (
    BY_ONNX,
    FLOAT64_CODE,
    FLOAT_CODES,
    FLOAT_DTYPES,
    MS_DOMAIN,
    MS_EXACT_TYPES,
    OP_NAMES,
    QTYPES,
    qtype_of,
)

__all__ = ["fold_constants"]

# Element types the com.microsoft operators share with extql's kernels (the
# kernels then give onnxruntime's bits; see tests/tools/test_fold.py): the 8/16-bit
# types, and int32 for dequantize where its 32-bit difference does not wrap.
_INT32 = QTYPES["int32"].onnx
_MS_QUANTIZE = MS_EXACT_TYPES
_MS_DEQUANTIZE = MS_EXACT_TYPES | {_INT32}


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return tensor_to_array(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), np.int64)
    return None


def _is_constant_node(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


class _Scope:
    """The constant values visible in one graph, with its enclosing scopes.

    Initializers are converted to NumPy only when a quantization node reads
    them (a model's weights are not all copied)."""

    def __init__(self, parent: _Scope | None, graph: onnx.GraphProto, top: bool) -> None:
        self.parent = parent
        self.graph = graph
        self.values: dict[str, np.ndarray] = {}
        self.protos: dict[str, onnx.TensorProto] = {}
        # Names defined here that are not constants shadow outer constants.
        self.shadowed: set[str] = {i.name for i in graph.input}
        inputs = {i.name for i in graph.input} if top else set()
        for init in graph.initializer:
            if init.name in inputs:
                continue  # a default value a caller may override
            if init.data_location == TensorProto.EXTERNAL and not init.raw_data:
                continue  # data not loaded: not known here
            self.protos[init.name] = init
            self.shadowed.discard(init.name)

    def get(self, name: str) -> np.ndarray | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            if name in scope.protos:
                value = tensor_to_array(scope.protos[name])
                if value is not None:
                    scope.values[name] = value
                return value
            if name in scope.shadowed:
                return None
            scope = scope.parent
        return None


def _evaluate(node: onnx.NodeProto, quantize: bool, args: list[np.ndarray | None]) -> (
    np.ndarray | None
):
    """The node's output from constant inputs, or None when extql cannot give
    exactly the output of this operator (a com.microsoft type or attribute
    outside what the kernels implement).  Raises ValueError for a node that
    would fail when run."""
    x, scale = args[0], args[1]
    zp = args[2] if len(args) > 2 else None
    attrs = {a.name: a.i for a in node.attribute}
    known = set(rules.MICROSOFT_ATTRIBUTES if node.domain == MS_DOMAIN else rules.DEFAULTS)
    if set(attrs) - known:
        return None  # an attribute the operator does not define: left to the runtime
    assert x is not None and scale is not None
    if any(qtype_of(a.dtype) is None and a.dtype not in FLOAT_CODES
           for a in (x, scale, zp) if a is not None):
        return None  # a type beyond the eight (int4, float8, ...): left to the runtime
    if node.domain == MS_DOMAIN:
        if scale.dtype != np.float32:
            return None
        code = None
        if zp is not None:
            code = onnx.helper.np_dtype_to_tensor_dtype(zp.dtype)
        elif not quantize:
            code = onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
        allowed = _MS_QUANTIZE if quantize else _MS_DEQUANTIZE
        if code is not None and code not in allowed:
            return None
        if quantize and x.dtype != np.float32:
            return None
        if not quantize and code == _INT32 and zp is not None:
            if int32_wraps(x, zp, node_axis(node)):
                return None  # onnxruntime's 32-bit difference wraps, the kernel's does not
    elif not quantize and qtype_of(x.dtype) is None:
        raise ValueError(f"{node_label(node)}: x has type {x.dtype}, not a quantized type")
    kwargs = {"axis": node_axis(node), "block_size": attrs.get("block_size", 0)}
    out_code = attrs.get("output_dtype", 0)
    if quantize:
        if out_code and out_code not in BY_ONNX:
            return None
        kwargs["output_dtype"] = BY_ONNX[out_code].dtype if out_code else None
        precision = attrs.get("precision", 0)
        kwargs["precision"] = (np.dtype(np.float64) if precision == FLOAT64_CODE
                               else FLOAT_DTYPES.get(precision))
    else:
        kwargs["output_dtype"] = FLOAT_DTYPES.get(out_code)
    try:
        if quantize:
            return quantize_linear(x, scale, zp, **kwargs)
        return dequantize_linear(x, scale, zp, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{node_label(node)}: cannot be folded: {exc}") from None


def _evaluate_block(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
    """A block-format node's output from its constant x, by the kernels (the
    library's bits).  Raises ValueError for a node that would fail when run."""
    try:
        return blocks.evaluate(node, x)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{node_label(node)}: cannot be folded: {exc}") from None


def _subgraph_uses(node: onnx.NodeProto) -> set[str]:
    """Every name a node's subgraphs read (their own names included)."""
    used: set[str] = set()
    for g in subgraphs(node):
        for sub in graphs(g):
            used.update(o.name for o in sub.output)
            for n in sub.node:
                used.update(n.input)
    return used


def fold_constants(
    model: onnx.ModelProto,
    *,
    keep: Callable[[onnx.NodeProto, onnx.GraphProto], bool] | None = None,
    report: list[str] | None = None,
) -> onnx.ModelProto:
    """Replace every quantization node whose inputs are all constant by its output.

    Extended (``com.amd.quark``), legacy Vitis (``com.vai.quantize``) and
    ``com.microsoft`` QuantizeLinear / DequantizeLinear nodes, and the block
    formats BFPQuantizeDequantize / MXQuantizeDequantize (legacy BFPFixNeuron
    / MXFixNeuron: Quark's BFP16 / MX weights, stored as float32 before such a
    node), are computed with extql's kernels (the bits the node produces in
    onnxruntime) and become initializers of their graph under the name of
    their output.  Chains fold
    too (a quantize of a constant feeding a dequantize).  An output that is a
    graph output becomes a ``Constant`` node of that name instead, so the
    graph's interface does not change.  Initializers and ``Constant`` nodes
    that nothing reads any more are removed, as are fallback functions and the
    opset imports of the quantization domains that no node uses any more.

    ``keep(node, graph)`` (optional) returns True for a node that must stay
    although it could be folded (:func:`extql.optimize` leaves the
    com.microsoft nodes to onnxruntime's QDQ fusion this way).  com.microsoft nodes
    whose types or attributes extql does not implement (int4, a float16 scale,
    an int32 dequantize whose 32-bit difference would wrap) are left as they
    are, with a line in ``report``.  A node that would fail at run time raises
    ``ValueError`` naming it.  The input model is not modified.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    namer = Names(out)
    messages: list[str] = [] if report is None else report
    folded_any = _fold_graph(out.graph, None, True, keep, namer, messages)
    if folded_any:
        _remove_dead(out.graph, set())
        _drop_unused(out)
    return out


def _fold_graph(
    graph: onnx.GraphProto,
    parent: _Scope | None,
    top: bool,
    keep: Callable[[onnx.NodeProto, onnx.GraphProto], bool] | None,
    namer: Names,
    messages: list[str],
) -> bool:
    scope = _Scope(parent, graph, top)
    outputs = {o.name for o in graph.output}
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    folded = False
    for node in graph.node:
        if _is_constant_node(node) and node.output:
            value = _constant_node_value(node)
            if value is not None:
                scope.values[node.output[0]] = value
                scope.shadowed.discard(node.output[0])
            new_nodes.append(node)
            continue
        for sub in subgraphs(node):
            folded |= _fold_graph(sub, scope, False, keep, namer, messages)
        quantize = is_quantization_node(node)
        value = None
        if blocks.block_family(node) is not None and len(node.input) == 1 and node.input[0] \
                and len(node.output) == 1:
            x = scope.get(node.input[0])
            if x is not None and not (keep is not None and keep(node, graph)):
                value = _evaluate_block(node, x)
        elif quantize is not None and 2 <= len(node.input) <= 3 and len(node.output) == 1:
            args = [scope.get(n) if n else None for n in node.input]
            constant = all(a is not None for a in args[:2]) and (
                len(args) < 3 or not node.input[2] or args[2] is not None
            )
            if constant and not (keep is not None and keep(node, graph)):
                value = _evaluate(node, quantize, args)
                if value is None:
                    messages.append(f"{node_label(node)}: not folded: extql does not implement "
                                    "its types or attributes exactly as this operator")
        if value is None:
            for name in node.output:
                scope.shadowed.add(name)
            new_nodes.append(node)
            continue
        folded = True
        name = node.output[0]
        scope.values[name] = value
        scope.shadowed.discard(name)
        if name in outputs:
            new_nodes.append(
                helper.make_node("Constant", [], [name], value=array_to_tensor(name, value),
                                 name=node.name or namer(name))
            )
        else:
            new_inits.append(array_to_tensor(name, value))
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    return folded


def _remove_dead(graph: onnx.GraphProto, outer_used: Collection[str]) -> set[str]:
    """Remove initializers and Constant nodes nothing reads (here or in a
    subgraph); returns the names this graph reads from enclosing scopes."""
    # Subgraphs first: what they read counts as used here.
    used: set[str] = set(outer_used) | {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        used |= _subgraph_uses(node)
    kept_nodes = [
        n for n in graph.node
        if not (_is_constant_node(n) and n.output and not any(o in used for o in n.output))
    ]
    if len(kept_nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept_nodes)
    inputs = {i.name for i in graph.input}
    kept_inits = [i for i in graph.initializer if i.name in used or i.name in inputs]
    if len(kept_inits) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept_inits)
    for node in graph.node:
        for sub in subgraphs(node):
            _remove_dead(sub, set())
    return used


def _drop_unused(model: onnx.ModelProto) -> None:
    """Remove the Extended fallback functions and the imports of the
    quantization domains that no node uses any more."""
    used_ops = {(n.domain, n.op_type) for g in graphs(model.graph) for n in g.node}
    functions = [
        f for f in model.functions if f.domain not in OP_NAMES or (f.domain, f.name) in used_ops
    ]
    if len(functions) != len(model.functions):
        del model.functions[:]
        model.functions.extend(functions)
    used = {d for d, _ in used_ops}
    for f in model.functions:
        used.update(n.domain for n in f.node)
        used.add(f.domain)
    ours = {*OP_NAMES, MS_DOMAIN}
    keep = [o for o in model.opset_import if o.domain not in ours or o.domain in used]
    if len(keep) != len(model.opset_import):
        del model.opset_import[:]
        model.opset_import.extend(keep)
