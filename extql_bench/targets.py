"""The benchmark's targets, checked on the measured rows.

At 16M elements both extql and its anchor move the same bytes at the memory
bandwidth limit, so the targets there are about bandwidth: at least 90% of
the copy kernel's (which moves the op's bytes with no arithmetic), and no
slower than onnxruntime's own op or Cast beyond measurement noise (1.05 at one
thread, 1.0 at all cores).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .config import size_label
from .runner import Result, type_label

_16M, _64K = 1 << 24, 1 << 16
#: The sizes and granularities of the operator check of issue 32: real
#: activations' sizes and bigger, per tensor and per channel of an NCHW
#: activation (long runs of one channel, and the runs of 1024 of a 32 x 32
#: feature map with 256 channels).
_CHECK_SIZES, _CHECK_GRANULARITIES = (1 << 18, 1 << 20, 1 << 24), ("tensor", "nchw", "nchw32")

#: (name, table, the rows it applies to, the test a row must pass).  A row
#: counts for a target only when it has what the target compares (an anchor,
#: a copy kernel): a row of a type onnxruntime has no op for is no row met.
TARGETS: tuple[tuple[str, str, Callable[[Result], bool], Callable[[Result], bool]], ...] = (
    ("ratio <= 1.05 at 1 thread (16M)", "ort",
     lambda r: r.size == _16M and r.threads == 1 and r.ratio is not None,
     lambda r: r.ratio <= 1.05),
    ("ratio <= 1.0 at all cores (16M)", "ort",
     lambda r: r.size == _16M and r.threads > 1 and r.ratio is not None,
     lambda r: r.ratio <= 1.0),
    (">= 90% of the copy kernel's bandwidth (16M)", "ort",
     lambda r: r.size == _16M and r.copy_share is not None,
     lambda r: r.copy_share >= 0.9),
    ("ratio <= 1.05 (256K, 1M, 16M; per tensor and NCHW; every thread count)", "ort",
     lambda r: (r.size in _CHECK_SIZES and r.granularity in _CHECK_GRANULARITIES
                and r.ratio is not None),
     lambda r: r.ratio <= 1.05),
    ("no slower than the anchor at 64K", "ort",
     lambda r: r.size == _64K and r.ratio is not None,
     lambda r: r.ratio <= 1.0),
    ("native op >= 3x faster than the fallback model (16M)", "fallback",
     lambda r: r.size == _16M and r.ratio is not None, lambda r: r.ratio <= 1 / 3),
)


def format_targets(results: Sequence[Result]) -> str:
    """A Markdown table: each target with the rows that meet it and the worst row."""
    lines = ["| target | rows met | worst row |", "|---|---|---|"]
    for name, table, applies, ok in TARGETS:
        rows = [r for r in results if r.table == table and applies(r) and r.measured]
        if not rows:
            continue
        met = sum(1 for r in rows if ok(r))
        by_copy = "copy" in name

        def badness(r: Result, by_copy: bool = by_copy) -> float:
            return -(r.copy_share or 1.0) if by_copy else (r.ratio or 0.0)

        worst = max(rows, key=badness)
        if by_copy:
            value = f"{(worst.copy_share or 0) * 100:.0f}% of copy"
        else:
            value = f"ratio {worst.ratio:.2f}" if worst.ratio is not None else "-"
        lines.append(f"| {name} | {met} of {len(rows)} | {worst.op} {type_label(worst)} "
                     f"{worst.granularity} {size_label(worst.size)} t={worst.threads}: "
                     f"{value} |")
    return "\n".join(lines)
