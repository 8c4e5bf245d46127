"""Models that AMD Quark 0.13's own quantizer wrote (tests/data/quark, made by
tools/make_quark_fixtures.py), through every extql path.

* onnxruntime with extql gives the bits onnxruntime gave with Quark's own
  custom-op library (saved next to each model), for every model, the BFP /
  MX ones (BFP16, MX4 / MX6 / MX9, MXFP*, MXINT8) included: those with
  extql's library alone, which is all they need;
* ``extql check`` finds no problem and ``extql run`` runs every model, the
  BFP / MX ones included (exit 0; ``run --inputs --save-outputs`` gives
  Quark's bits; ``--json`` documents); ``run --compare-fallback`` finds
  every quantization node identical (real processes, exit codes);
* ``onnx.reference`` + ``extql.reference.OPS`` and ``inline_fallbacks`` in
  onnxruntime without any library come close to the native output
  (tests/blockfmt/test_block_tools.py has the reference ops' bits on the
  BFP / MX models).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from blockfmt_data import BLOCK_MODELS, block_nodes
from contract import assert_same_bits
from onnx.reference import ReferenceEvaluator
from onnx_helpers import run_ort

import extql
import extql.reference
from extql.cli import main
from extql.cli.check import check_model
from extql.rules.types import OP_NAMES

DATA = Path(__file__).resolve().parents[1] / "data" / "quark"
MODELS = sorted(p.stem for p in DATA.glob("*.onnx"))
RUNNABLE = [m for m in MODELS if m not in BLOCK_MODELS]
CUSTOM = {"com.microsoft", extql.DOMAIN, "com.vai.quantize"}
EXTQL = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"


def _load(name: str):
    model = onnx.load(str(DATA / f"{name}.onnx"))
    with np.load(DATA / f"{name}.quark.npz") as data:
        return model, {model.graph.input[0].name: data["x"]}, data["y"]


def test_the_corpus_is_there():
    assert len(MODELS) >= 60 and len(BLOCK_MODELS) >= 46 and len(RUNNABLE) >= 20
    for name in MODELS:
        assert onnx.load(str(DATA / f"{name}.onnx")).producer_name == "quark.onnx"


# The fixtures' expected outputs come from a current onnxruntime: onnxruntime
# 1.18 rounds the float ops of the int32 transformer models differently
# (MatMul / Softmax around the quantization nodes, whose bits agree).
_OLD_ORT = tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 19)


#: Every model, the int32 transformers expected to differ on onnxruntime 1.18.
QUARK_BITS_MODELS = [
    pytest.param(n, marks=pytest.mark.xfail(
        _OLD_ORT and n.startswith("transformer") and "32" in n, strict=True,
        reason="onnxruntime 1.18's float ops round differently from the fixtures' onnxruntime"))
    for n in MODELS]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", QUARK_BITS_MODELS)
def test_native_gives_quarks_library_bits(name):
    model, feeds, quark_y = _load(name)
    y = run_ort(model, feeds, options=extql.register(ort.SessionOptions()))
    assert_same_bits(y[model.graph.output[0].name], quark_y, name)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_block_format_models_run_with_the_library_alone(name):
    """Every custom node of the model is onnxruntime's own (com.microsoft)
    or one extql's library registers (its BFP / MX nodes, and Extended /
    Vitis Q/DQ where Quark mixes them in): the file extql ships is all the
    session needs, and it gives Quark's library's bits."""
    model, feeds, quark_y = _load(name)
    ours = {(d, op) for d, ops in OP_NAMES.items() for op in ops}
    ours |= {(n.domain, n.op_type) for _, n, _ in block_nodes(name)}
    custom = {(n.domain, n.op_type) for n in model.graph.node
              if n.domain not in ("", "ai.onnx", "com.microsoft")}
    assert custom and custom <= ours, custom
    so = ort.SessionOptions()
    so.register_custom_ops_library(extql.get_library_path(standalone=True))
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    (y,) = sess.run([model.graph.output[0].name], feeds)
    assert_same_bits(y, quark_y, name)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", RUNNABLE)
def test_check_and_other_paths(name):
    model, feeds, quark_y = _load(name)
    count, problems = check_model(model)
    assert count > 0 and problems == []
    ref = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, feeds)[0]
    inlined = extql.inline_fallbacks(model)
    assert not {n.domain for n in inlined.graph.node} & CUSTOM
    inl = run_ort(inlined, feeds)[model.graph.output[0].name]
    # close: float ops around the quantization nodes round differently per runtime
    scale = float(np.abs(quark_y).max()) + 1.0
    np.testing.assert_allclose(ref, quark_y, atol=0.05 * scale, rtol=0, err_msg=name)
    np.testing.assert_allclose(inl, quark_y, atol=0.05 * scale, rtol=0, err_msg=name)


@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_block_format_models_check(name):
    """Every node is checked (the Q/DQ and the BFP / MX ones), none is a problem."""
    model = onnx.load(str(DATA / f"{name}.onnx"))
    count, problems = check_model(model)
    custom = [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    assert problems == [] and count == len(custom) > 0


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", QUARK_BITS_MODELS)
def test_check_and_run_commands(name, tmp_path, capsys):
    """``extql check --json`` and ``extql run --inputs --save-outputs
    --json`` on every model: exit 0, and the outputs run saved are Quark's
    library's bits (the same code as the processes of test_processes)."""
    model, feeds, quark_y = _load(name)
    path = DATA / f"{name}.onnx"
    assert main(["check", str(path), "-q", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["problems"] == [] and doc["quantization_nodes"] > 0
    inputs, saved = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **feeds)
    code = main(["run", str(path), "--inputs", str(inputs), "--save-outputs", str(saved),
                 "-q", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ok"] and doc["random_inputs"] == [], doc
    with np.load(saved) as out:
        assert_same_bits(out[model.graph.output[0].name], quark_y, name)


@pytest.mark.parametrize("name", ["cnn_a16w8_pc", "transformer_a8w8", "transformer_au32wu32",
                                  "cnn_bf16", "cnn_bfp16", "transformer_mx9",
                                  "cnn_mxfp4e2m1_qc", "transformer_bf16_mxint8"])
def test_processes(name):
    path = DATA / f"{name}.onnx"
    # (--compare-fallback: the models without BFP / MX nodes here.)
    run = ["run", path, "-q"] + ([] if name in BLOCK_MODELS else ["--compare-fallback"])
    for args in (["check", path, "-q"], run):
        proc = subprocess.run([sys.executable, "-c", EXTQL, *map(str, args)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and "unsupported" not in proc.stdout
        if "--compare-fallback" in args:
            assert "quantization nodes: all" in proc.stdout
