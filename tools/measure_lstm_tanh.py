"""Measure what the runtimes' Tanh changes in the DPU LSTM's standard-ops
fallback (docs/differences.rst): the inlined ExtendedLSTM against the NumPy
API (the C library's tanhf) on every stored Quark case (tests/data/dpu) and
on Quark-size models (sequence 80, input 64, hidden 128, bidirectional), in
onnxruntime (every graph optimisation level) and onnx.reference; then the
float32 Tanh itself against tanhf on the gates' arguments.

Each line: the runtime, the set of models, the output elements that differ
from the NumPy API's (of all), the cases with a difference, and the largest
difference in output steps (units of y_scale).  With ``--tanhf`` the
onnx.reference run replaces Tanh by the C library's tanhf, which shows that
Tanh is the only difference (0 elements); with ``--float64-tanh`` the
fallback computes each tanh as a float64 Tanh rounded to float32 (nearer
tanhf, for comparison: the fallback itself keeps the float32 Tanh).

Run from the repository (about a minute)::

    python tools/measure_lstm_tanh.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lstm_cases  # noqa: E402
import lstm_contract  # noqa: E402
from dpu_models import lstm_model  # noqa: E402
from lstm_data import CASES, inputs  # noqa: E402

import extql  # noqa: E402

F32 = np.float32
LEVELS = {"disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
_TANHF = np.vectorize(lstm_contract.tanhf, otypes=[F32])


class Tanh(OpRun):
    """Tanh as the C library's tanhf (onnx.reference matches the class name)."""

    op_domain = ""

    def _run(self, x):  # type: ignore[override]
        return (_TANHF(x).astype(F32),)


def quark_size(seeds: int) -> list[tuple[dict, dict, str]]:
    """Quark-size cases: the stored one and ``seeds`` more from tests/lstm_cases.py."""
    out = [(dict(c["attrs"]), inputs(c), c["op_type"]) for c in CASES
           if c["group"] == "quark_size"]
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        attrs, feeds = lstm_cases.make_case(rng, 80, 64, 128, symmetric=seed % 2 == 0)
        out.append((attrs, feeds, "ExtendedLSTM"))
    return out


def compare(cases, run) -> tuple[int, int, int, float]:
    diff = total = with_diff = 0
    steps = 0.0
    for attrs, feeds, op in cases:
        model = extql.inline_fallbacks(lstm_model(
            attrs, op=op, x_shape=list(feeds["X"].shape), w_shape=list(feeds["W"].shape)))
        want = extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"], **attrs)
        got = run(model, feeds)
        n = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        diff, total, with_diff = diff + n, total + want.size, with_diff + bool(n)
        if n:
            steps = max(steps, float(np.max(np.abs(got.astype(np.float64) - want)))
                        / attrs["y_scale"])
    return diff, total, with_diff, steps


def ort_runner(level):
    def run(model, feeds):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]
    return run


def reference_runner(tanhf: bool):
    def run(model, feeds):
        ev = ReferenceEvaluator(model, new_ops=[Tanh] if tanhf else None)
        with np.errstate(all="ignore"):
            return ev.run(None, feeds)[0]
    return run


def tanh_units(values: np.ndarray) -> dict[str, tuple[float, int]]:
    """(share of values off tanhf, largest distance in units) per runtime."""
    want = _TANHF(values).view(np.int32).astype(np.int64)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Tanh", ["x"], ["y"])], "t",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    got = {"onnxruntime": ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": values})[0], "numpy": np.tanh(values),
        "float64": np.tanh(values.astype(np.float64)).astype(F32)}
    return {k: (float(np.mean(v.view(np.int32) != want)),
                int(np.max(np.abs(v.view(np.int32).astype(np.int64) - want))))
            for k, v in got.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="extra Quark-size models")
    parser.add_argument("--tanhf", action="store_true",
                        help="also onnx.reference with Tanh as tanhf (expected: 0 elements)")
    parser.add_argument("--float64-tanh", action="store_true",
                        help="the fallback's tanh as a float64 Tanh rounded to float32")
    args = parser.parse_args()
    if args.float64_tanh:
        from extql.onnx import fallback_lstm

        def tanh64(self, v: str) -> str:
            return self.op("Cast", self.op("Tanh", self.op("Cast", v, to=onnx.TensorProto.DOUBLE)),
                           to=onnx.TensorProto.FLOAT)

        fallback_lstm._Builder.tanh = tanh64
    stored = [(dict(c["attrs"]), inputs(c), c["op_type"]) for c in CASES]
    big = quark_size(args.seeds)
    small = [c for c in stored if c[1]["X"].size <= 2000]
    rows = []
    for name, level in LEVELS.items():
        rows.append((f"onnxruntime {name}", "stored", compare(stored, ort_runner(level))))
    rows.append(("onnxruntime all", "quark-size", compare(big, ort_runner(LEVELS["all"]))))
    rows.append(("onnx.reference", "stored (X <= 2000)", compare(small, reference_runner(False))))
    rows.append(("onnx.reference", "quark-size", compare(big, reference_runner(False))))
    if args.tanhf:
        rows.append(("onnx.reference+tanhf", "stored (X <= 2000)",
                     compare(small, reference_runner(True))))
        rows.append(("onnx.reference+tanhf", "quark-size", compare(big, reference_runner(True))))
    print(f"{len(stored)} stored cases, {len(big)} quark-size models (seq 80, input 64, "
          "hidden 128, bidirectional)")
    for runtime, models, (diff, total, cases, steps) in rows:
        print(f"{runtime:22s} {models:20s} {diff:6d} of {total:7d} elements "
              f"({100 * diff / total:5.2f}%), {cases} case(s), up to {steps:.0f} step(s)")
    rng = np.random.default_rng(0)
    # the gates' arguments: g / 2^25 and g / 2^24 for int32 g (|v| <= 128),
    # and the cell state's tanh (|c| of a few units)
    values = np.concatenate([rng.uniform(-8, 8, 200_000),
                             rng.normal(0, 1, 200_000)]).astype(F32)
    for k, (share, units) in tanh_units(values).items():
        print(f"Tanh {k:12s} vs tanhf on 400,000 arguments in [-8, 8]: {100 * share:.1f}% "
              f"differ, up to {units} unit(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
