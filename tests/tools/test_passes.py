"""attach_fallbacks, inline_fallbacks, lower_to_standard and reference.OPS on
single-type, mixed-type and Q->DQ chain models, against tests/contract.py."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from fallback_cases import FORMS, quantized_x, random_scale, special_x, zero_points
from onnx import TensorProto, helper
from onnx_helpers import (
    DOMAIN,
    LEGACY,
    make_model,
    ort_float16_cast_keeps_payload,
    ort_honours_overload,
    qdq_model,
    run_ort,
    run_reference,
    tensor,
    value_info,
)
from pass_models import ALL, X_KERNEL, X, assert_outputs, canonical_nans, mixed_model

import extql
from extql import fallbacks
from extql.onnx import graph
from extql.tools import lower

# These run models through the fallback functions with the library not
# registered: while they run, registering a library is refused (conftest.py).
pytestmark = pytest.mark.fallback

ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
#: onnxruntime resolves model-local functions by (domain, name, overload)
#: since microsoft/onnxruntime#28275; before, by (domain, name): the last one.
HONOURS_OVERLOAD = ort_honours_overload()
#: The newest ai.onnx opset the installed onnxruntime officially supports.
ORT_MAX_OPSET = 21 if ORT_VERSION < (1, 20) else 23


#: Whether onnxruntime's float16 Cast keeps NaN payloads (1.18 drops them:
#: the fallbacks then give sign | 0x7E00 for every float16 NaN, see
#: test_fallbacks.test_float16_nan_payload_and_sign).
F16_PAYLOAD = ort_float16_cast_keeps_payload()


def assert_ort(model, expected, what, x=X):
    """Run in onnxruntime and compare with expected(x); NaN payloads are
    dropped from x where onnxruntime's float16 Cast cannot keep them."""
    x = x if F16_PAYLOAD else canonical_nans(x)
    assert_outputs(run_ort(model, {"x": x}), expected(x), what)


# --------------------------------------------------------------------------
# attach


@pytest.mark.parametrize("qtype", [*ALL, None], ids=[*ALL, "default"])
def test_attach_single_type_chain(qtype):
    model, expected = mixed_model([qtype])
    attached = extql.attach_fallbacks(model)
    onnx.checker.check_model(attached, full_check=True)
    variant = qtype or "default"
    assert sorted((f.name, f.overload) for f in attached.functions) == [
        ("ExtendedDequantizeLinear", variant), ("ExtendedQuantizeLinear", variant)]
    assert all(n.overload == variant for n in attached.graph.node)
    want = expected(X)
    assert_ort(attached, expected, f"onnxruntime {variant}")
    assert_outputs(run_reference(attached, {"x": X}), want, f"reference {variant}")


def test_attach_mixed_types():
    types = [*ALL, None]
    model, expected = mixed_model(types)
    attached = extql.attach_fallbacks(model)
    onnx.checker.check_model(attached, full_check=True)
    # per-type overloads for onnxruntime, then one dispatcher per operator
    # (empty overload, listed last) for onnx.reference, which ignores overload.
    assert [f.overload for f in attached.functions][-2:] == ["", ""]
    # The nodes without a zero point got an explicit uint8 zero.
    assert len(attached.functions) == 2 * len(ALL) + 2
    q_default = next(n for n in attached.graph.node if n.name == f"Q{len(ALL)}")
    assert q_default.overload == "uint8" and q_default.input[2]
    zero = next(i for i in attached.graph.initializer if i.name == q_default.input[2])
    assert zero.data_type == TensorProto.UINT8 and not onnx.numpy_helper.to_array(zero).any()
    want = expected(X)
    assert_ort(attached, expected, "onnxruntime mixed")
    assert_outputs(run_reference(attached, {"x": X}), want, "reference mixed")


def test_dispatchers_alone_in_onnxruntime():
    """What a runtime that ignores ``overload`` runs: the dispatchers only
    (onnxruntime before overload support); here onnxruntime is made to use
    them by removing the overloads and the per-type functions."""
    types = [*ALL, None]
    model, expected = mixed_model(types)
    attached = extql.attach_fallbacks(model)
    for node in attached.graph.node:
        node.overload = ""
    dispatchers = [f for f in attached.functions if not f.overload]
    assert len(dispatchers) == 2
    del attached.functions[:]
    attached.functions.extend(dispatchers)
    onnx.checker.check_model(attached, full_check=True)
    want = expected(X)
    assert_ort(attached, expected, "onnxruntime dispatchers")
    assert_outputs(run_reference(attached, {"x": X}), want, "reference dispatchers")


def test_attach_mixed_types_below_opset_15_warns():
    model, expected = mixed_model(["int8", "uint32", "bfloat16"], opset=13)
    with pytest.warns(UserWarning, match="extql.reference.OPS"):
        attached = extql.attach_fallbacks(model)
    onnx.checker.check_model(attached, full_check=True)
    assert all(f.overload for f in attached.functions)
    if HONOURS_OVERLOAD:
        assert_ort(attached, expected, "onnxruntime opset 13")


@pytest.mark.parametrize("opset", [o for o in (13, 15, 17, 19, 21, 23) if o <= ORT_MAX_OPSET])
def test_attach_keeps_the_model_opset(opset):
    model, expected = mixed_model(["int16", None, "float16"], opset=opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attached = extql.attach_fallbacks(model)
    assert graph.model_opset(attached) == opset
    assert all(o.version == opset for f in attached.functions for o in f.opset_import)
    onnx.checker.check_model(attached, full_check=True)
    want = expected(X)
    dispatcher = opset >= fallbacks.DISPATCH_MIN_OPSET  # (else attach warned)
    if dispatcher or HONOURS_OVERLOAD:
        assert_ort(attached, expected, f"onnxruntime opset {opset}")
    if dispatcher:
        assert_outputs(run_reference(attached, {"x": X}), want, f"reference opset {opset}")


def test_attach_rejects_too_old_opset():
    model, _ = mixed_model(["int8"], opset=12)
    with pytest.raises(ValueError, match=r"opset >= 13.*version_converter"):
        extql.attach_fallbacks(model)


def test_attach_is_idempotent_and_does_not_modify_its_input():
    model, expected = mixed_model(["int8", "uint16"])
    before = model.SerializeToString()
    once = extql.attach_fallbacks(model)
    twice = extql.attach_fallbacks(once)
    assert model.SerializeToString() == before
    assert len(twice.functions) == len(once.functions)
    assert_ort(twice, expected, "attached twice")


def test_attach_leaves_other_nodes_alone():
    model, expected = mixed_model(["int8"])
    model.graph.node.append(helper.make_node("Relu", ["x"], ["r"], name="relu"))
    model.graph.output.append(value_info("r", TensorProto.FLOAT, (2, 3, 4)))
    attached = extql.attach_fallbacks(model)
    relu = [n for n in attached.graph.node if n.op_type == "Relu"]
    assert relu == [model.graph.node[-1]]
    got = run_ort(attached, {"x": X})
    assert_same_bits(got["r"], np.maximum(X, 0))


def test_attach_unknown_zero_point_type_is_a_clear_error():
    node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp"], ["y"], domain=DOMAIN,
                            name="q_node")
    model = make_model(
        [helper.make_node("Foo", ["x"], ["zp"], domain="com.example"), node],
        [value_info("x", TensorProto.FLOAT, [4])],
        [value_info("y", TensorProto.INT8, [4])],
        [tensor("s", np.float32(1.0))],
        domains=(DOMAIN, "com.example"),
    )
    with pytest.raises(ValueError, match=r"q_node.*zero point 'zp'.*value_info"):
        extql.attach_fallbacks(model)


def test_attach_static_problem_is_a_clear_error():
    model = qdq_model("int8", [2, 3, 4], np.ones(4, np.float32), np.zeros(4, np.int8), axis=1)
    with pytest.raises(ValueError, match=r"scale has 4 elements but x has 3 along axis 1"):
        extql.attach_fallbacks(model)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("qtype", ["int8", "bfloat16", "uint32"])
def test_attach_legacy_names(qtype):
    model, expected = mixed_model([qtype, None], domain=LEGACY)
    attached = extql.attach_fallbacks(model)
    onnx.checker.check_model(attached, full_check=True)
    assert {f.domain for f in attached.functions} == {LEGACY}
    want = expected(X)
    assert_ort(attached, expected, "onnxruntime legacy")
    assert_outputs(run_reference(attached, {"x": X}), want, "reference legacy")
    assert_outputs(run_reference(model, {"x": X_KERNEL}, new_ops=extql.reference.OPS),
                   expected(X_KERNEL), "reference.OPS legacy")


def _if_model():
    """An Extended Q->DQ chain inside both branches of an If."""
    def branch(name, qtype):
        dt = TYPES[qtype][0]
        nodes = [
            helper.make_node("ExtendedQuantizeLinear", ["x", "s", f"zp_{name}"], [f"q_{name}"],
                             domain=DOMAIN),
            helper.make_node("ExtendedDequantizeLinear", [f"q_{name}", "s", f"zp_{name}"],
                             [f"d_{name}"], domain=DOMAIN),
        ]
        return helper.make_graph(
            nodes, name, [], [value_info(f"d_{name}", TensorProto.FLOAT, [2, 3, 4])],
            [tensor(f"zp_{name}", np.asarray(dt.type(3)))],
        )

    node = helper.make_node("If", ["c"], ["z"], then_branch=branch("then", "int16"),
                            else_branch=branch("else", "uint32"))
    return make_model(
        [node],
        [value_info("x", TensorProto.FLOAT, [2, 3, 4]), value_info("c", TensorProto.BOOL, [])],
        [value_info("z", TensorProto.FLOAT, [2, 3, 4])],
        [tensor("s", np.float32(0.5))],
    )


@pytest.mark.parametrize("cond", [True, False])
def test_passes_reach_subgraphs(cond):
    model = _if_model()
    zp = np.asarray(np.int16(3) if cond else np.uint32(3))
    want = {"z": dequantize(quantize(X, np.float32(0.5), zp), np.float32(0.5), zp)}
    feeds = {"x": X, "c": np.array(cond)}
    attached = extql.attach_fallbacks(model)
    assert_outputs(run_ort(attached, feeds), want, "attach onnxruntime")
    assert_outputs(run_reference(attached, feeds), want, "attach reference")
    inlined = extql.inline_fallbacks(model)
    assert not [e for e in graph.extended_nodes(inlined)]
    assert_outputs(run_ort(inlined, feeds), want, "inline onnxruntime")


# --------------------------------------------------------------------------
# inline


def _assert_no_custom_domain(model):
    for g in graph.graphs(model.graph):
        for node in g.node:
            assert node.domain in ("", "ai.onnx"), node
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}
    assert not model.functions


def _assert_inferred(model, names, *, data_prop=False):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=data_prop)
    known = {v.name: v.type.tensor_type for v in (*inferred.graph.value_info,
                                                    *inferred.graph.output)}
    for name in names:
        tt = known[name]
        assert tt.elem_type != 0, name
        assert tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim), name


@pytest.mark.parametrize("domain", [DOMAIN, LEGACY])
def test_inline_mixed_types(domain):
    types = [*ALL, None]
    model, expected = mixed_model(types, domain=domain)
    inlined = extql.inline_fallbacks(model)
    onnx.checker.check_model(inlined, full_check=True)
    _assert_no_custom_domain(inlined)
    # Strip the declared output shapes: inference alone must find them.
    bare = onnx.ModelProto()
    bare.CopyFrom(inlined)
    for out in bare.graph.output:
        out.type.tensor_type.ClearField("shape")
    del bare.graph.value_info[:]
    _assert_inferred(bare, [o.name for o in inlined.graph.output], data_prop=True)
    want = expected(X)
    assert_ort(inlined, expected, "inline onnxruntime")
    assert_outputs(run_reference(inlined, {"x": X}), want, "inline reference")


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", ["uint8", "int32", "float16"])
def test_inline_every_form(qtype, form):
    rng = np.random.default_rng(11)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    zp = zero_points(qtype, None if s_shape is None else s_shape[0], rng)
    model = qdq_model(qtype, x_shape, scale, zp, axis=axis)
    inlined = extql.inline_fallbacks(model)
    _assert_no_custom_domain(inlined)
    _assert_inferred(inlined, ["y", "z"])
    x = special_x(x_shape, rng, qtype)
    x = x if F16_PAYLOAD else canonical_nans(x)
    q = quantize(x, scale, zp, axis=1 if axis is None else axis)
    want = {"y": q, "z": dequantize(q, scale, zp, axis=1 if axis is None else axis)}
    assert_outputs(run_ort(inlined, {"x": x}), want, "inline onnxruntime")
    assert_outputs(run_reference(inlined, {"x": x}), want, "inline reference")


def test_inline_dynamic_granularity():
    """Scale and zero point as graph inputs: the run-time logic is inlined."""
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp"], ["y"], domain=DOMAIN,
                         axis=-1),
        helper.make_node("ExtendedDequantizeLinear", ["y", "s", "zp"], ["z"], domain=DOMAIN,
                         axis=-1),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, [3, 4]), value_info("s", TensorProto.FLOAT, None),
         value_info("zp", TensorProto.UINT16, None)],
        [value_info("y", TensorProto.UINT16, [3, 4]), value_info("z", TensorProto.FLOAT, [3, 4])],
    )
    inlined = extql.inline_fallbacks(model)
    _assert_no_custom_domain(inlined)
    x = special_x((3, 4), np.random.default_rng(5), "uint16")
    per_axis = (np.array([0.5, 1, 2, 4], np.float32), np.array([0, 1, 2, 65535], np.uint16))
    for scale, zp in ((np.float32(0.5), np.uint16(7)), per_axis):
        scale, zp = np.asarray(scale), np.asarray(zp)
        q = quantize(x, scale, zp, axis=-1)
        want = {"y": q, "z": dequantize(q, scale, zp, axis=-1)}
        feeds = {"x": x, "s": scale, "zp": zp}
        assert_outputs(run_ort(inlined, feeds), want, "inline dynamic onnxruntime")
        assert_outputs(run_reference(inlined, feeds), want, "inline dynamic reference")


def test_inline_keeps_unrelated_functions():
    model, expected = mixed_model(["int8"])
    other = helper.make_function("com.example", "Twice", ["a"], ["b"],
                                 [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 21)])
    model.functions.append(other)
    inlined = extql.inline_fallbacks(model)
    assert [f.name for f in inlined.functions] == ["Twice"]


# --------------------------------------------------------------------------
# lower


LOWERED_Q = ["int8", "uint8", "int16", "uint16", None]
LOWERED_DQ = ["int8", "uint8", "int16", "uint16"]


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", [*ALL, None], ids=[*ALL, "default"])
def test_lower_is_exact_in_onnxruntime(qtype, form):
    rng = np.random.default_rng(13)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    zp = None if qtype is None else zero_points(qtype, None if s_shape is None else s_shape[0],
                                                 rng)
    model = qdq_model(qtype, x_shape, scale, zp, axis=axis)
    report: list[str] = []
    lowered = extql.lower_to_standard(model, report=report)
    ops = [n.op_type for n in lowered.graph.node]
    expect_q = qtype in LOWERED_Q
    expect_dq = qtype in LOWERED_DQ or qtype is None
    assert ops == [
        "QuantizeLinear" if expect_q else "ExtendedQuantizeLinear",
        "DequantizeLinear" if expect_dq else "ExtendedDequantizeLinear",
    ]
    assert len(report) == (not expect_q) + (not expect_dq)
    onnx.checker.check_model(lowered, full_check=True)
    x = special_x(x_shape, rng, qtype or "uint8")
    x = x if F16_PAYLOAD else canonical_nans(x)
    ax = 1 if axis is None else axis
    q = quantize(x, scale, zp, axis=ax)
    want = {"y": q, "z": dequantize(q, scale, zp, axis=ax)}
    runnable = extql.attach_fallbacks(lowered)  # the nodes left need their functions
    assert_outputs(run_ort(runnable, {"x": x}), want, f"lowered {qtype} {form}")


@pytest.mark.parametrize("form", ["tensor-scalar", "axis-1", "axis-neg"])
@pytest.mark.parametrize("zero", ["absent", "zeros", "nonzero"])
def test_lower_int32_dequantize(zero, form):
    rng = np.random.default_rng(17)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    n = None if s_shape is None else s_shape[0]
    zp = {"absent": None, "zeros": np.zeros(() if n is None else (n,), np.int32),
          "nonzero": zero_points("int32", n, rng)}[zero]
    model = qdq_model("int32", x_shape, scale, zp, axis=axis, chain="dq")
    lowered = extql.lower_to_standard(model)
    op = lowered.graph.node[0].op_type
    assert op == ("ExtendedDequantizeLinear" if zero == "nonzero" else "DequantizeLinear")
    x = quantized_x("int32", x_shape, rng)
    want = {"z": dequantize(x, scale, zp, axis=1 if axis is None else axis)}
    assert_outputs(run_ort(extql.attach_fallbacks(lowered), {"x": x}), want, "int32 dq")


def test_lower_respects_the_model_opset():
    model, expected = mixed_model(["int8", "int16", "uint16", "uint8"], opset=17)
    report: list[str] = []
    with pytest.warns(UserWarning, match="needs ai.onnx opset >= 21, the model imports 17"):
        lowered = extql.lower_to_standard(model, report=report)
    assert graph.model_opset(lowered) == 17
    kinds = [(n.name, n.op_type) for n in lowered.graph.node]
    assert kinds == [
        ("Q0", "QuantizeLinear"), ("DQ0", "DequantizeLinear"),
        ("Q1", "ExtendedQuantizeLinear"), ("DQ1", "ExtendedDequantizeLinear"),
        ("Q2", "ExtendedQuantizeLinear"), ("DQ2", "ExtendedDequantizeLinear"),
        ("Q3", "QuantizeLinear"), ("DQ3", "DequantizeLinear"),
    ]
    assert len(report) == 4 and all("opset >= 21" in r for r in report)
    assert_ort(extql.attach_fallbacks(lowered), expected, "opset 17")


def test_lower_per_axis_needs_opset_13():
    model = qdq_model("int8", [2, 3, 4], np.ones(3, np.float32), np.zeros(3, np.int8),
                      axis=1, opset=11)
    with pytest.warns(UserWarning, match="per axis"):
        lowered = extql.lower_to_standard(model)
    assert [n.op_type for n in lowered.graph.node] == ["ExtendedQuantizeLinear",
                                                      "ExtendedDequantizeLinear"]
    per_tensor = qdq_model("int8", [2, 3, 4], np.float32(0.5), np.int8(1), opset=11)
    lowered = extql.lower_to_standard(per_tensor)
    assert [n.op_type for n in lowered.graph.node] == ["QuantizeLinear", "DequantizeLinear"]
    x = special_x((2, 3, 4), np.random.default_rng(1), "int8")
    q = quantize(x, np.float32(0.5), np.int8(1))
    got = run_ort(lowered, {"x": x})
    assert_same_bits(got["y"], q)
    assert_same_bits(got["z"], dequantize(q, np.float32(0.5), np.int8(1)))


@pytest.mark.parametrize("saturate", [0, 1])
def test_lower_drops_a_saturate_that_means_nothing(saturate):
    """saturate on an int8 quantize says nothing (it is float8's), and the
    official QuantizeLinear defines it only from opset 19: the lowered node
    at opset 17 is valid without it, and computes the same."""
    model = qdq_model("int8", [2, 3, 4], np.float32(0.5), np.int8(1), opset=17)
    q_node = model.graph.node[0]
    q_node.attribute.append(onnx.helper.make_attribute("saturate", saturate))
    lowered = extql.lower_to_standard(model)
    assert [n.op_type for n in lowered.graph.node] == ["QuantizeLinear", "DequantizeLinear"]
    assert all(a.name != "saturate" for n in lowered.graph.node for a in n.attribute)
    onnx.checker.check_model(lowered, full_check=True)
    x = special_x((2, 3, 4), np.random.default_rng(2), "int8")
    q = quantize(x, np.float32(0.5), np.int8(1))
    assert_same_bits(run_ort(lowered, {"x": x})["y"], q)


def test_lower_removes_functions_and_imports_no_longer_needed():
    model, expected = mixed_model(["int8", "uint8"])
    lowered = extql.lower_to_standard(extql.attach_fallbacks(model))
    assert not lowered.functions
    assert {o.domain for o in lowered.opset_import} == {""}
    onnx.checker.check_model(lowered, full_check=True)
    assert_ort(lowered, expected, "lowered")


def test_lower_keeps_functions_still_used():
    model, expected = mixed_model(["int8", "bfloat16"])
    lowered = extql.lower_to_standard(extql.attach_fallbacks(model))
    assert {f.overload for f in lowered.functions} >= {"bfloat16"}
    assert_ort(lowered, expected, "lowered")
    # onnx.reference's own QuantizeLinear casts x / s to int32 before it
    # saturates, so +inf and |x / s| >= 2**31 come out wrong there: compare on
    # values it handles (the official op's meaning is what onnxruntime gives).
    finite = np.where(np.abs(X) < 1e6, X, np.float32(3.5))
    assert_outputs(run_reference(lowered, {"x": finite}), expected(finite), "lowered reference")


# --------------------------------------------------------------------------
# reference.OPS


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("domain", [DOMAIN, LEGACY])
def test_reference_ops_mixed(domain):
    model, expected = mixed_model([*ALL, None], domain=domain)
    got = run_reference(model, {"x": X_KERNEL}, new_ops=extql.reference.OPS)
    assert_outputs(got, expected(X_KERNEL), "reference.OPS")


@pytest.mark.usefixtures("kernel_isa")
def test_reference_ops_bfloat16_nan_payload():
    x = np.array([0x7FC12345, 0xFFD55555], np.uint32).view(np.float32)
    zp = np.zeros((), TYPES["bfloat16"][0])
    model = qdq_model("bfloat16", [2], np.float32(1.0), zp, chain="q")
    got = run_reference(model, {"x": x}, new_ops=extql.reference.OPS)
    assert got["y"].view(np.uint16).tolist() == [0x7FC0, 0xFFC0]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", ALL)
def test_reference_ops_every_form(qtype, form):
    rng = np.random.default_rng(19)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    zp = zero_points(qtype, None if s_shape is None else s_shape[0], rng)
    model = qdq_model(qtype, x_shape, scale, zp, axis=axis)
    x = canonical_nans(special_x(x_shape, rng, qtype))
    ax = 1 if axis is None else axis
    q = quantize(x, scale, zp, axis=ax)
    got = run_reference(model, {"x": x}, new_ops=extql.reference.OPS)
    assert_outputs(got, {"y": q, "z": dequantize(q, scale, zp, axis=ax)}, "reference.OPS")
    xq = quantized_x(qtype, x_shape, rng)
    dq = qdq_model(qtype, x_shape, scale, zp, axis=axis, chain="dq")
    got = run_reference(dq, {"x": xq}, new_ops=extql.reference.OPS)
    assert_outputs(got, {"z": dequantize(xq, scale, zp, axis=ax)}, "reference.OPS dq")


def test_reference_ops_bad_input_names_the_operator():
    model = qdq_model("int8", [2, 3, 4], np.ones(4, np.float32), np.zeros(4, np.int8), axis=1)
    with pytest.raises(Exception, match="ExtendedQuantizeLinear.*4 elements"):
        run_reference(model, {"x": X}, new_ops=extql.reference.OPS)


def test_float_types_lowering_is_not_claimed():
    for t in FLOAT_TYPES:
        assert t not in lower._OFFICIAL_Q and t not in lower._OFFICIAL_DQ


def test_large_initializers_survive_type_inference():
    """infer_types empties big initializers while onnx infers (2 GiB limit)
    and must put their data back."""
    model, expected = mixed_model(["int16", "uint8"], shape=(1, 20000, 2))
    before = [bytes(i.raw_data) for i in model.graph.initializer]
    assert max(map(len, before)) > graph.INFER_KEEP_BYTES
    types = graph.infer_types(model)
    assert [bytes(i.raw_data) for i in model.graph.initializer] == before
    assert types["q0"].elem_type == TensorProto.INT16 and types["q0"].shape == (1, 20000, 2)
    x = np.random.default_rng(0).standard_normal((1, 20000, 2)).astype(np.float32) * 1e3
    assert_ort(extql.inline_fallbacks(model), expected, "inline", x=x)
