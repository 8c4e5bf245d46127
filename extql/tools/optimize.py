"""``extql.optimize``: the fastest form of a quantized model for onnxruntime.

Every quantization node keeps its bits; what changes is who computes it and
when:

1. **Lower** -- Extended nodes that the official operator computes bit for
   bit become ai.onnx QuantizeLinear / DequantizeLinear
   (:func:`extql.lower_to_standard`).  onnxruntime then sees the model it
   would see with official Q/DQ: it fuses 8-bit Q/DQ around Conv, MatMul,
   Gemm, ... into QLinearConv / QGemm / QLinearMatMul, turns dequantized
   8-bit weights of a MatMul into MatMulNBits, and drops the Q/DQ pairs its
   QDQ rules drop -- so the result runs as fast as, and gives the bits of,
   the official model.
2. **Fold** -- every Extended node left whose inputs are constant (weights
   stored quantized behind an Extended dequantize: onnxruntime never folds a
   custom node, so it would dequantize them on every run) is computed once
   with extql's kernels and
   stored as a float32 (or quantized) initializer
   (:func:`extql.fold_constants`).  The Conv / Gemm / MatMul reading it then
   get onnxruntime's pre-packed and NCHWc paths.  Not folded: ai.onnx and
   com.microsoft nodes (lowered or not), which onnxruntime treats exactly as
   in an official model: it fuses their 8-bit weight dequantizers with the
   Conv / MatMul / Gemm / Mul ... reading them, so the result keeps the
   official model's speed and output bits.
3. **Kernels** -- 16-bit (int16 / uint16) activation quantizers and
   dequantizers, which onnxruntime does not fuse on the CPU, run in extql's
   kernels (faster than onnxruntime's own, the same bits): Extended ones are
   not lowered, com.microsoft ones become Extended.

What stays custom (float16 / bfloat16, int32 / uint32, 16-bit types below
ai.onnx opset 21) runs in extql's kernels through the library.

Quark's block formats (BFPQuantizeDequantize / MXQuantizeDequantize and the
legacy names) have no official counterpart to lower to: the nodes on
constants (Quark's BFP16 / MX weights, stored as float32 before such a node)
are folded in step 2, the activation nodes run in the library's kernels.
"""

from __future__ import annotations

import warnings

import onnx

from ..onnx.blocks import block_nodes
from ..onnx.graph import graphs, is_quantization_node
from ..rules.types import DEFAULT_QTYPE, DOMAIN, MS_DOMAIN, MS_EXACT_TYPES, OP_NAMES, QTYPES
from .fold import fold_constants
from .lower import block_reason, lower_to_standard

__all__ = ["optimize"]

# Activation types onnxruntime does not fuse on the CPU, where extql's kernels
# are faster than its own QuantizeLinear / DequantizeLinear.
_KERNEL_TYPES = {QTYPES["int16"].onnx, QTYPES["uint16"].onnx}
# com.microsoft types extql's kernels compute exactly as onnxruntime does.
_RAISE_TYPES = MS_EXACT_TYPES
# op_type prefix that hides an Extended node from lower_to_standard.
_HIDDEN = "__extql_not_lowered__"


class _Facts:
    """Element types of the constants of a model, and which values are
    constant."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.elem_of: dict[str, int] = {}
        self.constants: set[str] = set()
        graph_inputs = {i.name for i in model.graph.input}
        for graph in graphs(model.graph):
            for init in graph.initializer:
                self.elem_of[init.name] = init.data_type
                if init.name not in graph_inputs:
                    self.constants.add(init.name)
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    self.constants.update(node.output)
                    for attr in node.attribute:
                        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                            self.elem_of[node.output[0]] = attr.t.data_type

    def quantized_type(self, node: onnx.NodeProto) -> int | None:
        """The quantized element type of a Q/DQ node, where its constants say."""
        if len(node.input) > 2 and node.input[2]:
            return self.elem_of.get(node.input[2])
        if is_quantization_node(node) is False:
            return self.elem_of.get(node.input[0])
        return DEFAULT_QTYPE.onnx

    def is_activation(self, node: onnx.NodeProto) -> bool:
        return bool(node.input) and node.input[0] not in self.constants


def _keep_standard(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """``keep`` for :func:`fold_constants`: com.microsoft nodes stay for
    onnxruntime, which fuses their 8-bit dequantizers with the node that reads
    them (QLinearConv, QGemm, QLinearMul, MatMulNBits, ...) exactly as in an
    official model, and folds their constant quantizers itself."""
    return node.domain == MS_DOMAIN


def _kernel_node(facts: _Facts, node: onnx.NodeProto) -> bool:
    """A 16-bit activation quantize / dequantize: extql's kernel runs it."""
    return facts.is_activation(node) and facts.quantized_type(node) in _KERNEL_TYPES


def _raise_to_extended(model: onnx.ModelProto, facts: _Facts, every: bool) -> None:
    """com.microsoft Q/DQ -> the Extended operator (the same bits: both follow
    the official operator for the 8- and 16-bit types with a float32 scale),
    run by extql's kernel: the 16-bit activation nodes, or (``every``) all
    8/16-bit nodes."""
    raised = False
    for graph in graphs(model.graph):
        for node in graph.node:
            quantize = is_quantization_node(node)
            if node.domain != MS_DOMAIN or quantize is None or len(node.input) < 2:
                continue
            wanted = facts.quantized_type(node) in _RAISE_TYPES if every else _kernel_node(
                facts, node)
            if not wanted or facts.elem_of.get(node.input[1]) != onnx.TensorProto.FLOAT:
                continue
            if any(a.name != "axis" for a in node.attribute):
                continue
            node.domain = DOMAIN
            node.op_type = OP_NAMES[DOMAIN][0 if quantize else 1]
            raised = True
    if raised and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))


def _lower_except_kernel_nodes(model: onnx.ModelProto, facts: _Facts,
                               messages: list[str]) -> onnx.ModelProto:
    """lower_to_standard, with the 16-bit activation nodes kept Extended."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    for graph in graphs(work.graph):
        for node in graph.node:
            if node.domain in OP_NAMES and _kernel_node(facts, node):
                node.op_type = _HIDDEN + node.op_type
    with warnings.catch_warnings():
        # Nodes the model's opset keeps from lowering are in the report.
        warnings.simplefilter("ignore", UserWarning)
        lowered = lower_to_standard(work, report=messages)
    for graph in graphs(lowered.graph):
        for node in graph.node:
            if node.op_type.startswith(_HIDDEN):
                node.op_type = node.op_type[len(_HIDDEN):]
    # Fallback functions of the operators that are still used.
    used = {(n.domain, n.op_type) for g in graphs(lowered.graph) for n in g.node}
    have = {(f.domain, f.name, f.overload) for f in lowered.functions}
    for f in model.functions:
        if (f.domain, f.name) in used and (f.domain, f.name, f.overload) not in have:
            lowered.functions.append(f)
    return lowered


def optimize(
    model: onnx.ModelProto, *, fuse: bool = True, report: list[str] | None = None
) -> onnx.ModelProto:
    """The fastest form of ``model`` for onnxruntime with the extql library,
    keeping the bits of every quantization node.

    Lowers the Extended nodes that the official QuantizeLinear /
    DequantizeLinear compute exactly (so onnxruntime fuses them as in an
    official Q/DQ model) -- except 16-bit activation nodes, which extql's
    kernels run faster than onnxruntime (com.microsoft ones become Extended
    for that) -- then folds every Extended node with constant inputs (see the
    module docstring).  The result has the output bits of the same model
    with official Q/DQ.

    ``fuse=False`` lowers nothing: every 8/16-bit node (com.microsoft ones
    too) runs in extql's kernels and every constant one is folded, so the
    float ops run in float32 on dequantized values instead of onnxruntime's
    quantized kernels.  That is faster where those kernels are slower than
    float (attention blocks: QLinearMatMul with many Q/DQ around it); the
    quantization nodes keep their bits, the float outputs differ from the
    official model's in their last bits.

    Folded weights are stored as float32: the model file grows (4x for
    8-bit weights).  The lines of ``report`` (when given) say which nodes
    were left and why.  The input is not modified; a model problem raises
    ``ValueError`` naming the node.
    """
    messages: list[str] = [] if report is None else report
    work = onnx.ModelProto()
    work.CopyFrom(model)
    facts = _Facts(work)
    _raise_to_extended(work, facts, every=not fuse)
    lines: list[str] = []
    if not fuse:
        out = fold_constants(work, report=lines)
    else:
        lowered = _lower_except_kernel_nodes(work, facts, lines)
        out = fold_constants(lowered, keep=_keep_standard, report=lines)
    # The block-format nodes left (activations: the folded weights are gone)
    # are said once each, after the others.
    said = {block_reason(b) for b in block_nodes(work)}
    messages.extend(line for line in lines if line not in said)
    messages.extend(block_reason(b) for b in block_nodes(out))
    return out
