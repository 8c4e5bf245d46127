"""The DPU-emulation operators' part of ``extql.attach_fallbacks``: give a
model's ``ExtendedInstanceNormalization`` (and legacy
``VitisInstanceNormalization``) nodes their fallback function.

Each node is checked first (:func:`extql.onnx.dpu.check_dpu_node`: a refused
attribute, input or static type / shape is a ``ValueError`` naming the
node), gets ``overload`` :data:`extql.fallbacks.DPU_VARIANT` and its
``epsilon`` spelled out (1e-5 when absent: the same meaning, so the
libraries run the node as before; onnx.reference ignores a function's
attribute defaults).  One function per operator name in use is added,
stamped with the model's ai.onnx opset (>= :data:`extql.fallbacks.DPU_MIN_OPSET`).
The LSTM has no standard-ops form yet: its nodes are left as they are
(:func:`extql.onnx.dpu.refuse_dpu_nodes` names them where a model must run
without the library).
"""

from __future__ import annotations

import onnx
from onnx import helper

from ..onnx.dpu import STANDARD_OPS_FAMILIES, check_dpu_node, dpu_nodes
from ..onnx.fallback_protos import DPU_MIN_OPSET, DPU_VARIANT, dpu_function_proto
from ..onnx.graph import TypeInfo, set_opset
from ..rules.dpu import DEFAULT_EPSILON

__all__ = ["attach_dpu_fallbacks", "FALLBACK_FAMILIES"]

#: The DPU families that have a standard-ops fallback.
FALLBACK_FAMILIES = STANDARD_OPS_FAMILIES


def attach_dpu_fallbacks(model: onnx.ModelProto, opset: int | None,
                         types: dict[str, TypeInfo]) -> bool:
    """Attach the instance norm's function to ``model`` (in place); returns
    whether it has such nodes.  ``opset``: the model's ai.onnx version (None:
    it imports none yet, and 21 is added by the caller)."""
    nodes = [d for d in dpu_nodes(model) if d.family in FALLBACK_FAMILIES]
    if not nodes:
        return False
    used: set[tuple[str, str]] = set()
    for d in nodes:
        problems = check_dpu_node(d.node, types)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"{d.label}: {problems[0]}{more}")
        if opset is not None and opset < DPU_MIN_OPSET:
            raise ValueError(
                f"{d.label}: the DPU operators' fallback functions need a default-domain "
                f"(ai.onnx) opset >= {DPU_MIN_OPSET}, the model imports {opset}; convert it "
                f"first, e.g. onnx.version_converter.convert_version(model, {DPU_MIN_OPSET})")
        d.node.overload = DPU_VARIANT
        if not any(a.name == "epsilon" for a in d.node.attribute):
            d.node.attribute.append(helper.make_attribute("epsilon", DEFAULT_EPSILON))
        used.add((d.node.domain, d.node.op_type))
    kept = [f for f in model.functions if (f.domain, f.name) not in used]
    del model.functions[:]
    model.functions.extend(kept)
    for domain, name in sorted(used):
        set_opset(model, domain, 1)
        model.functions.append(dpu_function_proto("in", name, domain, opset=opset or 21))
    return True
