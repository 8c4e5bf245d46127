"""The ``extql`` command line: :func:`main` and the top-level parser.

One module per concern, each named for what it holds:

- a module per command or family of commands, each adding its sub-parsers
  through ``register(subparsers)`` (listed in ``COMMAND_MODULES``, in the
  order of ``--help``): :mod:`.info`, :mod:`.check`, :mod:`.convert`
  (``attach``, ``inline``, ``lower``), :mod:`.run` (with
  :mod:`.compare_fallback`), :mod:`.optimize` (``optimize``, ``fold``),
  :mod:`.analyze` (accuracy analysis), :mod:`.bench` (runs the harness,
  the installed package ``extql_bench``);
- what the commands share: :mod:`.errors` (the guard: exit status 0 ok, 1
  the model has a problem, 2 the command could not do its work, 130
  interrupted; one-line messages, never a traceback), :mod:`.json_output`
  (``--json``), :mod:`.args` (argument types and shared arguments),
  :mod:`.model_io` (reading and writing models), :mod:`.session`
  (onnxruntime sessions), :mod:`.inputs` and :mod:`.files` (the arrays of
  ``run``), :mod:`.progress` (progress lines on stderr).

Every command runs under :func:`extql.cli.json_output.run`, which runs it
under :func:`extql.cli.errors.run_command`.  ``python -m extql`` and
``python -m extql.cli`` are the same command.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
from collections.abc import Sequence

from .. import __version__
from . import json_output

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: Modules with a ``register(subparsers)`` function, in the order of --help.
COMMAND_MODULES: list[str] = [
    "extql.cli.info",
    "extql.cli.check",
    "extql.cli.convert",
    "extql.cli.run",
    "extql.cli.optimize",
    "extql.cli.analyze",
    "extql.cli.bench",
]


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
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``; with ``--json`` among the arguments, a
    usage error is also printed as the JSON document of a failed command."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    if "--json" not in words or command not in json_output.JSON_COMMANDS:
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
        return json_output.run(args, args.func)
    except KeyboardInterrupt:
        print("extql: interrupted", file=sys.stderr)
        return 130
