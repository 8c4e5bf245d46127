"""``extql check MODEL``: validate every quantization node of a model.

The model's graph itself comes first (:mod:`extql.tools.lint`); then every
Extended, legacy Vitis and com.microsoft Q/DQ node and every block-format
node (BFPQuantizeDequantize / MXQuantizeDequantize, legacy BFPFixNeuron /
MXFixNeuron) is checked against its operator's rules, and a model without
problems is loaded in onnxruntime with the extql library.  One line per
problem, naming the node; exit status 1 when there is any.
"""

from __future__ import annotations

import argparse
import importlib.util

from ..ort import ONNXRUNTIME_HINT
from . import json_output
from .args import add_quiet_flag
from .errors import require_modules
from .model_io import load_model, require_external_data
from .progress import Progress, log

__all__ = ["register", "check_model"]


def check_model(
    model, progress: Progress | None = None, notes: list[str] | None = None
) -> tuple[int, list[str]]:
    """(number of quantization nodes, problems) of a model, each problem one
    line naming its node.  Checked: every Extended (and legacy Vitis) node and
    every com.microsoft QuantizeLinear / DequantizeLinear (which AMD Quark
    writes for its 8/16-bit nodes), each against its operator's rules, and
    every block-format node (BFPQuantizeDequantize / MXQuantizeDequantize,
    BFPFixNeuron / MXFixNeuron): its attributes, x's type and the axis
    against x's rank, in the words of the NumPy API and the library; every
    DPU-emulation node (ExtendedInstanceNormalization / ExtendedLSTM, legacy
    VitisInstanceNormalization / VitisLSTM): its inputs, outputs, attributes
    and the types and shapes known, by :mod:`extql.rules.dpu` /
    :mod:`extql.rules.lstm`; every operator of a custom domain that neither
    extql nor onnxruntime implements is a problem too.  What cannot be
    checked (unknown types) goes to ``notes``, not to the problems."""
    from ..onnx import blocks, check, dpu, graph
    from ..onnx.microsoft import unsupported_nodes

    problems: list[str] = [f"unsupported operator {line}" for line in unsupported_nodes(model)]
    notes = [] if notes is None else notes
    nodes = graph.extended_nodes(model, microsoft=True)
    block_nodes = blocks.block_nodes(model)
    dpu_nodes = dpu.dpu_nodes(model)
    if not nodes and not block_nodes and not dpu_nodes:
        return 0, problems
    types = graph.infer_types(model)
    imported = {o.domain for o in model.opset_import}
    domains = ({e.node.domain for e in nodes} | {b.node.domain for b in block_nodes}
               | {d.node.domain for d in dpu_nodes})
    for domain in sorted(domains):
        if domain not in imported:
            problems.append(
                f"the model has {domain} nodes but no opset import for {domain!r}; add "
                f"onnx.helper.make_opsetid({domain!r}, 1) to model.opset_import"
            )
    for i, ext in enumerate(nodes, 1):
        if progress is not None:
            progress.update(i)
        for problem in check.check_node(ext, types):
            problems.append(f"{ext.label}: {problem}")
        unknown = [n for n in ext.node.input[:2] if n and n not in types]
        if ext.has_zero_point and ext.node.input[2] not in types:
            unknown.append(ext.node.input[2])
        if unknown:
            notes.append(
                f"{ext.label}: the type of {', '.join(map(repr, unknown))} is unknown, so it "
                "cannot be checked; give the model value_info for it"
            )
    for i, block in enumerate(block_nodes, len(nodes) + 1):
        if progress is not None:
            progress.update(i)
        for problem in blocks.check_block_node(block.node, types):
            problems.append(f"{block.label}: {problem}")
        x = block.node.input[0] if block.node.input else ""
        if x and x not in types:
            notes.append(f"{block.label}: the type of {x!r} is unknown, so it cannot be "
                         "checked; give the model value_info for it")
    first = len(nodes) + len(block_nodes) + 1
    for i, unit in enumerate(dpu_nodes, first):
        if progress is not None:
            progress.update(i)
        for problem in dpu.check_dpu_node(unit.node, types):
            problems.append(f"{unit.label}: {problem}")
        unknown = [n for n in unit.node.input[:3] if n and n not in types]
        if unknown:
            notes.append(f"{unit.label}: the type of {', '.join(map(repr, unknown))} is "
                         "unknown, so it cannot be checked; give the model value_info for it")
    return len(nodes) + len(block_nodes) + len(dpu_nodes), problems


def _integrity_failure(args: argparse.Namespace, model) -> int | None:
    """Print the model's whole-graph problems (invalid element types, inputs
    that nothing produces, see :mod:`extql.tools.lint`) and return 1 when it
    has any: the node checks assume a well-formed graph."""
    from ..tools.lint import integrity_problems

    problems = integrity_problems(model)
    if not problems:
        return None
    for line in problems:
        print(line)
    print(f"{args.model}: {len(problems)} problem(s) in the graph itself; the Extended nodes "
          "were not checked")
    json_output.record(args, model=str(args.model), quantization_nodes=None, problems=problems,
                       notes=[])
    return 1


def _have_onnxruntime() -> bool:
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["onnxruntime"] is None
        return False


def _session_check(path: str) -> tuple[list[str], list[str]]:
    """(warnings, problems) of loading the model in onnxruntime with the extql
    library: a warning when it loads only below the default optimisation
    level (and why), a problem when it loads at no level.  Both empty when it
    loads at the default level, or when onnxruntime or the library is not
    available to try."""
    try:
        import onnxruntime  # noqa: F401

        from .session import library_options

        library_options()
    except ImportError:
        return [], []
    from ..ort_levels import SessionError, open_session

    found: list[str] = []
    try:
        open_session(path, library_options, warn=found.append)
    except SessionError as exc:
        message = " ".join(str(exc).split())
        return found, [f"onnxruntime (with the extql library) cannot load the model at any "
                       f"optimisation level: {message}"]
    return found, []


def _cmd_check(args: argparse.Namespace) -> int:
    require_modules("onnx", "onnxscript")
    model, external = load_model(args.model, with_data=False)
    if external:  # read where it is, by the checker and onnxruntime: it must be there
        require_external_data(args.model, model)
    failed = _integrity_failure(args, model)
    if failed is not None:
        return failed
    from ..onnx.blocks import block_nodes
    from ..onnx.dpu import dpu_nodes
    from ..onnx.graph import extended_nodes
    from ..tools.lint import onnx_checker_problems

    total = (len(extended_nodes(model, microsoft=True)) + len(block_nodes(model))
             + len(dpu_nodes(model)))
    log(args, f"checking {args.model}: {total} quantization node(s), inferring types ...")
    notes: list[str] = []
    count, problems = check_model(model, Progress(args, "checked", total), notes)
    if not problems:  # what the node checks do not look at; by path: external data
        problems += onnx_checker_problems(model, str(args.model))
    for line in problems:
        print(line)
    # With problems to fix, the notes (what could not be checked) are a
    # summary, not a list: the problems are what the reader needs.
    shown = notes if not problems or len(notes) <= 2 else notes[:1]
    for line in shown:
        print(f"note: {line}")
    if len(shown) < len(notes):
        print(f"note: {len(notes) - len(shown)} more node(s) could not be checked (unknown "
              "types); fix the problems above first")
    warned: list[str] = []
    if not problems and not _have_onnxruntime():
        notes.append("onnxruntime is not installed, so the model was not loaded in it; "
                     f"to load it there, {ONNXRUNTIME_HINT}")
        print(f"note: {notes[-1]}")
    elif not problems:
        log(args, "loading the model in onnxruntime at its default optimisation level ...")
        warned, refused = _session_check(str(args.model))
        for line in warned:
            print(f"warning: {line}")
        for line in refused:
            print(line)
        problems += refused
    json_output.record(args, model=str(args.model), quantization_nodes=count, problems=problems,
                       notes=notes, warnings=warned)
    if count == 0 and not problems:
        print(f"{args.model}: no ExtendedQuantizeLinear/ExtendedDequantizeLinear node "
              "(nor the legacy Vitis names, nor com.microsoft QuantizeLinear/DequantizeLinear, "
              "nor a block-format or DPU-emulation node)")
        return 0
    status = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"{args.model}: {count} quantization node(s) checked: {status}")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``check`` to the ``extql`` command."""
    p = subparsers.add_parser(
        "check", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="validate every quantization node of a model",
        description=(
            "Check every ExtendedQuantizeLinear / ExtendedDequantizeLinear node (and the legacy\n"
            "VitisQuantizeLinear / VitisDequantizeLinear, and com.microsoft QuantizeLinear /\n"
            "DequantizeLinear) of MODEL: input count, the types of x,\n"
            "scale and zero point, the scale's rank, zero point shape, axis range and scale\n"
            "length against the input's shape. Types and shapes come from the model's\n"
            "initializers, inputs, value_info and ONNX shape inference.\n\n"
            "Every BFPQuantizeDequantize / MXQuantizeDequantize node (and the legacy\n"
            "BFPFixNeuron / MXFixNeuron): its attributes, the type of x and the axis against\n"
            "x's rank, with the words of the NumPy API and the library.\n\n"
            "Every ExtendedInstanceNormalization / ExtendedLSTM node (and the legacy\n"
            "VitisInstanceNormalization / VitisLSTM): inputs, outputs, attributes, and the\n"
            "types and shapes of the inputs, with the words of the NumPy API and the library.\n\n"
            "Every operator of a custom domain that neither extql nor onnxruntime implements\n"
            "is a problem too. A model that onnxruntime loads only below its default\n"
            "optimisation level gets a warning.\n\n"
            "Prints one line per problem, naming the node, and exits with 1 if there is any."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="the .onnx model to check")
    add_quiet_flag(p)
    json_output.add_json_flag(p)
    p.set_defaults(func=_cmd_check)
