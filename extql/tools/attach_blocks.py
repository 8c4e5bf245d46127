"""The block formats' part of ``extql.attach_fallbacks``: give a model's
``BFPQuantizeDequantize`` / ``MXQuantizeDequantize`` (and legacy
``BFPFixNeuron`` / ``MXFixNeuron``) nodes their fallback functions.

Each node is checked (:mod:`extql.rules.blocks`: a refused attribute, or an
axis out of range for x's rank where the model gives it, is a ``ValueError``
/ ``TypeError`` naming the node), gets ``overload`` = its variant
(:data:`extql.fallbacks.BLOCK_VARIANTS`: ``to_bfp``, ``to_bfp_compiler``,
``to_bfp_prime``, or the MX element type) and every numeric attribute its
function reads, with the value it has when absent (the same meaning, so
extql's library and Quark's still run the node as before; onnx.reference
ignores a function's attribute defaults).  One function per (operator,
variant) in use is added, stamped with the model's ai.onnx opset
(>= :data:`extql.fallbacks.BLOCK_MIN_OPSET`).
"""

from __future__ import annotations

import warnings

import onnx
from onnx import helper

from ..onnx.blocks import BLOCK_OP_NAMES, BlockNode, block_nodes
from ..onnx.fallback_blocks import block_variant
from ..onnx.fallback_protos import BLOCK_MIN_OPSET, block_function_proto
from ..onnx.graph import TypeInfo, set_opset, static_shape
from ..rules.blocks import BFP_ATTRIBUTES, MX_ATTRIBUTES

__all__ = ["attach_block_fallbacks"]

#: The attributes a family's functions read: the numeric ones, with their
#: values when absent.
_READ = {
    "bfp": [(name, default) for name, kind, default in BFP_ATTRIBUTES if kind == "i"],
    "mx": [(name, default) for name, kind, default in MX_ATTRIBUTES if kind == "i"],
}


def _spell_out(node: onnx.NodeProto, family: str) -> None:
    present = {a.name for a in node.attribute}
    for name, default in _READ[family]:
        if name not in present:
            node.attribute.append(helper.make_attribute(name, default))


def _rank(b: BlockNode, types: dict[str, TypeInfo]) -> int | None:
    shape = static_shape(b.node.input[0], types) if b.node.input else None
    return None if shape is None else len(shape)


def attach_block_fallbacks(model: onnx.ModelProto, opset: int | None,
                           types: dict[str, TypeInfo]) -> bool:
    """Attach the block formats' functions to ``model`` (in place); returns
    whether it has block-format nodes.  ``opset``: the model's ai.onnx
    version (None: it imports none yet, and 21 is added by the caller)."""
    nodes = block_nodes(model)
    if not nodes:
        return False
    used: dict[tuple[str, str], list[str]] = {}
    for b in nodes:
        checked = b.checked(_rank(b, types))
        if opset is not None and opset < BLOCK_MIN_OPSET:
            raise ValueError(
                f"{b.label}: the block formats' fallback functions need a default-domain "
                f"(ai.onnx) opset >= {BLOCK_MIN_OPSET} (CastLike), the model imports {opset}; "
                f"convert it first, e.g. onnx.version_converter.convert_version(model, "
                f"{BLOCK_MIN_OPSET})")
        variant = block_variant(b.family, checked)
        b.node.overload = variant
        _spell_out(b.node, b.family)
        variants = used.setdefault((b.node.domain, b.family), [])
        if variant not in variants:
            variants.append(variant)
    names = {(d, BLOCK_OP_NAMES[d][0 if f == "bfp" else 1]) for d, f in used}
    kept = [f for f in model.functions if (f.domain, f.name) not in names]
    del model.functions[:]
    model.functions.extend(kept)
    for (domain, family), variants in sorted(used.items()):
        set_opset(model, domain, 1)
        for variant in variants:
            model.functions.append(block_function_proto(family, variant, domain=domain,
                                                        opset=opset or 21))
        if len(variants) > 1:
            warnings.warn(
                f"{BLOCK_OP_NAMES[domain][0 if family == 'bfp' else 1]} is used with several "
                f"variants ({', '.join(variants)}): onnxruntime with overload support runs "
                "each node's function, but onnx.reference (use new_ops=extql.reference.OPS, or "
                "extql.inline_fallbacks) and older onnxruntime releases, which ignore "
                "NodeProto.overload, run the last one for every node",
                stacklevel=3,
            )
    return True
