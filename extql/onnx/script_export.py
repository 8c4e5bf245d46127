"""Models from onnxscript functions that use extql's operators.

:func:`to_model_proto` (also :func:`extql.to_model_proto`) converts a
``@onnxscript.script`` function as its own ``to_model_proto()`` does, and
then makes the model one every supported onnxruntime loads.  onnxscript gives
a model an ``ai.onnx`` opset import even when no node uses that domain, and
then takes the newest opset the installed onnx knows (with the IR version
that goes with it: opset 28 / IR 14 with onnx 1.23), whatever
``default_opset`` the function was scripted with; an onnxruntime older than
the installed onnx refuses such a model ("Unsupported model IR version").  A
function whose body is only ``extql.quark`` calls is exactly that case.  For
a model with extql operators in it (Extended / Vitis nodes, or calls of the
script fallbacks of :data:`extql.fallbacks.QUANTIZE` / ``DEQUANTIZE``):

* when no node of the model uses ``ai.onnx`` and the call gave no
  ``opset_version``, the model imports ``ai.onnx`` :data:`MODEL_OPSET` (21,
  IR version 10), which every onnxruntime extql supports (1.18 on);
  otherwise onnxscript's choice stands (the opset the function's standard
  ops come from);
* the fallback function definitions import the model's ``ai.onnx`` version,
  as ONNX requires of model-local functions, and their calls spell out the
  attributes the definitions read (for onnx.reference, and for the
  precision of the division, which follows the scale's type) and an omitted
  zero point; a quantize call of precision float64 (``precision=11``, or an
  int32 scale without ``precision``) is pointed at the variant's
  precision-float64 function, which the model then carries;
* every Extended node is type-checked against the operator schemas (x, the
  scale and the zero point types, shapes and axis where known): a wrong type
  raises ``TypeError``, another problem ``ValueError``, naming the operator
  node, at conversion instead of at run time.

Models without extql operators are returned exactly as onnxscript makes them.
Nothing of onnxscript is changed: ``fn.to_model_proto()`` stays onnxscript's
own (it refuses a function that calls a fallback, whose calls it would not
spell out, see :class:`~extql.onnx.fallback_scripts.FallbackFunction`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import onnx
from onnxscript.values import OnnxFunction

from .. import rules
from ..rules.types import (
    DOMAIN,
    FLOAT64_CODE,
    LEGACY_DOMAIN,
    OUTPUT_CODES,
    default_precision,
    is_float8,
)
from .check import check_node
from .fallback_protos import (
    FALLBACK_DOMAIN,
    FLOAT64,
    MODEL_OPSET,
    fallback_proto,
    float64_overload,
    function_name,
    variant_opset,
)
from .fallback_scripts import exporting
from .graph import extended_nodes, infer_types, walk_nodes

__all__ = ["MODEL_OPSET", "FALLBACK_DOMAIN", "to_model_proto", "check_model", "finish_model"]

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


def _function_input_types(model: onnx.ModelProto,
                          types: dict) -> dict[tuple[str, str, str], dict[str, int]]:
    """The element types of the inputs of each model-local function, by
    input name, where its calls say one and agree: from the main graph's
    types, then from the functions' own (a function calling another), until
    nothing changes.  (A function's names are its own: the main graph's
    types say nothing of them.)"""
    keys = {(f.domain, f.name, f.overload): f for f in model.functions}
    known: dict[tuple[str, str, str], dict[str, int]] = {k: {} for k in keys}

    def elem(name: str, scope: dict[str, int] | None) -> int:
        if scope is not None:
            return scope.get(name, 0)
        info = types.get(name)
        return info.elem_type if info is not None else 0

    for _ in range(len(keys) + 1):
        votes: dict[tuple[str, str, str], dict[str, set[int]]] = {k: {} for k in keys}
        scopes = [(model.graph.node, None)] + [(f.node, known[k]) for k, f in keys.items()]
        for nodes, scope in scopes:
            for node in walk_nodes(nodes):
                key = (node.domain, node.op_type, node.overload)
                if key not in keys:
                    continue
                for formal, actual in zip(keys[key].input, node.input, strict=False):
                    code = elem(actual, scope) if actual else 0
                    if code:
                        votes[key].setdefault(formal, set()).add(code)
        found = {k: {n: next(iter(c)) for n, c in v.items() if len(c) == 1}
                 for k, v in votes.items()}
        if found == known:
            break
        known = found
    return known


def _explicit_calls(model: onnx.ModelProto) -> None:
    """Spell out what fallback calls leave to defaults, for onnx.reference,
    which ignores a function's attribute defaults and wants every input:
    ``axis`` and ``block_size`` where not given (their defaults, the same
    meaning), quantize's ``precision`` (:func:`extql.rules.linear.default_precision`
    of the scale's type: float64 for an int32 scale, float32 for a
    float8e8m0 one) and dequantize's ``output_dtype`` (the scale's type
    where the types say it is a float type, else float32, the functions'
    default), float8's ``saturate``, and an empty name for an omitted zero
    point (the "default" variants ignore it).  The scale's type is the
    static one: the main graph's, or in a model-local function what its
    calls pass (:func:`_function_input_types`).  A quantize call without
    ``precision`` whose scale's type is not known is a ``ValueError``: its
    precision, float or float64, cannot be chosen.  Quantize calls of
    precision float64 then call the variant's precision-float64 function
    (see :func:`_call_float64`)."""
    if not any(node.domain == FALLBACK_DOMAIN for node in _all_nodes(model)):
        return
    types = infer_types(model)
    function_types = _function_input_types(model, types)
    scopes = [(model.graph.node, None, "")] + [
        (f.node, function_types[f.domain, f.name, f.overload], f" (in function {f.name!r})")
        for f in model.functions]
    for nodes, scope, where in scopes:
        for node in walk_nodes(nodes):
            if node.domain != FALLBACK_DOMAIN:
                continue
            given = {a.name for a in node.attribute}
            quantize = node.op_type.startswith("ExtendedQuantize")
            variant = node.op_type.split("_", 1)[1]
            scale = node.input[1] if len(node.input) > 1 else ""
            if scope is not None:
                scale_type = scope.get(scale, 0)
            else:
                info = types.get(scale)
                scale_type = info.elem_type if info is not None else 0
            defaults = {name: rules.DEFAULTS[name] for name in ("axis", "block_size")}
            if quantize:
                if "precision" not in given and not scale_type:
                    raise ValueError(
                        f"extql fallback {node.op_type}{where}: the type of its scale "
                        f"{scale!r} is not known at conversion, and the precision of the "
                        "division depends on it (the scale's type; float64 for an int32 "
                        "scale): annotate the scale's type or pass precision= (1 float32, "
                        "10 float16, 16 bfloat16, 11 float64)"
                    )
                defaults["precision"] = default_precision(scale_type)
                if is_float8(variant):
                    defaults["saturate"] = rules.DEFAULTS["saturate"]
            else:
                defaults["output_dtype"] = (scale_type if scale_type in OUTPUT_CODES
                                            else onnx.TensorProto.FLOAT)
            for name, value in defaults.items():
                if name not in given:
                    node.attribute.append(onnx.helper.make_attribute(name, value))
            while len(node.input) < 3:
                node.input.append("")
    _call_float64(model)


def _call_float64(model: onnx.ModelProto) -> None:
    """Point every fallback quantize call of precision float64 (the
    attribute 11) at the variant's precision-float64 function
    (``ExtendedQuantizeLinear_<variant>-float64``), added to the model with
    the model's ai.onnx version: the per-variant functions of the float
    precisions divide in float32.  Functions that no call uses any more go."""
    needed: set[str] = set()
    for node in _all_nodes(model):
        if node.domain != FALLBACK_DOMAIN or not node.op_type.startswith("ExtendedQuantize"):
            continue
        variant = node.op_type.split("_", 1)[1]
        precision = next((a for a in node.attribute if a.name == "precision"), None)
        if variant.endswith(FLOAT64) or precision is None or precision.ref_attr_name:
            continue
        if precision.i == FLOAT64_CODE:
            node.op_type = function_name(True, float64_overload(variant))
            needed.add(float64_overload(variant))
    if not needed:
        return
    version = _default_opset(model)
    have = {f.name for f in model.functions if f.domain == FALLBACK_DOMAIN}
    # First: onnx.reference knows, in a function, the functions listed before it.
    added = [fallback_proto(True, overload, version or MODEL_OPSET)
             for overload in sorted(needed) if function_name(True, overload) not in have]
    called = {n.op_type for n in _all_nodes(model) if n.domain == FALLBACK_DOMAIN}
    kept = [f for f in model.functions if f.domain != FALLBACK_DOMAIN or f.name in called]
    del model.functions[:]
    model.functions.extend([*added, *kept])


_TYPE_PROBLEMS = ("must be float32", "must be one of", "must have the type of")


def check_model(model: onnx.ModelProto) -> None:
    """Raise on the first problem that the static types prove in an Extended
    node: ``TypeError`` for a wrong input type, ``ValueError`` otherwise; the
    message names the operator and the node (``extql check`` finds the same)."""
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


def to_model_proto(function: OnnxFunction, **kwargs: Any) -> onnx.ModelProto:
    """The model of a ``@onnxscript.script`` function, as described above:
    ``function.to_model_proto(**kwargs)`` (onnxscript's own), then, when
    the model uses extql's operators, the ``ai.onnx`` opset every supported
    onnxruntime loads where no node pins one, the fallback calls spelled out
    and every Extended node type-checked (:func:`finish_model`)."""
    if not isinstance(function, OnnxFunction):
        raise TypeError(
            "extql.to_model_proto: expected an onnxscript function (made with "
            f"@onnxscript.script()), got {type(function).__name__}"
        )
    with exporting():
        model = function.to_model_proto(**kwargs)
        if not _uses_extql(model):
            return model
        pinned = "opset_version" in kwargs or "opset_version" in (function.kwargs or {})
        if not pinned and not _has_default_domain_node(model):
            model = function.to_model_proto(**kwargs, opset_version=MODEL_OPSET)
    return finish_model(model)
