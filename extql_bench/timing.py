"""Interleaved median timing: every contender sampled in each round."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

#: The length of one sample (seconds): calls shorter than this are timed a
#: few back to back.  Short samples keep most of them clear of the moments
#: another process has the core (a sample that spans a time slice of
#: another process is an outlier, which the median then discards).
SAMPLE = 1e-4


def time_interleaved(
    funcs: Sequence[Callable[[], Any]], repeat: int, min_sample: float = 2e-3
) -> list[float]:
    """Median seconds per call of each function, measured interleaved.

    Each function is first run twice (warm-up) and calibrated: a sample is
    ``k`` back-to-back calls lasting about ``SAMPLE`` (1 for calls longer
    than that), and a round takes as many samples of a function as last
    about ``min_sample`` (at least one).  Then ``repeat`` rounds sample
    every function, the order rotating from round to round, so that other
    work on the machine hits every contender alike; the median is over all
    of a function's samples.
    """
    plan = []
    for f in funcs:
        f()
        t0 = time.perf_counter()
        f()
        dt = max(time.perf_counter() - t0, 1e-9)
        k = max(1, min(10_000, int(SAMPLE / dt)))
        plan.append((k, max(1, min(100, int(min_sample / (k * dt))))))
    samples: list[list[float]] = [[] for _ in funcs]
    n = len(funcs)
    for r in range(repeat):
        for j in range(n):
            i = (r + j) % n
            f, (k, inner) = funcs[i], plan[i]
            for _ in range(inner):
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                samples[i].append((time.perf_counter() - t0) / k)
    return [statistics.median(s) for s in samples]
