"""The quantization points of a quantized model, matched to the float model.

A quantization point is a tensor that the quantized model QUANT
fake-quantizes:

* a quantize -> dequantize pair of any domain extql knows: Extended
  (``com.amd.quark``), legacy Vitis (``com.vai.quantize``), onnxruntime's
  ``com.microsoft`` and the official ``ai.onnx`` QuantizeLinear /
  DequantizeLinear;
* a lone DequantizeLinear on a constant: a weight stored quantized (Quark's
  ``<w>_quantized``);
* a block-format node, ``BFPQuantizeDequantize`` / ``MXQuantizeDequantize``
  (``com.amd.quark``; legacy names ``BFPFixNeuron`` / ``MXFixNeuron`` in
  ``com.vai.quantize``): a one-node fake quantization whose output is
  compared with its own input;
* a DPU-emulation node, ``ExtendedInstanceNormalization`` / ``ExtendedLSTM``
  (legacy ``VitisInstanceNormalization`` / ``VitisLSTM``): its output
  compared with the float operator's on the same inputs
  (:mod:`extql.tools.analyze_dpu`).

Each point is matched by name to the float model FLOAT's tensor, the way
AMD Quark and onnxruntime's quantizer name what they write (docs/guide/
analyze.rst): an activation's quantize input keeps the float name (a graph
output's producer is renamed ``<y>_QuantizeLinear_Input``); a weight or
bias is stored as ``<w>_quantized`` (a bias's dequantize output is named
``<b>``).  A point whose name FLOAT lacks is kept unmatched, never guessed.
"""

from __future__ import annotations

import dataclasses

import onnx

from ..onnx.graph import QDQ_OPS, TypeInfo, node_label, type_name
from ..rules.types import BY_ONNX, QUANTIZED_BY_ONNX
from .analyze_dpu import DPU_TYPES, dpu_family, dpu_output

__all__ = [
    "Point",
    "QDQ_ALL",
    "BLOCK_OPS",
    "find_points",
    "value_names",
    "constant_names",
    "node_attributes",
]

#: (domain, op_type) -> True for quantize, False for dequantize: extql's
#: Q/DQ operators and the official ones.
QDQ_ALL: dict[tuple[str, str], bool] = {
    **QDQ_OPS,
    ("", "QuantizeLinear"): True,
    ("", "DequantizeLinear"): False,
    ("ai.onnx", "QuantizeLinear"): True,
    ("ai.onnx", "DequantizeLinear"): False,
}

#: (domain, op_type) -> "bfp" or "mx": the block-format fake-quantize nodes.
BLOCK_OPS: dict[tuple[str, str], str] = {
    (domain, name): kind
    for domain in ("com.amd.quark", "com.vai.quantize")
    for name, kind in (("BFPQuantizeDequantize", "bfp"), ("MXQuantizeDequantize", "mx"),
                       ("BFPFixNeuron", "bfp"), ("MXFixNeuron", "mx"))
}

_GRAPH_OUTPUT_SUFFIX = "_QuantizeLinear_Input"
_WEIGHT_SUFFIX = "_quantized"


@dataclasses.dataclass
class Point:
    """One quantization point of QUANT.

    ``input`` is QUANT's value before the quantization (None for a lone
    dequantize: the weight's float values are FLOAT's); ``quantized`` the
    quantized values (the quantize output, or the stored weight; None for a
    block format); ``output`` the fake-quantized result.  ``float_name`` is
    FLOAT's tensor (None: unmatched) and ``quant_name`` QUANT's value that
    is compared with it (the value of that name in QUANT, else ``output``).
    """

    tensor: str
    node: str
    kind: str  # "activation" | "weight"
    type: str
    form: str  # "pair" | "dequantize" | "block" | "dpu"
    order: int
    output: str
    input: str | None
    quantized: str | None
    dq_node: onnx.NodeProto
    q_node: onnx.NodeProto | None = None
    float_name: str | None = None
    quant_name: str | None = None
    block_op: str | None = None  # "bfp" | "mx"
    attrs: dict = dataclasses.field(default_factory=dict)
    bounds: tuple[float, float, bool] | None = None  # (lo, hi, is_float) of the type
    node_inputs: tuple[str, ...] = ()  # a DPU node's inputs ("" for an absent one)

    @property
    def matched(self) -> bool:
        return self.float_name is not None


def node_attributes(node: onnx.NodeProto) -> dict:
    """The node's attributes as Python values (strings decoded)."""
    out = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


def value_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name of a graph: inputs, initializers, node outputs."""
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def constant_names(graph: onnx.GraphProto) -> set[str]:
    """Initializers and outputs of Constant nodes."""
    names = {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            names.update(node.output)
    return names


def _block_type(kind: str, attrs: dict) -> str:
    """Quark's names of the block formats: bfp16, mx9 / mx6 / mx4 (to_bfp_prime
    at bit_width 16 / 13 / 11), mxint8, mxfp8_e4m3, ..."""
    if kind == "mx":
        return f"mx{attrs.get('element_dtype', 'int8')}"
    bits = int(attrs.get("bit_width", 16))
    if str(attrs.get("bfp_method", "to_bfp")).startswith("to_bfp_prime"):
        return f"mx{bits - 7}"
    return f"bfp{bits}"


def _quantized_type(code: int | None) -> tuple[str, tuple[float, float, bool] | None]:
    """A quantized element type's name and (lo, hi, is_float) bounds."""
    if code is None:
        return "unknown", None
    known = QUANTIZED_BY_ONNX.get(code) or BY_ONNX.get(code)
    if known is None:
        return type_name(code), None
    return known.name, (float(known.lo), float(known.hi), bool(known.is_float))


def _pair_type(q: onnx.NodeProto, x: str, types: dict[str, TypeInfo]) -> int | None:
    """ONNX code of a quantize node's output: inferred, else its zero point's,
    else its ``output_dtype``, else uint8 (a quantize without zero point)."""
    if x in types:
        return types[x].elem_type
    if len(q.input) >= 3 and q.input[2]:
        zp = types.get(q.input[2])
        return zp.elem_type if zp is not None else None
    for attr in q.attribute:
        if attr.name == "output_dtype" and attr.i:
            return int(attr.i)
    return onnx.TensorProto.UINT8


def _stripped(name: str, suffix: str) -> str | None:
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else None


def find_points(quant: onnx.ModelProto, float_names: set[str],
                types: dict[str, TypeInfo]) -> tuple[list[Point], list[str]]:
    """QUANT's quantization points in graph order, each matched against
    ``float_names`` (FLOAT's value names), and notes on the quantization
    nodes that are no point (a dequantize of a value that is neither a
    constant nor a quantize output; nodes inside subgraphs).

    ``types`` are QUANT's static types (:func:`extql.onnx.graph.infer_types`).
    """
    graph = quant.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    constants = constant_names(graph)
    quant_values = value_names(graph)
    points: list[Point] = []
    notes: list[str] = []
    for order, node in enumerate(graph.node):
        key = (node.domain, node.op_type)
        family = dpu_family(node)
        out = dpu_output(node) if family else None
        if family and out is not None:
            points.append(Point(
                tensor=out[1], node=node.name or out[1], kind="activation",
                type=DPU_TYPES[family], form="dpu", order=order, output=out[1], input=None,
                quantized=None, dq_node=node, node_inputs=tuple(node.input)))
            _match(points[-1], [out[1]], float_names, quant_values)
            continue
        if key in BLOCK_OPS and node.input and node.output:
            attrs = node_attributes(node)
            name = node.input[0]
            points.append(Point(
                tensor=name, node=node.name or node.output[0],
                kind="weight" if name in constants else "activation",
                type=_block_type(BLOCK_OPS[key], attrs), form="block", order=order,
                output=node.output[0], input=name, quantized=None, dq_node=node,
                block_op=BLOCK_OPS[key], attrs=attrs))
            _match(points[-1], [name, _stripped(name, _GRAPH_OUTPUT_SUFFIX)],
                   float_names, quant_values)
            continue
        if QDQ_ALL.get(key) is not False or not node.input or not node.output:
            continue
        x = node.input[0]
        q = producer.get(x)
        if q is not None and QDQ_ALL.get((q.domain, q.op_type)) is True and q.input:
            name = q.input[0]
            type_str, bounds = _quantized_type(_pair_type(q, x, types))
            points.append(Point(
                tensor=name, node=node.name or node.output[0],
                kind="weight" if name in constants else "activation",
                type=type_str, form="pair", order=order, output=node.output[0],
                input=name, quantized=x, dq_node=node, q_node=q, bounds=bounds,
                attrs=node_attributes(q)))
            _match(points[-1], [name, _stripped(name, _GRAPH_OUTPUT_SUFFIX)],
                   float_names, quant_values)
        elif x in constants:
            code = types[x].elem_type if x in types else None
            type_str, bounds = _quantized_type(code)
            base = _stripped(x, _WEIGHT_SUFFIX)
            points.append(Point(
                tensor=base or x, node=node.name or node.output[0], kind="weight",
                type=type_str, form="dequantize", order=order, output=node.output[0],
                input=None, quantized=x, dq_node=node, bounds=bounds,
                attrs=node_attributes(node)))
            _match(points[-1], [base, node.output[0]], float_names, quant_values)
        else:
            notes.append(f"{node_label(node)}: its input {x!r} is neither a constant nor the "
                         "output of a quantize node: not a quantization point")
    nested = sum(1 for node in graph.node for attr in node.attribute
                 if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS))
    if nested:
        notes.append(f"{nested} node(s) with subgraphs (If / Loop / Scan): quantization nodes "
                     "inside subgraphs are not analysed")
    return points, notes


def _match(point: Point, candidates: list[str | None], float_names: set[str],
           quant_values: set[str]) -> None:
    """Set the point's float name (the first candidate FLOAT has) and
    QUANT's value compared with it (QUANT's value of that name, else the
    point's output)."""
    for name in candidates:
        if name and name in float_names:
            point.float_name = name
            point.tensor = name
            point.quant_name = name if name in quant_values else point.output
            return
