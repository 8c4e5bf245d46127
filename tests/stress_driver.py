"""Concurrency stress scenarios, run as a child process by tests/reliability/test_concurrency.py
(and by benchmarks/concurrency.py for the throughput figures).

    python stress_driver.py SCENARIO [--threads N] [--seconds S] [--max-iters K]
                            [--intra-op N]

Scenarios:

* ``shared_session`` - one onnxruntime session (quantize per axis to int8,
  dequantize it back, quantize per tensor to uint16 and to bfloat16) run by
  N threads at once on inputs of different sizes, small ones and ones above
  the parallel minimum (so the intra-op pool is used by several callers at
  once);
* ``many_sessions`` - N threads each creating, running and destroying
  sessions of different models (every type, per axis and per tensor, legacy
  names) while registering the library each time;
* ``numpy_threads`` - N Python threads calling the NumPy API on large
  arrays (the kernels release the GIL and use OpenMP), each changing the
  global thread setting (1, 2, 3, 4, default) between calls;
* ``mixed`` - half the threads on a shared session, half on the NumPy API.

Every result is compared bit for bit with tests/contract.py (expectations
are computed before the threads start).  Each thread runs until the time is
up or it has done ``--max-iters`` iterations; the main thread then joins
every worker with a timeout, and a thread still running after it is
reported as stuck (with every thread's stack) and the process exits with
code 3.  The last line of output is a JSON report.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from contract import assert_same_bits, dequantize, quantize  # noqa: E402
from fuzz_common import awkward_f32  # noqa: E402


def _pool(rng: np.random.Generator, sizes: list[int], channels: int) -> list[np.ndarray]:
    xs = []
    for n in sizes:
        x = awkward_f32(rng, (n, channels), 0.05, "mixed")
        xs.append(x)
    return xs


# ---------------------------------------------------------------------------
# onnxruntime
# ---------------------------------------------------------------------------

C = 4
SCALE = np.array([0.05, 0.5, 1e-3, 7.0], np.float32)
ZP8 = np.array([-3, 0, 100, -128], np.int8)


def shared_model():
    """x [N, 4] -> y8 (int8, per axis 1), xr (float32, y8 dequantized),
    y16 (uint16, per tensor), ybf (bfloat16, per tensor)."""
    import ml_dtypes
    from onnx import TensorProto, helper
    from ortutil import bfloat16_io_fallback, make_model, tensor

    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z8"], ["y8"],
                         domain="com.amd.quark", axis=1, name="q8"),
        helper.make_node("ExtendedDequantizeLinear", ["y8", "s", "z8"], ["xr"],
                         domain="com.amd.quark", axis=1, name="dq8"),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s1", "z16"], ["y16"],
                         domain="com.amd.quark", name="q16"),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s1", "zbf"], ["ybf"],
                         domain="com.amd.quark", name="qbf"),
    ]
    inits = [
        tensor("s", SCALE), tensor("z8", ZP8), tensor("s1", np.float32(0.01)),
        tensor("z16", np.uint16(30000)),
        tensor("zbf", np.array(0.5, dtype=ml_dtypes.bfloat16)),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C])]
    outputs = [
        helper.make_tensor_value_info("y8", TensorProto.INT8, ["N", C]),
        helper.make_tensor_value_info("xr", TensorProto.FLOAT, ["N", C]),
        helper.make_tensor_value_info("y16", TensorProto.UINT16, ["N", C]),
        helper.make_tensor_value_info("ybf", TensorProto.BFLOAT16, ["N", C]),
    ]
    model, _ = bfloat16_io_fallback(make_model(nodes, inputs, outputs, inits))
    return model


def shared_expect(x: np.ndarray) -> list[np.ndarray]:
    import ml_dtypes

    y8 = quantize(x, SCALE, ZP8, 1)
    return [
        y8,
        dequantize(y8, SCALE, ZP8, 1),
        quantize(x, np.float32(0.01), np.uint16(30000)),
        quantize(x, np.float32(0.01), np.array(0.5, dtype=ml_dtypes.bfloat16)),
    ]


def make_session(model_bytes: bytes, intra_op: int):
    import onnxruntime as ort

    import extql

    so = ort.SessionOptions()
    so.intra_op_num_threads = intra_op
    so.log_severity_level = 3
    so.enable_cpu_mem_arena = not os.environ.get("EXTQL_TEST_NO_ARENA")
    extql.register(so)
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def run_shared(sess, x: np.ndarray, want: list[np.ndarray]) -> None:
    from ortutil import run

    got = run(sess, {"x": x}, [w.dtype for w in want], [w.shape for w in want])
    for g, w, name in zip(got, want, ("y8", "xr", "y16", "ybf"), strict=True):
        assert_same_bits(g, w, name)


def small_models() -> list[tuple[bytes, dict, list[np.ndarray]]]:
    """(model, feeds, expected outputs) for many_sessions: every type, per
    axis and per tensor, legacy names."""
    from contract import TYPES
    from ortutil import DQ, Q, node_model

    rng = np.random.default_rng(7)
    out = []
    for i, name in enumerate(TYPES):
        dt = TYPES[name][0]
        x = awkward_f32(rng, (3, 5, 6), 0.1, "mixed")
        s = (rng.random(5) + 0.01).astype(np.float32)
        zp = quantize(awkward_f32(rng, (5,), 1.0, "normal"), np.float32(1), np.zeros(5, dt))
        legacy = i % 3 == 0
        model, feeds, _ = node_model(Q, x, s, zp, axis=1, legacy=legacy,
                                     params="input" if i % 2 else "const")
        out.append((model.SerializeToString(), feeds, [quantize(x, s, zp, 1)]))
        q = quantize(x, np.float32(0.3), zp[:1].reshape(()))
        model, feeds, _ = node_model(DQ, q, np.float32(0.3), zp[:1].reshape(()),
                                     legacy=not legacy)
        out.append((model.SerializeToString(), feeds,
                    [dequantize(q, np.float32(0.3), zp[:1].reshape(()))]))
    return out


# ---------------------------------------------------------------------------
# The scenarios: each returns a per-thread worker function
# ---------------------------------------------------------------------------

class Stats:
    def __init__(self, n: int) -> None:
        self.iters = [0] * n
        self.sessions = [0] * n
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def error(self, tid: int, exc: BaseException) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(f"thread {tid}: {type(exc).__name__}: {str(exc)[:400]}")


def scenario_shared_session(args, stats: Stats):
    rng = np.random.default_rng(1)
    sizes = [1, 3, 17, 64, 1000, 20000, 70000, 130000]
    xs = _pool(rng, sizes, C)
    wants = [shared_expect(x) for x in xs]
    sess = make_session(shared_model().SerializeToString(), args.intra_op)

    def work(tid: int, i: int) -> None:
        k = (tid * 3 + i) % len(xs)
        run_shared(sess, xs[k], wants[k])
    return work


def scenario_many_sessions(args, stats: Stats):
    models = small_models()

    def work(tid: int, i: int) -> None:
        model, feeds, want = models[(tid * 5 + i) % len(models)]
        sess = make_session(model, 1 + (i % 2))
        stats.sessions[tid] += 1
        from ortutil import run

        for _ in range(1 + i % 3):
            got = run(sess, feeds, [w.dtype for w in want], [w.shape for w in want])
            assert_same_bits(got[0], want[0], f"model {(tid * 5 + i) % len(models)}")
        del sess
    return work


def _numpy_problems():
    from contract import TYPES

    rng = np.random.default_rng(3)
    problems = []
    for j, name in enumerate(TYPES):
        dt = TYPES[name][0]
        n = [50_000, 200_000, 300_001][j % 3]
        x = awkward_f32(rng, (3, n // 3), 0.02, "mixed")
        s = np.array([0.02, 1.0, 3e-3], np.float32)
        zp = quantize(np.array([1.0, -2.0, 7.0], np.float32), np.float32(1), np.zeros(3, dt))
        q = quantize(x, s, zp, 0)
        problems.append((x, s, zp, q, dequantize(q, s, zp, 0)))
    return problems


def scenario_numpy_threads(args, stats: Stats):
    import extql

    problems = _numpy_problems()
    settings = [1, 2, 3, 4, 0]

    def work(tid: int, i: int) -> None:
        x, s, zp, q, back = problems[(tid + i) % len(problems)]
        extql.set_num_threads(settings[(tid + i) % len(settings)])
        assert_same_bits(extql.quantize_linear(x, s, zp, axis=0), q, "numpy quantize")
        assert_same_bits(extql.dequantize_linear(q, s, zp, axis=0), back, "numpy dequantize")
    return work


def scenario_mixed(args, stats: Stats):
    shared = scenario_shared_session(args, stats)
    numpy_work = scenario_numpy_threads(args, stats)

    def work(tid: int, i: int) -> None:
        (shared if tid % 2 else numpy_work)(tid, i)
    return work


def scenario_selftest_stuck(args, stats: Stats):
    """The driver's own test: thread 0 blocks forever."""
    never = threading.Event()

    def work(tid: int, i: int) -> None:
        if tid == 0:
            never.wait()
    return work


SCENARIOS = {
    "shared_session": scenario_shared_session,
    "many_sessions": scenario_many_sessions,
    "numpy_threads": scenario_numpy_threads,
    "mixed": scenario_mixed,
    "selftest_stuck": scenario_selftest_stuck,
}


def run_scenario(args) -> dict[str, Any]:
    stats = Stats(args.threads)
    work = SCENARIOS[args.scenario](args, stats)
    start_gate = threading.Barrier(args.threads + 1)
    deadline = [0.0]

    def loop(tid: int) -> None:
        start_gate.wait()
        i = 0
        while time.monotonic() < deadline[0] and i < args.max_iters:
            try:
                work(tid, i)
            except Exception as exc:  # counted; the parent fails on any
                stats.error(tid, exc)
            i += 1
            stats.iters[tid] = i

    threads = [threading.Thread(target=loop, args=(t,), daemon=True, name=f"worker-{t}")
               for t in range(args.threads)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    deadline[0] = t0 + args.seconds
    start_gate.wait()
    stuck = []
    for t in threads:
        t.join(timeout=max(0.0, deadline[0] + args.grace - time.monotonic()))
        if t.is_alive():
            stuck.append(t.name)
    elapsed = time.monotonic() - t0
    return {
        "scenario": args.scenario,
        "threads": args.threads,
        "intra_op": args.intra_op,
        "seconds": round(elapsed, 3),
        "iterations": sum(stats.iters),
        "per_thread": stats.iters,
        "sessions": sum(stats.sessions),
        "errors": stats.errors,
        "stuck": stuck,
        "omp_threads_setting": os.environ.get("EXTQL_NUM_THREADS"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--max-iters", type=int, default=10**9)
    p.add_argument("--intra-op", type=int, default=2)
    p.add_argument("--grace", type=float, default=60.0,
                   help="seconds past the end before a thread counts as stuck")
    args = p.parse_args(argv)
    report = run_scenario(args)
    if report["stuck"]:
        faulthandler.dump_traceback(all_threads=True)
        print(json.dumps(report), flush=True)
        os._exit(3)  # stuck threads would keep the process alive
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
