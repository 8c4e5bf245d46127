"""``extql analyze`` on the block formats, ``BFPQuantizeDequantize`` /
``MXQuantizeDequantize`` (and the legacy ``BFPFixNeuron`` / ``MXFixNeuron``):
one-node fake quantizations whose local error is their output against their
input.

* models in Quark's BFP / MX form run everywhere through stand-in
  model-local functions (tests/quarkmodels.block_stand_in): the points are
  found and their figures agree with NumPy on the exposed tensors, whatever
  computes the node;
* the clipped share of a block format, at each block's own bound, against
  values worked out by hand from the operators' rules (docs/operators);
* every BFP / MX model Quark wrote (tests/data/quark), with its float
  original: every block node is a point of its configuration's type (on the
  operators as extql's library runs them); the figures of some of them
  recomputed from the tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import quarkmodels as qm
from analyzecheck import assert_db, expected_point, model_sqnr
from blockfmt_data import BLOCK_MODELS, BLOCK_OPS

import extql
from extql.tools.analyze_metrics import block_clipped_count

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

DATA = Path(__file__).resolve().parents[1] / "data" / "quark"


BLOCK_CASES = [
    ("BFPQuantizeDequantize", "com.amd.quark", {"bfp_method": "to_bfp", "bit_width": 16,
                                                "block_size": 8, "rounding_mode": 0}),
    ("MXQuantizeDequantize", "com.amd.quark", {"element_dtype": "fp8_e4m3", "block_size": 32}),
    ("BFPFixNeuron", "com.vai.quantize", {"bfp_method": "to_bfp_prime", "bit_width": 13,
                                          "block_size": 16}),
    ("MXFixNeuron", "com.vai.quantize", {"element_dtype": "int8"}),
]
TYPE_OF = {"BFPQuantizeDequantize": "bfp16", "MXQuantizeDequantize": "mxfp8_e4m3",
           "BFPFixNeuron": "mx6", "MXFixNeuron": "mxint8"}


@pytest.mark.parametrize("op,domain,attrs", BLOCK_CASES, ids=[c[0] for c in BLOCK_CASES])
@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_block_points_and_figures(op, domain, attrs, model):
    float_model = qm.float_cnn() if model == "cnn" else qm.float_transformer()
    quant = qm.block_stand_in(qm.quark_block(float_model, op, domain, **attrs))
    feeds = qm.calibration(float_model, 2, seed=3)
    batch = {k: np.stack([f[k] for f in feeds]) for k in feeds[0]}
    report = extql.analyze(float_model, quant, batch, what_if=2)
    doc = json.loads(report.to_json())
    nodes = sorted(n.name for n in quant.graph.node if n.op_type == op)
    assert sorted(p["node"] for p in doc["points"]) == nodes and doc["unmatched"] == []
    assert {p["type"] for p in doc["points"]} == {TYPE_OF[op]}
    weights = {i.name for i in float_model.graph.initializer}
    for p in doc["points"]:
        assert p["kind"] == ("weight" if p["tensor"] in weights else "activation"), p
        exp = expected_point(float_model, quant, feeds, p)
        assert_db(p["local_sqnr_db"], exp["local_sqnr_db"], f"{p['tensor']} local")
        assert_db(p["accumulated_sqnr_db"], exp["accumulated_sqnr_db"],
                  f"{p['tensor']} accumulated")
        assert 0.0 <= p["clipped_fraction"] <= 1.0
    assert_db(doc["model_sqnr_db"], model_sqnr(float_model, quant, feeds), "model")
    # Bypass: the node becomes an Identity; widen does not apply to a block format.
    assert [w["variant"] for w in doc["what_if"]] == ["bypass", "bypass"]
    assert all("block format" in s["reason"] for s in doc["what_if_skipped"])


def _f32(values) -> np.ndarray:
    return np.array(values, np.float32)


def test_block_clipped_share_at_each_blocks_bound():
    """Worked out by hand from the operators' rules."""
    # to_bfp, BFP16 (m = 7), one block of 8 along axis 1: E = 127 (from 1.99),
    # s = 2**-6, bound M = 2 - 2**-6 = 1.984375: 1.99 and -1.99 clamp to +-M.
    x = _f32([[1.99, 1.0, 0.5, -1.99, 0.25, 0.0, 1.5, -0.75]])
    m = 1.984375
    y = _f32([[m, 1.0, 0.5, -m, 0.25, 0.0, 1.5, -0.75]])
    attrs = {"bfp_method": "to_bfp", "bit_width": 16, "block_size": 8, "axis": 1}
    assert block_clipped_count(x, y, "bfp", attrs) == 2
    # Two blocks of 4 along axis 0 of a [8, 1] tensor: the second block's
    # largest exponent is 2**-2's, so its bound is 2**-1 - 2**-9.
    xs = _f32([[1.99], [1.0], [0.5], [0.0], [0.49], [0.25], [0.1], [0.0]])
    b2 = 0.5 - 2**-9
    ys = _f32([[m], [1.0], [0.5], [0.0], [b2], [0.25], [0.1], [0.0]])
    assert block_clipped_count(xs, ys, "bfp", {**attrs, "axis": 0, "block_size": 4}) == 2
    # MX int8, block 32: E = 127 (x in [1, 2)), scale 2**(127 - 127 - 0) = 1;
    # elements k/64 with k in [-128, 127]: 1.999 -> 127/64 (bound), -1.999 ->
    # -128/64 (bound), -1.984375 = -127/64 is not a bound.
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [1.999, -1.999, -1.984375]
    y = np.zeros((1, 32), np.float32)
    y[0, :3] = [127 / 64, -2.0, -127 / 64]
    assert block_clipped_count(x, y, "mx", {"element_dtype": "int8", "block_size": 32}) == 2
    # MX fp8_e4m3: scale 2**(E - 127 - 8); x = 1.9 (E = 127): bound 448 / 256 = 1.75.
    y[0, :3] = [1.75, -1.75, -1.75]
    assert block_clipped_count(x, y, "mx", {"element_dtype": "fp8_e4m3",
                                            "block_size": 32}) == 3
    # to_bfp_prime (MX9: m = 7), block 16, sub-blocks of 2, shift <= 1:
    # 1.99's sub-block has shift 0, bound 127 * 2**-6; the sub-block of 0.3
    # (exponent 2 below) has shift 1, bound 127 * 2**-7.
    x = np.zeros((1, 16), np.float32)
    x[0, :4] = [1.99, 0.01, 0.3, 0.2]
    y = np.zeros((1, 16), np.float32)
    y[0, :4] = [127 / 64, 0.0078125, 0.296875, 0.1953125]
    prime = {"bfp_method": "to_bfp_prime", "bit_width": 16, "block_size": 16,
             "sub_block_size": 2, "sub_block_shift_bits": 1}
    assert block_clipped_count(x, y, "bfp", prime) == 1
    y[0, 2] = 127 / 128
    assert block_clipped_count(x, y, "bfp", prime) == 2
    # One element: passes through, nothing clipped.
    assert block_clipped_count(_f32([5.0]), _f32([5.0]), "bfp", attrs) == 0


def _quark_pair(name: str):
    """A Quark-written model, its float original and two calibration-like
    samples (as one batch)."""
    float_model = onnx.load(str(DATA / "float" / f"{name.split('_')[0]}.onnx"))
    quant = onnx.load(str(DATA / f"{name}.onnx"))
    feeds = qm.calibration(float_model, 2, seed=3)
    return float_model, quant, feeds, {k: np.stack([f[k] for f in feeds]) for k in feeds[0]}


#: The block type each configuration's name says (Quark's names): the
#: points of its BFP / MX nodes.
def _config_type(name: str) -> str:
    config = name.split("_", 1)[1].removesuffix("_qc")
    config = {"bf16_bfp16": "bfp16", "bf16_mxint8": "mxint8", "mx9_int8": "mx9"}.get(config,
                                                                                     config)
    for fp in ("fp8e4m3", "fp8e5m2", "fp6e3m2", "fp6e2m3", "fp4e2m1"):
        config = config.replace(fp, f"{fp[:3]}_{fp[3:]}")
    return config


@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_quark_block_models_are_analysed(name):
    """Every BFP / MX model Quark wrote, with its float original: each of
    its block nodes is a point of its configuration's type, a weight where it
    reads an initializer, matched to the float tensor of its name where
    the float model has one; the model's SQNR is a number."""
    float_model, quant, _, batch = _quark_pair(name)
    doc = extql.analyze(float_model, quant, batch).to_dict()
    nodes = {n.name: n for n in quant.graph.node if n.op_type in BLOCK_OPS}
    points = {p["node"]: p for p in doc["points"]}
    assert nodes and set(nodes) <= set(points)
    weights = {i.name for i in quant.graph.initializer}
    float_names = {o for n in float_model.graph.node for o in n.output}
    float_names |= {i.name for i in (*float_model.graph.input, *float_model.graph.initializer)}
    for node_name, node in nodes.items():
        p = points[node_name]
        assert p["type"] == _config_type(name), p
        assert p["kind"] == ("weight" if node.input[0] in weights else "activation"), p
        assert (p["tensor"] in doc["unmatched"]) == (p["tensor"] not in float_names), p
        # (an SQNR of inf -- nothing lost -- is null in the document)
        assert p["local_sqnr_db"] is None or p["local_sqnr_db"] > 0, p
        assert 0.0 <= p["clipped_fraction"] <= 1.0, p
    assert np.isfinite(doc["model_sqnr_db"]) and doc["model_sqnr_db"] > 0


@pytest.mark.parametrize("name", ["cnn_bfp16", "transformer_bfp16", "cnn_mx9_qc",
                                  "transformer_mxfp4e2m1", "cnn_mxint8_qc"])
def test_quark_block_models_figures(name):
    """The figures of every block point of some of them, recomputed from
    the tensors (tests/analyzecheck.py)."""
    float_model, quant, feeds, batch = _quark_pair(name)
    doc = extql.analyze(float_model, quant, batch).to_dict()
    for p in doc["points"]:
        exp = expected_point(float_model, quant, feeds, p)
        assert_db(p["local_sqnr_db"], exp["local_sqnr_db"], p["tensor"])
        assert_db(p["accumulated_sqnr_db"], exp["accumulated_sqnr_db"], p["tensor"])
    assert_db(doc["model_sqnr_db"], model_sqnr(float_model, quant, feeds), "model")
