"""``extql bench``: the benchmark harness, installed with extql.

The harness is the top-level package ``extql_bench`` that the wheel carries
beside ``extql`` (the product's library holds no benchmark code); this module
hands it the command's arguments.  Its copy-kernel column needs a source
checkout (``extql_bench.copy_library``); the rest runs from the installed
package.  ``extql bench models [OPTIONS]`` runs the whole-model benchmark
(``benchmarks/whole_models.py``), which stays in the source checkout: the
``benchmarks`` directory named by the ``EXTQL_BENCHMARKS`` environment
variable or, when it is unset, the one beside the ``extql`` package of an
editable install; without it, that command says where to get it and exits
with status 2.
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

_MODELS_MISSING = (
    "extql bench models: the whole-model benchmark runs from a source checkout (git clone "
    "the extql repository, pip install -e . there, then run extql bench models), or set "
    "EXTQL_BENCHMARKS to a checkout's benchmarks directory; extql bench (the operator "
    "tables) runs from the installed package"
)


def benchmarks_dir() -> Path | None:
    """The source checkout's ``benchmarks`` directory (whole-model benchmark,
    copy kernel), or None."""
    named = os.environ.get("EXTQL_BENCHMARKS")
    path = Path(named) if named else _CHECKOUT / "benchmarks"
    return path if (path / "whole_models.py").is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness with argv (default: ``sys.argv[1:]``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["models"]:  # the whole-model benchmark
        path = benchmarks_dir()
        if path is None:
            print(_MODELS_MISSING, file=sys.stderr)
            return 2
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
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
             "and the fallback model (extql bench --help)",
        description=(
            "Runs the benchmark harness (the package extql_bench, installed with extql) with "
            "the options given; extql bench --help lists them (--quick, --json FILE, "
            "--markdown FILE, --threads T ..., --sizes N ..., --granularity G ...).  The "
            "copy-kernel column needs a source checkout (or EXTQL_BENCHMARKS naming its "
            "benchmarks directory); without one the table says so.  extql bench models "
            "[OPTIONS] runs the whole-model benchmark of a source checkout "
            "(extql bench models --help)."
        ),
        usage="extql bench [OPTIONS]",
        add_help=False,
        prefix_chars="\0",  # no options here: everything is the harness's
    )
    p.add_argument("args", nargs="*", metavar="OPTIONS", help="the harness's options")
    p.set_defaults(func=_command)
