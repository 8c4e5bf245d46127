"""The ``extql`` command line.

Each group of commands lives in its own module and adds its sub-parsers
through a ``register(subparsers)`` function listed in ``_COMMAND_MODULES``;
this module owns the parser and ``extql info``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
from collections.abc import Sequence

from . import __version__

# Modules with a ``register(subparsers)`` function, in the order of --help.
_COMMAND_MODULES: list[str] = ["extql.cli_tools", "extql.cli_optimize", "extql.bench"]


def _info(args: argparse.Namespace) -> int:
    """Print what a bug report needs: versions, OpenMP, threads, library."""
    from . import _kernels, numpy_api

    rows = [
        ("extql", __version__),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.system()} {platform.machine()}"),
        ("numpy", importlib.import_module("numpy").__version__),
        ("openmp", "yes" if _kernels.have_openmp() else "no (kernels run serially)"),
        ("kernels", f"{_kernels.isa()} (available: {', '.join(_kernels.available_isas())}; "
                    "EXTQL_ISA=baseline forces the baseline)"),
        ("cores", str(_kernels.cores())),
        ("threads", f"{numpy_api.get_num_threads()} (EXTQL_NUM_THREADS="
                    f"{os.environ.get('EXTQL_NUM_THREADS', 'unset')})"),
    ]
    rows += _library_rows()
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _library_rows() -> list[tuple[str, str]]:
    """Rows about the onnxruntime library, when the shim is built in."""
    try:
        from . import ort
    except ImportError:
        return []
    return ort.info_rows()


def build_parser() -> argparse.ArgumentParser:
    """The ``extql`` argument parser, with every command module's sub-commands."""
    parser = argparse.ArgumentParser(
        prog="extql",
        description=(
            "Run and convert ONNX models with AMD Quark's ExtendedQuantizeLinear / "
            "ExtendedDequantizeLinear operators."
        ),
    )
    parser.add_argument("--version", action="version", version=f"extql {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="print versions, OpenMP, thread count and library path")
    p.set_defaults(func=_info)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``extql`` command with ``argv`` (default: ``sys.argv[1:]``);
    return the exit status (2 and the help when no command is given)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
