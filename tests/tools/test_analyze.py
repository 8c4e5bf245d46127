"""``extql.analyze``: its figures against an independent NumPy computation
from the exposed tensors (tests/analyzecheck.py), on models in Quark's form
and on the models Quark 0.13 wrote with their float originals; the ranking
of a deliberately broken point; the what-if gains against models rebuilt
by hand; the JSON document; mismatched models; the inputs."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import quarkmodels as qm
from analyzecheck import assert_db, expected_point, model_sqnr, run_exposed, sqnr
from contract import quantize
from onnx import helper

import extql
from extql.tools.analyze import AnalysisError

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

DATA = Path(__file__).resolve().parents[1] / "data" / "quark"
FLOAT = {"cnn": DATA / "float" / "cnn.onnx", "transformer": DATA / "float" / "transformer.onnx"}
RUNNABLE = sorted(p.stem for p in DATA.glob("*.onnx") if "bfp" not in p.stem)


def _batch(model: onnx.ModelProto, count: int = 3, seed: int = 9) -> dict[str, np.ndarray]:
    feeds = qm.calibration(model, count, seed)
    return {k: np.stack([f[k] for f in feeds]) for k in feeds[0]}


def _samples(batch: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    n = len(next(iter(batch.values())))
    return [{k: v[i] for k, v in batch.items()} for i in range(n)]


def _check_every_point(float_model, quant, batch, doc) -> None:
    feeds = _samples(batch)
    for point in doc["points"]:
        exp = expected_point(float_model, quant, feeds, point)
        what = f"{point['tensor']} ({point['node']})"
        assert_db(point["local_sqnr_db"], exp["local_sqnr_db"], f"{what} local")
        assert_db(point["accumulated_sqnr_db"], exp["accumulated_sqnr_db"], f"{what} accumulated")
        assert point["max_abs_error"] == pytest.approx(exp["max_abs_error"], rel=1e-6, abs=1e-12)
        if "clipped_fraction" in exp:
            assert point["clipped_fraction"] == pytest.approx(exp["clipped_fraction"]), what
    assert_db(doc["model_sqnr_db"], model_sqnr(float_model, quant, feeds), "model")


PAIRS = [(m, act, pc) for m in ("cnn", "transformer")
         for act, pc in [("int8", False), ("uint8", True), ("int16", True), ("uint16", False),
                         ("int32", False), ("float16", False), ("bfloat16", False)]]


@pytest.mark.parametrize("model,act,per_channel", PAIRS)
def test_figures_agree_with_numpy_on_quark_form_models(model, act, per_channel):
    float_model = qm.float_cnn() if model == "cnn" else qm.float_transformer()
    quant = qm.quark_quantize(float_model, act, per_channel=per_channel)
    batch = _batch(float_model)
    doc = json.loads(extql.analyze(float_model, quant, batch).to_json())
    dq = [n.name for n in quant.graph.node if n.op_type.endswith("DequantizeLinear")]
    assert sorted(p["node"] for p in doc["points"]) == sorted(dq)
    assert doc["unmatched"] == [] and doc["samples"] == 3 and not doc["random_inputs"]
    _check_every_point(float_model, quant, batch, doc)


@pytest.mark.parametrize("name", RUNNABLE)
def test_quark_written_models_every_point_and_figure(name):
    """Every dequantize node of a model Quark wrote is a point (or its
    tensor, which the float original lacks, is named unmatched), and every
    figure agrees with NumPy."""
    float_model = onnx.load(str(FLOAT[name.split("_")[0]]))
    quant = onnx.load(str(DATA / f"{name}.onnx"))
    batch = _batch(float_model, 2)
    doc = extql.analyze(float_model, quant, batch).to_dict()
    reported = {p["node"] for p in doc["points"]}
    for node in quant.graph.node:
        if node.op_type.endswith("DequantizeLinear"):
            tensor = node.input[0].removesuffix("_quantized")
            assert node.name in reported or tensor in doc["unmatched"], (name, node.name)
    # The Reshape -> Gemm -> Reshape rewrite's tensors have no float counterpart.
    for p in doc["points"]:
        if p["tensor"] in doc["unmatched"]:
            assert p["accumulated_sqnr_db"] is None, p
    _check_every_point(float_model, quant, batch, doc)


def test_broken_point_ranks_first_and_bypass_recovers_most_of_the_sqnr():
    float_model = qm.float_cnn()
    batch = _batch(float_model, 4)
    good = extql.analyze(float_model, qm.quark_quantize(float_model, "int8"), batch)
    broken = qm.quark_quantize(float_model, "int8", scale_factor={"r": 0.01})
    report = extql.analyze(float_model, broken, batch, what_if=3)
    assert report.points[0].tensor == "r" and report.points[0].clipped_fraction > 0.3
    assert report.model_sqnr_db < good.model_sqnr_db - 20
    (fix,) = [w for w in report.what_if if w.tensor == "r" and w.variant == "bypass"]
    lost = good.model_sqnr_db - report.model_sqnr_db
    assert fix.gain_db > 0.9 * lost, (fix, lost)
    # The other variants of the three worst points recover far less.
    assert all(w.gain_db < 0.5 * lost for w in report.what_if if w is not fix)


def _rewired(model: onnx.ModelProto, old: str, new: str) -> None:
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def _bypassed_by_hand(quant: onnx.ModelProto, t: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(quant)
    drop = {f"{t}_QuantizeLinear", f"{t}_DequantizeLinear"}
    keep = [n for n in m.graph.node if n.name not in drop]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    _rewired(m, f"{t}_DequantizeLinear_Output", t)
    return m


def _widened_by_hand(quant: onnx.ModelProto, t: str) -> onnx.ModelProto:
    """The pair of ``t`` as com.microsoft int16 Q/DQ, scale / 256, zero point kept."""
    m = onnx.ModelProto()
    m.CopyFrom(quant)
    inits = {i.name: i for i in m.graph.initializer}
    scale = onnx.numpy_helper.to_array(inits[f"{t}_scale"])
    zp = onnx.numpy_helper.to_array(inits[f"{t}_zero_point"])
    m.graph.initializer.extend([
        onnx.numpy_helper.from_array((scale / np.float32(256)).astype(np.float32), "s16"),
        onnx.numpy_helper.from_array(zp.astype(np.int16), "z16")])
    for node in m.graph.node:
        if node.name in (f"{t}_QuantizeLinear", f"{t}_DequantizeLinear"):
            assert node.domain == "com.microsoft"
            node.input[1], node.input[2] = "s16", "z16"
    return m


def test_what_if_gains_match_models_rebuilt_by_hand():
    float_model = qm.float_cnn()
    batch = _batch(float_model, 3)
    feeds = _samples(batch)
    quant = qm.quark_quantize(float_model, "int8", scale_factor={"c2": 0.3})
    report = extql.analyze(float_model, quant, batch, what_if=2)
    base = model_sqnr(float_model, quant, feeds)
    assert abs(report.model_sqnr_db - base) <= 0.01
    worst = [p.tensor for p in report.points[:2]]
    assert "c2" in worst
    checked = 0
    for w in report.what_if:
        if w.tensor not in ("c2", "c1", "r1", "r", "p", "f", "x"):
            continue
        hand = (_bypassed_by_hand if w.variant == "bypass" else _widened_by_hand)(quant, w.tensor)
        expected = model_sqnr(float_model, hand, feeds)
        assert abs(w.model_sqnr_db - expected) <= 0.01, (w, expected)
        assert abs(w.gain_db - (expected - base)) <= 0.01, (w, expected - base)
        checked += 1
    assert checked >= 2


def test_widening_a_stored_weight_requantizes_the_float_weight():
    float_model = qm.float_cnn()
    batch = _batch(float_model, 2)
    feeds = _samples(batch)
    quant = qm.quark_quantize(float_model, "int8", per_channel=True)
    worst_weight = "w1"
    report = extql.analyze(float_model, quant, batch, what_if=len(quant.graph.node))
    (w,) = [r for r in report.what_if if r.tensor == worst_weight and r.variant == "widen"]
    # By hand: w1 requantized to int16 per channel with the scales / 256.
    m = onnx.ModelProto()
    m.CopyFrom(quant)
    inits = {i.name: i for i in m.graph.initializer}
    w1 = next(onnx.numpy_helper.to_array(i) for i in float_model.graph.initializer
              if i.name == "w1")
    scale = onnx.numpy_helper.to_array(inits["w1_scale"]) / np.float32(256)
    zp = onnx.numpy_helper.to_array(inits["w1_zero_point"]).astype(np.int16)
    for name, value in (("w1_quantized", quantize(w1, scale, zp, axis=0)), ("w1_scale", scale),
                        ("w1_zero_point", zp)):
        inits[name].CopyFrom(onnx.numpy_helper.from_array(value, name))
    expected = model_sqnr(float_model, m, feeds)
    assert abs(w.model_sqnr_db - expected) <= 0.01, (w, expected)
    (b,) = [r for r in report.what_if if r.tensor == worst_weight and r.variant == "bypass"]
    m = onnx.ModelProto()
    m.CopyFrom(quant)
    keep = [n for n in m.graph.node if n.name != "w1_DequantizeLinear"]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.append(onnx.numpy_helper.from_array(w1, "w1_DequantizeLinear_Output"))
    assert abs(b.model_sqnr_db - model_sqnr(float_model, m, feeds)) <= 0.01


def test_widen_is_skipped_with_a_reason_where_it_does_not_apply():
    float_model = qm.float_cnn()
    for act, reason in (("int16", "already 16 bits"), ("float16", "not an 8-bit integer")):
        quant = qm.quark_quantize(float_model, act)
        report = extql.analyze(float_model, quant, _batch(float_model, 1), what_if=2)
        assert len(report.what_if) == 2 and {w.variant for w in report.what_if} == {"bypass"}
        assert len(report.what_if_skipped) == 2
        assert all(reason in s["reason"] and s["variant"] == "widen"
                   for s in report.what_if_skipped)


def test_outputs_figures_and_json_document():
    """The JSON document has the schema's keys and types, strict JSON (no
    NaN / Infinity): an exact point's SQNR is null."""
    float_model = onnx.load(str(FLOAT["cnn"]))
    quant = onnx.load(str(DATA / "cnn_a8w8.onnx"))
    batch = _batch(float_model, 2)
    report = extql.analyze(float_model, quant, batch, what_if=1)
    doc = json.loads(report.to_json())
    assert set(doc) >= {"points", "outputs", "model_sqnr_db", "what_if", "unmatched"}
    for p in doc["points"]:
        assert {"tensor", "node", "kind", "type", "local_sqnr_db", "accumulated_sqnr_db",
                "max_abs_error", "clipped_fraction"} <= set(p)
        assert p["kind"] in ("activation", "weight") and isinstance(p["type"], str)
        assert p["local_sqnr_db"] is None or isinstance(p["local_sqnr_db"], float)
    # p requantizes r's values with r's own scale: exact, inf -> null, ranked last.
    exact = [p for p in doc["points"] if p["local_sqnr_db"] is None]
    assert {p["tensor"] for p in exact} == {"p", "f"} and doc["points"][-2:] == exact
    finite = [p["local_sqnr_db"] for p in doc["points"] if p["local_sqnr_db"] is not None]
    assert finite == sorted(finite)
    (out,) = doc["outputs"]
    feeds = _samples(batch)
    fv, qv = run_exposed(float_model, feeds, []), run_exposed(quant, feeds, [])
    ys_f, ys_q = [v["y"] for v in fv], [v["y"] for v in qv]
    assert_db(out["sqnr_db"], sqnr(ys_f, ys_q), "output y")
    from analyzecheck import cosine, max_error

    assert out["cosine"] == pytest.approx(cosine(ys_f, ys_q), abs=1e-9)
    assert out["max_abs_error"] == pytest.approx(max_error(ys_f, ys_q))
    (w,) = [w for w in doc["what_if"] if w["variant"] == "bypass"]
    assert set(w) >= {"tensor", "variant", "model_sqnr_db", "gain_db"}
    assert w["gain_db"] == pytest.approx(w["model_sqnr_db"] - doc["model_sqnr_db"])


def _renamed(model: onnx.ModelProto, old: str, new: str, where: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in getattr(m.graph, where):
        if vi.name == old:
            vi.name = new
    for node in m.graph.node:
        for seq in (node.input, node.output):
            for i, n in enumerate(seq):
                if n == old:
                    seq[i] = new
    return m


def test_models_that_do_not_fit_raise_one_line():
    float_model = qm.float_cnn()
    quant = qm.quark_quantize(float_model, "int8")
    cases = {
        "inputs": (float_model, _renamed(quant, "x", "image", "input")),
        "outputs": (float_model, _renamed(quant, "y", "logits", "output")),
        "swapped": (quant, float_model),
        "other": (qm.float_transformer(), quant),
    }
    expected = {"inputs": "inputs", "outputs": "outputs", "swapped": "no quantization point",
                "other": "do not fit together"}
    for case, (f, q) in cases.items():
        with pytest.raises(AnalysisError) as info:
            extql.analyze(f, q, samples=1)
        assert expected[case] in str(info.value) and "\n" not in str(info.value), case
    # x is read unquantized and every other tensor renamed: nothing matches.
    unmatched = _bypassed_by_hand(quant, "x")
    for node in unmatched.graph.node:
        for seq in (node.input, node.output):
            for i, n in enumerate(seq):
                if n not in ("x", "y"):
                    seq[i] = "t_" + n
    for init in unmatched.graph.initializer:
        init.name = "t_" + init.name
    with pytest.raises(AnalysisError, match="no quantization point of QUANT matches a tensor"):
        extql.analyze(float_model, unmatched, samples=1)


def test_unreadable_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(AnalysisError, match="bad.onnx: cannot be read"):
        extql.analyze(str(bad), qm.quark_quantize(qm.float_cnn()))


def test_inputs_batch_single_sample_and_random():
    float_model = qm.float_cnn()
    quant = qm.quark_quantize(float_model, "int8")
    batch = _batch(float_model, 3)
    assert extql.analyze(float_model, quant, batch).samples == 3
    one = extql.analyze(float_model, quant, {"x": batch["x"][1]})
    assert one.samples == 1
    alone = extql.analyze(float_model, quant, {"x": batch["x"][1:2]})
    assert alone.samples == 1 and alone.model_sqnr_db == one.model_sqnr_db
    assert alone.model_sqnr_db == pytest.approx(
        model_sqnr(float_model, quant, [{"x": batch["x"][1]}]), abs=0.01)
    with pytest.raises(AnalysisError, match=r"input 'x' has shape \[3, 8, 8\]"):
        extql.analyze(float_model, quant, {"x": batch["x"][0, 0]})
    with pytest.raises(AnalysisError, match="not inputs"):
        extql.analyze(float_model, quant, {"z": batch["x"]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rnd = extql.analyze(float_model, quant, samples=2)
    assert rnd.random_inputs and rnd.samples == 2
    assert any("calibration-like" in str(w.message) for w in caught)


def test_graph_order_and_kinds_on_a_quark_model():
    float_model = onnx.load(str(FLOAT["transformer"]))
    quant = onnx.load(str(DATA / "transformer_a8w8.onnx"))
    report = extql.analyze(float_model, quant, _batch(float_model, 1))
    kinds = {p.tensor: p.kind for p in report.points}
    assert kinds["bk"] == "weight" and kinds["scores"] == "activation"
    # The Gemm weights Quark transposed under new names are not guessed.
    assert {"mk_weight", "mq_weight", "mv_weight"} <= set(report.unmatched)
    assert {"mk_gemm_out", "mk_pre_reshape_out"} <= set(report.unmatched)
    order = [p.graph_order for p in sorted(report.points, key=lambda p: p.graph_order)]
    assert order == sorted(set(order))
    assert math.isinf(next(p for p in report.points if p.tensor == "x").accumulated_sqnr_db)


def test_bypass_through_a_node_with_another_consumer_of_the_quantized_tensor():
    """A quantize output read by two dequantize nodes: bypassing one point
    keeps the other working."""
    float_model = qm.float_cnn()
    quant = qm.quark_quantize(float_model, "int8")
    q = next(n for n in quant.graph.node if n.name == "r1_QuantizeLinear")
    dq = next(n for n in quant.graph.node if n.name == "r1_DequantizeLinear")
    twin = helper.make_node(dq.op_type, list(dq.input), ["r1_twin"], name="r1_DequantizeLinear2",
                            domain=dq.domain)
    index = list(quant.graph.node).index(dq)
    quant.graph.node.insert(index + 1, twin)
    conv = next(n for n in quant.graph.node if n.op_type == "Conv" and "r1_" in n.input[0])
    conv.input[0] = "r1_twin"
    assert q.output[0] in twin.input
    batch = _batch(float_model, 2)
    report = extql.analyze(float_model, quant, batch, what_if=len(quant.graph.node))
    bypasses = {w.node: w for w in report.what_if if w.variant == "bypass"}
    assert {"r1_DequantizeLinear", "r1_DequantizeLinear2"} <= set(bypasses)


def test_float_originals_are_the_ones_quark_quantized(tmp_path):
    """tests/data/quark/float is what make_quark_fixtures.py --float writes,
    byte for byte, and every float tensor Quark kept in its models (the
    float16 / bfloat16 / BFP16 models keep their weights float) is FLOAT's."""
    import importlib.util

    tool = Path(__file__).resolve().parents[2] / "tools" / "make_quark_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_quark_fixtures", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.write_float_models(str(tmp_path)) == 0
    for name, path in FLOAT.items():
        assert (tmp_path / f"{name}.onnx").read_bytes() == path.read_bytes(), name
    compared = 0
    for quant_path in DATA.glob("*.onnx"):
        floats = {i.name: onnx.numpy_helper.to_array(i)
                  for i in onnx.load(str(FLOAT[quant_path.stem.split("_")[0]])).graph.initializer}
        for init in onnx.load(str(quant_path)).graph.initializer:
            if init.name in floats and init.data_type == onnx.TensorProto.FLOAT:
                np.testing.assert_array_equal(onnx.numpy_helper.to_array(init),
                                              floats[init.name], err_msg=quant_path.name)
                compared += 1
    assert compared >= 20


def test_official_vitis_and_defaulted_zero_point_pairs():
    """Pairs of the official operators (one without a zero point: uint8) and
    of the legacy Vitis names are points like Quark's com.microsoft ones;
    widening the zero-point-less one gives uint16 with a zero point of 0."""
    float_model = qm.float_cnn()
    quant = qm.quark_quantize(float_model, "int8")
    for node in quant.graph.node:
        if node.name in ("r_QuantizeLinear", "r_DequantizeLinear"):
            node.domain = ""
        elif node.name in ("x_QuantizeLinear", "x_DequantizeLinear"):
            node.domain = ""
            del node.input[2]
        elif node.name in ("c2_QuantizeLinear", "c2_DequantizeLinear"):
            node.domain = "com.vai.quantize"
            node.op_type = "Vitis" + node.op_type
    quant.opset_import.append(helper.make_opsetid("com.vai.quantize", 1))
    assert {n.op_type for n in quant.graph.node if n.domain == "com.vai.quantize"} == \
        {"VitisQuantizeLinear", "VitisDequantizeLinear"}
    batch = _batch(float_model, 2)
    report = extql.analyze(float_model, quant, batch, what_if=len(quant.graph.node))
    types = {p.tensor: p.type for p in report.points}
    assert types["x"] == "uint8" and types["r"] == "int8" and types["c2"] == "int8"
    _check_every_point(float_model, quant, batch, report.to_dict())
    # x's negative half clips at 0 of uint8.
    assert next(p for p in report.points if p.tensor == "x").clipped_fraction > 0.3
    (w,) = [w for w in report.what_if if w.tensor == "x" and w.variant == "widen"]
    hand = onnx.ModelProto()
    hand.CopyFrom(quant)
    s = next(onnx.numpy_helper.to_array(i) for i in quant.graph.initializer
             if i.name == "x_scale")
    hand.graph.initializer.extend([
        onnx.numpy_helper.from_array((s / np.float32(256)).astype(np.float32), "s16"),
        onnx.numpy_helper.from_array(np.zeros((), np.uint16), "z16")])
    for node in hand.graph.node:
        if node.name in ("x_QuantizeLinear", "x_DequantizeLinear"):
            node.domain = "com.microsoft"
            node.input[1:] = ["s16", "z16"]
    assert abs(w.model_sqnr_db - model_sqnr(float_model, hand, _samples(batch))) <= 0.01
