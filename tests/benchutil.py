"""The benchmark harness (benchmarks/extql_bench) for the tests.

It is not part of the installed package, so the tests take it from the
checkout they belong to: importable from here, and named by EXTQL_BENCHMARKS
for ``extql bench`` (also when extql is installed from a wheel, not from this
checkout)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
os.environ["EXTQL_BENCHMARKS"] = str(BENCHMARKS)
