"""``--json``: one JSON document on stdout for scripts and CI.

A command given ``--json`` runs as usual, but what it prints on stdout is
collected instead of shown, and when it ends exactly one JSON object is
written to stdout::

    {"command": "check", "ok": true, "exit_code": 0, ...fields..., "messages": [...]}

``ok`` is ``exit_code == 0``; the exit status of the process is the same as
without ``--json``.  The fields are what the command recorded with
:func:`record` (for ``check``: the node count, problems and notes; for
``run``: each output's type and shape, the comparison; for ``info``: the
rows), ``messages`` the lines it would have printed.  When the command
could not do its work the document is ``{"command": ..., "ok": false,
"exit_code": 2, "error": "<the one-line message>"}`` (the message is on
stderr as well).  Progress lines stay on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any

from .errors import run_command

__all__ = ["JSON_COMMANDS", "add_json_flag", "wants_json", "record", "run"]

_FIELDS = "_json_fields"


#: The sub-commands that have the --json flag (``bench --json FILE`` is another option).
JSON_COMMANDS: set[str] = set()


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` to a sub-command's parser."""
    JSON_COMMANDS.add(parser.prog.split()[-1])
    parser.add_argument(
        "--json", action="store_true",
        help="print one JSON document on stdout instead of text (also for errors; "
             "the exit status is the same)")


def wants_json(args: argparse.Namespace) -> bool:
    """True when the command was given the ``--json`` flag."""
    return getattr(args, "json", None) is True


def record(args: argparse.Namespace, **fields: Any) -> None:
    """Add ``fields`` to the command's JSON document (ignored without --json)."""
    store = getattr(args, _FIELDS, None)
    if store is None:
        store = {}
        setattr(args, _FIELDS, store)
    store.update(fields)


def _default(value: Any) -> Any:
    """JSON for NumPy scalars and paths."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def run(args: argparse.Namespace, func: Callable[[argparse.Namespace], int]) -> int:
    """Run ``func`` under :func:`extql.cli.errors.run_command`; with ``--json``,
    print its one JSON document (module docstring).  Returns the exit status."""
    if not wants_json(args):
        return run_command(args, func)
    errors: list[str] = []

    def on_error(_args: argparse.Namespace, _status: int, message: str) -> None:
        errors.append(message)

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = run_command(args, func, on_error)
    doc: dict[str, Any] = {"command": args.command, "ok": status == 0, "exit_code": status}
    if errors:
        doc["error"] = errors[-1]
    else:
        doc.update(getattr(args, _FIELDS, {}))
    doc["messages"] = captured.getvalue().splitlines()
    print(json.dumps(doc, default=_default), file=sys.stdout)
    return status
