"""Quantize with an int32 scale (the division in float64): extql's native op
against the same model run through its fallback functions in onnxruntime
(standard ops: onnxruntime's own QuantizeLinear has no kernel for an int32
scale, so the fallbacks are what runs without the library).

    python benchmarks/int32_scales.py [--sizes 1M 16M] [--threads 1 2] [--repeat 15]

Each row runs the two sessions interleaved on the same tensors (IOBinding,
outputs checked bit for bit) and prints the median ratio extql / anchor
(below 1: extql is faster), for int32 and float32 x, per tensor and per
channel of an NCHW activation [N, 64, 56, 56].
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import extql
from extql_bench.config import parse_size
from extql_bench.models import Ort

TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16}
X_TYPES = {"int32": (np.int32, TensorProto.INT32), "float32": (np.float32, TensorProto.FLOAT)}


def _model(fallbacks: bool, xtype: int, scale: np.ndarray, zp: np.ndarray, per_channel: bool):
    """x -> y through one Extended node with an int32 scale; ``fallbacks``:
    with the fallback functions attached (to run without the library)."""
    attrs = {"axis": 1} if per_channel else {}
    dims = ["N", 64, 56, 56]
    graph = helper.make_graph(
        [helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["y"],
                          domain="com.amd.quark", **attrs)],
        "int32_scales", [helper.make_tensor_value_info("x", xtype, dims)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(zp.dtype), dims)],
        initializer=[numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.amd.quark", 1)])
    model.ir_version = 10
    return extql.attach_fallbacks(model) if fallbacks else model


def _x(rng: np.random.Generator, n: int, xname: str) -> np.ndarray:
    if xname == "int32":
        x = rng.integers(-2**31, 2**31, (n, 64, 56, 56), dtype=np.int64).astype(np.int32)
        x.reshape(-1)[: x.size // 2] //= 2**12  # half of it in the types' range
        return x
    return (rng.standard_normal((n, 64, 56, 56)) * 3e4).astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "16M"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--types", nargs="+", default=["int8", "uint16"], choices=list(TYPES))
    ap.add_argument("--x", nargs="+", default=list(X_TYPES), choices=list(X_TYPES))
    args = ap.parse_args()
    ort = Ort()
    rng = np.random.default_rng(0)
    print("| x | type | granularity | threads | size | extql ms | fallbacks ms | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    mismatches = 0
    for xname in args.x:
        xdt, xcode = X_TYPES[xname]
        for name in args.types:
            dt = np.dtype(TYPES[name])
            for per_channel in (False, True):
                scale = (rng.integers(3, 70000, 64) if per_channel else np.array(4099)).astype(
                    np.int32)
                zp = np.full(scale.shape, 3, dt)
                for threads in args.threads:
                    ext_sess = ort.session(_model(False, xcode, scale, zp, per_channel), threads,
                                           "extql")
                    anc_sess = ort.session(_model(True, xcode, scale, zp, per_channel), threads,
                                           None)
                    for size in args.sizes:
                        x = _x(rng, max(1, parse_size(size) // (64 * 56 * 56)), xname)
                        assert x.dtype == xdt
                        (te, ta), same = ort.race([ext_sess, anc_sess], x, dt, args.repeat)
                        mismatches += not same
                        print(f"| {xname} | {name} | {'channel' if per_channel else 'tensor'} "
                              f"| {threads} | {x.size} | {te * 1e3:.2f} | {ta * 1e3:.2f} "
                              f"| {te / ta:.2f}{'' if same else ' MISMATCH'} |", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
