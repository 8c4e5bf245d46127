"""``extql analyze FLOAT QUANT``: where a quantized model loses its accuracy.

Runs :func:`extql.analyze` on the two models and prints the quantization
points ranked worst first (``--json``: the whole report as one document;
``--report FILE``: an HTML page or a PNG).  Exit status: 0 analysed, 1 a
model's graph is broken, 2 the command could not do its work -- a file
that cannot be read, models that do not fit together (different graph
inputs or outputs, no quantization point matched), inputs that do not fit,
a PNG without matplotlib.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import json_output
from .args import add_quiet_flag
from .errors import CliError, readable_file, require_modules, writable_output
from .files import load_npz
from .model_io import load_model, require_integrity
from .progress import log

__all__ = ["register"]

_REPORT_SUFFIXES = (".html", ".htm", ".png")


def _count(text: str) -> int:
    """A whole number >= 0 (``--what-if``, ``--top``)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected a number >= 1")
    return value


class _Progress:
    """``stage: i/n (t s)`` lines on stderr about every 10% of a stage."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.start = time.monotonic()

    def __call__(self, stage: str, done: int, total: int) -> None:
        step = max(1, total // 10)
        if done % step == 0 or done == total:
            log(self.args, f"  {stage}: {done}/{total} ({time.monotonic() - self.start:.1f} s)")


def _check_report(path: str | None) -> Path | None:
    """The report's path, checked before the work: its suffix, its
    directory, matplotlib for a PNG."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() not in _REPORT_SUFFIXES:
        raise CliError(f"{p}: --report writes an .html page or a .png picture, not "
                       f"{p.suffix or 'a file without suffix'!r}")
    writable_output(p, "report")
    if p.suffix.lower() == ".png":
        from ..tools.analyze_report import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            raise CliError(str(exc)) from None
    return p


def _cmd_analyze(args: argparse.Namespace) -> int:
    require_modules("onnx", "onnxruntime")
    readable_file(args.float_model, "the float .onnx model")
    readable_file(args.quantized_model, "the quantized .onnx model")
    report_path = _check_report(args.report)
    inputs = load_npz(args.inputs) if args.inputs else None
    models = []
    for path in (args.float_model, args.quantized_model):
        log(args, f"loading {path} ...")
        model, _ = load_model(path)
        require_integrity(path, model)
        models.append(model)
    from ..tools.analyze import AnalysisError, analyze

    start = time.monotonic()
    try:
        report = analyze(models[0], models[1], inputs, what_if=args.what_if,
                         samples=args.samples, seed=args.seed, progress=_Progress(args),
                         names=(f"FLOAT ({args.float_model})",
                                f"QUANT ({args.quantized_model})"))
    except AnalysisError as exc:
        raise CliError(str(exc)) from None
    log(args, f"analysed in {time.monotonic() - start:.2f} s")
    print(report.table(top=args.top))
    json_output.record(args, float_model=str(args.float_model),
                       quantized_model=str(args.quantized_model), **report.to_dict())
    if report_path is not None:
        try:
            report.save(report_path)
        except OSError as exc:
            raise CliError(f"{report_path}: cannot write the report "
                           f"({exc.strerror or exc})") from None
        print(f"wrote {report_path}")
        json_output.record(args, report=str(report_path))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``analyze`` to the ``extql`` command."""
    p = subparsers.add_parser(
        "analyze", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="find where a quantized model loses its accuracy against its float model",
        description=(
            "Compare QUANT, a quantized model (Quark, onnxruntime's quantizer, ...), with FLOAT,\n"
            "the float model it was made from. Every quantization point of QUANT (a Q->DQ pair\n"
            "of any domain, a dequantized weight, a BFP / MX node) gets its local error (its\n"
            "output against its own input: what quantizing this tensor alone costs, with the\n"
            "share of values clipped at the type's bounds) and its accumulated error (QUANT's\n"
            "tensor against FLOAT's of the same name). Points are ranked worst local SQNR\n"
            "first. With --what-if K, QUANT runs again with each of the K worst points bypassed\n"
            "and widened (int8 -> int16, uint8 -> uint16), and the gain in the outputs' SQNR is\n"
            "reported. Both models run in onnxruntime (CPU) with the extql library, graph\n"
            "optimisations off, once per input sample (and once per what-if variant).\n\n"
            "example: extql analyze model.onnx model_quantized.onnx --inputs calib.npz "
            "--what-if 5 --report report.html"
        ),
    )
    p.add_argument("float_model", metavar="FLOAT", help="the float .onnx model")
    p.add_argument("quantized_model", metavar="QUANT", help="its quantized .onnx model")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="input arrays by input name (np.savez): a batch of samples along a new "
                        "first axis, or one sample; default: random standard-normal data")
    p.add_argument("--samples", type=_positive, default=4, metavar="N",
                   help="samples of random inputs when --inputs is not given (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--what-if", type=_count, default=0, metavar="K",
                   help="re-run QUANT with each of the K worst points bypassed and widened")
    p.add_argument("--report", metavar="FILE",
                   help="also write the report as an HTML page (.html) or a PNG picture (.png, "
                        'needs matplotlib: pip install "extql[plot]")')
    p.add_argument("--top", type=_count, default=20, metavar="N",
                   help="points shown in the table (default 20; 0: all; --json has all)")
    add_quiet_flag(p)
    json_output.add_json_flag(p)
    p.set_defaults(func=_cmd_analyze)
