"""Quantize of int32 ``x``: extql's native op against what onnxruntime offers
instead -- a Cast to float32 followed by its own QuantizeLinear (onnxruntime
has no QuantizeLinear kernel for int32 x; the Cast gives the same bits as
extql's contract, which rounds x to float32 first).

    python benchmarks/int32_input.py [--sizes 1M 16M] [--threads 1 2] [--repeat 15]

Each row runs the two sessions interleaved on the same tensors (IOBinding,
outputs checked bit for bit) and prints the median ratio extql / anchor
(below 1: extql is faster), per tensor and per channel of an NCHW
activation [N, 64, 56, 56].
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from extql_bench.config import parse_size
from extql_bench.models import Ort

TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16}


def _model(extql: bool, scale: np.ndarray, zp: np.ndarray, per_channel: bool):
    """x (int32) -> y: the Extended node, or Cast + QuantizeLinear."""
    attrs = {"axis": 1} if per_channel else {}
    if extql:
        nodes = [helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["y"],
                                  domain="com.amd.quark", **attrs)]
    else:
        nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
                 helper.make_node("QuantizeLinear", ["xf", "s", "z"], ["y"], **attrs)]
    dims = ["N", 64, 56, 56]
    graph = helper.make_graph(
        nodes, "int32_input", [helper.make_tensor_value_info("x", TensorProto.INT32, dims)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(zp.dtype), dims)],
        initializer=[numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.amd.quark", 1)]
                                              if extql else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "16M"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    args = ap.parse_args()
    ort = Ort()
    rng = np.random.default_rng(0)
    print("| type | granularity | threads | size | extql ms | Cast + QuantizeLinear ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    mismatches = 0
    for name in args.types:
        dt = np.dtype(TYPES[name])
        for per_channel in (False, True):
            scale = (rng.uniform(0.5, 40.0, 64) if per_channel else np.array(7.3)).astype(
                np.float32)
            zp = np.full(scale.shape, 3, dt)
            for threads in args.threads:
                ext_sess = ort.session(_model(True, scale, zp, per_channel), threads, "extql")
                anc_sess = ort.session(_model(False, scale, zp, per_channel), threads, None)
                for size in args.sizes:
                    n = max(1, parse_size(size) // (64 * 56 * 56))
                    x = rng.integers(-2**31, 2**31, (n, 64, 56, 56), dtype=np.int64).astype(
                        np.int32)
                    x.reshape(-1)[: x.size // 2] //= 2**20  # half of it in the types' range
                    (te, ta), same = ort.race([ext_sess, anc_sess], x, dt, args.repeat)
                    mismatches += not same
                    print(f"| {name} | {'channel' if per_channel else 'tensor'} | {threads} "
                          f"| {x.size} | {te * 1e3:.2f} | {ta * 1e3:.2f} | {te / ta:.2f}"
                          f"{'' if same else ' MISMATCH'} |", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
