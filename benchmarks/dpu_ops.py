"""Quark's DPU-emulation ops: extql against AMD Quark's own custom-op library
and onnxruntime's float operators.

    python benchmarks/dpu_ops.py [--quick] [--shapes in-1x64x56x56 ...]
        [--threads 1 2] [--rounds 15] [--quark-python /work/venvs/quark/bin/python]
        [--json FILE]

Rows are the shapes of ``extql bench``'s dpu table (extql_bench.dpu.DPU_SHAPES:
ExtendedInstanceNormalization on 1x64x56x56, 1x256x14x14, 8x64x56x56;
ExtendedLSTM, bidirectional, at Quark's size -- sequence 80, input 64,
hidden 128 -- at batch 1 and 8), built by the same code on the same inputs.
Columns, each a median over interleaved rounds (the order rotates from
round to round, so the load of a shared machine weighs on all alike):

* Quark: the one-node model in onnxruntime with Quark's library registered,
  1 thread (its kernels are single-threaded), in a separate process
  (``--quark-python``: an environment with torch and amd-quark;
  benchmarks/quark_library.py), fed the same inputs from files.  Quark's
  LSTM kernel computes batch 1 only (it reads a batch as one sequence): at
  batch 8 its column is 8 runs of the batch-1 model, one per sequence,
  which is what a model with Quark's library has to do to get the same
  output;
* extql: the same model in onnxruntime with extql's library, and the NumPy
  API (``extql.extended_instance_normalization`` / ``extended_lstm``), at
  each ``--threads`` count;
* onnxruntime's float ``InstanceNormalization`` / ``LSTM`` on the same
  inputs at the same thread count (the cost of the float op).

Quark's output is checked bit for bit against extql's library (a mismatch
is exit status 1), and extql's library against its NumPy API.  Quark's
library is a development-time dependency: without ``--quark-python`` (or
when its library does not load) the Quark column says why it is empty and
the rest runs.  The targets (extql_bench.targets.QUARK_TARGETS): the
instance norm >= 10x faster than Quark's library at 1 thread on every
shape; the LSTM faster than Quark's on every shape and >= 3x at Quark's
size, at 1 thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import numpy as np
from quark_library import Quark, timed

# ---------------------------------------------------------------- extql's side

def _calls_per_sample(fn, target: float = 5e-3) -> int:
    fn()
    return max(1, int(target / max(timed(fn, 1), 1e-7)))


def _quark_model(o, shape, tmp: str) -> tuple[str, list[str], int]:
    """Quark's model file (the same one-node model; the LSTM at batch 1)
    and the input slices it runs on; the axis Y's slices join along."""
    from extql_bench import dpu

    if shape.op == "IN":
        feeds = dpu.in_inputs(shape.dims)
        model, xs, axis = dpu.in_model(o, feeds, True), [feeds["x"]], 0
    else:
        attrs, feeds = dpu.lstm_inputs(shape.dims)
        xs = [np.ascontiguousarray(feeds["X"][:, b:b + 1]) for b in range(shape.dims[1])]
        model = dpu.lstm_model(o, attrs, {**feeds, "X": xs[0]}, True)
        axis = 2  # Y [seq, dirs, batch, hidden]
    path = os.path.join(tmp, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    paths = []
    for i, x in enumerate(xs):
        paths.append(os.path.join(tmp, f"x{i}.npy"))
        np.save(paths[-1], x)
    return path, paths, axis


def _row(o, quark: Quark, tmp: str, shape, threads: list[int], rounds: int) -> list[dict]:
    """The rows of one shape, one per extql thread count: medians (ms) of
    Quark (1 thread), extql's library and NumPy API and onnxruntime's float
    op, and their bits."""
    import extql
    from extql_bench import dpu
    from extql_bench.runner import same_bits

    contenders = {t: dpu.row_contenders(o, shape, t) for t in threads}
    base = contenders[threads[0]]
    base["library"]()
    ext_y = base["y"].copy()
    bits_api = same_bits(ext_y, base["numpy"]())
    bits_quark = None
    if quark.why is None:
        model, xs, axis = _quark_model(o, shape, tmp)
        y_path = os.path.join(tmp, "y.npy")
        quark.load(model, xs, y_path, axis)
        bits_quark = same_bits(ext_y, np.load(y_path))
    funcs: dict[str, object] = {}
    for t, c in contenders.items():
        def numpy_api(call=c["numpy"], t=t):
            extql.set_num_threads(t)
            call()

        funcs[f"library_{t}"] = c["library"]
        funcs[f"numpy_{t}"] = numpy_api
        funcs[f"ort_{t}"] = c["anchor"]
    ks = {name: _calls_per_sample(f) for name, f in funcs.items()}
    names = list(funcs) + (["quark"] if quark.why is None else [])
    if quark.why is None:
        one = quark.time(1)
        ks["quark"] = max(1, int(5e-3 / one))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            if name == "quark":
                samples[name].append(quark.time(ks[name]))
            else:
                samples[name].append(timed(funcs[name], ks[name]))
    extql.set_num_threads(0)
    med = {n: statistics.median(v) for n, v in samples.items()}
    rows = []
    for t in threads:
        row = {"op": shape.op, "shape": shape.label, "threads": t,
               "library_ms": med[f"library_{t}"] * 1e3, "numpy_ms": med[f"numpy_{t}"] * 1e3,
               "ort_float_ms": med[f"ort_{t}"] * 1e3,
               "quark_1t_ms": med["quark"] * 1e3 if "quark" in med else None,
               "bits_api": bits_api, "bits_quark": bits_quark, "rounds": rounds}
        row["vs_ort_float"] = row["library_ms"] / row["ort_float_ms"]
        row["numpy_vs_ort_float"] = row["numpy_ms"] / row["ort_float_ms"]
        row["speedup"] = (row["quark_1t_ms"] / row["library_ms"]
                          if row["quark_1t_ms"] is not None else None)
        row["numpy_speedup"] = (row["quark_1t_ms"] / row["numpy_ms"]
                                if row["quark_1t_ms"] is not None else None)
        rows.append(row)
    del contenders, base
    return rows


def _fmt(row: dict) -> str:
    def num(v, f="{:.3f}"):
        return "-" if v is None else f.format(v)

    bits = {True: "same", False: "MISMATCH", None: "-"}
    cells = [row["op"], row["shape"], str(row["threads"]), num(row["quark_1t_ms"]),
             num(row["library_ms"]), num(row["numpy_ms"]), num(row["ort_float_ms"]),
             num(row["speedup"], "{:.1f}"), num(row["numpy_speedup"], "{:.1f}"),
             num(row["vs_ort_float"], "{:.2f}"), num(row["numpy_vs_ort_float"], "{:.2f}"),
             bits[row["bits_quark"]], bits[row["bits_api"]]]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| op | shape | thr | Quark 1t ms | extql lib ms | extql numpy ms | ort float ms | "
          "Quark / lib | Quark / numpy | lib / ort float | numpy / ort float | bits vs Quark | "
          "lib = numpy |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def format_quark_targets(rows: list[dict]) -> str:
    """The Quark targets as a Markdown table: rows met and the worst row."""
    from extql_bench.targets import check_quark_targets

    lines = ["| target | rows met | worst row |", "|---|---|---|"]
    for name, met, total, worst in check_quark_targets(rows):
        lines.append(f"| {name} | {met} of {total} | {worst['op']} {worst['shape']} "
                     f"t={worst['threads']}: {worst['speedup']:.1f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from extql_bench.dpu import DPU_SHAPES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(DPU_SHAPES), choices=list(DPU_SHAPES))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2],
                    help="extql's and onnxruntime's thread counts (Quark: always 1)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true",
                    help="the instance norm on 1x64x56x56 and the LSTM at batch 1, "
                         "1 thread, 3 rounds")
    ap.add_argument("--quark-python", default=os.environ.get(
        "EXTQL_QUARK_PYTHON", "/work/venvs/quark/bin/python"),
        help="a Python with torch and amd-quark (no Quark column when it has none)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    args = ap.parse_args(argv)
    import extql
    from extql_bench.dpu import resolve
    from extql_bench.machine import loadavg, machine_info
    from extql_bench.models import Ort

    if args.quick:
        args.shapes, args.threads, args.rounds = ["in-1x64x56x56", "lstm-80x1"], [1], 3
    threads = list(dict.fromkeys(max(1, t) for t in args.threads))
    quark = Quark(args.quark_python)
    load_start = loadavg()
    print(f"extql {extql.__version__}; Quark: "
          + (f"amd-quark {quark.info['amd-quark']}, {quark.info['library']} "
             f"(onnxruntime {quark.info['onnxruntime']}), 1 thread"
             if quark.why is None else f"not measured: {quark.why}"))
    print(f"medians of {args.rounds} interleaved rounds; load average {load_start}")
    print(HEADER, flush=True)
    o = Ort()
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="extql-dpu-") as tmp:
            for shape in resolve(args.shapes):
                for row in _row(o, quark, tmp, shape, threads, args.rounds):
                    rows.append(row)
                    print(_fmt(row), flush=True)
    finally:
        quark.close()
    load_end = loadavg()
    print(f"\nload average {load_start} at the start, {load_end} at the end")
    if quark.why is None:
        print("\n" + format_quark_targets(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python benchmarks/dpu_ops.py" + "".join(
                           f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
                       "machine": machine_info(), "quark": quark.info or quark.why,
                       "load": [load_start, load_end], "rows": rows}, f, indent=1)
            f.write("\n")
    bad = [r for r in rows if r["bits_quark"] is False or not r["bits_api"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
