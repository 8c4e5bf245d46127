"""Builds of the onnxruntime library side by side: one Q or DQ node through
each build's library and through onnxruntime's own op, in one process,
interleaved, medians (a kernel or driver change against the last landed
main, in one table).

    python benchmarks/floors/ab_libraries.py main=/path/to/main/extql/libextql_ort.so \\
        new=extql/libextql_ort.so [ort] [--op dq] [--type int8] [--shape 64,256,1024] \\
        [--axis 1] [--threads 1] [--repeat 15] [--align 16]

Each ``NAME=PATH`` is a library (``extql.get_library_path()`` of a build; a
build made in place by ``python setup.py build_ext --inplace`` in a git
worktree of the other commit); ``ort`` adds onnxruntime's own
QuantizeLinear / DequantizeLinear (opset 21; int8 / uint8 / int16 / uint16).
Ratios are to the last one named.  ``--align`` places the output at that
offset from a 64-byte boundary (default 16, where NumPy's large buffers
start); every output is checked to be the first's bits.  The per-channel
default, (64, 256, 1024) along axis 1, is the shape whose per-run cost a
driver change once tripled.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
         "float16": np.float16}


def _model(domain: str, op: str, opset: int, xt: int, yt: int, shape: list[int], axis: int,
           scale: np.ndarray, zp: np.ndarray) -> bytes:
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    node = helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain, axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", xt, shape)],
                              [helper.make_tensor_value_info("y", yt, shape)], inits)
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=10).SerializeToString()


def _aligned(shape: list[int], dtype: np.dtype, align: int) -> np.ndarray:
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + 128, np.uint8)
    off = (-buf.ctypes.data) % 64 + align
    return buf[off:off + nbytes].view(dtype).reshape(shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="NAME=LIBRARY, or ort")
    ap.add_argument("--op", choices=("q", "dq"), default="dq")
    ap.add_argument("--type", choices=sorted(TYPES), default="int8")
    ap.add_argument("--shape", default="64,256,1024")
    ap.add_argument("--axis", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--align", type=int, default=16)
    a = ap.parse_args()

    shape = [int(s) for s in a.shape.split(",")]
    qdt = np.dtype(TYPES[a.type])
    qt = helper.np_dtype_to_tensor_dtype(qdt)
    rng = np.random.default_rng(0)
    scale = (rng.random(shape[a.axis]) * 0.1 + 0.01).astype(np.float32)
    zp = np.zeros(shape[a.axis], qdt)
    if a.op == "dq":
        if qdt.kind in "iu":
            info = np.iinfo(qdt)
            x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(qdt)
        else:
            x = rng.standard_normal(shape).astype(qdt)
        xt, yt, ydt = qt, TensorProto.FLOAT, np.dtype(np.float32)
    else:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        xt, yt, ydt = TensorProto.FLOAT, qt, qdt
    op = {"dq": "DequantizeLinear", "q": "QuantizeLinear"}[a.op]

    xv = ort.OrtValue.ortvalue_from_numpy(x)
    runs, outs = {}, {}
    for spec in a.builds:
        name, _, lib = spec.partition("=")
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
        if spec == "ort":
            model = _model("", op, 21, xt, yt, shape, a.axis, scale, zp)
        else:
            so.register_custom_ops_library(lib)
            model = _model("com.amd.quark", "Extended" + op, 17, xt, yt, shape, a.axis, scale, zp)
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        y = _aligned(shape, ydt, a.align)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", xv)
        binding.bind_output("y", "cpu", 0, ydt, shape, y.ctypes.data)
        sess.run_with_iobinding(binding)
        runs[name], outs[name] = (sess, binding), y
    first = next(iter(outs))
    for name, y in outs.items():
        if not np.array_equal(y.view(np.uint8), outs[first].view(np.uint8)):
            raise SystemExit(f"ab_libraries: {name}'s output differs from {first}'s")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(a.repeat):
        for name, (sess, binding) in runs.items():
            t0 = time.perf_counter()
            sess.run_with_iobinding(binding)
            times[name].append(time.perf_counter() - t0)
    last = list(runs)[-1]
    base = statistics.median(times[last])
    print(f"{a.op} {a.type} {tuple(shape)} axis {a.axis}, {a.threads} thread(s), "
          f"y 64-byte boundary + {a.align}; {a.repeat} rounds")
    for name in runs:
        med = statistics.median(times[name])
        print(f"  {name:>12}: {med * 1e3:8.3f} ms   {med / base:5.2f}x {last}")


if __name__ == "__main__":
    main()
