"""Whole-model integrity checks that the ``extql`` commands make before their work.

A model can be readable protobuf and still be no model onnxruntime will load:
an element type code that no ONNX type has (one flipped bit does it), a node
input that nothing produces (a zero point whose initializer was dropped), a
name that is not UTF-8.  (Operators that neither extql nor onnxruntime
implements are named by :func:`extql.onnx.microsoft.unsupported_nodes`.)
:func:`integrity_problems` finds these, each as one line naming the tensor
or node, so that ``check`` reports them as the model's problems (exit 1),
and ``run`` / ``attach`` / ``inline`` / ``lower`` refuse the model with
exit 1, instead of passing it or failing inside code that assumes valid
type codes and names.  :func:`onnx_checker_problems` adds what
``onnx.checker`` rejects, for ``check`` to report when the node checks found
nothing.
"""
from __future__ import annotations

from collections.abc import Iterator

import onnx
from google.protobuf import descriptor

from ..onnx.graph import node_label

__all__ = [
    "integrity_problems",
    "non_utf8_problems",
    "invalid_type_problems",
    "dangling_input_problems",
    "onnx_checker_problems",
]

_VALID_TYPES = frozenset(onnx.TensorProto.DataType.values())


def _type_codes(tp: onnx.TypeProto) -> Iterator[int]:
    """Every element type code inside a TypeProto (tensors, sequences, maps, optionals)."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(tp, kind).elem_type
    elif kind == "sequence_type":
        yield from _type_codes(tp.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from _type_codes(tp.optional_type.elem_type)
    elif kind == "map_type":
        yield tp.map_type.key_type
        yield from _type_codes(tp.map_type.value_type)


def _attribute_tensors(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.name, attr.t
        for t in attr.tensors:
            yield attr.name, t
        if attr.HasField("sparse_tensor"):
            yield attr.name, attr.sparse_tensor.values


def _subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.name, attr.g
        for g in attr.graphs:
            yield attr.name, g


def invalid_type_problems(model: onnx.ModelProto) -> list[str]:
    """One line per tensor or value whose element type code is not an ONNX type."""
    problems: list[str] = []

    def bad(code: int) -> bool:
        return code not in _VALID_TYPES

    def walk(graph: onnx.GraphProto, where: str) -> None:
        for kind, infos in (("input", graph.input), ("output", graph.output),
                            ("value_info", graph.value_info)):
            for vi in infos:
                codes = [c for c in _type_codes(vi.type) if bad(c)]
                if codes:
                    problems.append(f"{where}{kind} {vi.name!r} has an invalid element type "
                                    f"{codes[0]} (not an ONNX TensorProto data type)")
        for init in graph.initializer:
            if bad(init.data_type) or init.data_type == onnx.TensorProto.UNDEFINED:
                problems.append(f"{where}initializer {init.name!r} has an invalid element type "
                                f"{init.data_type} (not an ONNX TensorProto data type)")
        for sparse in graph.sparse_initializer:
            code = sparse.values.data_type
            if bad(code) or code == onnx.TensorProto.UNDEFINED:
                problems.append(f"{where}sparse initializer {sparse.values.name!r} has an "
                                f"invalid element type {code}")
        for node in graph.node:
            for attr_name, t in _attribute_tensors(node):
                if bad(t.data_type) or t.data_type == onnx.TensorProto.UNDEFINED:
                    problems.append(f"{where}{node_label(node)}: the tensor of attribute "
                                    f"{attr_name!r} has an invalid element type {t.data_type}")
            for attr_name, sub in _subgraphs(node):
                walk(sub, f"{where}subgraph {attr_name!r} of {node_label(node)}: ")

    walk(model.graph, "")
    return problems


def dangling_input_problems(model: onnx.ModelProto) -> list[str]:
    """One line per node input that nothing produces: not an input or an
    initializer of its graph or of an enclosing graph (subgraphs see outer
    scopes), and not the output of any node there.  Empty names are omitted
    optional inputs and are fine."""
    problems: list[str] = []

    def walk(graph: onnx.GraphProto, outer: frozenset[str], where: str) -> None:
        known = set(outer)
        known.update(vi.name for vi in graph.input)
        known.update(t.name for t in graph.initializer)
        known.update(s.values.name for s in graph.sparse_initializer)
        for node in graph.node:
            known.update(o for o in node.output if o)
        scope = frozenset(known)
        for node in graph.node:
            missing = [n for n in node.input if n and n not in scope]
            for name in dict.fromkeys(missing):
                problems.append(
                    f"{where}{node_label(node)}: input {name!r} is produced by nothing (not a "
                    "graph input, an initializer or any node's output)")
            for attr_name, sub in _subgraphs(node):
                walk(sub, scope, f"{where}subgraph {attr_name!r} of {node_label(node)}: ")
        for vi in graph.output:
            if vi.name and vi.name not in scope:
                problems.append(f"{where}graph output {vi.name!r} is produced by nothing")

    walk(model.graph, frozenset(), "")
    for fn in model.functions:
        scope = set(fn.input)
        for node in fn.node:
            scope.update(o for o in node.output if o)
        for node in fn.node:
            for name in dict.fromkeys(n for n in node.input if n and n not in scope):
                problems.append(f"function {fn.domain}.{fn.name}: {node_label(node)}: input "
                                f"{name!r} is produced by nothing (not a function input or any "
                                "node's output)")
    return problems


def non_utf8_problems(model: onnx.ModelProto, limit: int = 3) -> list[str]:
    """Text fields (names, domains, ...) that are not valid UTF-8, which ONNX
    requires and onnxruntime refuses; at most ``limit`` lines."""
    problems: list[str] = []
    stack: list[tuple[str, object]] = [("model", model)]
    string = descriptor.FieldDescriptor.TYPE_STRING
    message = descriptor.FieldDescriptor.TYPE_MESSAGE
    while stack and len(problems) < limit:
        where, msg = stack.pop()
        for fd, value in msg.ListFields():  # type: ignore[attr-defined]
            repeated = _is_repeated(fd)
            values = list(value) if repeated else [value]
            if fd.type == string:
                for v in values:
                    if isinstance(v, bytes):
                        problems.append(f"{where}.{fd.name} {v!r} is not valid UTF-8 text")
            elif fd.type == message:
                for i, v in enumerate(values):
                    stack.append((f"{where}.{fd.name}[{i}]" if repeated else
                                  f"{where}.{fd.name}", v))
    return problems[:limit]


def _is_repeated(fd: descriptor.FieldDescriptor) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf >= 5.28
    if isinstance(is_repeated, bool):
        return is_repeated
    return fd.label == descriptor.FieldDescriptor.LABEL_REPEATED


def integrity_problems(model: onnx.ModelProto) -> list[str]:
    """Every whole-model problem: no IR version, text that is not UTF-8,
    invalid element types, inputs that nothing produces (module docstring)."""
    problems: list[str] = []
    if model.ir_version <= 0:
        problems.append("the model has no IR version (ir_version is not set)")
    problems += non_utf8_problems(model)
    if problems:
        return problems  # names are not comparable: the other checks would only add noise
    problems += invalid_type_problems(model)
    problems += dangling_input_problems(model)
    return problems


def onnx_checker_problems(model: onnx.ModelProto, path: str | None = None) -> list[str]:
    """What ``onnx.checker`` finds wrong with the model (one line), for the
    problems the node checks do not look at: an ai.onnx operator that does
    not exist, a missing opset import, a name that is not UTF-8 ...

    With ``path`` (the model's file) the checker reads the file itself, so
    that tensors in external data files are checked where they are, next to
    the model; without it, ``model`` is checked in memory, which must then
    hold its tensors.  Shape inference is not strict: the node checks infer
    types themselves, and a type they cannot know is a note, not a problem."""
    try:
        onnx.checker.check_model(model if path is None else str(path))
    except Exception as exc:  # noqa: BLE001 - ValidationError, decoding errors ...
        lines = [s.strip() for s in str(exc).splitlines() if s.strip()]
        first = lines[0] if lines else type(exc).__name__
        return [f"the ONNX checker rejects the model: {first}"]
    return []
