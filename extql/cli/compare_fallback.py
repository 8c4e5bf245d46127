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
                     native: dict[str, np.ndarray], tmp: str) -> int:
    """Run the comparison for a model whose outputs with the library were
    ``native``; print and record it; return the exit status (1: a node differs).
    ``tmp`` is a directory for models too big to hand over as bytes."""
    from ..onnx import graph
    from ..tools import compare as node_compare

    nodes = node_compare.quantization_nodes(model)
    types = graph.infer_types(model)
    exposed, kept = node_compare.expose(model, nodes, types)
    node_lines: list[str] = []
    if kept:
        log(args, f"running with the library, {len(kept)} quantization node(s) exposed ...")
        target = serialisable(exposed, tmp, "exposed.onnx")
        values = dict(feeds)
        values.update(session.run_model(
            target, feeds, session.stepped_options(target, session.library_options, args)))
        iso, feed_of, out_of = node_compare.isolated_nodes(model, kept, types)
        log(args, "running the same nodes through the fallback functions (no library) ...")
        target = serialisable(_with_fallbacks(iso), tmp, "nodes.onnx")
        got = session.run_model(target, {alias: values[name] for alias, name in feed_of.items()},
                                session.stepped_options(target, None, args))
        for q, (alias, name) in zip(kept, out_of.items(), strict=True):
            diff = node_compare.compare_arrays(values[name], got[alias])
            if diff is not None:
                node_lines.append(f"{q.ext.label} (output {name!r}): {diff}")
    skipped = len(nodes) - len(kept)
    log(args, "running the whole model with the fallback functions (no library) ...")
    target = serialisable(_with_fallbacks(model), tmp, "fallback.onnx")
    fallback = session.run_model(target, feeds, session.stepped_options(target, None, args))
    whole = _differing_outputs(native, fallback)
    if node_lines:
        print("quantization nodes: native and fallback DIFFER on the same inputs:")
        for line in node_lines:
            print(f"  {line}")
    elif kept:
        print(f"quantization nodes: all {len(kept)} output(s) identical, native kernels vs "
              "fallback functions on the same inputs")
    else:
        print("quantization nodes: none to compare")
    if skipped:
        print(f"note: {skipped} quantization node(s) not compared (inside a subgraph, or a "
              "value of unknown type)")
    if whole:
        print("whole model (information, not a failure: onnxruntime optimises the graph "
              "around custom nodes and around their decompositions differently):")
        for line in whole:
            print(f"  {line}")
    else:
        print(f"whole model: all {len(native)} output(s) agree bit for bit")
    json_output.record(args, fallback_agrees=not node_lines, differences=node_lines,
                       nodes_compared=len(kept), nodes_not_compared=skipped,
                       whole_model_differences=whole)
    return 1 if node_lines else 0


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
