"""Models in the form AMD Quark writes them (tests/quarkmodels.py), every path.

* onnxruntime with the extql library: every quantization node's output
  (Extended and com.microsoft Q/DQ) has the bits tests/contract.py gives for
  the inputs that node saw, at every optimisation level onnxruntime loads the
  model at (Quark's int32 models load only with the optimisations disabled:
  that is tested too);
* the same nodes, on the same inputs, through ``onnx.reference`` with
  ``extql.reference.OPS`` and through ``inline_fallbacks`` in onnxruntime
  without any library (every level): the same bits;
* the whole model through those three paths: close (float ops around the
  quantization nodes round differently from runtime to runtime).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import quarkmodels as qm
from contract import TYPES, assert_same_bits, dequantize, quantize
from onnx.reference import ReferenceEvaluator
from onnx_helpers import run_ort

import extql
import extql.reference
from extql.onnx import graph
from extql.ort_levels import LEVELS, SessionError, open_session
from extql.tools import compare as node_compare

MODELS = qm.all_models()
NAMES = sorted(MODELS)
CUSTOM = {"com.microsoft", extql.DOMAIN, "com.vai.quantize"}
ORT_LEVEL = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def _act(name: str) -> str:
    return name.split("_")[1]


def _options(level: str, library: bool) -> ort.SessionOptions:
    options = extql.register(ort.SessionOptions()) if library else ort.SessionOptions()
    options.graph_optimization_level = ORT_LEVEL[level]
    return options


def _loads(model: onnx.ModelProto, level: str, library: bool) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), _options(level, library),
                             providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001
        # The one known rejection: Quark's int32 pairs rewritten into an int32
        # QuantizeLinear by onnxruntime's Q/DQ optimisations.
        assert "int32" in str(exc) and "QuantizeLinear" in str(exc), exc
        return False
    return True


# --------------------------------------------------------------------------
# The fixtures are in Quark's form


@pytest.mark.parametrize("name", NAMES)
def test_fixture_has_quarks_form(name):
    model = MODELS[name]
    onnx.checker.check_model(model)
    assert model.ir_version == 8
    assert graph.model_opset(model) == 17
    assert len(model.opset_import) >= 6
    act = _act(name)
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if not node.op_type.endswith("uantizeLinear"):
            continue
        assert len(node.input) == 3 and node.input[2], node.name  # zero point always present
        zp_type = inits[node.input[2]].data_type
        ms = node.domain == "com.microsoft"
        if zp_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
                       onnx.TensorProto.UINT16):
            assert ms, node.name
        elif zp_type == onnx.TensorProto.INT32 and node.op_type == "DequantizeLinear":
            zero = not onnx.numpy_helper.to_array(inits[node.input[2]]).any()
            assert ms == zero, node.name
        else:
            assert node.domain == extql.DOMAIN, node.name
        assert [a.name for a in node.attribute] in ([], ["axis"])
        if node.attribute:
            assert node.attribute[0].i == 0 and len(inits[node.input[1]].dims) == 1
        if node.input[0] in inits:  # a stored weight or bias: DequantizeLinear only
            assert "Dequantize" in node.op_type
            if inits[node.input[0]].data_type == onnx.TensorProto.INT32 and act != "int32":
                assert list(inits[node.input[1]].dims) == [1]  # bias scale of shape [1]
                assert list(inits[node.input[2]].dims) == []  # scalar zero point
        if act in ("float16", "bfloat16"):
            assert onnx.numpy_helper.to_array(inits[node.input[1]]).reshape(-1).tolist()[0] == 1
    if name.endswith("_pc") and act not in ("float16", "bfloat16"):
        assert any(a.name == "axis" for n in model.graph.node for a in n.attribute
                   if n.op_type.endswith("uantizeLinear"))


@pytest.mark.usefixtures("kernel_isa")
def test_int32_models_need_a_lower_level():
    """onnxruntime rejects Quark's int32 models at its default level; the
    level is stepped down to one that loads, with a warning naming why."""
    model = MODELS["cnn_int32"]
    assert not _loads(model, "all", True)
    warnings: list[str] = []
    _, level = open_session(model.SerializeToString(),
                            lambda: extql.register(ort.SessionOptions()), warn=warnings.append)
    assert level == "disabled"
    assert len(warnings) == 1 and "all" in warnings[0] and "int32" in warnings[0]
    with pytest.raises(SessionError, match="protobuf"):
        open_session(b"not a model", ort.SessionOptions)


# --------------------------------------------------------------------------
# Node by node: native vs contract vs reference vs inline


@functools.cache
def _inlined(name: str) -> onnx.ModelProto:
    return extql.inline_fallbacks(MODELS[name])


@functools.cache
def _reference_output(name: str) -> np.ndarray:
    model = MODELS[name]
    return ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(
        None, qm.sample_input(model))[0]


@functools.cache
def _isolated(name: str):
    model = MODELS[name]
    nodes = node_compare.quantization_nodes(model)
    types = graph.infer_types(model)
    iso, feed_of, out_of = node_compare.isolated_nodes(model, nodes, types)
    return iso, feed_of, out_of, extql.inline_fallbacks(iso)


def _expected(ext: graph.ExtNode, values: dict, inits: dict) -> np.ndarray:
    node = ext.node

    def value(name):
        return values[name] if name in values else onnx.numpy_helper.to_array(inits[name])

    x, s = value(node.input[0]), value(node.input[1])
    zp = value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if zp is not None and zp.dtype == np.uint16 and inits.get(node.input[2]) is not None \
            and inits[node.input[2]].data_type == onnx.TensorProto.BFLOAT16:
        zp = zp.view(TYPES["bfloat16"][0])
    axis = ext.axis
    if ext.quantize:
        return quantize(x, s, zp, axis=axis)
    return dequantize(x, s, zp, axis=axis)


def _native_node_values(model, level):
    nodes = node_compare.quantization_nodes(model)
    types = graph.infer_types(model)
    exposed, kept = node_compare.expose(model, nodes, types)
    assert len(kept) == len(nodes)
    feeds = qm.sample_input(model)
    values = dict(feeds)
    values.update(run_ort(exposed, feeds, options=_options(level, True)))
    return nodes, types, values


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_quantization_nodes_every_path(name, level):
    model = MODELS[name]
    if not _loads(model, level, True):
        assert _act(name) == "int32"
        level = "disabled"
    nodes, types, values = _native_node_values(model, level)
    inits = {i.name: i for i in model.graph.initializer}
    # 1. native vs the contract, node by node (on each node's own inputs)
    for q in nodes:
        assert_same_bits(values[q.output], _expected(q.ext, values, inits),
                         f"{name} {level} native {q.ext.label}")
    # 2. the same nodes through onnx.reference + extql.reference.OPS, and
    #    through inline_fallbacks in onnxruntime without the library
    iso, feed_of, out_of, inlined = _isolated(name)
    iso_feeds = {alias: values[n] for alias, n in feed_of.items()}
    ref = ReferenceEvaluator(iso, new_ops=extql.reference.OPS).run(None, iso_feeds)
    assert not {n.domain for n in inlined.graph.node} & CUSTOM
    inl = run_ort(inlined, iso_feeds, options=_options(level, False))
    for got_ref, (alias, orig) in zip(ref, out_of.items(), strict=True):
        assert_same_bits(got_ref, values[orig], f"{name} reference {orig}")
        assert_same_bits(inl[alias], values[orig], f"{name} inline {level} {orig}")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", NAMES)
def test_whole_model_paths_are_close(name, level):
    model = MODELS[name]
    feeds = qm.sample_input(model)
    native_level = level if _loads(model, level, True) else "disabled"
    native = run_ort(model, feeds, options=_options(native_level, True))["y"]
    ref = _reference_output(name)
    inlined = _inlined(name)
    assert not {n.domain for n in inlined.graph.node} & CUSTOM
    assert not {o.domain for o in inlined.opset_import} & CUSTOM
    inline_level = level if _loads(inlined, level, False) else "disabled"
    inl = run_ort(inlined, feeds, options=_options(inline_level, False))["y"]
    # Within a few steps of the output quantization (float ops upstream may
    # round differently and move a value across one step).
    step = {"float16": 2.0**-10 * 4, "bfloat16": 2.0**-7 * 4}.get(_act(name))
    step = step or float(qm._ACT[_act(name)][0])
    atol = 4 * step + 1e-6
    np.testing.assert_allclose(ref, native, atol=atol, rtol=0, err_msg=f"{name} reference")
    np.testing.assert_allclose(inl, native, atol=atol, rtol=0, err_msg=f"{name} inline {level}")
