"""Two builds' fallbacks against each other in onnxruntime: the inlined
one-node models of a change and of main, interleaved, medians.

The fallback table of ``extql bench`` times one build's fallback against its
native op; this script times the same node's fallback of two builds (a
decomposition change against main's), so that a change states what it costs.

1. ``python benchmarks/fallback_ab.py export DIR`` (run by each build's own
   interpreter, e.g. main's venv with ``PYTHONPATH`` at main's tree): writes
   ``DIR/<op>-<type>-<granularity>.onnx``, the one-node model of each case
   inlined by that build (``extql.inline_fallbacks``);
2. ``python benchmarks/fallback_ab.py time A=DIR_A B=DIR_B`` runs each case's
   models in onnxruntime (1 thread by default, every optimisation on) on
   the same input, interleaved, ``--repeat`` rounds, and prints the median
   times and B / A (``--clock cpu``: the thread's CPU time, steadier on a
   shared machine); the outputs must be equal bit for bit (a mismatch: exit
   status 1).

Cases: ExtendedQuantizeLinear / ExtendedDequantizeLinear of ``--types``
(default int32, uint32; also float16), x of shape (1, 64, 128, 128) (1M
elements), per tensor (a scalar scale) and per channel (axis 1), zero points
not 0 (float16: 0, as Quark writes them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

SHAPE = (1, 64, 128, 128)
_CODES = {"int32": 6, "uint32": 12, "float16": 10}


def _case_arrays(op: str, qtype: str, granularity: str):
    """x, scale, zero point of one case (the same in every build)."""
    rng = np.random.default_rng(7)
    dt = np.dtype(qtype)
    n = SHAPE[1] if granularity == "channel" else None
    shape = () if n is None else (n,)
    s = rng.uniform(1e-3, 1e-2, shape).astype(np.float32)
    if dt.kind == "f":  # float16: Quark's zero point of 0
        z = np.zeros(shape, dt)
        x = (rng.standard_normal(SHAPE) * (1e-2 if op == "Q" else 1e2)).astype(
            np.float32 if op == "Q" else dt)
        return x, s, z
    info = np.iinfo(dt)
    z = rng.integers(info.min // 4 + info.max // 4, info.max // 2, shape, dtype=dt,
                     endpoint=True)
    if op == "Q":
        x = (rng.standard_normal(SHAPE) * 1e6).astype(np.float32)
    else:
        x = rng.integers(info.min, info.max, SHAPE, dtype=dt, endpoint=True)
    return x, s, z


def _model(op: str, qtype: str, granularity: str):
    import onnx
    from onnx import helper, numpy_helper

    x, s, z = _case_arrays(op, qtype, granularity)
    name = "ExtendedQuantizeLinear" if op == "Q" else "ExtendedDequantizeLinear"
    node = helper.make_node(name, ["x", "s", "z"], ["y"], domain="com.amd.quark", axis=1)
    x_code = 1 if op == "Q" else _CODES[qtype]
    y_code = _CODES[qtype] if op == "Q" else 1
    graph = helper.make_graph(
        [node], "one_node", [helper.make_tensor_value_info("x", x_code, SHAPE)],
        [helper.make_tensor_value_info("y", y_code, SHAPE)],
        [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")])
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.amd.quark", 1)])


def _cases(types: list[str]) -> list[tuple[str, str, str]]:
    return [(op, t, g) for op in ("Q", "DQ") for t in types for g in ("tensor", "channel")]


def export(out: Path, types: list[str]) -> None:
    import onnx

    import extql

    out.mkdir(parents=True, exist_ok=True)
    for op, t, g in _cases(types):
        onnx.save(extql.inline_fallbacks(_model(op, t, g)), str(out / f"{op}-{t}-{g}.onnx"))
    print(f"wrote {len(_cases(types))} models to {out} (extql at {extql.__file__})")


def _session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def time_builds(builds: list[tuple[str, Path]], types: list[str], repeat: int,
                threads: int, clock: str = "wall") -> int:
    status = 0
    labels = [label for label, _ in builds]
    # cpu: the calling thread's CPU time (with one thread onnxruntime runs the
    # graph there), less disturbed by other processes on a shared machine
    now = time.thread_time if clock == "cpu" else time.perf_counter
    print(f"onnxruntime, {threads} thread(s), x {SHAPE}, {repeat} interleaved rounds, "
          f"median ms ({clock} clock)")
    print(f"{'case':24s} " + " ".join(f"{lab:>9s}" for lab in labels)
          + "".join(f" {lab}/{labels[0]:>5s}" for lab in labels[1:]))
    for op, t, g in _cases(types):
        x = _case_arrays(op, t, g)[0]
        sessions = [_session(d / f"{op}-{t}-{g}.onnx", threads) for _, d in builds]
        outs = [s.run(None, {"x": x})[0] for s in sessions]
        for label, o in zip(labels[1:], outs[1:], strict=True):
            if not np.array_equal(o.view(f"u{o.itemsize}"), outs[0].view(f"u{o.itemsize}")):
                print(f"  {op}-{t}-{g}: {label}'s output differs from {labels[0]}'s")
                status = 1
        times: list[list[float]] = [[] for _ in sessions]
        for _ in range(repeat):
            for i, s in enumerate(sessions):
                t0 = now()
                s.run(None, {"x": x})
                times[i].append(now() - t0)
        med = [statistics.median(ts) * 1e3 for ts in times]
        print(f"{op + '-' + t + '-' + g:24s} " + " ".join(f"{m:9.3f}" for m in med)
              + "".join(f" {m / med[0]:11.3f}" for m in med[1:]))
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write this build's inlined one-node models")
    e.add_argument("dir", type=Path)
    e.add_argument("--types", nargs="+", default=["int32", "uint32"])
    t = sub.add_parser("time", help="time builds' models against each other")
    t.add_argument("builds", nargs="+", help="LABEL=DIR (the first is the reference)")
    t.add_argument("--types", nargs="+", default=["int32", "uint32"])
    t.add_argument("--repeat", type=int, default=31)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: the thread's CPU time (1 thread only)")
    a = p.parse_args(argv)
    if a.cmd == "export":
        export(a.dir, a.types)
        return 0
    builds = [(b.split("=", 1)[0], Path(b.split("=", 1)[1])) for b in a.builds]
    if a.clock == "cpu" and a.threads != 1:
        p.error("--clock cpu measures the calling thread: --threads 1")
    return time_builds(builds, a.types, a.repeat, a.threads, a.clock)


if __name__ == "__main__":
    sys.exit(main())
