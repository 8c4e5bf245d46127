"""Throughput under concurrency: does sharing work between threads stall?

    python benchmarks/concurrency.py [--elements 524288] [--runs 64] [--threads 8]

The same total work -- ``--runs`` quantize + dequantize passes over a float32
tensor of ``--elements`` elements -- is done

* serially (one caller), and by ``--threads`` callers at once on one shared
  onnxruntime session, with intra_op_num_threads 1 and 2;
* by ``--threads`` callers each with a session of its own (intra_op 2, so
  threads x 2 pool threads on this machine's cores: oversubscribed);
* through the NumPy API (the kernels' OpenMP team), serially and from
  ``--threads`` Python threads.

It prints wall time, throughput (elements per second, quantize and
dequantize counted once each) and the ratio to the serial run of the same
path.  A ratio well below 1 would mean threads stall each other
(oversubscription, lock contention); about 1 means the cores are shared
without loss.  Nothing here is asserted: the figures go into
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import extql


def model_bytes(channels: int) -> bytes:
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"],
                         domain="com.amd.quark", axis=1),
        helper.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"],
                         domain="com.amd.quark", axis=1),
    ]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [channels], [0.05] * channels),
             helper.make_tensor("z", TensorProto.INT8, [channels], [3] * channels)]
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.amd.quark", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def session(data: bytes, intra_op: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = intra_op
    return ort.InferenceSession(data, extql.register(so), providers=["CPUExecutionProvider"])


def timed(callers: int, runs: int, make_call) -> float:
    """Wall time of `runs` calls split over `callers` threads (each thread
    gets its callable from make_call(thread_index))."""
    calls = [make_call(t) for t in range(callers)]
    per = [runs // callers + (1 if t < runs % callers else 0) for t in range(callers)]
    gate = threading.Barrier(callers + 1)

    def loop(t: int) -> None:
        gate.wait()
        for _ in range(per[t]):
            calls[t]()

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(callers)]
    for th in threads:
        th.start()
    gate.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 19)
    ap.add_argument("--runs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    channels = 4
    n = args.elements // channels
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((n, channels)) * 3).astype(np.float32)
    s = np.full(channels, 0.05, np.float32)
    z = np.full(channels, 3, np.int8)
    data = model_bytes(channels)
    want = extql.dequantize_linear(extql.quantize_linear(x, s, z), s, z)
    shared = {k: session(data, k) for k in (1, 2)}
    assert np.array_equal(shared[2].run(None, {"x": x})[0], want)

    def ort_shared(intra):
        return lambda t: (lambda: shared[intra].run(None, {"x": x}))

    own = [session(data, 2) for _ in range(args.threads)]

    def ort_own(t):
        return lambda: own[t].run(None, {"x": x})

    def numpy_call(t):
        return lambda: extql.dequantize_linear(extql.quantize_linear(x, s, z), s, z)

    rows = [
        ("onnxruntime, shared session, intra_op 2", ort_shared(2), "ort2"),
        ("onnxruntime, shared session, intra_op 1", ort_shared(1), "ort1"),
        ("onnxruntime, a session per caller, intra_op 2", ort_own, "ort2"),
        ("NumPy API (OpenMP)", numpy_call, "numpy"),
    ]
    serial: dict[str, float] = {}
    print(f"{os.cpu_count()} cores; onnxruntime {ort.__version__}; {args.elements} elements x "
          f"{args.runs} runs (quantize + dequantize); extql threads "
          f"{extql.get_num_threads()}; median of {args.repeat}")
    print(f"{'path':48s} {'callers':>7s} {'seconds':>8s} {'Melem/s':>9s} {'vs serial':>9s}")
    for label, make_call, key in rows:
        for callers in (1, args.threads):
            if key in serial and callers == 1 and label.startswith("onnxruntime, a session"):
                continue
            t = statistics.median(timed(callers, args.runs, make_call)
                                  for _ in range(args.repeat))
            rate = 2 * args.elements * args.runs / t / 1e6
            if callers == 1:
                serial.setdefault(key, rate)
            ratio = rate / serial[key]
            print(f"{label:48s} {callers:7d} {t:8.3f} {rate:9.1f} {ratio:9.2f}")


if __name__ == "__main__":
    main()
