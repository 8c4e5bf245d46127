"""The README's examples, taken from README.md as written: the NumPy one runs
and gives the contract's bits; the onnxruntime one is the file the
documentation runs as a doctest; the one without the library runs on a
model.onnx in a temporary directory and its results do what it says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from contract import assert_same_bits, dequantize, quantize

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.usefixtures("kernel_isa")
def test_numpy_example_runs_and_matches_the_contract():
    (block,) = [b for b in _python_blocks() if "quantize_linear" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    x, s, q, y = (namespace[k] for k in ("x", "s", "q", "y"))
    zp = np.zeros(3, np.int16)
    assert q.dtype == np.int16 and y.dtype == np.float32 and q.shape == x.shape
    assert_same_bits(q, quantize(x, s, zp, axis=1), "README quantize")
    assert_same_bits(y, dequantize(q, s, zp, axis=1), "README dequantize")


def test_onnxruntime_example_is_the_documented_one():
    """docs/guide/onnxruntime.rst runs docs/examples/quickstart.py (sphinx
    doctest, once extql.register exists); the README shows the same code."""
    (block,) = [b for b in _python_blocks() if "extql.register" in b]
    assert block == (ROOT / "docs" / "examples" / "quickstart.py").read_text(encoding="utf-8")


def test_every_python_block_is_tested():
    """A new block in the README needs a test here: each one is claimed by
    exactly one of the tests above and below."""
    blocks = _python_blocks()
    claimed = [
        [b for b in blocks if "quantize_linear" in b],
        [b for b in blocks if "extql.register" in b],
        [b for b in blocks if 'onnx.load("model.onnx")' in b],
    ]
    assert all(len(c) == 1 for c in claimed), [len(c) for c in claimed]
    assert sorted(map(id, (c[0] for c in claimed))) == sorted(map(id, blocks))


@pytest.mark.usefixtures("kernel_isa")
def test_without_the_library_example_runs_and_its_models_do_what_it_says(tmp_path,
                                                                          monkeypatch):
    """The block runs as written in a directory holding a model.onnx (an
    int16 Extended Q -> DQ and a bfloat16 one); each pass's result is checked
    against the contract, and the loaded model is left as it was."""
    import onnx
    import onnxruntime as ort
    from contract import TYPES
    from onnx import TensorProto, helper
    from onnx_helpers import DOMAIN, make_model, run_ort, tensor, value_info

    bf16 = TYPES["bfloat16"][0]
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp16"], ["q16"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["q16", "s", "zp16"], ["y16"],
                         domain=DOMAIN),
        helper.make_node("ExtendedQuantizeLinear", ["x", "one", "zpbf"], ["qbf"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["qbf", "one", "zpbf"], ["ybf"],
                         domain=DOMAIN),
    ]
    shape = [2, 3, 4]
    model = make_model(
        nodes, [value_info("x", TensorProto.FLOAT, shape)],
        [value_info("y16", TensorProto.FLOAT, shape), value_info("ybf", TensorProto.FLOAT, shape)],
        [tensor("s", np.float32(0.03)), tensor("zp16", np.int16(-5)),
         tensor("one", np.float32(1)), tensor("zpbf", np.zeros((), bf16))])
    onnx.save(model, str(tmp_path / "model.onnx"))
    (block,) = [b for b in _python_blocks() if 'onnx.load("model.onnx")' in b]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)

    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 300
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # (-0.0 through the fallbacks: issue 10)
    zp16, zpbf = np.int16(-5), np.zeros((), bf16)
    expected = {
        "y16": dequantize(quantize(x, np.float32(0.03), zp16), np.float32(0.03), zp16),
        "ybf": dequantize(quantize(x, np.float32(1), zpbf), np.float32(1), zpbf),
    }

    def extended(m):
        return [n.op_type for n in m.graph.node if n.domain == DOMAIN]

    # The passes returned new models; the loaded one is unchanged.
    assert namespace["m"] == model
    assert len(extended(namespace["m"])) == 4
    # attach: the Extended nodes stay, with function definitions; runs without the library.
    portable = namespace["portable"]
    assert len(extended(portable)) == 4 and len(portable.functions) > 0
    got = run_ort(portable, {"x": x})
    # inline: no Extended node left; the file it saved is that model.
    plain = namespace["plain"]
    assert extended(plain) == []
    assert onnx.load("model-standard-ops.onnx") == plain
    got_plain = run_ort("model-standard-ops.onnx", {"x": x})
    # lower: the int16 pair became the official ops, the bfloat16 pair stayed.
    lowered = namespace["lowered"]
    ops = [(n.domain, n.op_type) for n in lowered.graph.node]
    assert ops.count(("", "QuantizeLinear")) == 1 and ops.count(("", "DequantizeLinear")) == 1
    assert len(extended(lowered)) == 2
    import extql

    got_lowered = run_ort(lowered, {"x": x}, options=extql.register(ort.SessionOptions()))
    # onnx.reference with extql's reference ops.
    names = [o.name for o in model.graph.output]
    got_ref = dict(zip(names, namespace["reference"].run(None, {"x": x}), strict=True))
    for label, result in (("attach", got), ("inline", got_plain), ("lower", got_lowered),
                          ("reference", got_ref)):
        for name, want in expected.items():
            assert_same_bits(result[name], want, f"README {label} {name}")
