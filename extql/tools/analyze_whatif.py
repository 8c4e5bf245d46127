"""The what-if variants of ``extql analyze``: QUANT with one point changed.

* **bypass** -- the point's fake quantization removed: its dequantize
  output replaced by its quantize input (a lone dequantize on a weight: by
  FLOAT's weight; a block-format node: by its input).
* **widen** -- the point requantized to the 16-bit type of the same
  signedness: int8 -> int16 and uint8 -> uint16, the scale divided by 256
  and the zero point's value kept (retyped), as a user who moves a tensor
  to the wide types would.  The widened pair is written as
  ExtendedQuantizeLinear / ExtendedDequantizeLinear (``com.amd.quark``),
  which run the int16 math natively whatever the model's ai.onnx opset.
  A weight stored quantized is requantized from FLOAT's float values.

Every other case is skipped with a reason (:class:`Skipped`), never guessed:
types that are already 16 bits or wider, the float types (float16,
bfloat16, float8, float4), int4 / uint4 / int2 / uint2 (widen is defined
for the 8-bit types only), block formats, a scale or zero point that is not
a constant.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..onnx.graph import Names, TypeInfo, array_to_tensor, constant_value, copy_model, set_opset
from ..rules.types import DOMAIN, OP_NAMES
from .analyze_points import Point, constant_names

__all__ = ["Skipped", "WIDER", "bypass", "widen"]

#: The types widen moves to.
WIDER: dict[str, np.dtype] = {"int8": np.dtype(np.int16), "uint8": np.dtype(np.uint16)}


class Skipped(Exception):
    """The variant does not apply to this point; the message says why."""


def _without(graph: onnx.GraphProto, index: int, new: list[onnx.NodeProto],
             drop_quantize: onnx.NodeProto | None) -> None:
    """Replace ``graph.node[index]`` by ``new``; also drop ``drop_quantize``
    (the point's quantize node) when nothing else reads its output."""
    nodes = list(graph.node)
    target = nodes[index]
    keep_q = True
    if drop_quantize is not None:
        readers = [n for n in nodes if n is not target and drop_quantize.output[0] in n.input]
        outputs = {o.name for o in graph.output}
        keep_q = bool(readers) or drop_quantize.output[0] in outputs
    out = []
    for n in nodes:
        if n is target:
            out.extend(new)
        elif drop_quantize is not None and not keep_q and n is drop_quantize:
            continue
        else:
            out.append(n)
    del graph.node[:]
    graph.node.extend(out)


def _twin(model: onnx.ModelProto, point: Point) -> tuple[onnx.ModelProto, onnx.NodeProto | None]:
    """A copy of QUANT and, in it, the point's quantize node (or None)."""
    out = copy_model(model)
    q = None
    if point.q_node is not None:
        for node in out.graph.node:
            if list(node.output) == list(point.q_node.output):
                q = node
                break
    return out, q


def bypass(model: onnx.ModelProto, point: Point, types: dict[str, TypeInfo],
           float_value: np.ndarray | None = None) -> onnx.ModelProto:
    """QUANT with ``point`` bypassed (module docstring).  ``float_value``
    is FLOAT's weight, needed for a lone dequantize."""
    out, q = _twin(model, point)
    graph = out.graph
    if point.form == "dequantize":
        if float_value is None:
            raise Skipped("FLOAT's weight is not a constant to put in its place")
        dtype = _float_dtype(types.get(point.output))
        graph.initializer.append(array_to_tensor(point.output,
                                                 np.asarray(float_value).astype(dtype)))
        _without(graph, point.order, [], None)
        return out
    source = point.input
    assert source is not None
    src, dst = types.get(source), types.get(point.output)
    if src is not None and dst is not None and src.elem_type != dst.elem_type:
        node = helper.make_node("Cast", [source], [point.output], to=dst.elem_type,
                                name=f"{point.node}__bypass")
    else:
        node = helper.make_node("Identity", [source], [point.output],
                                name=f"{point.node}__bypass")
    _without(graph, point.order, [node], q)
    return out


def _float_dtype(info: TypeInfo | None) -> np.dtype:
    from ..rules.types import FLOAT_DTYPES

    if info is None:
        return np.dtype(np.float32)
    return FLOAT_DTYPES.get(info.elem_type, np.dtype(np.float32))


def _why_not(point: Point) -> str | None:
    if point.form == "block":
        return "a block format (BFP / MX) has no integer type to widen"
    if point.type in WIDER:
        return None
    if point.type in ("int16", "uint16", "int32", "uint32"):
        return f"{point.type} is already 16 bits or wider"
    if point.type in ("int4", "uint4", "int2", "uint2"):
        return f"widen is defined for int8 and uint8 only, not {point.type}"
    return f"{point.type} is not an 8-bit integer type (widen: int8 -> int16, uint8 -> uint16)"


def _constant(name: str, graph: onnx.GraphProto, what: str) -> np.ndarray:
    if name not in constant_names(graph):
        raise Skipped(f"its {what} {name!r} is not a constant")
    value = constant_value(name, [graph])
    if value is None:
        raise Skipped(f"its {what} {name!r} has no data loaded")
    return value


def _scale_and_zero_point(node: onnx.NodeProto, graph: onnx.GraphProto, names: Names,
                          wide: np.dtype) -> list[str]:
    """New initializers for ``node``'s scale / 256 and its zero point's
    value retyped to ``wide``; returns their names."""
    scale = _constant(node.input[1], graph, "scale")
    if scale.dtype.kind != "f" and scale.dtype.name != "bfloat16":
        raise Skipped(f"its scale is {scale.dtype}, not a float type")
    new_scale = (scale.astype(np.float64) / 256.0).astype(scale.dtype)
    if len(node.input) >= 3 and node.input[2]:
        zp_name = node.input[2]
        zp = _constant(zp_name, graph, "zero point")
    else:  # no zero point: 0 of the quantized type
        zp_name = f"{node.input[1]}_zero_point"
        zp = np.zeros(scale.shape, np.uint8)
    names_out = [names(f"{node.input[1]}_wide"), names(f"{zp_name}_wide")]
    graph.initializer.append(array_to_tensor(names_out[0], new_scale))
    graph.initializer.append(array_to_tensor(names_out[1], zp.astype(np.int64).astype(wide)))
    return names_out


def _attrs(node: onnx.NodeProto, drop: tuple[str, ...]) -> list[onnx.AttributeProto]:
    return [a for a in node.attribute if a.name not in drop]


def widen(model: onnx.ModelProto, point: Point, types: dict[str, TypeInfo],
          float_value: np.ndarray | None = None) -> onnx.ModelProto:
    """QUANT with ``point`` widened (module docstring); raises
    :class:`Skipped` where widen does not apply."""
    reason = _why_not(point)
    if reason is not None:
        raise Skipped(reason)
    wide = WIDER[point.type]
    out, q = _twin(model, point)
    graph = out.graph
    names = Names(out)
    dq = graph.node[point.order]
    quantize_op, dequantize_op = OP_NAMES[DOMAIN]
    dq_params = _scale_and_zero_point(dq, graph, names, wide)
    if point.form == "dequantize":
        if float_value is None:
            raise Skipped("FLOAT's weight is not a constant to requantize")
        from ..api.linear import quantize_linear

        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        block = next((a.i for a in dq.attribute if a.name == "block_size"), 0)
        scale = constant_value(dq_params[0], [graph])
        zp = constant_value(dq_params[1], [graph])
        try:
            stored = quantize_linear(np.asarray(float_value, np.float32), scale, zp,
                                     axis=int(axis), block_size=int(block))
        except (TypeError, ValueError) as exc:
            raise Skipped(f"its weight cannot be requantized ({exc})") from None
        stored_name = names(f"{point.tensor}_quantized_wide")
        graph.initializer.append(array_to_tensor(stored_name, stored))
        new = [helper.make_node(dequantize_op, [stored_name, *dq_params], [point.output],
                                name=f"{point.node}__wide", domain=DOMAIN)]
        new[0].attribute.extend(_attrs(dq, ()))
        set_opset(out, DOMAIN, 1)
        _without(graph, point.order, new, None)
        return out
    assert q is not None and point.input is not None
    q_params = _scale_and_zero_point(q, graph, names, wide)
    wide_q = names(f"{point.tensor}_QuantizeLinear_Output_wide")
    new_q = helper.make_node(quantize_op, [point.input, *q_params], [wide_q],
                             name=f"{q.name or point.tensor}__wide", domain=DOMAIN)
    new_q.attribute.extend(_attrs(q, ("output_dtype",)))
    new_dq = helper.make_node(dequantize_op, [wide_q, *dq_params], [point.output],
                              name=f"{point.node}__wide", domain=DOMAIN)
    new_dq.attribute.extend(_attrs(dq, ()))
    set_opset(out, DOMAIN, 1)
    _without(graph, point.order, [new_q, new_dq], q)
    return out
