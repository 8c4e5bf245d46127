"""The stored bits of AMD Quark 0.13's own library for the block formats, for
the tests of every path (oracle, NumPy API, onnxruntime, fallbacks, reference
ops) to share:

* the single-node grid (tests/data/blockfmt, made by
  tools/make_blockfmt_grid.py): :data:`GRID_CASES`, :func:`grid_arrays` and
  :func:`assert_quarks_bits`, which applies the case's ``check``;
* the models Quark's quantizer wrote with BFP / MX nodes (tests/data/quark,
  made by tools/make_quark_fixtures.py): :data:`BLOCK_MODELS`,
  :func:`block_nodes` and :func:`model_values` (the input, Quark's output
  and each BFP / MX node's input and output in that run).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import blockfmt_contract as bc
import numpy as np
import onnx
from contract import assert_same_bits

DATA = Path(__file__).resolve().parent / "data"
GRID = DATA / "blockfmt"
QUARK = DATA / "quark"
BLOCK_OPS = ("BFPQuantizeDequantize", "MXQuantizeDequantize")

#: The grid's manifest: ``versions``, ``cases`` and ``skipped``.
GRID_MANIFEST: dict = json.loads((GRID / "grid.json").read_text())
#: Every case: ``id``, ``op_type``, ``attrs`` (as on the node), ``shape``,
#: ``dtype``, ``file``, ``group``, ``check``.
GRID_CASES: list[dict] = GRID_MANIFEST["cases"]
_ARRAYS: dict[str, dict[str, np.ndarray]] = {}


def grid_arrays(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The case's input and Quark's output."""
    name = case["file"]
    if name not in _ARRAYS:
        with np.load(GRID / name) as z:
            _ARRAYS[name] = {k: z[k] for k in z.files}
    got = _ARRAYS[name]
    return got[case["id"] + "_x"], got[case["id"] + "_y"]


def nan_decided(x: np.ndarray, attrs: dict) -> np.ndarray:
    """Where an input NaN decides the output (bfloat16 pre-rounding, where
    Quark makes some NaNs -0 or +-inf): at the NaN itself, and (to_bfp_prime)
    in its whole block."""
    nan = np.isnan(x.astype(np.float32))
    a = bc.attributes("BFPQuantizeDequantize", attrs)
    if a["bfp_method"] == "to_bfp" or x.size <= 1:
        return nan
    blocks, back = bc.to_blocks(nan.astype(np.float32), a["axis"], a["block_size"])
    return back(np.repeat(blocks.max(axis=1, keepdims=True), blocks.shape[1], axis=1)) > 0


def assert_quarks_bits(y: np.ndarray, case: dict, what: str = "") -> None:
    """y (an implementation's output on the case's input) has Quark's bits
    (any NaN equal to any NaN).  For a ``quark_bfloat_nan`` case, where
    Quark's pre-rounding makes some NaNs numbers and extql keeps them NaN,
    every element those NaNs do not decide has Quark's bits and every input
    NaN gives a NaN."""
    x, quark_y = grid_arrays(case)
    what = what or f"{case['id']} {case['op_type']} {case['attrs']}"
    if case["check"] == "bits":
        assert_same_bits(y, quark_y, what)
        return
    assert case["check"] == "quark_bfloat_nan", case["check"]
    apart = nan_decided(x, case["attrs"])
    assert_same_bits(np.where(apart, 0, y).astype(quark_y.dtype),
                     np.where(apart, 0, quark_y).astype(quark_y.dtype), what)
    assert np.isnan(np.asarray(y)[np.isnan(x)]).all(), f"{what}: an input NaN is not NaN"


def _has_block_nodes(path: Path) -> bool:
    return any(n.op_type in BLOCK_OPS for n in onnx.load(str(path)).graph.node)


#: The Quark-written models with BFP / MX nodes, by stem (``cnn_mx4``, ...).
BLOCK_MODELS: list[str] = sorted(p.stem for p in QUARK.glob("*.onnx") if _has_block_nodes(p))


def block_nodes(name: str) -> Iterator[tuple[onnx.ModelProto, onnx.NodeProto, dict]]:
    """The model's BFP / MX nodes with their attributes (strings decoded)."""
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    for node in model.graph.node:
        if node.op_type in BLOCK_OPS:
            attrs = {}
            for a in node.attribute:
                value = onnx.helper.get_attribute_value(a)
                attrs[a.name] = value.decode() if isinstance(value, bytes) else value
            yield model, node, attrs


def model_values(name: str) -> dict[str, np.ndarray]:
    """``x``, Quark's ``y``, and ``node_in__<node>`` / ``node_out__<node>``."""
    with np.load(QUARK / f"{name}.quark.npz") as data:
        return {k: data[k] for k in data.files}
