"""The DPU-emulation operators' part of ``extql.attach_fallbacks``: give a
model's ``ExtendedInstanceNormalization`` / ``ExtendedLSTM`` nodes (and the
legacy ``VitisInstanceNormalization`` / ``VitisLSTM``) their fallback
functions.

Each node is checked first (:func:`extql.onnx.dpu.check_dpu_node`: a refused
attribute, input or static type / shape is a ``ValueError`` naming the
node).  An instance norm gets ``overload`` :data:`extql.fallbacks.DPU_VARIANT`
and its ``epsilon`` spelled out (1e-5 when absent: the same meaning, so the
libraries run the node as before; onnx.reference ignores a function's
attribute defaults); one function per operator name in use is added,
stamped with the model's ai.onnx opset (>= :data:`extql.fallbacks.DPU_MIN_OPSET`).
An LSTM gets the function of its parameter set
(:mod:`extql.onnx.fallback_lstm`: its fixed-point parameters are constants
of the body), ``overload`` ``lstm_<digest>``; it needs parameters the
kernels accept (their refusal, naming the node, otherwise) and its input
size known statically (W's or X's last dimension: otherwise the node is left
without a function, with a warning, and ``inline_fallbacks`` refuses it).
"""

from __future__ import annotations

import warnings

import onnx
from onnx import helper

from ..onnx.dpu import DPU_OPS as DPU_FAMILIES
from ..onnx.dpu import STANDARD_OPS_FAMILIES, DPUNode, check_dpu_node, dpu_nodes, lstm_attributes
from ..onnx.fallback_lstm import lstm_function_proto
from ..onnx.fallback_protos import DPU_MIN_OPSET, DPU_VARIANT, dpu_function_proto
from ..onnx.graph import TypeInfo, set_opset, static_shape
from ..rules.dpu import DEFAULT_EPSILON

__all__ = ["attach_dpu_fallbacks", "FALLBACK_FAMILIES", "lstm_size_unknown"]

#: The DPU families that have a standard-ops fallback.
FALLBACK_FAMILIES = STANDARD_OPS_FAMILIES


def lstm_size_unknown(label: str) -> str:
    """Why an LSTM node whose input size is unknown has no fallback."""
    return (f"{label}: the standard-ops fallback of the DPU LSTM needs the input size "
            "(the last dimension of W or X) known statically: its fixed-point shifts "
            "depend on it; give W as an initializer or X a static last dimension")


def _input_size(d: DPUNode, types: dict[str, TypeInfo]) -> int | None:
    """An LSTM node's input size from W's or X's static shape (None: unknown)."""
    for index in (1, 0):
        shape = static_shape(d.node.input[index], types)
        if shape is not None and len(shape) == 3 and isinstance(shape[2], int):
            return shape[2]
    return None


def _lstm_function(d: DPUNode, opset: int,
                   types: dict[str, TypeInfo]) -> onnx.FunctionProto | None:
    """The node's function (and its overload set on the node); None, with a
    warning, where the input size is unknown (the node is left as it is:
    ``inline_fallbacks`` then refuses it)."""
    a = lstm_attributes(d.node)
    n_in = _input_size(d, types)
    if n_in is None:
        warnings.warn(f"{lstm_size_unknown(d.label)}; the node is left without a fallback "
                      "function", stacklevel=4)
        d.node.overload = ""
        return None
    has_b = len(d.node.input) > 3 and bool(d.node.input[3])
    name = d.node.name or d.node.output[0]
    fn = lstm_function_proto(a, n_in, has_b, len(d.node.output), name=d.node.op_type,
                             domain=d.node.domain, opset=opset, node=name)
    d.node.overload = fn.overload
    return fn


def attach_dpu_fallbacks(model: onnx.ModelProto, opset: int | None,
                         types: dict[str, TypeInfo]) -> bool:
    """Attach the DPU operators' functions to ``model`` (in place); returns
    whether it has such nodes.  ``opset``: the model's ai.onnx version (None:
    it imports none yet, and 21 is added by the caller)."""
    nodes = [d for d in dpu_nodes(model) if d.family in FALLBACK_FAMILIES]
    if not nodes:
        return False
    used: set[tuple[str, str]] = set()
    lstm_functions: dict[tuple[str, str, str], onnx.FunctionProto] = {}
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
        used.add((d.node.domain, d.node.op_type))
        if d.family == "lstm":
            fn = _lstm_function(d, opset or 21, types)
            if fn is not None:
                lstm_functions.setdefault((fn.domain, fn.name, fn.overload), fn)
            continue
        d.node.overload = DPU_VARIANT
        if not any(a.name == "epsilon" for a in d.node.attribute):
            d.node.attribute.append(helper.make_attribute("epsilon", DEFAULT_EPSILON))
    kept = [f for f in model.functions if (f.domain, f.name) not in used]
    del model.functions[:]
    model.functions.extend(kept)
    for domain, name in sorted(used):
        set_opset(model, domain, 1)
        if DPU_FAMILIES[(domain, name)] == "in":
            model.functions.append(dpu_function_proto("in", name, domain, opset=opset or 21))
    model.functions.extend(lstm_functions.values())
    names = [(domain, name) for domain, name, _ in lstm_functions]
    for domain, name in sorted({n for n in names if names.count(n) > 1}):
        warnings.warn(
            f"{name} ({domain}) is used with {names.count((domain, name))} parameter sets: "
            "onnxruntime runs each node's function (by overload), but onnx.reference (use "
            "new_ops=extql.reference.OPS, or extql.inline_fallbacks) and onnxruntime "
            "releases that ignore NodeProto.overload run the last one for every node",
            stacklevel=3)
    return True
