"""How the ``extql`` command fails: one short line, an exit status, never a traceback.

The exit statuses are the command line's contract: 0 the work is done, 1 the
model has a problem (``check`` found one, ``run --compare-fallback`` saw a
difference), 2 the command could not do its work (a bad path, an unreadable
or non-ONNX file, an output that cannot be written, a missing optional
dependency), 130 interrupted by Ctrl-C.

:func:`run_command` is the guard every sub-command runs under: it turns the
errors a user can fix (:class:`CliError`, a missing ``[onnx]`` extra) into a
one-line message naming the path or input, and anything unexpected into a
one-line "internal error" message instead of a traceback.  The checks of
paths that commands make *before* their work -- an input that is a
directory, an output directory that is missing or not writable -- are here
too, so every command words them alike.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "CliError",
    "MissingExtra",
    "EXIT_OK",
    "EXIT_MODEL_PROBLEM",
    "EXIT_CANNOT_WORK",
    "EXIT_INTERRUPTED",
    "ONNX_EXTRA_HINT",
    "require_modules",
    "readable_file",
    "writable_output",
    "run_command",
]

EXIT_OK = 0
EXIT_MODEL_PROBLEM = 1
EXIT_CANNOT_WORK = 2
EXIT_INTERRUPTED = 130

#: What to install when onnx / onnxscript are missing (the [onnx] extra: the
#: tools, without an onnxruntime build).
ONNX_EXTRA_HINT = 'pip install "extql[onnx]"'
# The modules a command may need that are not installed with extql itself:
# the [onnx] extra's, and onnxruntime, which the user chooses the build of.
_ONNX_EXTRA = ("onnx", "onnxruntime", "onnxscript")


class CliError(Exception):
    """A problem the user can fix; printed as one line without a traceback
    (exit status 2 unless ``status`` says otherwise)."""

    def __init__(self, message: str, status: int = EXIT_CANNOT_WORK) -> None:
        super().__init__(message)
        self.status = status


class MissingExtra(CliError):
    """An optional dependency of the command is not installed."""


def _missing_extra(modules: Iterable[str]) -> MissingExtra:
    """The error for missing optional modules: the [onnx] extra for onnx /
    onnxscript, and the ways to get an onnxruntime build for onnxruntime."""
    from ..ort import ONNXRUNTIME_HINT

    modules = list(modules)
    names = ", ".join(modules)
    ways = []
    if set(modules) - {"onnxruntime"}:
        ways.append(f"install the ONNX side of extql with: {ONNX_EXTRA_HINT}")
    if "onnxruntime" in modules:
        ways.append(ONNXRUNTIME_HINT)
    return MissingExtra(
        f"this command needs {names}, which {'is' if len(modules) == 1 else 'are'} not "
        f"installed; {'; and '.join(ways)}"
    )


def require_modules(*modules: str) -> None:
    """Raise :class:`MissingExtra` naming ``pip install "extql[onnx]"`` (and
    the ways to get an onnxruntime build) when one of ``modules`` is not
    installed (checked before a command's work, without
    importing them: the command imports what it uses when it gets there)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise _missing_extra(missing)


# --------------------------------------------------------------------------
# Paths


def readable_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` as a Path when it is an existing regular file that can be
    opened for reading; else a :class:`CliError` that says what it is."""
    p = Path(path)
    if not p.exists():
        parent = p.parent
        if parent != Path("") and not parent.is_dir():
            raise CliError(f"{p}: no such file (the directory {parent} does not exist)")
        raise CliError(f"{p}: no such file (give the path of {what})")
    if p.is_dir():
        raise CliError(f"{p}: is a directory, not a file (give the path of {what})")
    if not p.is_file():
        raise CliError(f"{p}: is not a regular file (give the path of {what})")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise CliError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    return p


def writable_output(path: str | os.PathLike, what: str = "output") -> Path:
    """Check, before any work, that ``path`` can be written: its directory
    exists and takes a new file, and ``path`` is not a directory.  Returns
    ``path`` as a Path; raises :class:`CliError` naming the path."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise CliError(f"{p}: is a directory; give a file name for the {what}")
    if p.exists() and not p.is_file():
        raise CliError(f"{p}: is not a regular file; give a file name for the {what}")
    if not parent.exists():
        raise CliError(f"{p}: the directory {parent} does not exist (create it first)")
    if not parent.is_dir():
        raise CliError(f"{p}: {parent} is not a directory")
    # A real probe rather than os.access: it also sees read-only file systems,
    # and the rules that let root write anywhere os.access would allow.
    try:
        fd, probe = tempfile.mkstemp(prefix=".extql-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CliError(
            f"{p}: cannot write to the directory {parent} ({exc.strerror or exc})"
        ) from None
    if p.exists():
        try:
            with open(p, "r+b"):
                pass
        except OSError as exc:
            raise CliError(f"{p}: cannot be overwritten ({exc.strerror or exc})") from None
    return p


def os_error_message(exc: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for an OSError: the path, then what the system said."""
    where = path if path is not None else (exc.filename or "")
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{where}: {reason}" if where else reason


# --------------------------------------------------------------------------
# The guard


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr (no source line under them)."""
    text = " ".join(str(message).split())
    print(f"extql: warning: {text}", file=sys.stderr if file is None else file)


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _missing_module(exc: ImportError) -> str | None:
    """The [onnx] extra's module an ImportError is about, if any."""
    name = getattr(exc, "name", None) or ""
    root = name.split(".")[0]
    return root if root in _ONNX_EXTRA else None


def run_command(
    args: argparse.Namespace,
    func: Callable[[argparse.Namespace], int],
    on_error: Callable[[argparse.Namespace, int, str], None] | None = None,
) -> int:
    """Run ``func(args)`` and return its exit status; errors become one line
    on stderr ("extql COMMAND: error: ...") and a status (module docstring).

    ``on_error(args, status, message)`` is called as well, for a second form
    of the error (the ``--json`` document)."""
    command = getattr(args, "command", None) or "extql"
    prefix = f"extql {command}" if command != "extql" else "extql"
    status: int
    message: str | None = None
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        try:
            status = int(func(args) or 0)
            # Written out here, inside the guard: a reader that went away
            # (``extql info | head -0``) is then reported like any other error,
            # not by the interpreter at exit.
            sys.stdout.flush()
        finally:
            warnings.showwarning = previous
    except CliError as exc:
        status, message = exc.status, f"error: {exc}"
    except KeyboardInterrupt:
        status, message = EXIT_INTERRUPTED, "interrupted"
    except BrokenPipeError:
        # The reader of stdout went away (``extql info | head -1``): stop
        # writing there, also at interpreter exit.
        _silence_stdout()
        status, message = EXIT_CANNOT_WORK, "error: stdout was closed before the output ended"
    except ImportError as exc:
        module = _missing_module(exc)
        status = EXIT_CANNOT_WORK
        if module is not None:
            message = f"error: {_missing_extra([module])}"
        else:
            message = f"error: cannot import {exc.name or ''} ({_one_line(exc)})"
    except MemoryError:
        status, message = EXIT_CANNOT_WORK, "error: out of memory"
    except RecursionError:
        status = EXIT_CANNOT_WORK
        message = "error: the model is nested too deeply to process (subgraphs within subgraphs)"
    except OSError as exc:
        status, message = EXIT_CANNOT_WORK, f"error: {_one_line(os_error_message(exc))}"
    except Exception as exc:  # noqa: BLE001 - the last resort: never a traceback
        status = EXIT_CANNOT_WORK
        message = (f"internal error: {type(exc).__name__}: {_one_line(exc)} "
                   "(please report this at the extql issue tracker with the command line)")
    if message is not None:
        message = _one_line(message, 1000)
        try:
            print(f"{prefix}: {message}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        if on_error is not None:
            on_error(args, status, f"{message.removeprefix('error: ')}")
    return status
