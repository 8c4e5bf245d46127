"""The fixed cost of one run of one node through InferenceSession + IOBinding:
extql's custom op (and the copy anchor's op: the same shim without the math)
against onnxruntime's built-in DequantizeLinear and Cast, at 1 element (the
cost of a run itself) or at the size given.  Medians of 25 interleaved
batches.  A yardstick for the 64K rows of `extql bench`.

    python benchmarks/floors/fixed_cost.py [N]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from extql.rules.types import QTYPES
from extql_bench.data import Data
from extql_bench.models import Ort

_LIBRARY = {"extql": "extql", "copy": "copy", "ort": None, "cast": None}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    o, data = Ort(), Data(5)
    i32, f16 = QTYPES["int32"], QTYPES["float16"]
    q32, q16 = data.q(n, i32, "tensor"), data.q(n, f16, "tensor")
    runs = {}
    for kind in ("extql", "copy", "ort"):
        model = o.model(kind, "DQ", i32, "tensor", data.scale(i32, "tensor"),
                        data.zero_point(i32, "tensor"))
        runs[f"DQ int32 {kind}"] = o.runner(o.session(model, 1, _LIBRARY[kind]), q32,
                                            np.zeros(n, np.float32))
    for kind in ("extql", "cast"):
        model = o.model(kind, "DQ", f16, "tensor", data.scale(f16, "tensor"),
                        data.zero_point(f16, "tensor"))
        runs[f"DQ float16 {kind}"] = o.runner(o.session(model, 1, _LIBRARY[kind]), q16,
                                              np.zeros(n, np.float32))
    reps = 2000 if n < 10_000 else 200
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(25):
        for name, run in runs.items():
            t = time.perf_counter()
            for _ in range(reps):
                run()
            samples[name].append((time.perf_counter() - t) / reps * 1e6)
    for name, v in samples.items():
        print(f"{name:20s} {np.median(v):8.3f} us")


if __name__ == "__main__":
    main()
