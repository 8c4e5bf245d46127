"""com.microsoft QuantizeLinear / DequantizeLinear as first-class nodes.

extql.reference.OPS against onnxruntime's own kernels for them (the
definition of their meaning), ``check`` rules, ``inline_fallbacks`` and
``lower_to_standard`` on them, and the naming of custom operators that
neither extql nor onnxruntime implements.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import ALL_TYPES, assert_same_bits
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import ONNX_OF, run_ort

import extql
import extql.reference
from extql.cli.check import check_model
from extql.onnx import microsoft
from extql.onnx.graph import extended_nodes

MS = "com.microsoft"
#: The types of onnxruntime's com.microsoft Q/DQ: (NumPy dtype, ONNX code).
TYPES = {n: (ALL_TYPES[n][0].type, ONNX_OF[n])
         for n in ("int8", "uint8", "int16", "uint16", "int4", "uint4")}


def _onnxruntime_has_int4() -> bool:
    """Whether this onnxruntime's com.microsoft DequantizeLinear takes int4
    (1.18 rejects the type when it loads the model)."""
    import onnxruntime as ort
    from onnx import helper

    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], domain=MS)
    graph = helper.make_graph(
        [node], "probe", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("x", TensorProto.INT4, [2], [1, 2]),
         helper.make_tensor("s", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime's own exception types
        return False
    return True


#: The types compared with onnxruntime's kernels: int4 / uint4 only where
#: onnxruntime has them (1.18 does not).
ORT_VERSION = tuple(int(p) for p in __import__("onnxruntime").__version__.split(".")[:2])
ORT_TYPES = [t for t in TYPES if t not in ("int4", "uint4") or _onnxruntime_has_int4()]
# (x shape, scale shape or None for a scalar, axis attribute or None)
FORMS = {"tensor": ((2, 3, 4), None, None), "tensor-[1]": ((2, 3, 4), (1,), None),
         "axis-default": ((2, 3, 4), (3,), None), "axis-0": ((4, 3), (4,), 0),
         "axis-neg": ((2, 3, 4), (4,), -1)}


def _tensor(name, value):
    value = np.asarray(value)
    code = next((c for dt, c in TYPES.values() if np.dtype(dt) == value.dtype), None)
    if code in (TensorProto.INT4, TensorProto.UINT4):
        return helper.make_tensor(name, code, value.shape, value.astype(np.int64).reshape(-1))
    return onnx.numpy_helper.from_array(value, name)


def _model(op, x_type, out_type, scale, zp, axis, x_shape, opset=17):
    inputs = ["x", "s"] + (["zp"] if zp is not None else [])
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node(op, inputs, ["y"], domain=MS, **attrs)
    inits = [_tensor("s", scale)] + ([_tensor("zp", zp)] if zp is not None else [])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [helper.make_tensor_value_info("y", out_type, x_shape)], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])


def _case(qtype, form, with_zp, rng):
    x_shape, s_shape, axis = FORMS[form]
    dt, code = TYPES[qtype]
    info = ml_dtypes.iinfo(dt) if qtype.endswith("4") else np.iinfo(dt)
    scale = (rng.choice([0.5, 0.25, 0.37, 3.0], size=s_shape).astype(np.float32)
             if s_shape else np.float32(0.37))
    n = s_shape[0] if s_shape else None
    zp = None
    if with_zp:
        z = rng.integers(int(info.min), int(info.max), size=n, endpoint=True)
        zp = np.asarray(z).astype(dt)
    return x_shape, scale, zp, axis, code, info


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no-zp"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", ORT_TYPES)
def test_reference_quantize_matches_onnxruntime(qtype, form, with_zp):
    rng = np.random.default_rng(len(qtype) * 31 + len(form))
    x_shape, scale, zp, axis, code, info = _case(qtype, form, with_zp, rng)
    if not with_zp and qtype != "uint8":
        return  # without a zero point the output is uint8: one case per form
    x = (rng.standard_normal(x_shape) * float(info.max) * 0.6).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, 0.5 * 0.37, -1e9, 2.5]
    model = _model("QuantizeLinear", TensorProto.FLOAT, code, scale, zp, axis, x_shape)
    if qtype.endswith("4"):
        # onnxruntime's Python API hands packed int4 outputs over as bytes: read
        # the values through a DequantizeLinear with scale 1 and zero point 0.
        model.graph.node.append(helper.make_node(
            "DequantizeLinear", ["y", "one", "zero"], ["y_values"], domain=MS))
        model.graph.initializer.extend([_tensor("one", np.float32(1)),
                                        _tensor("zero", np.zeros((), TYPES[qtype][0]))])
        model.graph.output[0].CopyFrom(
            helper.make_tensor_value_info("y_values", TensorProto.FLOAT, x_shape))
    want = run_ort(model, {"x": x})[model.graph.output[0].name]
    got = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, {"x": x})[0]
    assert_same_bits(np.asarray(got), want, f"{qtype} {form}")


@pytest.mark.parametrize(("x", "x_type"), [(np.ones(3, np.int32), TensorProto.INT32),
                                           (np.ones(3, ml_dtypes.bfloat16), TensorProto.BFLOAT16)])
def test_reference_quantize_refuses_what_onnxruntime_refuses(x, x_type):
    """onnxruntime's com.microsoft QuantizeLinear takes float32 / float16 x
    only (an invalid model otherwise); the reference op says so too, where
    the Extended one would take int32 and bfloat16."""
    model = _model("QuantizeLinear", x_type, TensorProto.INT8, np.float32(1), np.int8(0), None,
                   (3,))
    with pytest.raises(Exception, match="tensor\\((int32|bfloat16)\\)"):
        run_ort(model, {"x": x})
    with pytest.raises(TypeError) as info:
        ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, {"x": x})
    # (onnx.reference wraps a TypeError of an op in its own, from the op's.)
    assert re.fullmatch("com.microsoft QuantizeLinear: x must be float32 or float16, got "
                        "(int32|bfloat16)", str(info.value.__cause__ or info.value))


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no-zp"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", [*ORT_TYPES, "int32"])
def test_reference_dequantize_matches_onnxruntime(qtype, form, with_zp):
    if qtype == "int32" and with_zp and ORT_VERSION < (1, 19):
        pytest.xfail("onnxruntime 1.18's DequantizeLinear takes int32 only with a zero zero point")
    rng = np.random.default_rng(len(qtype) * 17 + len(form))
    if qtype == "int32":
        dt, code = np.int32, TensorProto.INT32
        x_shape, s_shape, axis = FORMS[form]
        scale = np.float32(0.37) if not s_shape else np.full(s_shape, 0.5, np.float32)
        n = s_shape[0] if s_shape else None
        # zero points that make x - zp wrap in 32 bits, as onnxruntime computes it
        zp = (np.asarray(rng.integers(-(2**31), 2**31 - 1, size=n)).astype(np.int32)
              if with_zp else None)
        info = np.iinfo(np.int32)
    else:
        x_shape, scale, zp, axis, code, info = _case(qtype, form, with_zp, rng)
        dt = TYPES[qtype][0]
    x = rng.integers(int(info.min), int(info.max), size=x_shape, endpoint=True).astype(dt)
    model = _model("DequantizeLinear", code, TensorProto.FLOAT, scale, zp, axis, x_shape)
    want = run_ort(model, {"x": x})["y"] if qtype not in ("int4", "uint4") else None
    got = np.asarray(ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(
        None, {"x": x})[0])
    if want is None:  # no int4 graph inputs in onnxruntime's Python API: make x an initializer
        model.graph.initializer.append(_tensor("x", x))
        del model.graph.input[:]
        want = run_ort(model, {})["y"]
    assert_same_bits(got, want, f"{qtype} {form}")


# --------------------------------------------------------------------------
# check


def _problems(model):
    count, problems = check_model(model)
    return count, problems


def test_check_validates_microsoft_nodes():
    good = _model("QuantizeLinear", TensorProto.FLOAT, TensorProto.INT16,
                  np.full(3, 0.5, np.float32), np.zeros(3, np.int16), 1, (2, 3, 4))
    assert _problems(good) == (1, [])
    # int32 quantize: onnxruntime has no com.microsoft kernel for it
    bad_type = _model("QuantizeLinear", TensorProto.FLOAT, TensorProto.INT32,
                      np.float32(0.5), np.int32(0), None, (2, 3))
    _, problems = _problems(bad_type)
    assert len(problems) == 1 and "zero point 'zp' must be one of" in problems[0]
    assert problems[0].startswith("QuantizeLinear node")
    # a per-axis scale whose length is not D[axis]
    bad_len = _model("DequantizeLinear", TensorProto.UINT8, TensorProto.FLOAT,
                     np.full(5, 0.5, np.float32), np.zeros(5, np.uint8), 0, (2, 3))
    _, problems = _problems(bad_len)
    assert problems == ["DequantizeLinear node (unnamed, output 'y'): the scale has 5 elements "
                        "but x has 2 along axis 0 (shape (2, 3))"]
    # zero point type not x's
    bad_zp = _model("DequantizeLinear", TensorProto.INT8, TensorProto.FLOAT,
                    np.float32(0.5), np.uint8(0), None, (2, 3))
    _, problems = _problems(bad_zp)
    assert any("must have the type of x (int8)" in p for p in problems)


#: Custom operators nobody here implements: Quark's ops under a name their
#: domain does not have, any other.
UNKNOWN_OPS = [("ExtendedLSTM", "com.vai.quantize"),
               ("VitisInstanceNormalization", extql.DOMAIN),
               ("BFPQuantizeDequantize", "com.vai.quantize"),
               ("BFPFixNeuron", extql.DOMAIN), ("Frobnicate", "org.example")]


@pytest.mark.parametrize("op,domain", UNKNOWN_OPS)
def test_unknown_custom_ops_are_named(op, domain):
    nodes = [helper.make_node(op, ["x"], ["t"], domain=domain, name="first"),
             helper.make_node("Relu", ["t"], ["y"]),
             helper.make_node("Gelu", ["y"], ["z"], domain=MS)]  # onnxruntime has it
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("z", 1, [2])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(domain, 1), helper.make_opsetid(MS, 1)])
    lines = microsoft.unsupported_nodes(model)
    assert len(lines) == 1 and lines[0].startswith(f"{op} ({domain}): 1 node(s) (first)")
    count, problems = check_model(model)
    assert count == 0 and problems == [f"unsupported operator {lines[0]}"]


def test_model_functions_extended_and_block_nodes_are_not_unknown():
    model = extql.attach_fallbacks(_model(
        "QuantizeLinear", TensorProto.FLOAT, TensorProto.INT8, np.float32(0.5), np.int8(1),
        None, (2, 3)))
    fn = helper.make_function("my.domain", "Twice", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    model.functions.append(fn)
    model.graph.node.append(helper.make_node("Twice", ["y"], ["w"], domain="my.domain"))
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    # The block formats and the DPU ops, under their names and the legacy ones:
    # every operator of Quark's library.
    for op, domain in [("BFPQuantizeDequantize", extql.DOMAIN),
                       ("MXQuantizeDequantize", extql.DOMAIN),
                       ("BFPFixNeuron", "com.vai.quantize"), ("MXFixNeuron", "com.vai.quantize"),
                       ("ExtendedInstanceNormalization", extql.DOMAIN),
                       ("ExtendedLSTM", extql.DOMAIN),
                       ("VitisInstanceNormalization", "com.vai.quantize"),
                       ("VitisLSTM", "com.vai.quantize")]:
        model.graph.node.append(helper.make_node(op, ["w"], [f"w_{op}"], domain=domain))
    model.opset_import.append(helper.make_opsetid("com.vai.quantize", 1))
    assert microsoft.unsupported_nodes(model) == []


# --------------------------------------------------------------------------
# inline and lower


@pytest.mark.parametrize("level", ["disabled", "all"])
@pytest.mark.parametrize("qtype", ["int8", "uint8", "int16", "uint16"])
def test_inline_removes_microsoft_nodes(qtype, level):
    dt, code = TYPES[qtype]
    scale, zp = np.array([0.5, 0.25, 2.0], np.float32), np.array([1, 2, 3]).astype(dt)
    q = _model("QuantizeLinear", TensorProto.FLOAT, code, scale, zp, 1, (2, 3, 4))
    x = (np.random.default_rng(0).standard_normal((2, 3, 4)) * 300).astype(np.float32)
    out = extql.inline_fallbacks(q)
    assert {n.domain for n in out.graph.node} <= {"", "ai.onnx"}
    assert {o.domain for o in out.opset_import} <= {"", "ai.onnx"}
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                                        if level == "disabled"
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert_same_bits(run_ort(out, {"x": x}, options=options)["y"], run_ort(q, {"x": x})["y"])


def test_inline_names_what_it_cannot_express():
    int4 = _model("QuantizeLinear", TensorProto.FLOAT, TensorProto.INT4, np.float32(0.5),
                  np.asarray(1).astype(ml_dtypes.int4), None, (2, 3))
    with pytest.raises(ValueError, match="QuantizeLinear node .*int4 has no standard-ops"):
        extql.inline_fallbacks(int4)
    wrap = _model("DequantizeLinear", TensorProto.INT32, TensorProto.FLOAT, np.float32(0.5),
                  np.int32(7), None, (2, 3))
    with pytest.raises(ValueError, match="int32 with a zero point that is not a constant zero"):
        extql.inline_fallbacks(wrap)
    zero = _model("DequantizeLinear", TensorProto.INT32, TensorProto.FLOAT, np.float32(0.5),
                  np.int32(0), None, (2, 3))
    x = np.array([[1, -2, 2**31 - 1], [-(2**31), 0, 5]], np.int32)
    assert_same_bits(run_ort(extql.inline_fallbacks(zero), {"x": x})["y"],
                     run_ort(zero, {"x": x})["y"])


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("qtype", ["int8", "uint8", "int16", "uint16"])
def test_lower_microsoft_nodes_where_the_opset_allows(qtype, opset):
    dt, code = TYPES[qtype]
    scale, zp = np.array([0.5, 0.25, 2.0], np.float32), np.array([1, 2, 3]).astype(dt)
    q = _model("QuantizeLinear", TensorProto.FLOAT, code, scale, zp, 1, (2, 3, 4), opset=opset)
    report: list[str] = []
    with pytest.warns(UserWarning) if opset == 17 and "16" in qtype else _no_warning():
        out = extql.lower_to_standard(q, report=report)
    lowered = out.graph.node[0].domain == ""
    assert lowered == (opset >= 21 or "16" not in qtype), report
    if not lowered:
        assert "needs ai.onnx opset >= 21, the model imports 17" in report[0]
    else:
        assert {o.domain for o in out.opset_import} == {""}
    x = (np.random.default_rng(1).standard_normal((2, 3, 4)) * 300).astype(np.float32)
    assert_same_bits(run_ort(out, {"x": x})["y"], run_ort(q, {"x": x})["y"])


class _no_warning:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def test_extended_nodes_lists_microsoft_nodes_on_request():
    model = _model("QuantizeLinear", TensorProto.FLOAT, TensorProto.INT8, np.float32(0.5),
                   np.int8(1), None, (2, 3))
    assert extended_nodes(model) == []
    (ext,) = extended_nodes(model, microsoft=True)
    assert ext.microsoft and ext.quantize
