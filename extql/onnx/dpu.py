"""Quark's DPU-emulation nodes in ONNX models: which they are, their static
checks, their value computed by the kernels.

``ExtendedInstanceNormalization`` / ``ExtendedLSTM`` (``com.amd.quark``) and
the legacy ``VitisInstanceNormalization`` / ``VitisLSTM``
(``com.vai.quantize``), docs/operators/extended_instance_normalization.rst and
extended_lstm.rst.  Their rules are :mod:`extql.rules.dpu`'s and
:mod:`extql.rules.lstm`'s, so everything here refuses a node with the words
of the NumPy API and the library:

* :data:`DPU_OPS`, :func:`dpu_family`, :func:`dpu_nodes` -- finding the
  nodes (subgraphs included);
* :func:`check_dpu_node` -- every problem the node's attributes and its
  inputs' static types and shapes prove (``extql check``);
* :func:`evaluate` -- the node's outputs for given inputs, by the kernels
  through the NumPy API (the reference ops, ``extql analyze``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ..api.dpu import extended_instance_normalization
from ..api.lstm import extended_lstm
from ..rules import lstm as lstm_rules
from ..rules.dpu import DEFAULT_EPSILON, IN_OPS, in_problems
from ..rules.types import DOMAIN, LEGACY_DOMAIN
from .blocks import node_attributes, x_type_name
from .graph import TypeInfo, graphs, node_label

__all__ = ["DPU_OPS", "DPUNode", "dpu_family", "dpu_nodes", "check_dpu_node",
           "lstm_attributes", "evaluate", "refuse_dpu_nodes", "STANDARD_OPS_FAMILIES"]

#: (domain, op_type) -> "in" (instance norm) or "lstm".
DPU_OPS: dict[tuple[str, str], str] = {
    **{(domain, name): "in" for name, domain in IN_OPS.items()},
    (DOMAIN, lstm_rules.OP): "lstm",
    (LEGACY_DOMAIN, lstm_rules.LEGACY_OP): "lstm",
}


#: The DPU families that have a standard-ops fallback (both:
#: :mod:`extql.onnx.fallback_dpu`, :mod:`extql.onnx.fallback_lstm`).
STANDARD_OPS_FAMILIES: tuple[str, ...] = ("in", "lstm")


def dpu_family(node: onnx.NodeProto) -> str | None:
    """"in" or "lstm" for a DPU-emulation node, None for any other node."""
    return DPU_OPS.get((node.domain, node.op_type))


@dataclasses.dataclass
class DPUNode:
    """A DPU-emulation node, the graph that holds it and its family."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    family: str  # "in" | "lstm"

    @property
    def label(self) -> str:
        return node_label(self.node)


def dpu_nodes(model: onnx.ModelProto) -> list[DPUNode]:
    """Every DPU-emulation node of the model, subgraphs included, in graph order."""
    out = []
    for graph in graphs(model.graph):
        for node in graph.node:
            family = dpu_family(node)
            if family is not None:
                out.append(DPUNode(node, graph, family))
    return out


def _words(text: str, op: str) -> str:
    """A refusal without the operator it starts with: the caller names the
    node."""
    return text.removeprefix(f"{op}: ")


def _in_problems(node: onnx.NodeProto, types: dict[str, TypeInfo]) -> list[str]:
    """An instance norm's problems: 3 inputs, 1 output, only ``epsilon``,
    then :func:`extql.rules.dpu.in_problems` on what is known."""
    op = node.op_type
    problems = []
    inputs = list(node.input)
    if len(inputs) != 3 or not all(inputs):
        problems.append(f"has inputs {inputs}, expected 3 non-empty ones (x, scale, B)")
    if len(node.output) != 1 or not node.output[0]:
        problems.append(f"has {len(node.output)} output(s), expected 1 (y)")
    for attr in node.attribute:
        if attr.name != "epsilon":
            problems.append(f"unknown attribute {attr.name!r} (only epsilon)")
        elif attr.type != onnx.AttributeProto.FLOAT:
            problems.append("attribute epsilon must be a float")
    if problems:
        return problems
    info = [types.get(n) for n in inputs]
    if any(i is None for i in info):
        return []  # the library checks what is unknown when the model runs
    names = tuple(x_type_name(i.elem_type) for i in info)
    shapes = [None if i.shape is None or any(not isinstance(d, int) for d in i.shape)
              else tuple(i.shape) for i in info]
    if shapes[0] is None and info[0].shape is not None and len(info[0].shape) < 2:
        shapes[0] = tuple(0 for _ in info[0].shape)  # the rank is what fails
    return [_words(p, op) for p in in_problems(op, names, *shapes)]


def lstm_attributes(node: onnx.NodeProto, *, named: bool = True) -> lstm_rules.LSTMAttrs:
    """The node's attributes checked by :mod:`extql.rules.lstm` (TypeError /
    ValueError naming the operator, the node unless not ``named``, and the
    attribute)."""
    name = (node.name or (node.output[0] if node.output else None)) if named else None
    return lstm_rules.check_lstm(node_attributes(node), node.op_type, name)


def _lstm_problems(node: onnx.NodeProto, types: dict[str, TypeInfo]) -> list[str]:
    """An LSTM's problems: its attributes, the refused optional inputs, the
    inputs' types (float32) and shapes against the attributes."""
    op = node.op_type
    problems = []
    inputs = list(node.input)
    if len(inputs) < 3 or not all(inputs[:3]):
        problems.append(f"has inputs {inputs}, expected X, W, R (and optionally B)")
    for index, (name, why) in lstm_rules.REFUSED_INPUTS.items():
        if index < len(inputs) and inputs[index]:
            problems.append(f"input {name} is not supported: {why}")
    if len(node.output) > len(lstm_rules.OUTPUTS):
        problems.append(f"has {len(node.output)} outputs, expected at most 3 (Y, Y_h, Y_c)")
    try:
        attrs = lstm_attributes(node, named=False)
    except (TypeError, ValueError) as exc:
        problems.append(_words(str(exc), op))
        attrs = None
    if problems:
        return problems
    info = {n: types.get(v) for n, v in zip(lstm_rules.INPUTS, inputs[:4], strict=False) if v}
    for name, i in info.items():
        if i is not None and i.elem_type != onnx.TensorProto.FLOAT:
            problems.append(f"{name} must be float32, got {x_type_name(i.elem_type)}")
    if problems or attrs is None:
        return problems

    def shape(name: str) -> tuple | None:
        i = info.get(name)
        if i is None or i.shape is None:
            return None
        return tuple(d if isinstance(d, int) else None for d in i.shape)

    x = shape("X")
    if x is None:
        return []
    try:
        lstm_rules.check_shapes(attrs, x, shape("W"), shape("R"), shape("B"), op)
    except ValueError as exc:
        problems.append(_words(str(exc), op))
    return problems


def check_dpu_node(node: onnx.NodeProto, types: dict[str, TypeInfo]) -> list[str]:
    """Every problem of one DPU-emulation node that its attributes and its
    inputs' static types and shapes prove, in the words of the rules
    (without the operator and node, which the caller names).  What is
    unknown is no problem: the library checks it when the model runs."""
    family = dpu_family(node)
    if family == "in":
        return _in_problems(node, types)
    if family == "lstm":
        return _lstm_problems(node, types)
    raise ValueError(f"{node_label(node)}: not a DPU-emulation node")


def _epsilon(node: onnx.NodeProto) -> float:
    """The instance norm's epsilon (the float32 onnx stores; 1e-5 absent)."""
    return float(node_attributes(node).get("epsilon", DEFAULT_EPSILON))


def evaluate(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """The node's outputs (one per non-empty output name, in order) for the
    given input values, computed by the kernels through the NumPy API (the
    bits the library gives).  Bad inputs raise the NumPy API's TypeError /
    ValueError naming the operator."""
    family = dpu_family(node)
    if family == "in":
        return [extended_instance_normalization(*inputs[:3], epsilon=_epsilon(node))]
    if family != "lstm":
        raise ValueError(f"{node_label(node)}: not a DPU-emulation node")
    for index, (name, why) in lstm_rules.REFUSED_INPUTS.items():
        if index < len(inputs) and inputs[index] is not None:
            raise ValueError(f"{node.op_type}: input {name} is not supported: {why}")
    attrs = node_attributes(node)
    lstm_attributes(node)  # refusals name the node
    attrs.pop("input_forget", None)
    wanted = [n for n, o in zip(lstm_rules.OUTPUTS, node.output, strict=False) if o]
    b = inputs[3] if len(inputs) > 3 else None
    got: Any = extended_lstm(*inputs[:3], b, outputs=",".join(wanted or ["Y"]), **attrs)
    return [got] if isinstance(got, np.ndarray) else list(got)


def refuse_dpu_nodes(model: onnx.ModelProto) -> None:
    """Raise a ValueError naming the first DPU-emulation node of the model
    whose family has no standard-ops form in extql (none today: the
    instance norm has :mod:`extql.onnx.fallback_dpu`, the LSTM
    :mod:`extql.onnx.fallback_lstm`; a family added to :data:`DPU_OPS`
    without one would be refused here), so a model that is to need no
    custom operator cannot keep it."""
    found = [d for d in dpu_nodes(model) if d.family not in STANDARD_OPS_FAMILIES]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ValueError(f"{found[0].label}{more}: a DPU-emulation operator has no "
                         "standard-ops fallback in extql yet; run the model with the library")
