"""``extql run MODEL``: run a model in onnxruntime with the extql library
(or, with ``--runtime openvino|tract``, its fallbacks inlined in that runtime).

Inputs come from ``--inputs FILE.npz`` or are random (:mod:`.inputs`); an
input that the file lacks is random too, with a warning on stderr that names
it (``-q`` does not silence it; ``--json`` lists them as ``random_inputs``).  Each
output's type and shape is printed, and ``--save-outputs`` writes them.  With
``--compare-fallback`` every quantization node is also run through its
fallback function on the same inputs (:mod:`.compare_fallback`).  Exit
status: 0 ran, 1 the model has an unsupported operator or a node differs from
its fallback, 2 the command could not do its work.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

from ..tools.runtimes import RUNTIMES
from . import json_output, session
from .args import add_quiet_flag, dim_size
from .compare_fallback import compare_fallback
from .errors import CliError, readable_file, require_modules, writable_output
from .files import load_npz, save_npz
from .inputs import complete_feeds, graph_inputs
from .model_io import load_model, require_integrity, serialisable
from .progress import log

__all__ = ["register"]


def _cmd_run(args: argparse.Namespace) -> int:
    require_modules("onnx", "onnxruntime", "onnxscript")
    if args.runtime != "onnxruntime":
        from ..tools.runtimes import available

        if not available(args.runtime):
            raise CliError(f"--runtime {args.runtime}: {args.runtime} is not installed "
                           f"(pip install {args.runtime})")
    readable_file(args.model, "an .onnx model")
    if args.save_outputs:
        writable_output(args.save_outputs, "outputs (.npz)")  # before the model runs
    feeds: dict[str, np.ndarray] = load_npz(args.inputs) if args.inputs else {}
    log(args, f"loading {args.model} ...")
    model, _ = load_model(args.model)
    require_integrity(args.model, model)
    from ..onnx.microsoft import unsupported_nodes

    unsupported = unsupported_nodes(model)
    if unsupported:
        for line in unsupported:
            print(f"{args.model}: unsupported operator {line}")
        print(f"{args.model}: cannot run: {len(unsupported)} unsupported operator(s)")
        json_output.record(args, model=str(args.model), unsupported=unsupported)
        return 1

    randomised: list[str] = []

    def said_random(name: str, value: np.ndarray) -> None:
        what = f"random {value.dtype}{list(value.shape)}"
        randomised.append(name)
        if args.inputs:  # the file was meant to hold them all: always said
            print(f"warning: {args.inputs}: has no array for the model's input {name!r}; "
                  f"{what} (seed {args.seed}) is used instead", file=sys.stderr, flush=True)
        else:
            log(args, f"input {name}: {what}")

    complete_feeds(args.inputs, graph_inputs(model), feeds, np.random.default_rng(args.seed),
                   dict(args.dim or []), said_random)
    json_output.record(args, random_inputs=randomised)
    with tempfile.TemporaryDirectory(prefix="extql-run-") as tmp:
        start = time.monotonic()
        if args.runtime != "onnxruntime":
            return _run_elsewhere(args, model, feeds, tmp, start)
        if args.no_library:
            log(args, "running with the fallback functions (no library) ...")
            native = None
            # (imported here: the fallbacks' onnxscript costs a second of start-up)
            from ..tools.attach import attach_fallbacks

            target = serialisable(attach_fallbacks(model), tmp, "fallback.onnx")
            outputs = session.run_model(target, feeds,
                                        session.stepped_options(target, None, args))
        else:
            log(args, "running with the extql library ...")
            target = serialisable(model, tmp, "model.onnx")
            outputs = native = session.run_model(
                target, feeds, session.stepped_options(target, session.library_options, args))
        log(args, f"ran in {time.monotonic() - start:.2f} s")
        _report_outputs(args, outputs)
        if not args.compare_fallback:
            return 0
        if native is None:
            raise CliError("--compare-fallback compares with the library: drop --no-library")
        return compare_fallback(args, model, feeds, native, tmp)


def _run_elsewhere(args: argparse.Namespace, model, feeds: dict[str, np.ndarray], tmp: str,
                   start: float) -> int:
    """``--runtime openvino|tract``: the fallbacks inlined and run there
    (OpenVINO's CPU plugin at float32 precision), after a warning for each
    node that runtime is known not to keep exact; with --compare-fallback,
    every quantization node's fallback in that runtime against the library's
    kernels, each on the inputs the library's run gave it."""
    from ..tools import runtimes
    from ..tools.inline import inline_fallbacks
    from .convert import warn_target

    if args.no_library:
        raise CliError(f"--runtime {args.runtime} runs the fallbacks, never the library: "
                       "drop --no-library")
    warn_target(args.model, args.runtime)
    log(args, f"inlining the fallbacks and running in {args.runtime} ...")
    try:
        inlined = inline_fallbacks(model)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        outputs = runtimes.run(inlined, feeds, args.runtime)
    except runtimes.RuntimeFailure as exc:
        # With --compare-fallback the nodes are still compared one by one:
        # that is how the node the runtime cannot take is found.
        print(f"{args.model}: {args.runtime} cannot run the inlined model: {exc}")
        json_output.record(args, model=str(args.model), runtime=args.runtime,
                           runtime_error=str(exc))
        if not args.compare_fallback:
            return 1
        outputs, failed = None, str(exc)
    else:
        failed = None
        log(args, f"ran in {time.monotonic() - start:.2f} s")
        _report_outputs(args, outputs)
        if not args.compare_fallback:
            return 0
    log(args, "running with the extql library ...")
    target = serialisable(model, tmp, "model.onnx")
    native = session.run_model(target, feeds,
                               session.stepped_options(target, session.library_options, args))
    return compare_fallback(args, model, feeds, native, tmp, runtime=args.runtime,
                            whole_fallback=outputs, whole_error=failed)


def _report_outputs(args: argparse.Namespace, outputs: dict[str, np.ndarray]) -> None:
    """Print the outputs and write them where --save-outputs says."""
    _print_outputs(args, outputs)
    if args.save_outputs:
        save_npz(args.save_outputs, outputs)
        print(f"wrote {args.save_outputs}")
        json_output.record(args, saved=str(args.save_outputs))


def _print_outputs(args: argparse.Namespace, outputs: dict[str, np.ndarray]) -> None:
    """One line per output: its type, shape and, for floats, NaN count."""
    summary = {}
    for name, value in outputs.items():
        finite = ""
        summary[name] = {"dtype": str(value.dtype), "shape": list(value.shape)}
        if value.dtype.kind == "f" or value.dtype.name == "bfloat16":
            v = value.astype(np.float32)
            summary[name]["nan"] = int(np.isnan(v).sum())
            finite = f", {summary[name]['nan']} NaN"
        print(f"output {name}: {value.dtype}{list(value.shape)}{finite}")
    json_output.record(args, model=str(args.model), runtime=args.runtime,
                       library=not args.no_library and args.runtime == "onnxruntime",
                       outputs=summary)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``extql`` command."""
    p = subparsers.add_parser(
        "run", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="run a model with the extql library (optionally compare with the fallback)",
        description=(
            "Run MODEL in onnxruntime (CPU) with the extql library registered, on the arrays of\n"
            "--inputs or on random inputs, and print each output's type and shape. With\n"
            "--compare-fallback it also compares every quantization node (Extended and\n"
            "com.microsoft Q/DQ) between the native kernels and the fallback functions on the\n"
            "same inputs (exit 1 if any output differs), and reports the whole model's\n"
            "difference as information. If onnxruntime rejects the model at its default\n"
            "optimisation level, run steps it down (all, extended, basic, disabled) with a\n"
            "warning. A custom operator that neither extql nor onnxruntime implements is named\n"
            "and run exits 1. --runtime openvino|tract runs the model with its fallbacks\n"
            "inlined in that runtime instead; with --compare-fallback each quantization node's\n"
            "fallback there is compared with the library's kernels, which names the nodes the\n"
            "runtime breaks.\n\n"
            "example: extql run model.onnx --inputs in.npz --compare-fallback\n"
            "         extql run model.onnx --runtime openvino --compare-fallback"
        ),
    )
    p.add_argument("model", metavar="MODEL", help="the .onnx model to run")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="input arrays by input name (np.savez); an input the file lacks "
                        "gets random values, with a warning that names it")
    p.add_argument("--compare-fallback", action="store_true",
                   help="also compare each quantization node's output with the fallback's, "
                        "bit for bit on the same inputs (the whole model: information)")
    p.add_argument("--no-library", action="store_true",
                   help="run with the fallback functions only (no native library)")
    p.add_argument("--runtime", choices=RUNTIMES, default="onnxruntime",
                   help="run the model with its fallbacks inlined in OpenVINO (CPU, float32 "
                        "precision) or tract instead (default: onnxruntime with the library); "
                        "warns where the runtime is known not to keep the bits, and with "
                        "--compare-fallback names every node whose fallback differs there")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--dim", type=dim_size, action="append", metavar="NAME=SIZE",
                   help="size of a symbolic dimension of the random inputs (default 1); "
                        "repeatable")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="write the outputs to FILE.npz")
    add_quiet_flag(p)
    json_output.add_json_flag(p)
    p.set_defaults(func=_cmd_run)
