"""``extql bench``: runs the benchmark harness of a source checkout.

The harness (``benchmarks/extql_bench``) and the copy anchor it measures
against are not part of the installed package.  ``extql bench`` finds them in
the directory named by the ``EXTQL_BENCHMARKS`` environment variable or, when
it is unset, in the source checkout extql runs from (an editable install: the
``benchmarks`` directory next to the ``extql`` package), and hands its arguments to them;
without them it says where to get them and exits with status 2.
``extql bench models [OPTIONS]`` runs the whole-model benchmark
(``benchmarks/whole_models.py``) the same way.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["benchmarks_dir", "register", "main"]

# The directory holding the ``extql`` package: a source checkout's root when
# extql runs from one (this module is extql/cli/bench.py).
_CHECKOUT = Path(__file__).resolve().parents[2]

_MISSING = (
    "extql bench: the benchmark harness is not installed with extql; it runs from a "
    "source checkout (git clone the extql repository, pip install -e . there, then run "
    "extql bench), or set EXTQL_BENCHMARKS to a checkout's benchmarks directory"
)


def benchmarks_dir() -> Path | None:
    """The ``benchmarks`` directory holding the harness, or None."""
    named = os.environ.get("EXTQL_BENCHMARKS")
    path = Path(named) if named else _CHECKOUT / "benchmarks"
    return path if (path / "extql_bench" / "cli.py").is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness with argv (default: ``sys.argv[1:]``); 2 when it is absent."""
    path = benchmarks_dir()
    if path is None:
        print(_MISSING, file=sys.stderr)
        return 2
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["models"]:  # the whole-model benchmark
        return int(importlib.import_module("whole_models").main(args[1:]))
    harness = importlib.import_module("extql_bench.cli")
    return int(harness.main(args))


def _command(args: argparse.Namespace) -> int:
    """``extql bench``: every argument goes to the harness."""
    return main(args.args)


def register(subparsers: Any) -> None:
    """Add ``extql bench`` to the command line: every argument goes to the
    harness, which has its own ``--help``."""
    p = subparsers.add_parser(
        "bench",
        help="median time ratios against onnxruntime's ops, Cast, a copy kernel, NumPy "
             "and the fallback model (needs a source checkout; extql bench --help)",
        description=(
            "Runs the benchmark harness of a source checkout (benchmarks/extql_bench in the "
            "extql repository, or the directory EXTQL_BENCHMARKS names) with the options "
            "given; there, extql bench --help lists them (--quick, --json FILE, --markdown "
            "FILE, --threads T ..., --sizes N ..., --granularity G ...); extql bench models "
            "[OPTIONS] runs the whole-model benchmark (extql bench models --help).  Without the "
            "harness it says where to get it and exits with status 2."
        ),
        usage="extql bench [OPTIONS]",
        add_help=False,
        prefix_chars="\0",  # no options here: everything is the harness's
    )
    p.add_argument("args", nargs="*", metavar="OPTIONS", help="the harness's options")
    p.set_defaults(func=_command)
