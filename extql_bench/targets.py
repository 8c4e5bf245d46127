"""The benchmark's targets, checked on the measured rows.

At 16M elements both extql and its anchor move the same bytes at the memory
bandwidth limit, so the targets there are about bandwidth: at least 90% of
the copy kernel's (which moves the op's bytes with no arithmetic), and no
slower than onnxruntime's own op or Cast beyond measurement noise (1.05 at one
thread, 1.0 at all cores).

The block formats (``blocks``) against their fallback model (the node
inlined to standard ONNX ops, what runs without extql): at least 10x faster
on every row.  The DPU instance norm (``dpu``) against onnxruntime's float
InstanceNormalization on Quark's CNN shape 1x64x56x56: at most 2x its time,
library and NumPy API, at every thread count measured (1 and 2 on a 2-core
machine).  The LSTM's ratio to onnxruntime's float LSTM is reported with no
target; the targets against Quark's own library are
``benchmarks/dpu_ops.py``'s (:data:`QUARK_TARGETS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .config import size_label
from .dpu import IN_TARGET_SHAPE, LSTM_QUARK_SIZE
from .runner import Result, ratio_text, type_label

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
    ("block format >= 10x faster than its fallback model (every size, layout, thread count)",
     "blocks", lambda r: r.ratio is not None, lambda r: r.ratio <= 0.1),
    (f"instance norm <= 2x onnxruntime's float InstanceNormalization ({IN_TARGET_SHAPE}, "
     "library and NumPy API, every thread count)", "dpu",
     lambda r: r.op == "IN" and r.granularity == IN_TARGET_SHAPE and r.ratio is not None,
     lambda r: r.ratio <= 2.0),
)

#: The targets against Quark's own library (benchmarks/dpu_ops.py; Quark is
#: a development-time dependency, not one of the harness): (name, the rows
#: it applies to, the test), on rows with ``op`` (IN / LSTM), ``shape``,
#: ``threads`` and ``speedup`` (Quark's time / extql's library time, at 1
#: thread each: Quark's kernels are single-threaded).
QUARK_TARGETS: tuple[tuple[str, Callable[[dict], bool], Callable[[dict], bool]], ...] = (
    ("instance norm >= 10x faster than Quark's library at 1 thread (every shape)",
     lambda r: r["op"] == "IN" and r["threads"] == 1, lambda r: r["speedup"] >= 10.0),
    ("LSTM faster than Quark's library at 1 thread (every shape)",
     lambda r: r["op"] == "LSTM" and r["threads"] == 1, lambda r: r["speedup"] > 1.0),
    (f"LSTM >= 3x faster than Quark's library at 1 thread at Quark's size ({LSTM_QUARK_SIZE})",
     lambda r: r["op"] == "LSTM" and r["threads"] == 1 and r["shape"] == LSTM_QUARK_SIZE,
     lambda r: r["speedup"] >= 3.0),
)


def check_quark_targets(rows: Sequence[dict]) -> list[tuple[str, int, int, dict | None]]:
    """Each Quark target with rows: (name, rows met, rows it applies to, the
    worst row: least speedup).  Rows without a speedup (Quark not measured)
    count for none."""
    out = []
    for name, applies, ok in QUARK_TARGETS:
        rows_in = [r for r in rows if r.get("speedup") is not None and applies(r)]
        if rows_in:
            out.append((name, sum(1 for r in rows_in if ok(r)), len(rows_in),
                        min(rows_in, key=lambda r: r["speedup"])))
    return out


def check_targets(results: Sequence[Result]) -> list[tuple[str, int, int, Result]]:
    """Each target with measured rows: (name, rows met, rows it applies to,
    the worst row: the highest ratio, or the least share of the copy
    kernel's bandwidth for a copy target)."""
    out = []
    for name, table, applies, ok in TARGETS:
        rows = [r for r in results if r.table == table and r.measured and applies(r)]
        if not rows:
            continue
        by_copy = "copy" in name

        def badness(r: Result, by_copy: bool = by_copy) -> float:
            return -(r.copy_share or 1.0) if by_copy else (r.ratio or 0.0)

        out.append((name, sum(1 for r in rows if ok(r)), len(rows), max(rows, key=badness)))
    return out


def format_targets(results: Sequence[Result]) -> str:
    """A Markdown table: each target with the rows that meet it and the worst row."""
    lines = ["| target | rows met | worst row |", "|---|---|---|"]
    for name, met, total, worst in check_targets(results):
        if "copy" in name:
            value = f"{(worst.copy_share or 0) * 100:.0f}% of copy"
        else:
            value = f"ratio {ratio_text(worst.ratio)}"
        lines.append(f"| {name} | {met} of {total} | {worst.op} {type_label(worst)} "
                     f"{worst.granularity} {size_label(worst.size)} t={worst.threads}: "
                     f"{value} |")
    return "\n".join(lines)
