"""``extql optimize IN OUT`` and ``extql fold IN OUT``: models for speed.

``optimize`` writes the fastest bit-identical form of a model for onnxruntime
(:mod:`extql.tools.optimize`), ``fold`` computes the quantization nodes with
constant inputs once, offline (:mod:`extql.tools.fold`).  Exit status: 0 the model
was written, 1 the model has a problem (a node that cannot be folded, an
invalid quantization node), 2 the command could not do its work (the input is
missing or unreadable, the output cannot be written).
"""

from __future__ import annotations

import argparse
import time

from .args import add_rewrite_arguments
from .errors import CliError
from .model_io import open_rewrite, write_rewritten
from .progress import log

__all__ = ["register"]


def _run(args: argparse.Namespace, name: str) -> int:
    """Read IN, transform it, write OUT.  Errors are raised as CliError and
    printed by the command line's guard (:mod:`extql.cli.errors`): status 2
    for paths and files, 1 for a model the transformation cannot take."""
    src, dst, model, external = open_rewrite(args, name)
    start = time.monotonic()
    report: list[str] = []
    try:
        out = _transform(name, model, report, getattr(args, "no_fuse", False))
    except ValueError as exc:
        raise CliError(str(exc), status=1) from None
    log(args, f"{name}: done in {time.monotonic() - start:.1f} s; writing {dst} ...")
    location = write_rewritten(args, out, dst, external)
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
        from ..tools.optimize import optimize

        return optimize(model, fuse=not no_fuse, report=report)
    from ..tools.fold import fold_constants

    return fold_constants(model, report=report)


def _count(model) -> int:
    """The quantization nodes of a model, the official ONNX ones and the block
    formats included."""
    from ..onnx.blocks import block_family
    from ..onnx.graph import graphs, is_quantization_node

    return sum(
        1
        for g in graphs(model.graph)
        for n in g.node
        if is_quantization_node(n) is not None or block_family(n) is not None
        or (n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear"))
    )


def _cmd_optimize(args: argparse.Namespace) -> int:
    return _run(args, "optimize")


def _cmd_fold(args: argparse.Namespace) -> int:
    return _run(args, "fold")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_rewrite_arguments(p)  # IN, OUT, --external-data / --no-external-data, -q
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
    _add_arguments(p)
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
            "QuantizeLinear / DequantizeLinear node, and every BFPQuantizeDequantize /\n"
            "MXQuantizeDequantize node (Quark's BFP16 / MX weights), whose inputs are all\n"
            "constant replaced by its output (an initializer computed by extql's kernels:\n"
            "the same bits).\n\n"
            "Exit status: 0 written, 1 the model has a problem, 2 a file problem."
        ),
    )
    _add_arguments(p)
    p.set_defaults(func=_cmd_fold)
