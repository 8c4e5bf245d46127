"""The ``extql`` command line.

Each group of commands lives in its own module and adds its sub-parsers
through a ``register(subparsers)`` function listed in ``_COMMAND_MODULES``;
this module owns the parser and ``extql info``.  Every command runs under
:func:`extql.cli_json.run` (``--json``), which runs it under
:func:`extql.cli_errors.run_command`: exit 0 ok, 1 the model has a problem,
2 the command could not do its work, with a one-line message and never a
traceback.  ``python -m extql`` is the same command.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import platform
import sys
from collections.abc import Sequence

from . import __version__, cli_json

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
    cli_json.record(args, info=dict(rows))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _library_rows() -> list[tuple[str, str]]:
    """Rows about the onnxruntime library, when the shim is built in."""
    try:
        from . import ort

        return ort.info_rows()
    except ImportError:
        return []


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
    cli_json.add_json_flag(p)
    p.set_defaults(func=_info)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``; with ``--json`` among the arguments, a
    usage error is also printed as the JSON document of a failed command."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    if "--json" not in words or command not in cli_json.JSON_COMMANDS:
        return parser.parse_args(words)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return parser.parse_args(words)
    except SystemExit as exc:
        text = captured.getvalue()
        sys.stderr.write(text)
        if exc.code not in (0, None):
            lines = [s for s in text.splitlines() if s.strip()]
            print(json.dumps({"command": command, "ok": False, "exit_code": exc.code,
                              "error": lines[-1] if lines else "invalid arguments"}))
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``extql`` command with ``argv`` (default: ``sys.argv[1:]``);
    return the exit status (2 and the help when no command is given)."""
    try:
        parser = build_parser()
        args = _parse(parser, argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 2
        return cli_json.run(args, args.func)
    except KeyboardInterrupt:
        print("extql: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
