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
2. **Fold** -- every quantization node left whose inputs are constant
   (weights stored quantized behind an Extended or com.microsoft dequantize,
   which onnxruntime never folds) is computed once with extql's kernels and
   stored as a float32 (or quantized) initializer
   (:func:`extql.fold_constants`).  The Conv / Gemm / MatMul reading it then
   get onnxruntime's pre-packed and NCHWc paths.  Not folded: ai.onnx nodes
   (lowered or not: onnxruntime treats them exactly as in the official model,
   which keeps the official model's output bits), and com.microsoft 8-bit
   weight dequantizers (and the int32 bias dequantizers beside them) feeding
   a Conv, ConvTranspose, MatMul or Gemm, which onnxruntime's QDQ fusion
   needs.

What stays custom (float16 / bfloat16, int32 / uint32, 16-bit types below
ai.onnx opset 21) runs in extql's kernels through the library.
"""

from __future__ import annotations

import warnings

import onnx

from .fold import MS_DOMAIN, fold_constants, is_quantization_node
from .passes import _graphs, lower_to_standard

__all__ = ["optimize"]

# Ops whose quantized weight input onnxruntime's QDQ fusion reads from a
# DequantizeLinear (QLinearConv, QGemm, QLinearMatMul, MatMulNBits ...).
_WEIGHT_CONSUMERS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
# Quantized element types onnxruntime's fusions take from a weight DQ; int32
# is the bias of QLinearConv / QGemm.
_FUSED_TYPES = {
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT32,
}


def _fusion_keeper(model: onnx.ModelProto):
    """A ``keep(node, graph)`` for :func:`fold_constants`: True for a
    standard-domain (ai.onnx or com.microsoft) dequantize of an 8-bit weight
    (or an int32 bias) that a Conv / ConvTranspose / MatMul / Gemm reads."""
    consumers: dict[str, set[str]] = {}
    for graph in _graphs(model.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx"):
                for name in node.input:
                    consumers.setdefault(name, set()).add(node.op_type)
    elem_of: dict[str, int] = {}
    for graph in _graphs(model.graph):
        for init in graph.initializer:
            elem_of[init.name] = init.data_type
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        elem_of[node.output[0]] = attr.t.data_type

    def keep(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
        if node.domain not in ("", "ai.onnx", MS_DOMAIN) or is_quantization_node(node) is not False:
            return False
        if elem_of.get(node.input[0]) not in _FUSED_TYPES:
            return False
        return bool(consumers.get(node.output[0], set()) & _WEIGHT_CONSUMERS)

    return keep


def optimize(model: onnx.ModelProto, *, report: list[str] | None = None) -> onnx.ModelProto:
    """The fastest form of ``model`` for onnxruntime with the extql library,
    keeping the bits of every quantization node.

    Lowers the Extended nodes that the official QuantizeLinear /
    DequantizeLinear compute exactly (so onnxruntime fuses them as in an
    official Q/DQ model), then folds every quantization node with constant
    inputs that onnxruntime's fusions do not need (see the module docstring).
    Folded weights are stored as float32: the model file grows (about 4x for
    8-bit weights).  The lines of ``report`` (when given) say which nodes
    were left and why.  The input is not modified; a model problem raises
    ``ValueError`` naming the node.
    """
    messages: list[str] = [] if report is None else report
    with warnings.catch_warnings():
        # Nodes the model's opset keeps from lowering are in the report.
        warnings.simplefilter("ignore", UserWarning)
        lowered = lower_to_standard(model, report=messages)
    return fold_constants(lowered, keep=_fusion_keeper(lowered), report=messages)
