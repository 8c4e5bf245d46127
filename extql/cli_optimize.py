"""``extql optimize IN OUT`` and ``extql fold IN OUT`` on the command line.

Registered in :mod:`extql.cli` through :func:`register`.  Exit codes: 0 the
model was written, 1 the model has a problem (a node that cannot be folded,
an invalid quantization node), 2 the command could not do its work (the input
is missing or unreadable, the output cannot be written).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["register"]


def _run(args: argparse.Namespace, name: str) -> int:
    """Read IN, transform it, write OUT.  Errors are raised as CliError and
    printed by the command line's guard (extql.cli_errors): status 2 for
    paths and files, 1 for a model the transformation cannot take."""
    from .cli_errors import CliError, readable_file, require_modules, writable_output
    from .cli_tools import _name_unsupported, _require_integrity, load_model, save_model

    require_modules("onnx", "onnxscript")
    src, dst = Path(args.input), Path(args.output)
    readable_file(src, "an .onnx model")
    if src.resolve() == dst.resolve():
        raise CliError("the output must be a different file from the input")
    writable_output(dst, "model")  # before the work, not after it
    if not args.quiet:
        print(f"loading {src} ...", file=sys.stderr, flush=True)
    model, external = load_model(src)
    _require_integrity(src, model)
    _name_unsupported(src, model, name)
    start = time.monotonic()
    report: list[str] = []
    try:
        out = _transform(name, model, report, getattr(args, "no_fuse", False))
    except ValueError as exc:
        raise CliError(str(exc), status=1) from None
    if not args.quiet:
        print(f"{name}: done in {time.monotonic() - start:.1f} s; writing {dst} ...",
              file=sys.stderr, flush=True)
    want_external = True if args.external_data else (
        False if args.no_external_data else (True if external else None))
    location = save_model(out, dst, external=want_external)
    if args.verbose:
        for line in report:
            print(line)
    before, after = _count(model), _count(out)
    note = f" (tensors in {location})" if location else ""
    print(f"wrote {dst}{note}: quantization nodes {before} -> {after}; "
          f"size {model.ByteSize() / 1e6:.1f} MB -> {out.ByteSize() / 1e6:.1f} MB")
    return 0


def _transform(name: str, model, report: list[str], no_fuse: bool = False):
    if name == "optimize":
        from .tools.optimize import optimize

        return optimize(model, fuse=not no_fuse, report=report)
    from .tools.fold import fold_constants

    return fold_constants(model, report=report)


def _count(model) -> int:
    from .tools.graph import graphs as _graphs
    from .tools.graph import is_quantization_node

    return sum(
        1
        for g in _graphs(model.graph)
        for n in g.node
        if is_quantization_node(n) is not None
        or (n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear"))
    )


def _cmd_optimize(args: argparse.Namespace) -> int:
    return _run(args, "optimize")


def _cmd_fold(args: argparse.Namespace) -> int:
    return _run(args, "fold")


def _add_io(p: argparse.ArgumentParser) -> None:
    from .cli_tools import _add_io as add_paths

    add_paths(p)  # IN, OUT, --external-data / --no-external-data, -q
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print one line for every quantization node left as it is, and why")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``optimize`` and ``fold`` to the ``extql`` command."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "optimize", formatter_class=fmt,
        help="the fastest bit-identical form of a model for onnxruntime",
        description=(
            "Copy IN to OUT in the form onnxruntime runs fastest, keeping the bits of every\n"
            "quantization node: Extended nodes that the official QuantizeLinear /\n"
            "DequantizeLinear compute exactly are lowered to them (onnxruntime fuses these\n"
            "into QLinearConv / QGemm / ...), and every quantization node with constant\n"
            "inputs that onnxruntime's fusions do not need is computed once with extql's\n"
            "kernels and stored as an initializer. Folded weights are float32, so OUT is\n"
            "larger than IN. Run OUT with the extql library registered.\n\n"
            "Exit status: 0 written, 1 the model has a problem, 2 a file problem."
        ),
    )
    _add_io(p)
    p.add_argument("--no-fuse", action="store_true",
                   help="lower nothing: run every 8/16-bit node in extql's kernels and fold the "
                        "weights (faster where onnxruntime's quantized kernels are slower than "
                        "float, e.g. attention; float outputs differ in their last bits)")
    p.set_defaults(func=_cmd_optimize)

    p = subparsers.add_parser(
        "fold", formatter_class=fmt,
        help="compute quantization nodes with constant inputs once, offline",
        description=(
            "Copy IN to OUT with every Extended, legacy Vitis and com.microsoft\n"
            "QuantizeLinear / DequantizeLinear node whose inputs are all constant replaced by\n"
            "its output (an initializer computed by extql's kernels: the same bits).\n\n"
            "Exit status: 0 written, 1 the model has a problem, 2 a file problem."
        ),
    )
    _add_io(p)
    p.set_defaults(func=_cmd_fold)
