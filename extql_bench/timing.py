"""Interleaved median timing: every contender sampled in each round."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def time_interleaved(
    funcs: Sequence[Callable[[], Any]], repeat: int, min_sample: float = 2e-3
) -> list[float]:
    """Median seconds per call of each function, measured interleaved.

    Each function is first run twice (warm-up) and calibrated: a sample is
    ``k`` back-to-back calls, ``k`` chosen so that a sample lasts about
    ``min_sample`` (1 for large tensors).  Then ``repeat`` rounds take one
    sample of every function, the order rotating from round to round, so that
    other work on the machine hits every contender alike.
    """
    ks = []
    for f in funcs:
        f()
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        ks.append(max(1, min(10_000, int(min_sample / max(dt, 1e-9)))))
    samples: list[list[float]] = [[] for _ in funcs]
    n = len(funcs)
    for r in range(repeat):
        for j in range(n):
            i = (r + j) % n
            f, k = funcs[i], ks[i]
            t0 = time.perf_counter()
            for _ in range(k):
                f()
            samples[i].append((time.perf_counter() - t0) / k)
    return [statistics.median(s) for s in samples]
