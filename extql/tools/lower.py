"""``extql.lower_to_standard``: Extended nodes as official QuantizeLinear /
DequantizeLinear where that operator gives the same bits, so that
onnxruntime fuses them as in an official Q/DQ model.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper

from .. import rules
from ..onnx.blocks import BlockNode, block_nodes
from ..onnx.check import check_node
from ..onnx.graph import (
    ExtNode,
    TypeInfo,
    constant_value,
    copy_model,
    drop_unused_imports,
    extended_nodes,
    infer_types,
    model_opset,
    static_shape,
    type_name,
    zero_point_type,
)
from ..onnx.variants import variant as fallback_variant
from ..rules.types import MS_DOMAIN, OP_NAMES, is_float8

__all__ = ["lower_to_standard", "block_reason"]


def block_reason(block: BlockNode) -> str:
    """Why a block-format node is never lowered (a line of the report)."""
    return (f"{block.label}: left as is: a block format (shared exponents per block), which no "
            "official operator computes; extql's library runs it")


@dataclasses.dataclass(frozen=True)
class _Official:
    """When the official operator is bit-identical, and from which opset."""

    per_tensor: int  # minimum ai.onnx opset, per-tensor
    per_axis: int  # minimum ai.onnx opset, per-axis


# Verified against the contract in tests/tools/test_passes.py (onnxruntime).
# Both directions: the 16-bit types, the sub-byte types and float8 (quantize
# with saturate = 1 only: see _not_saturating).
_OFFICIAL_BOTH = {
    "int8": _Official(10, 13),
    "uint8": _Official(10, 13),
    "default": _Official(10, 13),
    "int16": _Official(21, 21),
    "uint16": _Official(21, 21),
    "int4": _Official(21, 21),
    "uint4": _Official(21, 21),
    "int2": _Official(25, 25),
    "uint2": _Official(25, 25),
    "float8e4m3fn": _Official(19, 19),
    "float8e4m3fnuz": _Official(19, 19),
    "float8e5m2": _Official(19, 19),
    "float8e5m2fnuz": _Official(19, 19),
}
_OFFICIAL_Q = dict(_OFFICIAL_BOTH)
_OFFICIAL_DQ = {
    **_OFFICIAL_BOTH,
    "int32": _Official(10, 13),  # only without a zero point or with an all-zero one
}

def _not_saturating(ext: ExtNode) -> bool:
    """A quantize with saturate = 0: onnxruntime's non-saturating float8e4m3fn
    conversion takes some overflowing values to the largest finite value
    instead of NaN, so such nodes are not lowered."""
    return ext.quantize and any(a.name == "saturate" and a.i == 0 for a in ext.node.attribute)


def _granularity_words(ext: ExtNode, per_tensor: bool) -> str:
    """How the reason for a node left as is names its granularity."""
    if ext.block_size > 0:
        return f"blocked (block_size {ext.block_size})"
    return "per tensor" if per_tensor else "per axis (or of unknown granularity)"


def lower_to_standard(
    model: onnx.ModelProto, *, report: list[str] | None = None
) -> onnx.ModelProto:
    """Rewrite Extended nodes as official QuantizeLinear/DequantizeLinear where
    that operator gives the same bits, so onnxruntime can fuse them again.

    com.microsoft QuantizeLinear / DequantizeLinear nodes (float32 x and
    scale) are lowered by the same rules; a com.microsoft node that the
    model's opset cannot express (16-bit below opset 21) stays as it is.

    Lowered: quantize to int8/uint8 (and without a zero point), int16/uint16,
    the sub-byte int4/uint4/int2/uint2 and float8 (with saturate = 1);
    dequantize of the same types, and of int32 without a zero point or with
    a constant all-zero one (the official int32 dequantize computes the
    difference in 32 bits).  Per-tensor needs ai.onnx opset >= 10 (21 for
    the 16-bit types and int4/uint4, 19 for float8, 25 for int2/uint2),
    per-axis >= 13 (the same).  Everything
    else is left as it is; the reason for each node left is appended to ``report`` (when given) and
    issued as a warning when the model's opset is too old.  The model's
    opset is never changed (raising it could change the meaning of other
    nodes); a model without any ai.onnx import gets opset 21.  Fallback
    functions of operators with no node left are removed, with their domain's
    opset import.

    Quark's block formats (BFPQuantizeDequantize / MXQuantizeDequantize,
    BFPFixNeuron / MXFixNeuron) have no official counterpart: they are left
    as they are, each with its line in ``report``.
    """
    out = copy_model(model)
    messages: list[str] = [] if report is None else report
    messages.extend(block_reason(b) for b in block_nodes(out))
    nodes = extended_nodes(out, microsoft=True)
    if not nodes:
        return out
    if model_opset(out, "") is None:
        out.opset_import.append(helper.make_opsetid("", 21))
    opset = model_opset(out, "")
    assert opset is not None
    types = infer_types(out)
    for ext in nodes:
        node = ext.node
        problems = check_node(ext, types)
        if problems:
            messages.append(f"{ext.label}: left as is: {problems[0]}")
            continue
        if ext.microsoft and not _float32_inputs(ext, types):
            messages.append(f"{ext.label}: left as is: x and the scale are not both float32")
            continue
        reason = _float_types_not_lowered(ext, types)
        if reason:
            messages.append(f"{ext.label}: left as is: {reason}")
            continue
        try:
            variant = fallback_variant(zero_point_type(ext, types))
        except ValueError as exc:
            messages.append(f"{exc}; left as is")
            continue
        if is_float8(variant) and _not_saturating(ext):
            messages.append(f"{ext.label}: left as is: saturate = 0 (onnxruntime's official "
                            "float8 conversion differs without saturation)")
            continue
        table = _OFFICIAL_Q if ext.quantize else _OFFICIAL_DQ
        official = table.get(variant)
        if official is None:
            what = "quantize to" if ext.quantize else "dequantize of"
            messages.append(
                f"{ext.label}: left as is: the official operator has no bit-identical "
                f"{what} {variant}"
            )
            continue
        if not ext.quantize and variant == "int32":
            zp = constant_value(node.input[2], [ext.graph, out.graph])
            if zp is None or np.any(zp != 0):
                messages.append(
                    f"{ext.label}: left as is: the official int32 DequantizeLinear computes "
                    "x - zero_point in 32 bits; only a constant all-zero zero point is exact"
                )
                continue
        s_shape = static_shape(node.input[1], types)
        per_tensor = s_shape is not None and (len(s_shape) == 0 or s_shape[0] == 1)
        needed = official.per_tensor if per_tensor else official.per_axis
        if ext.block_size > 0:
            needed, per_tensor = max(needed, 21), False  # block_size: opset 21
        if opset < needed:
            msg = (
                f"{ext.label}: left as is: the official "
                f"{'QuantizeLinear' if ext.quantize else 'DequantizeLinear'} for {variant} "
                f"{_granularity_words(ext, per_tensor)} "
                f"needs ai.onnx opset >= {needed}, the model imports {opset}"
            )
            messages.append(msg)
            warnings.warn(msg, stacklevel=2)
            continue
        node.domain = ""
        node.op_type = "QuantizeLinear" if ext.quantize else "DequantizeLinear"
        node.overload = ""
        while node.input and node.input[-1] == "":
            node.input.pop()
        # Attributes that repeat their default (as attach_fallbacks spells
        # them out) go: older official operators do not define them.
        kept = [a for a in node.attribute if not _redundant(ext, a, is_float8(variant))]
        del node.attribute[:]
        node.attribute.extend(kept)
        if opset < 13:
            # axis exists from opset 13; per-tensor only below.
            kept = [a for a in node.attribute if a.name != "axis"]
            del node.attribute[:]
            node.attribute.extend(kept)
    # Remove fallback functions and imports no node needs any more.
    remaining = {(e.node.domain, e.node.op_type) for e in extended_nodes(out)}
    kept_f = [
        f
        for f in out.functions
        if f.domain not in OP_NAMES or (f.domain, f.name) in remaining
    ]
    del out.functions[:]
    out.functions.extend(kept_f)
    drop_unused_imports(out, (*OP_NAMES, MS_DOMAIN))
    return out


def _redundant(ext: ExtNode, attr: onnx.AttributeProto, float8: bool = False) -> bool:
    """An attribute that says what its absence says for a node with float32
    x and scale: ``block_size`` 0, ``precision`` float, dequantize's
    ``output_dtype`` float, quantize's ``output_dtype`` beside a zero point
    (which must have that type), ``saturate`` 1 -- or any ``saturate`` of a
    node whose type is not a float8 one (it means nothing there, and the
    official operator defines it only from opset 19)."""
    if attr.name == "saturate":
        return not float8 or attr.i == rules.DEFAULTS["saturate"]
    if attr.name == "block_size":
        return attr.i == rules.DEFAULTS["block_size"]
    if attr.name == "precision":
        return attr.i == TensorProto.FLOAT
    if attr.name == "output_dtype":
        return attr.i == 0 or (ext.has_zero_point if ext.quantize else
                               attr.i == TensorProto.FLOAT)
    return False


def _float_types_not_lowered(ext: ExtNode, types: dict[str, TypeInfo]) -> str | None:
    """Why an Extended node with float16 / bfloat16 / int32 x or a float16 /
    bfloat16 / int32 scale (or the attributes that go with them) stays as it is, or
    None.  The official operator is not exact for them where models run:
    onnxruntime's QuantizeLinear divides float16 x by a float16 scale in
    float32 for int8 / uint8 (the operator document, and extql, divide in
    the scale's type) and has no bfloat16 or int32 kernel."""
    for a in ext.node.attribute:
        if a.name in ("precision", "output_dtype") and not _redundant(ext, a):
            return (f"the attribute {a.name} (the official operator is lowered to for float32 "
                    "only)")
    names = set([ext.node.input[1]] + ([ext.node.input[0]] if ext.quantize else []))
    other = sorted({types[n].elem_type for n in names if n in types} - {TensorProto.FLOAT})
    for name, what in ((ext.node.input[0], "x"), (ext.node.input[1], "the scale")):
        if ext.quantize and name in types and types[name].elem_type == TensorProto.INT32:
            return f"{what} is int32: onnxruntime's official QuantizeLinear has no kernel for it"
    if other:
        return (f"x or the scale is {' / '.join(type_name(t) for t in other)}: onnxruntime's "
                "official operator does not give the same bits for it")
    return None


def _float32_inputs(ext: ExtNode, types: dict[str, TypeInfo]) -> bool:
    """x (for quantize) and the scale are known to be float32."""
    names = [ext.node.input[1]] + ([ext.node.input[0]] if ext.quantize else [])
    return all(n in types and types[n].elem_type == TensorProto.FLOAT for n in names)
