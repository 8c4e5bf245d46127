"""Quark's block formats: extql's kernels against a plain copy and against AMD
Quark's own custom-op library.

    python benchmarks/block_formats.py [--quick] [--configs bfp16 mx9 ...]
        [--rounds 9] [--quark-python /work/venvs/quark/bin/python] [--json]

Rows are the activation and weight shapes of a CNN and a transformer, with
the axes Quark's quantizer writes (activations along axis 1 -- the sequence
of a transformer [1, seq, hidden] --, MatMul inputs along the last axis, the
MatMul weight along the second to last), from 64K to 16M elements.  Columns:

* copy: ``np.copyto`` of the same bytes (the memory-bandwidth limit);
* extql at 1 thread and at ``extql.get_num_threads()`` threads (NumPy API,
  ``out=`` a preallocated array);
* Quark: a one-node model through onnxruntime with Quark's library
  registered, 1 thread (its kernels are single-threaded), in a separate
  process (``--quark-python``: an environment with torch and amd-quark;
  benchmarks/quark_library.py), fed the same input from a file.

Every measurement is interleaved round by round (Quark, extql, copy, ...) and
the figures are medians, so that the load of a shared machine weighs on all
of them alike; the ratios are the figures that count.  Quark's output is
checked bit for bit against extql's (any NaN equal to any NaN; Quark's
bfloat16 pre-rounding is not used here): a mismatch exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
from quark_library import Quark, timed

#: Quark's configurations (the attributes its quantizer writes).
CONFIGS: dict[str, tuple[str, dict]] = {
    "bfp16": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp", "bit_width": 16,
                                        "block_size": 8, "rounding_mode": 0}),
    "mx9": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "bit_width": 16,
                                      "block_size": 16, "sub_block_size": 2,
                                      "sub_block_shift_bits": 1, "rounding_mode": 2}),
    "mx6": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "bit_width": 13,
                                      "block_size": 16, "sub_block_size": 2,
                                      "sub_block_shift_bits": 1, "rounding_mode": 2}),
    "mxint8": ("MXQuantizeDequantize", {"element_dtype": "int8", "block_size": 32,
                                        "rounding_mode": 2}),
    "mxfp8": ("MXQuantizeDequantize", {"element_dtype": "fp8_e4m3", "block_size": 32,
                                       "rounding_mode": 2}),
    "mxfp4": ("MXQuantizeDequantize", {"element_dtype": "fp4_e2m1", "block_size": 32,
                                       "rounding_mode": 2}),
}

#: (what, shape, axis).
SHAPES: list[tuple[str, tuple[int, ...], int]] = [
    ("cnn act", (1, 64, 32, 32), 1),
    ("cnn act", (1, 128, 56, 56), 1),
    ("cnn weight", (256, 256, 3, 3), 1),
    ("tfm act", (1, 512, 768), 1),
    ("tfm matmul A", (1, 512, 768), -1),
    ("tfm weight B", (768, 3072), -2),
    ("cnn act", (1, 256, 256, 256), 1),
    ("tfm matmul A", (1, 4096, 4096), -1),
]
QUICK_SHAPES = [SHAPES[0], SHAPES[4]]


# ---------------------------------------------------------------- the rows

def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    return bool(np.all((ua == ub) | (np.isnan(a) & np.isnan(b))))


def _node_model(op: str, attrs: dict, shape: tuple[int, ...], path: str) -> None:
    """The one-node model Quark's library runs (x -> op -> y), saved to ``path``."""
    from onnx import TensorProto, helper, save

    node = helper.make_node(op, ["x"], ["y"], domain="com.amd.quark", **attrs)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("x", "y")]
    model = helper.make_model(
        helper.make_graph([node], "blockfmt", [vi[0]], [vi[1]]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])
    model.ir_version = 8
    save(model, path)


def _row(extql, quark: Quark | None, tmp: str, config: str, what: str,
         shape: tuple[int, ...], axis: int, rounds: int) -> dict:
    op, attrs = CONFIGS[config]
    attrs = {**attrs, "axis": axis}
    api = (extql.bfp_quantize_dequantize if op.startswith("BFP")
           else extql.mx_quantize_dequantize)
    rng = np.random.default_rng(0)
    # Activations as they come: normal values with a spread of block scales.
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))).astype(np.float32)
    out = np.empty_like(x)
    copy = np.empty_like(x)
    all_threads = extql.get_num_threads()
    k = max(1, (1 << 21) // x.size)
    row = {"config": config, "what": what, "shape": list(shape), "axis": axis,
           "elements": x.size, "threads": all_threads}
    if quark is not None:
        xp, yp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        mp = os.path.join(tmp, "model.onnx")
        np.save(xp, x)
        _node_model(op, attrs, shape, mp)
        quark.load(mp, [xp], yp)
        extql.set_num_threads(1)
        row["bits"] = _same_bits(api(x, **attrs), np.load(yp))
    times: dict[str, list[float]] = {"copy": [], "extql_1": [], "extql_n": [], "quark_1": []}
    for _ in range(rounds):
        if quark is not None:
            times["quark_1"].append(quark.time(k))
        extql.set_num_threads(1)
        times["extql_1"].append(timed(lambda: api(x, **attrs, out=out), k))
        extql.set_num_threads(all_threads)
        times["extql_n"].append(timed(lambda: api(x, **attrs, out=out), k))
        times["copy"].append(timed(lambda: np.copyto(copy, x), k))
    extql.set_num_threads(all_threads)
    for key, values in times.items():
        if values:
            row[key + "_us"] = float(np.median(values)) * 1e6
    return row


def _fmt(row: dict) -> str:
    quark = row.get("quark_1_us")
    cells = [row["config"], row["what"], "x".join(map(str, row["shape"])), str(row["axis"]),
             f"{row['elements'] / 2**20:.2f}M", f"{row['copy_us']:.0f}",
             f"{row['extql_1_us']:.0f}", f"{row['extql_n_us']:.0f}",
             f"{quark:.0f}" if quark else "-",
             f"{row['extql_1_us'] / row['copy_us']:.1f}",
             f"{quark / row['extql_1_us']:.1f}" if quark else "-",
             {True: "same", False: "MISMATCH"}.get(row.get("bits"), "-")]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--quick", action="store_true", help="two small shapes, 3 rounds")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--quark-python", default=os.environ.get(
        "EXTQL_QUARK_PYTHON", "/work/venvs/quark/bin/python"),
        help="a Python with amd-quark (no Quark column when it does not exist)")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = ap.parse_args()
    import extql

    shapes = QUICK_SHAPES if args.quick else SHAPES
    rounds = 3 if args.quick else args.rounds
    quark: Quark | None = Quark(args.quark_python)
    if quark.why is not None:
        print(f"Quark: not measured: {quark.why}", file=sys.stderr)
        quark = None
    rows = []
    if not args.json:
        print(f"extql {extql.__version__}, {extql.get_num_threads()} threads; "
              f"Quark: {'1 thread, ' + args.quark_python if quark else 'not measured'}")
        print("| config | tensor | shape | axis | size | copy us | extql 1t us | "
              "extql Nt us | Quark 1t us | extql/copy | Quark/extql | bits |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        with tempfile.TemporaryDirectory(prefix="extql-blockfmt-") as tmp:
            for config in args.configs:
                for what, shape, axis in shapes:
                    row = _row(extql, quark, tmp, config, what, shape, axis, rounds)
                    rows.append(row)
                    if not args.json:
                        print(_fmt(row), flush=True)
    finally:
        if quark is not None:
            quark.close()
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    return 1 if any(row.get("bits") is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
