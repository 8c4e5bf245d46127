"""Run Python in a child process the way a user would: outside the source
tree, so that ``-c``/``-m`` import the installed extql (under tox the source
tree's ``extql/`` has no compiled extension for that interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def run_python(*args: str, env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from an empty temporary directory; raises on failure."""
    with tempfile.TemporaryDirectory(prefix="extql-child-") as cwd:
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, check=True,
            cwd=cwd, env=env if env is not None else dict(os.environ), timeout=timeout,
        )
