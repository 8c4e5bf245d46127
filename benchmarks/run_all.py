"""The full benchmark: every table of ``extql bench`` with its defaults, written
to docs/benchmarks-results.md (with the command and the machine) and to
benchmarks/results.json.

    python benchmarks/run_all.py [extra extql bench options]

It takes a few minutes on a 2-core machine.  Other work on the machine shows
in the figures (the report records the load average); run it on a quiet one.
"""

from __future__ import annotations

import os
import sys

from extql_bench.cli import main as bench_main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> int:
    argv = [
        "--markdown", os.path.join(ROOT, "docs", "benchmarks-results.md"),
        "--json", os.path.join(HERE, "results.json"),
        *sys.argv[1:],
    ]
    os.makedirs(os.path.join(ROOT, "docs"), exist_ok=True)
    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
