"""Arguments of the ``extql`` command shared by its sub-commands.

The argument types are ``argparse`` ``type=`` callables: a bad value is
rejected by argparse itself with a one-line message naming the option
(exit 2), before any work starts.  :func:`add_rewrite_arguments` adds the
arguments of every command that rewrites one model file into another.  The
benchmark harness (the package ``extql_bench``) uses :func:`thread_count` too.
"""

from __future__ import annotations

import argparse

__all__ = ["thread_count", "dim_size", "add_rewrite_arguments", "add_quiet_flag"]


def thread_count(text: str) -> int:
    """A thread count: an integer >= 0, where 0 means all cores."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of threads (0 = all cores), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"a thread count must be >= 0 (0 = all cores), got {value}")
    return value


def dim_size(text: str) -> tuple[str, int]:
    """``NAME=SIZE``: the size of a symbolic dimension (``extql run --dim``)."""
    name, sep, value = text.partition("=")
    if not sep or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (e.g. batch=4), got {text!r}")
    return name, int(value)


def add_quiet_flag(p: argparse.ArgumentParser) -> None:
    """``-q`` / ``--quiet``: no progress lines on stderr."""
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")


def add_rewrite_arguments(p: argparse.ArgumentParser) -> None:
    """IN, OUT, ``--external-data`` / ``--no-external-data`` and ``-q``: the
    arguments of a command that reads one model and writes another."""
    p.add_argument("input", metavar="IN", help="the model to read (.onnx)")
    p.add_argument("output", metavar="OUT", help="where to write the result (.onnx)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--external-data", action="store_true",
                   help="write the tensors to OUT.data next to OUT (default: only when IN had "
                        "external data or the model is too big for one file)")
    g.add_argument("--no-external-data", action="store_true",
                   help="write everything into OUT")
    add_quiet_flag(p)
