"""``extql attach | inline | lower IN OUT``: rewrite a model's quantization nodes.

``attach`` adds a fallback function for every Extended operator, ``inline``
replaces every quantization node by standard ops, ``lower`` uses the official
QuantizeLinear / DequantizeLinear where they give the same bits (the passes
of :mod:`extql.tools`).  Exit status: 0 written, 1 the model has a problem
(its graph is broken; for ``inline``, an operator nothing implements), 2 the
command could not do its work.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..tools.runtimes import RUNTIMES
from .args import add_rewrite_arguments
from .errors import CliError
from .model_io import open_rewrite, write_rewritten
from .progress import log

__all__ = ["register"]


def _convert(args: argparse.Namespace, name: str, fn: Callable[[Any], Any]) -> int:
    """Read IN, apply the pass ``fn``, write OUT; the pass's warnings are
    printed on stderr (``lower`` prints its own report instead)."""
    src, dst, model, external = open_rewrite(args, name)
    start = time.monotonic()
    log(args, f"{name}: {len(model.graph.node)} nodes ...")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(model)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if name != "lower":
        for w in caught:
            if issubclass(w.category, UserWarning):
                print(f"warning: {w.message}", file=sys.stderr)
    log(args, f"{name}: done in {time.monotonic() - start:.1f} s; writing {dst} ...")
    location = write_rewritten(args, out, dst, external)
    note = f" (tensors in {location})" if location else ""
    print(f"wrote {dst}{note}")
    return 0


def _cmd_attach(args: argparse.Namespace) -> int:
    from ..tools.attach import attach_fallbacks

    return _convert(args, "attach", attach_fallbacks)


def _cmd_inline(args: argparse.Namespace) -> int:
    from ..tools.inline import inline_fallbacks

    code = _convert(args, "inline", inline_fallbacks)
    if args.target and args.target != "onnxruntime":
        warn_target(args.input, args.target)
    else:
        warn_lstm(args.input)
    return code


def warn_lstm(path: str) -> list[str]:
    """Warn on stderr, one line per DPU LSTM node, that its inlined form is
    close, not exact, in every runtime (its gates' Tanh is not the C
    library's tanhf: docs/differences.rst); return the lines."""
    import onnx

    from ..onnx.dpu import dpu_nodes

    lines = [f"{d.label}: inlined with the runtime's Tanh for the C library's tanhf: "
             "close to the library's output, not bit for bit (docs/differences.rst)"
             for d in dpu_nodes(onnx.load(path, load_external_data=False))
             if d.family == "lstm"]
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)
    return lines


def warn_target(path: str, runtime: str) -> list[str]:
    """Warn on stderr, one line per node, where ``runtime`` does not keep
    the fallbacks exact (:data:`extql.tools.runtimes.LIMITS`); return the lines."""
    import onnx

    from ..tools.runtimes import TESTED, model_limits

    lines = model_limits(onnx.load(path, load_external_data=False), runtime)
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)
    if lines:
        print(f"warning: {len(lines)} node(s) not exact in {runtime} {TESTED[runtime]} "
              "(docs/guide/runtimes.rst)", file=sys.stderr)
    return lines


def _cmd_lower(args: argparse.Namespace) -> int:
    from ..tools.lower import lower_to_standard

    report: list[str] = []

    def lower(model):
        return lower_to_standard(model, report=report)

    code = _convert(args, "lower", lower)
    for line in report:
        print(line)
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``attach``, ``inline`` and ``lower`` to the ``extql`` command."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "attach", formatter_class=fmt,
        help="add fallback functions so the model runs without the extql library",
        description=(
            "Copy IN to OUT with a standard-ops definition (an ONNX function) of every Extended\n"
            "operator and type it uses. OUT runs in onnxruntime without the extql library and\n"
            "in onnx.reference, with the same bits; where the library is registered its native\n"
            "kernels still run. Nothing else in the model changes."
        ),
    )
    add_rewrite_arguments(p)
    p.set_defaults(func=_cmd_attach)

    p = subparsers.add_parser(
        "inline", formatter_class=fmt,
        help="replace every Extended node by standard ONNX ops",
        description=(
            "Copy IN to OUT with every Extended (and legacy Vitis) node, and every com.microsoft\n"
            "QuantizeLinear / DequantizeLinear, replaced by the standard ops that compute it bit\n"
            "for bit (a DPU LSTM but for its gates' Tanh: a warning names it). OUT has no custom\n"
            "or Microsoft operator left, so any ONNX runtime can run it. With --target\n"
            "openvino|tract it also warns, naming each node, where that runtime is known not to\n"
            "keep the fallback's bits (docs/guide/runtimes.rst)."
        ),
    )
    add_rewrite_arguments(p)
    p.add_argument("--target", choices=RUNTIMES, default=None,
                   help="the runtime OUT is for: warn where it does not keep the bits")
    p.set_defaults(func=_cmd_inline)

    p = subparsers.add_parser(
        "lower", formatter_class=fmt,
        help="use the official QuantizeLinear/DequantizeLinear where exact",
        description=(
            "Copy IN to OUT with Extended nodes rewritten as the official ONNX QuantizeLinear /\n"
            "DequantizeLinear where these give the same bits (int8, uint8, int16, uint16; int32\n"
            "dequantize without a zero point), so onnxruntime can fuse them into quantized\n"
            "kernels again; com.microsoft QuantizeLinear / DequantizeLinear by the same rules.\n"
            "The other nodes stay; the model's opset is never changed, so a node that needs a\n"
            "newer opset is left and reported."
        ),
    )
    add_rewrite_arguments(p)
    p.set_defaults(func=_cmd_lower)
