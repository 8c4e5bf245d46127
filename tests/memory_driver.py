"""Resident-memory growth of repeated work, measured in a fresh process
(run by tests/reliability/test_memory.py; its last output line is a JSON report).

    python memory_driver.py SCENARIO [--count N] [--warmup W]

Scenarios:

* ``sessions``         - create an onnxruntime session with extql registered
  (new SessionOptions each time), run it on every output, destroy it;
* ``sessions_shared_options`` - the same with one SessionOptions for all;
* ``failing_sessions`` - models that fail at session creation (a string axis,
  a wrong zero-point type) and at run (a scale that does not fit x);
* ``numpy``            - quantize + dequantize through the NumPy API, per axis
  and per tensor, every type, including inputs that raise.

Resident memory is read from /proc/self/statm after ``--warmup`` rounds
(so that one-time allocations -- onnxruntime's environment, the loaded
library, NumPy caches -- are not counted) and then every ``count / 20``
rounds; the report gives the growth from the first to the last sample and
the slope of a straight line through the samples (bytes per round).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _model():
    """Quantize per axis to int8, dequantize back, quantize to bfloat16 and
    uint16 per tensor: four kernels per session."""
    import ml_dtypes
    from onnx import TensorProto, helper
    from ortutil import make_model, tensor

    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"],
                         domain="com.amd.quark", axis=1),
        helper.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"],
                         domain="com.amd.quark", axis=1),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s1", "zb"], ["b"],
                         domain="com.amd.quark"),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s1", "zu"], ["u"],
                         domain="com.amd.quark"),
    ]
    inits = [tensor("s", np.array([0.1, 0.2, 0.3], np.float32)),
             tensor("z", np.array([1, -2, 3], np.int8)),
             tensor("s1", np.float32(0.5)),
             tensor("zb", np.array(1.5, ml_dtypes.bfloat16)),
             tensor("zu", np.uint16(7))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "M"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("q", TensorProto.INT8, None),
               helper.make_tensor_value_info("u", TensorProto.UINT16, None)]
    return make_model(nodes, inputs, outputs, inits).SerializeToString()


def _bad_models() -> list[tuple[bytes, dict]]:
    from onnx import TensorProto, helper
    from ortutil import make_model, tensor

    x = np.ones((2, 3, 4), np.float32)
    out = []
    for attrs, zp, s in (({"axis": "1"}, np.int8(0), np.float32(1)),     # create: axis type
                         ({}, np.float32(0), np.float32(1)),               # create: zp type
                         ({"axis": 2}, np.zeros(3, np.int8), np.ones(3, np.float32))):  # run
        node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["y"],
                                domain="com.amd.quark", **attrs)
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])]
        outputs = [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT if zp.dtype == np.float32 else TensorProto.INT8, None)]
        model = make_model([node], inputs, outputs, [tensor("s", s), tensor("z", zp)])
        out.append((model.SerializeToString(), {"x": x}))
    return out


def make_round(scenario: str):
    """A callable doing one round of the scenario."""
    if scenario == "numpy":
        import ml_dtypes

        import extql

        rng = np.random.default_rng(0)
        x = (rng.standard_normal((64, 3, 50)) * 10).astype(np.float32)
        s = np.array([0.1, 0.2, 0.3], np.float32)
        zps = [np.zeros(3, t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                        np.uint32, np.float16, ml_dtypes.bfloat16)]

        def round_() -> None:
            for zp in zps:
                q = extql.quantize_linear(x, s, zp, axis=1)
                extql.dequantize_linear(q, s, zp, axis=1)
                extql.quantize_linear(x, np.float32(0.7), zp[:1])
            for bad in ((x, s, np.zeros(2, np.int8)), (x.astype(np.float64), s, None)):
                try:
                    extql.quantize_linear(*bad, axis=1)
                except (TypeError, ValueError):
                    pass
        return round_

    import onnxruntime as ort

    import extql

    ort.set_default_logger_severity(4)
    x = np.linspace(-5, 5, 2 * 3 * 7, dtype=np.float32).reshape(2, 3, 7)
    providers = ["CPUExecutionProvider"]
    if scenario in ("sessions", "sessions_shared_options"):
        data = _model()
        shared = extql.register(ort.SessionOptions())

        def round_() -> None:
            so = shared if scenario == "sessions_shared_options" else extql.register(
                ort.SessionOptions())
            sess = ort.InferenceSession(data, so, providers=providers)
            sess.run(None, {"x": x})
            del sess
        return round_
    if scenario == "failing_sessions":
        bad = _bad_models()

        def round_() -> None:
            for data, feeds in bad:
                so = extql.register(ort.SessionOptions())
                so.log_severity_level = 4
                try:
                    sess = ort.InferenceSession(data, so, providers=providers)
                    sess.run(None, feeds)
                except Exception:  # every one of them fails; that is the point
                    pass
                else:
                    raise AssertionError("a bad model ran")
        return round_
    raise SystemExit(f"unknown scenario {scenario}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()
    round_ = make_round(args.scenario)
    for _ in range(args.warmup):
        round_()
    gc.collect()
    step = max(1, args.count // 20)
    samples = [(0, rss_bytes())]
    for i in range(1, args.count + 1):
        round_()
        if i % step == 0 or i == args.count:
            gc.collect()
            samples.append((i, rss_bytes()))
    xs = np.array([s[0] for s in samples], np.float64)
    ys = np.array([s[1] for s in samples], np.float64)
    slope = float(np.polyfit(xs, ys, 1)[0]) if len(samples) > 2 else 0.0
    print(json.dumps({
        "scenario": args.scenario,
        "count": args.count,
        "warmup": args.warmup,
        "rss_start_mb": round(samples[0][1] / 2**20, 2),
        "rss_end_mb": round(samples[-1][1] / 2**20, 2),
        "growth_mb": round((samples[-1][1] - samples[0][1]) / 2**20, 3),
        "max_growth_mb": round((max(ys) - samples[0][1]) / 2**20, 3),
        "slope_bytes_per_round": round(slope, 1),
        "samples_mb": [round(y / 2**20, 2) for y in ys],
    }), flush=True)


if __name__ == "__main__":
    main()
