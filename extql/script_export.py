"""``to_model_proto()`` of onnxscript functions that use extql's operators.

onnxscript gives a model an ``ai.onnx`` opset import even when no node uses
that domain, and then takes the newest opset the installed onnx knows (with
the IR version that goes with it: opset 28 / IR 14 with onnx 1.23), whatever
``default_opset`` the function was scripted with.  onnxruntime refuses such a
model ("Unsupported model IR version").  A function whose body is only
``extql.quark`` calls is exactly that case.

:func:`install` (called when :mod:`extql.opset` is imported, which
``from extql import quark`` and the script fallbacks do) wraps
``onnxscript.OnnxFunction.to_model_proto`` so that, for a model with extql
operators in it (Extended / Vitis nodes, or calls of the script fallbacks of
:data:`extql.fallbacks.QUANTIZE` / ``DEQUANTIZE``):

* when no node of the model uses ``ai.onnx`` and the call gave no
  ``opset_version``, the model imports ``ai.onnx`` :data:`MODEL_OPSET` (21,
  IR version 10), which every onnxruntime extql supports (1.18 on);
  otherwise onnxscript's choice stands (the opset the function's standard
  ops come from);
* the fallback function definitions import the model's ``ai.onnx`` version,
  as ONNX requires of model-local functions, and their calls spell out
  ``axis`` and an omitted zero point (for onnx.reference);
* every Extended node is type-checked against the operator schemas (x, the
  scale and the zero point types, shapes and axis where known): a wrong type
  raises ``TypeError``, another problem ``ValueError``, naming the operator
  node, at conversion instead of at run time.

Models without extql operators are returned exactly as onnxscript makes them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import onnx
from onnxscript.values import OnnxFunction

from .tools.graph import walk_nodes
from .types import DOMAIN, LEGACY_DOMAIN, is_float8

__all__ = ["MODEL_OPSET", "FALLBACK_DOMAIN", "install", "check_model", "finish_model"]

#: The ``ai.onnx`` opset given to models whose nodes do not pin one: the
#: newest that onnxruntime 1.18 (the oldest extql supports) loads, and the
#: one the fallback functions are written for.
MODEL_OPSET = 21
#: Domain of the fallback functions that script functions call
#: (:mod:`extql.fallback_scripts`).
FALLBACK_DOMAIN = "ai.extql.fallbacks"

_EXTQL_DOMAINS = frozenset((DOMAIN, LEGACY_DOMAIN, FALLBACK_DOMAIN))
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _all_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    yield from walk_nodes(model.graph.node)
    for fn in model.functions:
        yield from walk_nodes(fn.node)


def _default_opset(model: onnx.ModelProto) -> int | None:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return None


def _restamp_fallbacks(model: onnx.ModelProto) -> None:
    """Give the fallback functions the model's ai.onnx version."""
    from .fallbacks import variant_opset

    version = _default_opset(model)
    for fn in model.functions:
        if fn.domain != FALLBACK_DOMAIN:
            continue
        needed = variant_opset(fn.name.split("_", 1)[1])
        if version is None or version < needed:
            raise ValueError(
                f"extql fallback {fn.name}: needs an ai.onnx opset >= {needed}, the model "
                f"imports {version}; script the function with default_opset=onnxscript.opset"
                f"{max(MODEL_OPSET, needed)} (or any opset >= {needed})"
            )
        for imp in fn.opset_import:
            if imp.domain in _DEFAULT_DOMAINS:
                imp.version = version


def _explicit_calls(model: onnx.ModelProto) -> None:
    """Spell out what fallback calls leave to defaults, for onnx.reference,
    which ignores a function's attribute defaults and wants every input:
    ``axis=1`` and ``block_size=0`` where not given (the same meaning),
    quantize's ``precision`` and dequantize's ``output_dtype`` (the scale's
    type where the types say it, else float32, the functions' default),
    float8's ``saturate=1``, and an empty name for an omitted zero point
    (the "default" variants ignore it)."""
    from .tools.graph import infer_types

    types = None
    for node in _all_nodes(model):
        if node.domain != FALLBACK_DOMAIN:
            continue
        if types is None:
            types = infer_types(model)
        given = {a.name for a in node.attribute}
        quantize = node.op_type.startswith("ExtendedQuantize")
        variant = node.op_type.split("_", 1)[1]
        info = types.get(node.input[1]) if len(node.input) > 1 else None
        scale_type = info.elem_type if info is not None and info.elem_type else 1
        defaults = {"axis": 1, "block_size": 0}
        if quantize:
            defaults["precision"] = scale_type
            if is_float8(variant):
                defaults["saturate"] = 1
        else:
            defaults["output_dtype"] = scale_type
        for name, value in defaults.items():
            if name not in given:
                node.attribute.append(onnx.helper.make_attribute(name, value))
        while len(node.input) < 3:
            node.input.append("")


_TYPE_PROBLEMS = ("must be float32", "must be one of", "must have the type of")


def check_model(model: onnx.ModelProto) -> None:
    """Raise on the first problem that the static types prove in an Extended
    node: ``TypeError`` for a wrong input type, ``ValueError`` otherwise; the
    message names the operator and the node (``extql check`` finds the same)."""
    from .tools.check import check_node
    from .tools.graph import extended_nodes, infer_types

    nodes = extended_nodes(model)
    if not nodes:
        return
    types = infer_types(model)
    for ext in nodes:
        problems = check_node(ext, types)
        if problems:
            problem = problems[0]
            error = TypeError if any(p in problem for p in _TYPE_PROBLEMS) else ValueError
            raise error(f"{ext.label}: {problem}")


def finish_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """Restamp the fallback functions and type-check the Extended nodes of a
    model converted by onnxscript (in place; returns it)."""
    _restamp_fallbacks(model)
    _explicit_calls(model)
    check_model(model)
    return model


def _uses_extql(model: onnx.ModelProto) -> bool:
    return any(node.domain in _EXTQL_DOMAINS for node in _all_nodes(model))


def _has_default_domain_node(model: onnx.ModelProto) -> bool:
    return any(node.domain in _DEFAULT_DOMAINS for node in _all_nodes(model))


def _wrap(original):
    @functools.wraps(original)
    def to_model_proto(self: OnnxFunction, **kwargs: Any) -> onnx.ModelProto:
        model = original(self, **kwargs)
        if not _uses_extql(model):
            return model
        pinned = "opset_version" in kwargs or "opset_version" in (self.kwargs or {})
        if not pinned and not _has_default_domain_node(model):
            model = original(self, **kwargs, opset_version=MODEL_OPSET)
        return finish_model(model)

    to_model_proto.__extql_original__ = original  # type: ignore[attr-defined]
    return to_model_proto


_lock = threading.Lock()


def install() -> None:
    """Wrap ``OnnxFunction.to_model_proto`` as described above (idempotent)."""
    with _lock:
        current = OnnxFunction.to_model_proto
        if hasattr(current, "__extql_original__"):
            return
        OnnxFunction.to_model_proto = _wrap(current)  # type: ignore[method-assign]
