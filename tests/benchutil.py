"""The benchmark harness (benchmarks/extql_bench) for the tests: it is not part
of the installed package, so the tests import it from the source tree."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
