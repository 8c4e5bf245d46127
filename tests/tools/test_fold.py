"""extql.fold_constants: quantization nodes with constant inputs become initializers.

Expectations: the contract (tests/contract.py) for Extended nodes,
onnxruntime's own com.microsoft kernels for com.microsoft nodes, and the
unfolded model run with the library for whole graphs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from contract import TYPES, assert_same_bits, dequantize, quantize
from fold_models import if_model, options, rng_values
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import DOMAIN, LEGACY, NAMES, ONNX_OF, make_model, run_ort, tensor, value_info
from ortutil import LEVELS

import extql
from extql.onnx.graph import array_to_tensor, tensor_to_array

MS = "com.microsoft"


def initializer_value(model, name):
    for init in model.graph.initializer:
        if init.name == name:
            return tensor_to_array(init)
    raise AssertionError(f"{name} is not an initializer")


def ops(model):
    return [(n.domain, n.op_type) for n in model.graph.node]


GRANULARITIES = [
    ("tensor", (), None),
    ("axis0", (4,), 0),
    ("axis1", (3,), 1),
    ("axis-1", (5,), -1),
    ("default-axis", (3,), None),  # per channel along the default axis 1
]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("qtype", list(TYPES))
@pytest.mark.parametrize("gran", GRANULARITIES, ids=[g[0] for g in GRANULARITIES])
def test_dequantize_weight_folds_to_contract_bits(qtype, gran):
    _, s_shape, axis = gran
    rng = np.random.default_rng(1)
    x = rng_values(rng, qtype, (4, 3, 5))
    scale = (rng.random(s_shape) + 0.01).astype(np.float32)
    zp = rng_values(rng, qtype, s_shape) if qtype not in ("int32", "uint32") else (
        np.zeros(s_shape, TYPES[qtype][0]))
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("ExtendedDequantizeLinear", ["w", "s", "zp"], ["wf"],
                            domain=DOMAIN, **attrs)
    mm = helper.make_node("Add", ["a", "wf"], ["y"])
    model = make_model([node, mm], [value_info("a", TensorProto.FLOAT, (4, 3, 5))],
                       [value_info("y", TensorProto.FLOAT, (4, 3, 5))],
                       [tensor("w", x), tensor("s", scale), tensor("zp", zp)])
    folded = extql.fold_constants(model)
    assert ops(folded) == [("", "Add")]
    expected = dequantize(x, scale, zp, axis=1 if axis is None else axis)
    assert_same_bits(initializer_value(folded, "wf"), expected)
    # Dead inputs are gone, and so is the Extended opset import.
    assert {i.name for i in folded.graph.initializer} == {"wf"}
    assert DOMAIN not in {o.domain for o in folded.opset_import}
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    want = run_ort(model, {"a": a}, options=options())["y"]
    for level in LEVELS:
        got = run_ort(folded, {"a": a}, options=options(level, library=False))["y"]
        assert_same_bits(got, want)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("qtype", list(TYPES))
@pytest.mark.parametrize("gran", GRANULARITIES, ids=[g[0] for g in GRANULARITIES])
def test_quantize_dequantize_chain_of_a_float_weight_folds(qtype, gran):
    _, s_shape, axis = gran
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((4, 3, 5)) * 300).astype(np.float32)
    w.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    scale = (rng.random(s_shape) * 2 + 0.01).astype(np.float32)
    zp = rng_values(rng, qtype, s_shape)
    attrs = {} if axis is None else {"axis": axis}
    qn, dqn = NAMES[DOMAIN]
    nodes = [
        helper.make_node(qn, ["w", "s", "zp"], ["wq"], domain=DOMAIN, **attrs),
        helper.make_node(dqn, ["wq", "s", "zp"], ["wf"], domain=DOMAIN, **attrs),
        helper.make_node("Identity", ["wf"], ["y"]),
    ]
    model = make_model(nodes, [], [value_info("y", TensorProto.FLOAT, (4, 3, 5))],
                       [tensor("w", w), tensor("s", scale), tensor("zp", zp)])
    folded = extql.fold_constants(model)
    ax = 1 if axis is None else axis
    q = quantize(w, scale, zp, axis=ax)
    assert_same_bits(initializer_value(folded, "wf"), dequantize(q, scale, zp, axis=ax))
    assert ops(folded) == [("", "Identity")]


@pytest.mark.usefixtures("kernel_isa")
def test_quantize_without_zero_point_gives_uint8_and_legacy_domain_folds():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((6,)) * 50).astype(np.float32)
    qn, _ = NAMES[LEGACY]
    node = helper.make_node(qn, ["w", "s"], ["wq"], domain=LEGACY)
    model = make_model([node, helper.make_node("Identity", ["wq"], ["y"])], [],
                       [value_info("y", TensorProto.UINT8, (6,))],
                       [tensor("w", w), tensor("s", np.float32(0.5))], domains=(LEGACY,))
    folded = extql.fold_constants(model)
    got = initializer_value(folded, "wq")
    assert got.dtype == np.uint8
    assert_same_bits(got, quantize(w, np.float32(0.5)))
    assert LEGACY not in {o.domain for o in folded.opset_import}


@pytest.mark.usefixtures("kernel_isa")
def test_constant_nodes_and_graph_output_keep_their_name():
    w = np.arange(-3, 3, dtype=np.int8)
    nodes = [
        helper.make_node("Constant", [], ["s"], value=tensor("sv", np.float32(0.25))),
        helper.make_node("Constant", [], ["w"], value=tensor("wv", w)),
        helper.make_node("ExtendedDequantizeLinear", ["w", "s"], ["out"], domain=DOMAIN),
    ]
    model = make_model(nodes, [], [value_info("out", TensorProto.FLOAT, (6,))])
    folded = extql.fold_constants(model)
    onnx.checker.check_model(folded, full_check=True)
    assert ops(folded) == [("", "Constant")]  # the input Constants are dead
    assert folded.graph.node[0].output[0] == "out"
    got = run_ort(folded, {}, options=options(library=False))["out"]
    assert_same_bits(got, dequantize(w, np.float32(0.25)))


def test_non_constant_inputs_and_overridable_initializers_are_not_folded():
    w = np.arange(6, dtype=np.int8)
    nodes = [
        # x is a graph input.
        helper.make_node("ExtendedDequantizeLinear", ["x", "s"], ["a"], domain=DOMAIN),
        # w is an initializer that is also a graph input: a caller may override it.
        helper.make_node("ExtendedDequantizeLinear", ["w", "s"], ["b"], domain=DOMAIN),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.INT8, (6,)), value_info("w", TensorProto.INT8, (6,))],
        [value_info("y", TensorProto.FLOAT, (6,))],
        [tensor("w", w), tensor("s", np.float32(0.5))],
    )
    folded = extql.fold_constants(model)
    assert folded == model  # nothing to do: the model comes back unchanged


@pytest.mark.usefixtures("kernel_isa")
def test_input_model_is_not_modified_and_unrelated_nodes_stay():
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, (3, 4)).astype(np.int8)
    nodes = [
        helper.make_node("ExtendedDequantizeLinear", ["w", "s", "zp"], ["wf"], domain=DOMAIN,
                         axis=0),
        helper.make_node("MatMul", ["x", "wf"], ["m"]),
        helper.make_node("ExtendedQuantizeLinear", ["m", "s1", "zp1"], ["mq"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["mq", "s1", "zp1"], ["y"], domain=DOMAIN),
    ]
    model = make_model(
        nodes, [value_info("x", TensorProto.FLOAT, (2, 3))],
        [value_info("y", TensorProto.FLOAT, (2, 4))],
        [tensor("w", w), tensor("s", np.float32([0.1, 0.2, 0.3])),
         tensor("zp", np.int8([0, 1, -1])), tensor("s1", np.float32(0.05)),
         tensor("zp1", np.int16(3))],
    )
    before = model.SerializeToString()
    folded = extql.fold_constants(model)
    assert model.SerializeToString() == before
    assert [n.op_type for n in folded.graph.node] == [
        "MatMul", "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"]
    assert DOMAIN in {o.domain for o in folded.opset_import}
    x = rng.standard_normal((2, 3)).astype(np.float32)
    want = run_ort(model, {"x": x}, options=options())["y"]
    for level in LEVELS:
        assert_same_bits(run_ort(folded, {"x": x}, options=options(level))["y"], want)


@pytest.mark.usefixtures("kernel_isa")
def test_fallback_functions_of_folded_operators_are_removed():
    w = np.arange(6, dtype=np.uint8)
    nodes = [helper.make_node("ExtendedDequantizeLinear", ["w", "s", "zp"], ["wf"],
                              domain=DOMAIN),
             helper.make_node("Add", ["x", "wf"], ["y"])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, (6,))],
                       [value_info("y", TensorProto.FLOAT, (6,))],
                       [tensor("w", w), tensor("s", np.float32(2)), tensor("zp", np.uint8(3))])
    attached = extql.attach_fallbacks(model)
    assert attached.functions
    folded = extql.fold_constants(attached)
    assert not [f for f in folded.functions if f.domain == DOMAIN]
    assert DOMAIN not in {o.domain for o in folded.opset_import}
    x = np.ones(6, np.float32)
    assert_same_bits(run_ort(folded, {"x": x}, options=options(library=False))["y"],
                     x + dequantize(w, np.float32(2), np.uint8(3)))


@pytest.mark.usefixtures("kernel_isa")
def test_subgraphs_fold_with_outer_scope_constants():
    w = np.int8([-128, -1, 0, 1, 127])
    model = if_model(w)
    folded = extql.fold_constants(model)
    onnx.checker.check_model(folded, full_check=True)
    for attr in folded.graph.node[0].attribute:
        assert [n.op_type for n in attr.g.node] == ["Add", "Add"]
    assert {i.name for i in folded.graph.initializer} == set()  # w, s, s2 are dead now
    x = np.linspace(-2, 2, 5).astype(np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": x}
        want = run_ort(model, feeds, options=options())["y"]
        for level in LEVELS:
            assert_same_bits(run_ort(folded, feeds, options=options(level, False))["y"], want)


def test_invalid_node_raises_naming_it():
    node = helper.make_node("ExtendedDequantizeLinear", ["w", "s"], ["wf"], domain=DOMAIN,
                            axis=0, name="bad_dq")
    model = make_model([node, helper.make_node("Identity", ["wf"], ["y"])], [],
                       [value_info("y", TensorProto.FLOAT, (4, 2))],
                       [tensor("w", np.zeros((4, 2), np.int8)),
                        tensor("s", np.ones(3, np.float32))])
    with pytest.raises(ValueError, match="bad_dq"):
        extql.fold_constants(model)


# --------------------------------------------------------------------------
# com.microsoft QuantizeLinear / DequantizeLinear: onnxruntime's own kernel
# is the expectation.

MS_TYPES = ["int8", "uint8", "int16", "uint16"]


def _ms_model(op, x, scale, zp, axis, out_elem):
    attrs = {} if axis is None else {"axis": axis}
    inputs = ["x", "s"] + (["zp"] if zp is not None else [])
    inits = [tensor("x", x), tensor("s", scale)] + ([tensor("zp", zp)] if zp is not None else [])
    node = helper.make_node(op, inputs, ["q"], domain=MS, **attrs)
    return make_model([node, helper.make_node("Identity", ["q"], ["y"])], [],
                      [value_info("y", out_elem, x.shape)], inits, domains=(MS,))


# Without a zero point the quantized type is uint8.
MS_CASES = [(t, True) for t in MS_TYPES] + [("uint8", False)]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize(("qtype", "with_zp"), MS_CASES, ids=[f"{t}-zp{z}" for t, z in MS_CASES])
@pytest.mark.parametrize("gran", GRANULARITIES, ids=[g[0] for g in GRANULARITIES])
def test_com_microsoft_nodes_fold_to_onnxruntime_bits(qtype, with_zp, gran):
    _, s_shape, axis = gran
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 3, 5)) * 400).astype(np.float32)
    x.flat[:5] = [np.nan, np.inf, -np.inf, -0.0, 2.5]
    scale = (rng.random(s_shape) * 3 + 0.01).astype(np.float32)
    zp = rng_values(rng, qtype, s_shape) if with_zp else None
    qm = _ms_model("QuantizeLinear", x, scale, zp, axis, ONNX_OF[qtype])
    want_q = run_ort(qm, {}, options=options(library=False))["y"]
    folded = extql.fold_constants(qm)
    assert ops(folded) == [("", "Identity")]
    assert MS not in {o.domain for o in folded.opset_import}
    assert_same_bits(initializer_value(folded, "q"), want_q)

    dm = _ms_model("DequantizeLinear", want_q, scale, zp, axis, TensorProto.FLOAT)
    want_dq = run_ort(dm, {}, options=options(library=False))["y"]
    folded = extql.fold_constants(dm)
    assert ops(folded) == [("", "Identity")]
    assert_same_bits(initializer_value(folded, "q"), want_dq)


@pytest.mark.usefixtures("kernel_isa")
def test_com_microsoft_int32_dequantize_folds_unless_onnxruntime_would_wrap():
    x = np.int32([-(2**31), -5, 0, 7, 2**31 - 1])
    scale = np.float32(0.125)
    zero = _ms_model("DequantizeLinear", x, scale, np.int32(0), None, TensorProto.FLOAT)
    want = run_ort(zero, {}, options=options(library=False))["y"]
    folded = extql.fold_constants(zero)
    assert_same_bits(initializer_value(folded, "q"), want)
    wrapping = _ms_model("DequantizeLinear", x, scale, np.int32(-3), None, TensorProto.FLOAT)
    report: list[str] = []
    kept = extql.fold_constants(wrapping, report=report)
    assert ("com.microsoft", "DequantizeLinear") in ops(kept)
    assert report and "not folded" in report[0]


def test_com_microsoft_float16_scale_is_left_to_onnxruntime():
    x = np.int8([1, 2, 3])
    model = _ms_model("DequantizeLinear", x, np.float16(0.5), np.int8(0), None,
                      TensorProto.FLOAT16)
    report: list[str] = []
    kept = extql.fold_constants(model, report=report)
    assert ("com.microsoft", "DequantizeLinear") in ops(kept)
    assert len(report) == 1


def test_bfloat16_folded_tensor_round_trips():
    bf = np.array([1.5, -2.25, 3e38], np.float32).astype(ml_dtypes.bfloat16)
    t = array_to_tensor("t", bf)
    assert t.data_type == TensorProto.BFLOAT16
    assert_same_bits(tensor_to_array(t), bf)
    assert_same_bits(tensor_to_array(numpy_helper.from_array(np.int8([1, -1]), "u")),
                     np.int8([1, -1]))
