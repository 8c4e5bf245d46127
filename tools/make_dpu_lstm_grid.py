"""Write tests/data/dpu/lstm.json and lstm.npz: one-node ExtendedLSTM /
VitisLSTM models run through AMD Quark 0.13's own custom-op library, so that
tests compare extql (and the oracle ``tests/lstm_contract.py``) with Quark's
bits without torch or Quark installed.

Quark's kernel computes batch 1, bidirectional, layout 0, so every case is
that (extql's batch, direction and layout are tested against these runs by
the tests themselves).  The cases cross sizes from 1 x 1 x 1 to sequence 16,
input 64, hidden 64 (and Quark's own size, sequence 80, input 64, hidden 128)
with symmetric and asymmetric quantization parameters, y_zero_point below
and above 32768, output scales that give each output shift from 24 to 32,
power-of-two scale products, the largest fixed-point factor exponent (31),
saturated gate constants, X values on ties, past the range and special, and
both operator names.  Inputs come from ``tests/lstm_cases.py`` with seeds
derived from each case.

Written files:

- ``lstm.json``: the versions used, every case (``id``, ``op_type``,
  ``attrs`` as written on the node, ``shape`` of X, ``group``, ``check``)
  and the ranges left out (``skipped``) with the reason.
- ``lstm.npz``: ``<id>_X``, ``<id>_W``, ``<id>_R``, ``<id>_B`` (the inputs)
  and ``<id>_Y`` (Quark's output); a W or R of more than 4096 elements that
  is on its quantization grid is stored as its uint16 codes instead
  (``<id>_Wq``, ``<id>_Rq``; the float32 values are
  ``(code - zero_point) * scale``), which halves the file.

``check`` is "bits" (Quark's output is the contract's) or "quark_plus_inf":
X holds +inf, which Quark's quantization turns into 0 (its float -> int64
conversion is undefined there; x86 gives the smallest int64, clamped to 0)
and the contract into 65535; Quark's output is then the contract's output on
X with +inf replaced by -inf.

Regenerate (Quark's environment, not extql's; see
tools/make_blockfmt_grid.py for setting it up; ~1 minute)::

    /work/venvs/quark/bin/python tools/make_dpu_lstm_grid.py tests/data/dpu
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import lstm_cases  # noqa: E402
import lstm_contract as lc  # noqa: E402
from contract import case_rng  # noqa: E402

#: Sizes (seq, input, hidden) of the main cross.
SIZES = [(1, 1, 1), (1, 3, 2), (2, 1, 4), (3, 4, 5), (4, 7, 3), (5, 16, 8), (6, 8, 16),
         (7, 2, 33), (8, 64, 64), (9, 33, 17), (10, 12, 24), (12, 5, 40), (16, 64, 64),
         (16, 31, 9), (13, 48, 32), (11, 64, 1), (20, 10, 12), (32, 6, 6)]
#: Quark's own size (its kernel's constants): seq 80, input 64, hidden 128.
QUARK_SIZE = (80, 64, 128)


def _cases() -> list[dict]:
    out = []

    def add(group, seq, n_in, hidden, op="ExtendedLSTM", **kw):
        out.append({"group": group, "size": (seq, n_in, hidden), "op_type": op, "kw": kw})

    for i, (seq, n_in, hidden) in enumerate(SIZES):
        for symmetric in (True, False):
            off_grid = i % 3 == 0 and (symmetric or n_in * hidden < 2048)
            add("core", seq, n_in, hidden, symmetric=symmetric, grid_weights=not off_grid,
                specials=(i % 4 == 1), saturate=(i % 5 == 2))
    # y_zero_point below and above 32768 (below: h starts, and the output is
    # offset, one step higher), and at the ends.
    for yz in (0, 1, 20000, 32767, 32768, 32769, 45000, 65535):
        add("y_zero_point", 6, 9, 7, y_zero_point=yz)
    # Every output shift oh = 24 + a from y_scale (a = 16 - ceil(log2(1/y_scale))):
    # 2^-16 .. 2^-8 and beyond, powers of two (ohs clamps at 65535) and not.
    for k in range(8, 17):
        add("y_scale", 5, 6, 6, y_scale=2.0**-k * 1.37)
        add("y_scale", 5, 6, 6, y_scale=2.0**-k)
    for ys in (2.0**-17 * 1.5, 2.0**-20 * 1.1, 2.0**-24 * 1.9):
        add("y_scale", 5, 6, 6, y_scale=ys)
    # Scale products that are powers of two (the factor 2^15 wraps to -2^15),
    # and the largest factor exponent 31 (Quark's int 1 << 31 is -2^31).
    add("pow2_product", 6, 8, 8, x_scale=2.0**-10, w_scale=2.0**-14)
    add("pow2_product", 6, 8, 8, symmetric=True, x_scale=2.0**-8, w_scale=2.0**-12)
    add("exponent_31", 6, 8, 8, x_scale=1.5e-6, w_scale=2.0**-20 * 0.6)
    add("exponent_31", 6, 8, 8, x_scale=2.0**-20, w_scale=2.0**-20 * 0.8)
    # Gate constants that saturate int32 (round32 clamps; the gate sum wraps).
    for bs in (0.05, 3.0, 1e4):
        add("saturated_bias", 5, 8, 6, b_scale=bs)
    # The legacy name.
    for symmetric in (True, False):
        add("legacy", 7, 10, 9, op="VitisLSTM", symmetric=symmetric)
    # +inf in X (Quark quantizes it to 0).
    add("plus_inf", 6, 8, 5)
    # Quark's size (one case: its W and R are most of the file).
    add("quark_size", *QUARK_SIZE)
    return out


#: Ranges the contract refuses, where Quark's code is undefined: not run.
SKIPPED = [
    ("a fixed-point factor exponent a = 15 - ceil(log2|d|) above 31 or below the shift it "
     "feeds (xwq = a - ceil(log2 input) < 0): Quark shifts an int by 32 or more, or by a "
     "negative count"),
    ("an output shift oh = 24 + a above 32 or below 0 (y_scale above about 2^-7 or below "
     "2^-40): Quark shifts an int by 32 or more, or by a negative count"),
    ("batch > 1: Quark's kernel reads X as one sequence and leaves part of Y uninitialised"),
    ("direction forward / reverse, layout 1: Quark computes bidirectional layout 0 whatever "
     "the attributes say (extql's tests compare these with the halves of these runs)"),
    ("a scale of 0, negative or not finite, a zero point outside [0, 65535]: refused "
     "(Quark divides by 0, takes log2 of 0 or wraps the zero point)"),
]


def _model(op_type: str, attrs: dict, arrays: dict[str, np.ndarray]):
    domain = lc.OPS[op_type]
    node = helper.make_node(op_type, ["X", "W", "R", "B"], ["Y"], name=f"{op_type}_node",
                            domain=domain, **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(arrays[n].shape))
              for n in "XWRB"]
    graph = helper.make_graph([node], "lstm", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def _run(model, library: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.copy() for k, v in feeds.items()})[0]


def _codes(v: np.ndarray, scale: float, zero_point: int) -> np.ndarray | None:
    """v's uint16 codes when v is on its quantization grid, else None."""
    q = np.clip(np.rint(v / np.float32(scale)) + zero_point, 0, 65535).astype(np.uint16)
    back = ((q.astype(np.int64) - zero_point).astype(np.float32) * np.float32(scale))
    return q if np.array_equal(back.view(np.uint32), v.view(np.uint32)) else None


def _dumps(doc: dict) -> str:
    """The manifest as JSON with one case per line."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v, sort_keys=True) for v in value)
            lines.append(f"{json.dumps(key)}: [\n{items}\n]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(out_dir: str) -> int:
    import torch  # noqa: F401 - Quark's library links against torch's libc10
    from quark.onnx import get_library_path

    library = get_library_path()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    manifest = []
    for i, case in enumerate(_cases()):
        case_id = f"lstm{i:03d}"
        rng = case_rng("dpu-lstm-grid", case_id)
        seq, n_in, hidden = case["size"]
        kw = dict(case["kw"])
        if case["group"] == "quark_size":
            kw["grid_weights"] = True
        attrs, feeds = lstm_cases.make_case(rng, seq, n_in, hidden, **kw)
        if case["group"] == "quark_size":  # all of W and R on the grid
            for name in "WR":
                p = name.lower()
                feeds[name] = lstm_cases.on_grid(feeds[name], attrs[f"{p}_scale"],
                                                 attrs[f"{p}_zero_point"])
        check = "bits"
        if case["group"] == "plus_inf":
            feeds["X"].reshape(-1)[[1, 5, 17]] = np.inf
            check = "quark_plus_inf"
        lc.params(attrs, n_in, hidden)  # inside the contract's ranges
        y = _run(_model(case["op_type"], attrs, feeds), library, feeds)
        for name, v in feeds.items():
            codes = _codes(v, attrs[f"{name.lower()}_scale"],
                           attrs[f"{name.lower()}_zero_point"]) if name in "WR" else None
            if codes is not None and v.size > 4096:
                arrays[f"{case_id}_{name}q"] = codes
            else:
                arrays[f"{case_id}_{name}"] = v
        arrays[f"{case_id}_Y"] = np.asarray(y)
        manifest.append({"id": case_id, "op_type": case["op_type"], "attrs": attrs,
                         "shape": list(feeds["X"].shape), "group": case["group"],
                         "check": check})
    np.savez_compressed(out / "lstm.npz", **arrays)
    versions = {name: metadata.version(name) for name in ("amd-quark", "onnxruntime", "torch")}
    doc = {"about": "Quark 0.13's custom-op library on one-node ExtendedLSTM / VitisLSTM "
                    "models; made by tools/make_dpu_lstm_grid.py",
           "versions": versions, "cases": manifest, "skipped": SKIPPED}
    (out / "lstm.json").write_text(_dumps(doc))
    print(f"{len(manifest)} cases in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests/data/dpu")))
