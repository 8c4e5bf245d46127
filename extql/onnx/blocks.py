"""Quark's block-format nodes in ONNX models: which they are, their attributes,
their static checks, their value from a constant input.

``BFPQuantizeDequantize`` / ``MXQuantizeDequantize`` (``com.amd.quark``) and
the legacy ``BFPFixNeuron`` / ``MXFixNeuron`` (``com.vai.quantize``) take one
input x (float32 or float16) and give y of x's type and shape
(docs/operators/bfp_quantize_dequantize.rst, mx_quantize_dequantize.rst).
Their whole behaviour is in their attributes, whose rules are
:mod:`extql.rules.blocks`'s: the NumPy API and the onnxruntime library check
them with the same words, and so does everything here --

* :data:`BLOCK_OPS`, :func:`block_family`, :func:`block_nodes` -- finding
  the nodes (subgraphs included);
* :func:`node_attributes` -- a node's attributes as the Python values the
  NumPy API takes (strings decoded, float attributes as the float32 values
  onnx stores);
* :func:`check_block_node` -- every problem the attributes and x's static
  type and rank prove (``extql check``, the graph passes);
* :func:`evaluate` -- the node's output for a constant x, by the kernels
  (:func:`extql.fold_constants`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from ..api.blocks import bfp_quantize_dequantize, mx_quantize_dequantize
from ..rules.blocks import (
    BFP_LEGACY_OP,
    BFP_OP,
    MX_LEGACY_OP,
    MX_OP,
    BFPAttrs,
    MXAttrs,
    check_axis,
    check_bfp,
    check_mx,
    check_x_type,
)
from ..rules.types import DOMAIN, FLOAT64_CODE, FLOAT_NAMES, LEGACY_DOMAIN, QUANTIZED_BY_ONNX
from .graph import TypeInfo, graphs, node_label

__all__ = [
    "BLOCK_OP_NAMES",
    "BLOCK_OPS",
    "BlockNode",
    "block_family",
    "block_nodes",
    "node_attributes",
    "checked_attributes",
    "x_type_name",
    "check_block_node",
    "evaluate",
]

#: (BFP operator, MX operator) of each domain: the current and the legacy
#: names (the names extql's onnxruntime library registers).
BLOCK_OP_NAMES: dict[str, tuple[str, str]] = {
    DOMAIN: (BFP_OP, MX_OP),
    LEGACY_DOMAIN: (BFP_LEGACY_OP, MX_LEGACY_OP),
}
#: (domain, op_type) -> "bfp" or "mx": the four block-format operators.
BLOCK_OPS: dict[tuple[str, str], str] = {
    (domain, name): family for domain, names in BLOCK_OP_NAMES.items()
    for name, family in zip(names, ("bfp", "mx"), strict=True)
}

_CHECKS: dict[str, Callable[..., BFPAttrs | MXAttrs]] = {"bfp": check_bfp, "mx": check_mx}
_API: dict[str, Callable[..., np.ndarray]] = {
    "bfp": bfp_quantize_dequantize, "mx": mx_quantize_dequantize}

#: Names of the element types that are no input of these operators, as the
#: NumPy API (and the library) name them in a refusal of x's type.
_OTHER_TYPES: dict[int, str] = {FLOAT64_CODE: "float64", 7: "int64", 8: "string", 9: "bool",
                                13: "uint64", 14: "complex64", 15: "complex128"}


def block_family(node: onnx.NodeProto) -> str | None:
    """"bfp" or "mx" for a block-format node, None for any other node."""
    return BLOCK_OPS.get((node.domain, node.op_type))


@dataclasses.dataclass
class BlockNode:
    """A block-format node, the graph that holds it and its family."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    family: str  # "bfp" | "mx"

    @property
    def label(self) -> str:
        return node_label(self.node)

    def checked(self, rank: int | None = None) -> BFPAttrs | MXAttrs:
        """The node's attributes checked (with the axis against ``rank``
        when known): TypeError / ValueError naming the operator, the node,
        the attribute and the value."""
        name = self.node.name or self.node.output[0]
        checked = checked_attributes(self.node, name=name)
        if rank is not None:
            check_axis(self.node.op_type, checked.axis, rank, node=name)
        return checked


def block_nodes(model: onnx.ModelProto) -> list[BlockNode]:
    """Every block-format node of the model, subgraphs included, in graph order."""
    out = []
    for graph in graphs(model.graph):
        for node in graph.node:
            family = block_family(node)
            if family is not None:
                out.append(BlockNode(node, graph, family))
    return out


class _Shown:
    """An attribute value with no Python counterpart (a tensor, a graph):
    shown in a refusal by these words, as the library shows it."""

    def __repr__(self) -> str:
        return "an attribute of another type (a list, tensor or graph)"


def _value(attr: onnx.AttributeProto) -> Any:
    kind = attr.type
    if kind == onnx.AttributeProto.INT:
        return int(attr.i)
    if kind == onnx.AttributeProto.FLOAT:
        return float(np.float32(attr.f))
    if kind == onnx.AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == onnx.AttributeProto.INTS:
        return [int(i) for i in attr.ints]
    if kind == onnx.AttributeProto.FLOATS:
        return [float(np.float32(f)) for f in attr.floats]
    if kind == onnx.AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    return _Shown()


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as the NumPy API takes them: integers, strings
    (decoded), float attributes as the float32 values onnx stores, lists."""
    return {attr.name: _value(attr) for attr in node.attribute}


def checked_attributes(node: onnx.NodeProto, *, name: str | None = None) -> BFPAttrs | MXAttrs:
    """The node's attributes checked by :mod:`extql.rules.blocks`: a
    ``TypeError`` / ``ValueError`` naming the operator (the node's own
    op_type; and ``name``), the attribute and the value."""
    family = block_family(node)
    if family is None:
        raise ValueError(f"{node_label(node)}: not a block-format node")
    return _CHECKS[family](node_attributes(node), name, op=node.op_type)


def _words(exc: Exception, op: str) -> str:
    """A block_rules refusal without the operator it starts with."""
    text = str(exc)
    prefix = f"{op}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def x_type_name(code: int) -> str:
    """An ONNX element type as the NumPy API and the library name it in a
    refusal of x (``float32``, ``float64``, ``int8``, ...)."""
    known = FLOAT_NAMES.get(code) or _OTHER_TYPES.get(code)
    if known is None and code in QUANTIZED_BY_ONNX:
        known = QUANTIZED_BY_ONNX[code].name
    return known or f"ONNX type {code}"


def check_block_node(node: onnx.NodeProto, types: dict[str, TypeInfo]) -> list[str]:
    """Every problem of one block-format node that its attributes and x's
    static type and shape prove, each in the words of :mod:`extql.rules.blocks`
    (without the operator, which the caller names with the node): the input
    and output count, each attribute, x's type, the axis against x's rank.
    What is unknown (x's type or rank) is no problem: the library checks it
    when the model runs."""
    op = node.op_type
    problems: list[str] = []
    inputs = list(node.input)
    if len(inputs) != 1 or not inputs[0]:
        problems.append(f"has {len(inputs)} input(s), expected 1 (x)"
                        if len(inputs) != 1 else "x is a required input and must not be empty")
    if len(node.output) != 1 or not node.output[0]:
        problems.append(f"has {len(node.output)} output(s), expected 1 (y)")
    try:
        attrs = checked_attributes(node)
    except (TypeError, ValueError) as exc:
        problems.append(_words(exc, op))
        attrs = None
    x = types.get(inputs[0]) if inputs and inputs[0] else None
    if x is not None:
        try:
            check_x_type(op, x_type_name(x.elem_type), x.elem_type)
        except TypeError as exc:
            problems.append(_words(exc, op))
        if attrs is not None and x.shape is not None:
            try:
                check_axis(op, attrs.axis, len(x.shape))
            except ValueError as exc:
                problems.append(_words(exc, op))
    return problems


def evaluate(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
    """The node's output for the value x, computed by the kernels through the
    NumPy API (the bits the library gives).  A node the operator refuses
    raises the NumPy API's ``TypeError`` / ``ValueError`` naming the
    operator, the attribute and the value."""
    family = block_family(node)
    if family is None:
        raise ValueError(f"{node_label(node)}: not a block-format node")
    checked_attributes(node)  # an unknown attribute: refused, as the checks refuse it
    return _API[family](x, **node_attributes(node))
