"""The tables for people: the summary of ratios, the times behind them, the
report ``extql bench`` prints and the standalone Markdown document
(docs/benchmarks-results.md)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .config import TABLES, BenchConfig, size_label
from .runner import Result, ratio_text, type_label
from .targets import format_targets

TITLES = {
    "ort": "onnxruntime sessions (IOBinding): extql's native op / anchor; "
           "copy% = copy kernel time / extql time",
    "numpy": "NumPy API: extql.quantize_linear / dequantize_linear over the NumPy expression",
    "fallback": "native op / the same model through the fallback functions (no library)",
    "blocks": "block formats in onnxruntime sessions (IOBinding): extql's native op / the "
              "same model inlined to standard ops (no library); "
              "copy% = copy kernel time / extql time",
    "dpu": "DPU-emulation ops: extql's ExtendedInstanceNormalization / ExtendedLSTM (library "
           "in onnxruntime, NumPy API) / onnxruntime's float InstanceNormalization / LSTM",
}
#: The tables with a copy kernel column.
COPY_TABLES = ("ort", "blocks")


def _ms(t: float | None) -> str:
    if t is None or t != t:
        return "-"
    return f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}"


def format_table(results: Sequence[Result], table: str) -> str:
    """A Markdown table of one table's rows, one line per measurement (ms)."""
    rows = [r for r in results if r.table == table]
    if not rows:
        return ""
    head = ["op", "type", "gran.", "size", "thr", "extql ms", "anchor", "anchor ms", "ratio"]
    if table in COPY_TABLES:
        head += ["copy ms", "copy%"]
    head += ["exact"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.op, type_label(r), r.granularity, size_label(r.size), str(r.threads), _ms(r.extql),
            r.anchor_name or "-", _ms(r.anchor), ratio_text(r.ratio),
        ]
        if table in COPY_TABLES:
            share = r.copy_share
            cells += [_ms(r.copy), "-" if share is None else f"{share * 100:.0f}%"]
        cells.append(r.exact or (r.note or "-"))
        if r.note and r.exact:
            cells[-1] += f" ({r.note})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_dpu_summary(rows: Sequence[Result]) -> str:
    """The dpu table's summary: one line per op, shape and contender, one
    column per thread count holding the ratio (each shape is its own size)."""
    threads = list(dict.fromkeys(r.threads for r in rows))
    keys: dict[tuple, dict[int, Result]] = {}
    for r in rows:
        keys.setdefault((r.op, r.granularity, r.type, r.anchor_name or "-"), {})[r.threads] = r
    head = ["op", "shape", "extql", "anchor"] + [f"t={t} ratio (ms)" for t in threads]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (op, shape, kind, anchor), by_t in keys.items():
        cells = [op, shape, kind, anchor]
        for t in threads:
            r = by_t.get(t)
            if r is None or not r.measured:
                cells.append("n/a")
                continue
            text = f"{ratio_text(r.ratio)} ({_ms(r.extql)} / {_ms(r.anchor)})"
            if r.exact and r.exact.startswith("MISMATCH"):
                text += " MISMATCH"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_summary(results: Sequence[Result], table: str) -> str:
    """A compact Markdown table: one line per op, type, granularity and
    thread count, one column per size holding the ratio (and, for the
    onnxruntime table, the share of the copy kernel's bandwidth); the dpu
    table's by :func:`format_dpu_summary`."""
    rows = [r for r in results if r.table == table]
    if not rows:
        return ""
    if table == "dpu":
        return format_dpu_summary(rows)
    sizes = list(dict.fromkeys(r.size for r in rows))
    keys: dict[tuple, dict[int, Result]] = {}
    for r in rows:
        keys.setdefault((r.op, type_label(r), r.anchor_name or "-", r.granularity, r.threads), {})[
            r.size] = r
    with_copy = table in COPY_TABLES and any(r.copy_share is not None for r in rows)
    cell_name = "ratio / copy%" if with_copy else "ratio"
    head = ["op", "type", "anchor", "gran.", "thr"] + [f"{size_label(n)} {cell_name}"
                                                       for n in sizes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = sorted({r.note for r in rows if r.note and not r.measured})
    for (op, tname, anchor, gran, thr), by_size in keys.items():
        cells = [op, tname, anchor, gran, str(thr)]
        for n in sizes:
            r = by_size.get(n)
            if r is None or not r.measured:
                cells.append("n/a")
                continue
            text = ratio_text(r.ratio)
            if table in COPY_TABLES and r.copy_share is not None:
                text += f" / {r.copy_share * 100:.0f}%"
            if r.exact and r.exact.startswith("MISMATCH"):
                text += " MISMATCH"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"\nn/a: {note}" for note in notes]
    copy_notes = sorted({r.copy_note for r in rows if r.copy_note})
    lines += [f"\ncopy% not measured: {note}" for note in copy_notes]
    return "\n".join(lines)


def format_report(results: Sequence[Result], cfg: BenchConfig, info: dict[str, Any],
                  details: bool = False) -> str:
    """What ``extql bench`` prints: machine, summaries, targets (and times)."""
    parts = [
        "machine: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"median of {cfg.repeat} interleaved runs ({cfg.side_repeat} for the NumPy and "
        "fallback tables); ratio = extql / anchor (below 1: extql is faster)",
    ]
    for table in TABLES:
        text = format_summary(results, table)
        if text:
            parts += ["", f"## {TITLES[table]}", "", text]
    targets = format_targets(results)
    if targets.count("\n") > 1:
        parts += ["", "## Targets", "", targets]
    if details:
        for table in TABLES:
            text = format_table(results, table)
            if text:
                parts += ["", f"## Times: {table}", "", text]
    return "\n".join(parts)


METHOD = """\
How it was measured (`extql bench`, the harness extql_bench):

* Every row runs its contenders side by side in one process on the same input
  and output buffers, interleaved: each of `repeat` rounds takes samples of
  each contender for about 2 ms, in an order that rotates from round to round;
  a sample is one call (small tensors: a few calls, about 0.1 ms); the table
  shows the median of all samples.  Short samples keep most of them clear of
  other processes' time slices on a shared machine.
* extql: the native op in an onnxruntime `InferenceSession` (library
  registered), run with IOBinding into a preallocated output (bfloat16 through
  `OrtValue.ortvalue_from_numpy_with_onnx_type`).  The anchors run in the same
  way in sessions of their own with the same `intra_op_num_threads`:
  onnxruntime's QuantizeLinear / DequantizeLinear (opset 21) for int8, uint8,
  int16, uint16 (and DequantizeLinear of int32); its int16 QuantizeLinear of
  the same input for the int32 / uint32 quantize (it has no 32-bit quantize);
  `Cast` for float16 / bfloat16 (quantize: Cast float -> float16/bfloat16;
  dequantize: Cast back to float).
  Thread-pool spinning is off in every session (`session.intra_op.allow_spinning
  = 0`): otherwise the idle workers of one session spin for tens of
  milliseconds after each run on the cores the next, interleaved session needs.
* copy% is the copy kernel's time over extql's time: the share of the memory
  bandwidth limit extql reaches.  The copy kernel is the same node run as
  `QuantizeCopy` / `DequantizeCopy` (domain `com.amd.quark.bench`) of the
  benchmarks' own custom-op library (benchmarks/copy_ops, built on demand from
  extql's shim sources in a source checkout, not part of extql's library; an
  installed extql without a checkout leaves the copy column out): the same
  inputs, the same checks, the same split of the work on the session's thread
  pool, but instead of the math a C loop, in the instruction-set variant the
  kernels run (AVX2, also for the AVX-512 kernels: non-temporal stores for
  outputs of 16 MiB or more, as the kernels), that
  reads the op's input buffer and writes its output buffer element by element
  with no arithmetic (the low bytes of each float32 for quantize; each element
  zero-extended to 32 bits for dequantize).  So it moves exactly the op's
  bytes, in the same session, on the same threads.
* Data: standard normal float32 values; scales that spread them over about a
  third of the integer range (32-bit types: +-2^24) so that some values
  saturate; non-zero zero points; per-axis scales vary by channel.  float16 /
  bfloat16 rows are as Quark writes them: scale 1 and zero point 0, the
  conversion a Cast is.  Granularities: `tensor` (scalar scale), `axis0`
  (shape (256, n/256), axis 0: the channel changes every n/256 elements),
  `axis1` (shape (n/256, 256), axis 1: the channel changes every element) and
  `nchw` (shape (1, 64, H, W), axis 1, as a convolution's activations: 16M is
  (1, 64, 512, 512)), `nchw7`, `nchw32` and `nchw56` (shapes (N, 256, 7, 7),
  (N, 256, 32, 32) and (N, 64, 56, 56), axis 1: runs of 49, 1024 and 3136
  elements sharing a scale; N is the batch nearest the size, so the first and
  last have about the size's elements, not exactly: at 16M, N = 1337
  (16,771,328 elements) / 64 (exactly 16M) / 84 (16,859,136 elements)),
  `block32` and `block128` (shape (n/4096, 4096), blocked quantization along
  axis 1 with block_size 32 / 128, a scale per block: an LLM weight; the
  anchor is onnxruntime's own blocked op).
* The block formats' table: Quark's BFPQuantizeDequantize /
  MXQuantizeDequantize configurations on an NCHW activation (blocks along
  axis 1) and a (n/256, 256) MatMul input (blocks along the last axis); the
  anchor is the same one-node model through `extql.inline_fallbacks` (standard
  ONNX ops only) in a session without the library, at the same thread count;
  the copy kernel is `BlockCopy`, split in block-rows as extql's nodes are.
* The DPU-emulation ops' table: ExtendedInstanceNormalization (x of
  1x64x56x56, 1x256x14x14, 8x64x56x56; γ / β initializers) and ExtendedLSTM
  (bidirectional, sequence 80, input 64, hidden 128 -- Quark's size -- at
  batch 1 and 8; W / R / B initializers on their uint16 grid) as extql's nodes
  in onnxruntime (`library`) and through the NumPy API (`numpy`, threads set by
  `extql.set_num_threads`), against onnxruntime's own float
  `InstanceNormalization` / `LSTM` on the same inputs at the same thread
  count, the three timed interleaved.  The float op computes in float32 what
  the DPU computes in bfloat16 / 16-bit fixed point: the ratio is what the
  emulation costs over the float op.  The library is checked bit for bit
  against the NumPy API (`=api`); Quark's own library is measured by
  `benchmarks/dpu_ops.py`.
* Before timing, every row checks extql's output bit for bit: `=ort` against
  onnxruntime's own op, `=api` against extql's NumPy API, `=fallback` against
  the fallback model (block formats: `=api =fallback`, both; a NaN equals any
  NaN there).
"""


def format_markdown(results: Sequence[Result], cfg: BenchConfig, info: dict[str, Any],
                    command: str) -> str:
    """A standalone Markdown document: command, machine, method, targets and
    the tables (for docs/benchmarks-results.md)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = [
        "# extql benchmark results",
        "",
        f"Made by `{command}` on {stamp}.",
        "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + ".",
        "",
        METHOD,
        "Ratios are extql / anchor: below 1.0, extql is faster.",
    ]
    targets = format_targets(results)
    if targets.count("\n") > 1:
        parts += ["", "## Targets", "", targets]
    for table in TABLES:
        text = format_summary(results, table)
        if text:
            parts += ["", f"## {TITLES[table]}", "", text]
    for table in TABLES:
        text = format_table(results, table)
        if text:
            parts += ["", f"## Times (medians): {table}", "", text]
    return "\n".join(parts) + "\n"
