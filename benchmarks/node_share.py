"""Where a whole model's time goes, by operator, from onnxruntime's profiler.

    python benchmarks/node_share.py [--model resnet|bert] [--variant float16 ...]
        [--threads 1] [--runs 20]

Builds the variant as benchmarks/whole_models.py does, runs extql's path
(optimize + library) and its anchor with profiling on, and prints the share
of the summed node time of each operator type.  This is the measurement
behind the decision not to build a fused quantize-dequantize kernel: the
Extended Q/DQ pairs' share bounds what such a kernel could save (it would
remove one pass over memory out of two, so at most about half of it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections import defaultdict

import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_zoo  # noqa: E402
import whole_models  # noqa: E402

import extql  # noqa: E402


def profile(model, feeds, threads: int, runs: int, library: bool) -> dict[str, float]:
    """Summed microseconds per operator type over ``runs`` runs (after 3
    untimed ones)."""
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "prof")
        if library:
            extql.register(so)
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        for _ in range(3 + runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
    per_op: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per_op[e["args"].get("op_name", "?")].append(float(e["dur"]))
    # Drop the untimed runs: keep each op type's last ``runs`` shares.
    return {op: sum(v[len(v) * 3 // (3 + runs):]) / runs for op, v in per_op.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet", choices=["resnet", "bert"])
    p.add_argument("--variant", default="float16", choices=whole_models.VARIANTS)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="the small models of --quick")
    args = p.parse_args(argv)
    ort.set_default_logger_severity(3)
    logging.getLogger().setLevel(logging.ERROR)
    float_model = whole_models._build(args.model, args.quick)
    feeds = model_zoo.random_inputs(float_model, seed=123)
    anchor_name, anchor, extended = whole_models._variant_models(float_model, args.variant, {})
    optimized = extql.optimize(extended)
    for name, model, library in (("extql", optimized, True), (anchor_name, anchor, False)):
        per_op = profile(model, feeds, args.threads, args.runs, library)
        total = sum(per_op.values())
        print(f"{args.model} {args.variant} {name}: {total / 1e3:.2f} ms of node time per run")
        for op, us in sorted(per_op.items(), key=lambda kv: -kv[1]):
            print(f"  {op:<28} {us / 1e3:8.3f} ms  {100 * us / total:5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
