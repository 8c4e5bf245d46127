"""The block-format nodes of a model: Quark's ``BFPQuantizeDequantize`` /
``MXQuantizeDequantize`` (``com.amd.quark``) and their legacy names
``BFPFixNeuron`` / ``MXFixNeuron`` (``com.vai.quantize``), found in the
main graph and every subgraph, with their attributes checked by
:mod:`extql.block_rules` (the words every path uses).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx

from ..block_rules import (
    BFP_LEGACY_OP,
    BFP_OP,
    MX_LEGACY_OP,
    MX_OP,
    BFPAttrs,
    MXAttrs,
    check_axis,
    check_bfp,
    check_mx,
)
from ..types import DOMAIN, LEGACY_DOMAIN
from .graph import graphs, node_label

__all__ = ["BLOCK_OP_NAMES", "BLOCK_OPS", "BlockNode", "block_nodes", "node_attributes"]

#: (BFP operator, MX operator) of each domain: the current and the legacy names.
BLOCK_OP_NAMES: dict[str, tuple[str, str]] = {
    DOMAIN: (BFP_OP, MX_OP),
    LEGACY_DOMAIN: (BFP_LEGACY_OP, MX_LEGACY_OP),
}
#: (domain, op_type) -> family ("bfp" or "mx") of the four block-format operators.
BLOCK_OPS: dict[tuple[str, str], str] = {
    (domain, name): family for domain, names in BLOCK_OP_NAMES.items()
    for name, family in zip(names, ("bfp", "mx"), strict=True)
}


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return out


@dataclasses.dataclass
class BlockNode:
    """A block-format node, the graph that holds it and its family."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    family: str  # "bfp" or "mx"

    @property
    def label(self) -> str:
        return node_label(self.node)

    @property
    def op(self) -> str:
        """The operator's current name (the one block_rules' words use)."""
        return BFP_OP if self.family == "bfp" else MX_OP

    def checked(self, rank: int | None = None) -> BFPAttrs | MXAttrs:
        """The node's attributes checked (with the axis against ``rank``
        when known): TypeError / ValueError naming the node, the attribute
        and the value."""
        name = self.node.name or self.node.output[0]
        attrs = node_attributes(self.node)
        checked = (check_bfp if self.family == "bfp" else check_mx)(attrs, node=name)
        if rank is not None:
            check_axis(self.op, checked.axis, rank, node=name)
        return checked


def block_nodes(model: onnx.ModelProto) -> list[BlockNode]:
    """Every block-format node of the model, subgraphs included, in graph order."""
    out = []
    for graph in graphs(model.graph):
        for node in graph.node:
            family = BLOCK_OPS.get((node.domain, node.op_type))
            if family is not None:
                out.append(BlockNode(node, graph, family))
    return out
