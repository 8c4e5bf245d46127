"""extql.quantize_linear / dequantize_linear against the NumPy expressions.

    python benchmarks/numpy_api.py [--size 16M] [--repeat 15] [--threads 1 2]

A thin front end to ``extql bench --tables numpy`` (the harness extql_bench), which
runs the two interleaved on the same tensors and prints the median ratio
extql / NumPy (below 1: extql is faster).
"""

from __future__ import annotations

import argparse
import sys

from extql_bench.cli import main as bench_main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", nargs="+", default=["64K", "1M", "16M"])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 0])
    args, rest = ap.parse_known_args()
    argv = ["--tables", "numpy", "--sizes", *args.size, "--repeat", str(args.repeat),
            "--threads", *map(str, args.threads), *rest]
    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
