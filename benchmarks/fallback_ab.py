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
(default int32, uint32; also the 8/16-bit integers and float16; ``--types``
with no name: none), x of shape (1, 64, 128, 128) (1M elements), per tensor (a scalar scale) and per
channel (axis 1), zero points not 0 (float16: 0, as Quark writes them).
``--blocks [CONFIG ...]`` adds BFPQuantizeDequantize / MXQuantizeDequantize
with the attributes Quark writes for each configuration (:data:`BLOCKS`; no
name: all of them), blocks along the channels (axis 1 of NCHW) and along the
last axis (``--layouts``), at 1M (1, 64, 128, 128) and 64K (1, 64, 32, 32)
elements (``--block-sizes``); x is normal values times powers of two from
2^-8 to 2^7 (blocks of different scales).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

SHAPE = (1, 64, 128, 128)
_CODES = {"uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "uint32": 12, "float16": 10}

_BFP16 = {"bfp_method": "to_bfp", "bit_width": 16, "block_size": 8, "rounding_mode": 0}


def _prime(width: int) -> dict:
    return {"bfp_method": "to_bfp_prime", "bit_width": width, "block_size": 16,
            "sub_block_size": 2, "sub_block_shift_bits": 1, "rounding_mode": 2}


def _mx(element: str) -> dict:
    return {"element_dtype": element, "block_size": 32, "rounding_mode": 2}


#: Every block-format configuration Quark writes (docs/operators): config ->
#: (operator, attributes).
BLOCKS: dict[str, tuple[str, dict]] = {
    "bfp16": ("BFPQuantizeDequantize", _BFP16),
    "bfp16-legacy": ("BFPQuantizeDequantize", {**_BFP16, "rounding_mode": 2}),
    "bf16-bfp16": ("BFPQuantizeDequantize", {**_BFP16, "convert_to_bfloat_before_bfp": 1}),
    "mx9": ("BFPQuantizeDequantize", _prime(16)),
    "mx6": ("BFPQuantizeDequantize", _prime(13)),
    "mx4": ("BFPQuantizeDequantize", _prime(11)),
    "mxint8": ("MXQuantizeDequantize", _mx("int8")),
    "mxfp8e5m2": ("MXQuantizeDequantize", _mx("fp8_e5m2")),
    "mxfp8e4m3": ("MXQuantizeDequantize", _mx("fp8_e4m3")),
    "mxfp6e3m2": ("MXQuantizeDequantize", _mx("fp6_e3m2")),
    "mxfp6e2m3": ("MXQuantizeDequantize", _mx("fp6_e2m3")),
    "mxfp4e2m1": ("MXQuantizeDequantize", _mx("fp4_e2m1")),
}
#: The block rows' shapes by size, and the layouts' axes.
BLOCK_SHAPES = {"1M": (1, 64, 128, 128), "64K": (1, 64, 32, 32)}
LAYOUTS = {"channel": 1, "last": -1}


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


def _block_x(size: str) -> np.ndarray:
    shape = BLOCK_SHAPES[size]
    rng = np.random.default_rng(7)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))).astype(np.float32)


def _block_model(config: str, layout: str, size: str):
    import onnx
    from onnx import TensorProto, helper

    op, attrs = BLOCKS[config]
    shape = BLOCK_SHAPES[size]
    node = helper.make_node(op, ["x"], ["y"], domain="com.amd.quark", axis=LAYOUTS[layout],
                            **attrs)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y")]
    graph = helper.make_graph([node], "one_node", [vi[0]], [vi[1]])
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.amd.quark", 1)])


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


def _cases(types: list[str], blocks: list[str] | None = None,
           layouts: list[str] | None = None, sizes: list[str] | None = None):
    """(name, model maker, input maker) of every case."""
    out = [(f"{op}-{t}-{g}", functools.partial(_model, op, t, g),
            functools.partial(lambda *a: _case_arrays(*a)[0], op, t, g))
           for op in ("Q", "DQ") for t in types for g in ("tensor", "channel")]
    out += [(f"{c}-{lay}-{n}", functools.partial(_block_model, c, lay, n),
             functools.partial(_block_x, n))
            for n in sizes or () for c in blocks or () for lay in layouts or ()]
    return out


def export(out: Path, cases) -> None:
    import onnx

    import extql

    out.mkdir(parents=True, exist_ok=True)
    for name, model, _ in cases:
        onnx.save(extql.inline_fallbacks(model()), str(out / f"{name}.onnx"))
    print(f"wrote {len(cases)} models to {out} (extql at {extql.__file__})")


def _session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bits (a NaN equals any NaN)."""
    u = f"u{a.itemsize}"
    same = a.view(u) == b.view(u)
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return bool(np.all(same))


def time_builds(builds: list[tuple[str, Path]], cases, repeat: int,
                threads: int, clock: str = "wall") -> int:
    status = 0
    labels = [label for label, _ in builds]
    # cpu: the calling thread's CPU time (with one thread onnxruntime runs the
    # graph there), less disturbed by other processes on a shared machine
    now = time.thread_time if clock == "cpu" else time.perf_counter
    print(f"onnxruntime, {threads} thread(s), {repeat} interleaved rounds, "
          f"median ms ({clock} clock)")
    print(f"{'case':24s} " + " ".join(f"{lab:>9s}" for lab in labels)
          + "".join(f" {lab}/{labels[0]:>5s}" for lab in labels[1:]))
    for name, _, make_x in cases:
        x = make_x()
        sessions = [_session(d / f"{name}.onnx", threads) for _, d in builds]
        outs = [s.run(None, {"x": x})[0] for s in sessions]
        for label, o in zip(labels[1:], outs[1:], strict=True):
            if not _same(o, outs[0]):
                print(f"  {name}: {label}'s output differs from {labels[0]}'s")
                status = 1
        times: list[list[float]] = [[] for _ in sessions]
        for _ in range(repeat):
            for i, s in enumerate(sessions):
                t0 = now()
                s.run(None, {"x": x})
                times[i].append(now() - t0)
        med = [statistics.median(ts) * 1e3 for ts in times]
        print(f"{name:24s} " + " ".join(f"{m:9.3f}" for m in med)
              + "".join(f" {m / med[0]:11.3f}" for m in med[1:]))
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write this build's inlined one-node models")
    e.add_argument("dir", type=Path)
    t = sub.add_parser("time", help="time builds' models against each other")
    t.add_argument("builds", nargs="+", help="LABEL=DIR (the first is the reference)")
    for q in (e, t):
        q.add_argument("--types", nargs="*", default=["int32", "uint32"],
                       help="the Extended ops' types (none: no such rows)")
        q.add_argument("--blocks", nargs="*", choices=list(BLOCKS), default=None,
                       help="block-format configurations (no name: all)")
        q.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
        q.add_argument("--block-sizes", nargs="+", choices=list(BLOCK_SHAPES),
                       default=list(BLOCK_SHAPES))
    t.add_argument("--repeat", type=int, default=31)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: the thread's CPU time (1 thread only)")
    a = p.parse_args(argv)
    blocks = list(BLOCKS) if a.blocks == [] else a.blocks
    cases = _cases(a.types, blocks, a.layouts, a.block_sizes)
    if a.cmd == "export":
        export(a.dir, cases)
        return 0
    builds = [(b.split("=", 1)[0], Path(b.split("=", 1)[1])) for b in a.builds]
    if a.clock == "cpu" and a.threads != 1:
        p.error("--clock cpu measures the calling thread: --threads 1")
    return time_builds(builds, cases, a.repeat, a.threads, a.clock)


if __name__ == "__main__":
    sys.exit(main())
