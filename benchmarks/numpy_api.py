"""extql.quantize_linear / dequantize_linear against the NumPy expressions.

    python benchmarks/numpy_api.py [--size 16777216] [--repeat 15] [--threads 1 2]

Prints the median time of each and the ratio extql / NumPy (below 1 is
faster).  The two are run interleaved on the same tensors so that noise on a
busy machine hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import extql
from extql.types import QTYPES


def _numpy_quantize(x, s, zp, qt):
    if qt.is_float:
        v = x / s + np.float32(zp)
        return np.where(np.isnan(v), v, np.clip(v, qt.lo, qt.hi)).astype(qt.dtype)
    return np.clip(np.rint(x / s) + zp, qt.lo, qt.hi).astype(qt.dtype)


def _numpy_dequantize(q, s, zp, qt):
    if qt.is_float:
        return (q.astype(np.float32) - np.float32(zp)) * s
    return (q.astype(np.int64) - np.int64(zp)).astype(np.float32) * s


def _interleaved(fa, fb, repeat: int) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(repeat):
        for f, ts in ((fa, ta), (fb, tb)):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.size) * 100).astype(np.float32)
    s = np.float32(0.37)
    print(f"{args.size} elements, median of {args.repeat}; ratio = extql / numpy")
    print(f"{'threads':>7} {'type':>9} {'Q extql':>9} {'Q numpy':>9} {'ratio':>6} "
          f"{'DQ extql':>9} {'DQ numpy':>9} {'ratio':>6}")
    for threads in args.threads:
        extql.set_num_threads(threads)
        for qt in QTYPES.values():
            zp = qt.dtype.type(3)
            te, tn = _interleaved(
                lambda qt=qt, zp=zp: extql.quantize_linear(x, s, zp),
                lambda qt=qt, zp=zp: _numpy_quantize(x, s, zp, qt),
                args.repeat,
            )
            q = extql.quantize_linear(x, s, zp)
            de, dn = _interleaved(
                lambda q=q, zp=zp: extql.dequantize_linear(q, s, zp),
                lambda q=q, qt=qt, zp=zp: _numpy_dequantize(q, s, zp, qt),
                args.repeat,
            )
            print(f"{threads:>7} {qt.name:>9} {te*1e3:8.2f}ms {tn*1e3:8.2f}ms {te/tn:6.3f} "
                  f"{de*1e3:8.2f}ms {dn*1e3:8.2f}ms {de/dn:6.3f}")
    extql.set_num_threads(0)


if __name__ == "__main__":
    main()
