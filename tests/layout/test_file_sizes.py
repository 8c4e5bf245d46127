"""No hand-written source file over 800 lines: one module per concern.

A file that grows past that holds several concerns; split it where a
newcomer would look for each (extql/onnx/fallback_*.py is an example).
Generated files (build products git ignores, the results of benchmarks,
test data) do not count.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 800
SOURCE_SUFFIXES = (".py", ".pyx", ".pxd", ".pxi", ".c", ".h", ".tp")

#: Files over the limit today, each with its reason; an entry here is a
#: promise to split the file.
OVER_THE_LIMIT: set[str] = set()


def _sources() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.split()
            if f.endswith(SOURCE_SUFFIXES) and not f.startswith("tests/data/")]


def _lines(path: str) -> int:
    with open(ROOT / path, encoding="utf-8", errors="replace") as f:
        return sum(1 for _ in f)


def test_no_source_file_is_over_the_limit():
    over = {f: n for f in _sources() if (n := _lines(f)) > LIMIT and f not in OVER_THE_LIMIT}
    assert not over, f"source files over {LIMIT} lines (split them by concern): {over}"


def test_the_exceptions_are_still_needed():
    """An exception for a file that shrank (or went) is removed."""
    present = set(_sources())
    stale = [f for f in OVER_THE_LIMIT if f not in present or _lines(f) <= LIMIT]
    assert not stale, f"no longer over {LIMIT} lines: remove {stale} from OVER_THE_LIMIT"
