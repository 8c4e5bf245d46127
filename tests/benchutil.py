"""The source checkout's benchmarks directory for the tests.

The harness (the package ``extql_bench``) is installed with extql; its copy
kernel (``benchmarks/copy_ops``) and the scripts of ``benchmarks/`` are not.
Importing this module names this checkout's ``benchmarks`` directory in
EXTQL_BENCHMARKS, where the harness and ``extql bench models`` look for them
(also when extql is installed from a wheel, not from this checkout)."""

from __future__ import annotations

import os
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
os.environ["EXTQL_BENCHMARKS"] = str(BENCHMARKS)
