"""``extql run --compare-fallback``: native kernels against fallback functions.

Every quantization node's output is compared bit for bit between the extql
library's native kernels and the node's fallback function on the same inputs
(the promise; a difference is exit status 1); then the whole model's outputs
are compared as information only, since onnxruntime optimises the graph
around custom nodes and around their decompositions differently.
"""

from __future__ import annotations

import argparse

import numpy as np

from . import json_output, session
from .errors import CliError
from .model_io import serialisable
from .progress import log

__all__ = ["compare_fallback"]


def compare_fallback(args: argparse.Namespace, model, feeds: dict[str, np.ndarray],
                     native: dict[str, np.ndarray], tmp: str, runtime: str = "onnxruntime",
                     whole_fallback: dict[str, np.ndarray] | None = None,
                     whole_error: str | None = None) -> int:
    """Run the comparison for a model whose outputs with the library were
    ``native``; print and record it; return the exit status (1: a node differs).
    ``tmp`` is a directory for models too big to hand over as bytes.  With
    ``runtime`` "openvino" or "tract" the fallbacks are inlined and run
    there (:mod:`extql.tools.runtimes`), and a node that runtime is known not
    to keep exact says so; ``whole_fallback`` is the whole model's outputs
    there when they were computed already, ``whole_error`` the runtime's
    message when it could not run the whole model (it is not tried again)."""
    from ..onnx import graph
    from ..tools import compare as node_compare

    nodes = node_compare.quantization_nodes(model)
    types = graph.infer_types(model)
    exposed, kept = node_compare.expose(model, nodes, types)
    node_lines: list[str] = []
    known = _known_limits(model, runtime)
    where = "fallback functions" if runtime == "onnxruntime" else f"fallbacks in {runtime}"
    if kept:
        log(args, f"running with the library, {len(kept)} quantization node(s) exposed ...")
        target = serialisable(exposed, tmp, "exposed.onnx")
        values = dict(feeds)
        values.update(session.run_model(
            target, feeds, session.stepped_options(target, session.library_options, args)))
        log(args, f"running the same nodes through the {where} ...")
        for q, diff in _node_differences(args, model, kept, types, values, tmp, runtime):
            if diff is not None:
                line = f"{q.ext.label} (output {q.output!r}): {diff}"
                if q.ext.label in known:
                    line += f" [known: {known[q.ext.label]}]"
                node_lines.append(line)
    skipped = len(nodes) - len(kept)
    failed = whole_error
    if whole_fallback is None and failed is None:
        from ..tools.runtimes import RuntimeFailure

        log(args, f"running the whole model with the {where} ...")
        try:
            whole_fallback = _fallback_run(args, model, feeds, tmp, runtime, "fallback.onnx")
        except RuntimeFailure as exc:
            failed = str(exc)
    whole = [] if failed else _differing_outputs(native, whole_fallback)
    if node_lines:
        print(f"quantization nodes: native and {where} DIFFER on the same inputs:")
        for line in node_lines:
            print(f"  {line}")
    elif kept:
        print(f"quantization nodes: all {len(kept)} output(s) identical, native kernels vs "
              f"{where} on the same inputs")
    else:
        print("quantization nodes: none to compare")
    if skipped:
        print(f"note: {skipped} quantization node(s) not compared (inside a subgraph, or a "
              "value of unknown type)")
    if failed:
        print(f"whole model: {runtime} cannot run it: {failed}")
    elif whole:
        print("whole model (information, not a failure: a runtime optimises the graph "
              "around custom nodes and around their decompositions differently):")
        for line in whole:
            print(f"  {line}")
    else:
        print(f"whole model: all {len(native)} output(s) agree bit for bit")
    json_output.record(args, runtime=runtime, fallback_agrees=not node_lines,
                       differences=node_lines, nodes_compared=len(kept), nodes_not_compared=skipped,
                       whole_model_differences=whole, whole_model_error=failed)
    return 1 if node_lines or failed else 0


def _known_limits(model, runtime: str) -> dict[str, str]:
    """node label -> what :data:`extql.tools.runtimes.LIMITS` says of it there."""
    if runtime == "onnxruntime":
        return {}
    from ..tools.runtimes import node_limits

    return {n.label: n.line().removeprefix(f"{n.label}: ") for n in node_limits(model, runtime)}


def _fallback_run(args: argparse.Namespace, model, feeds: dict[str, np.ndarray], tmp: str,
                  runtime: str, name: str) -> dict[str, np.ndarray]:
    """The model's outputs through its fallbacks: attached and run by
    onnxruntime without the library, or inlined and run in ``runtime``
    (a :class:`extql.tools.runtimes.RuntimeFailure` when it cannot)."""
    if runtime == "onnxruntime":
        target = serialisable(_with_fallbacks(model), tmp, name)
        return session.run_model(target, feeds, session.stepped_options(target, None, args))
    from ..tools import runtimes
    from ..tools.inline import inline_fallbacks

    try:
        inlined = inline_fallbacks(model)
    except ValueError as exc:
        raise CliError(f"--compare-fallback cannot compare this model: {exc}") from None
    return runtimes.run(inlined, feeds, runtime)


def _node_differences(args, model, kept, types, values, tmp, runtime):
    """(node, difference or None) for every node of ``kept``, its fallback
    run alone on the inputs the native run gave it.  The nodes run as one
    model; where another runtime cannot run that, one by one, and a node it
    cannot run is a difference that says why."""
    from ..tools import compare as node_compare
    from ..tools.runtimes import RuntimeFailure

    def run(nodes):
        iso, feed_of, out_of = node_compare.isolated_nodes(model, nodes, types)
        got = _fallback_run(args, iso, {alias: values[name] for alias, name in feed_of.items()},
                            tmp, runtime, "nodes.onnx")
        return [(q, node_compare.compare_arrays(values[name], got[alias]))
                for q, (alias, name) in zip(nodes, out_of.items(), strict=True)]

    try:
        return run(kept)
    except RuntimeFailure:
        if len(kept) == 1:
            raise
    out = []
    for q in kept:
        try:
            out.extend(run([q]))
        except RuntimeFailure as exc:
            out.append((q, f"{runtime} cannot run its fallback: {exc}"))
    return out


def _with_fallbacks(model):
    """The model with its fallback functions; a node they cannot be given
    (a type the model's opset cannot express) is the user's answer, not an
    internal error: the comparison cannot be made."""
    from ..tools import attach

    try:
        return attach.attach_fallbacks(model)
    except ValueError as exc:
        raise CliError(f"--compare-fallback cannot compare this model: {exc}") from None


def _differing_outputs(native: dict, fallback: dict) -> list[str]:
    """One line per output of ``native`` that differs in ``fallback`` (any NaN
    matches any NaN)."""
    from ..tools.compare import compare_arrays

    lines = []
    for name, a in native.items():
        diff = compare_arrays(a, fallback[name])
        if diff is not None:
            lines.append(f"{name}: {diff}")
    return lines
