"""Quark's DPU-emulation operators in ``onnx.reference`` (extql.reference.OPS)
and their schemas: one-node models under both names give Quark's stored bits
and the NumPy API's, refusals are the NumPy API's words naming the operator,
``onnx.checker`` accepts the nodes and shape inference gives the outputs'
types and shapes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from contract import assert_same_bits
from dpu_models import in_model, lstm_model, lstm_node_attrs
from in_data import CASES as IN_CASES
from in_data import epsilon, quark_y
from in_data import inputs as in_inputs
from lstm_data import CASES as LSTM_CASES
from lstm_data import contract_inputs
from lstm_data import quark_y as lstm_quark_y
from onnx.reference import ReferenceEvaluator

import extql
from extql.onnx.schemas import register_schemas

register_schemas()
pytestmark = pytest.mark.usefixtures("kernel_isa")
_LEGACY_IN = {"ExtendedInstanceNormalization": "VitisInstanceNormalization",
              "VitisInstanceNormalization": "ExtendedInstanceNormalization"}


def _run(model, feeds):
    return ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, feeds)


@pytest.mark.parametrize("case", IN_CASES, ids=[c["id"] for c in IN_CASES])
def test_in_reference_gives_quarks_bits(case):
    """Every stored case, under its own name and the other one."""
    feeds = in_inputs(case)
    for op in (case["op_type"], _LEGACY_IN[case["op_type"]]):
        model = in_model(op, epsilon=case["epsilon"])
        (y,) = _run(model, feeds)
        assert_same_bits(y, quark_y(case), f"{case['id']} {op}")
    want = extql.extended_instance_normalization(feeds["x"], feeds["scale"], feeds["B"],
                                                 epsilon=epsilon(case))
    assert_same_bits(y, want, case["id"])


@pytest.mark.parametrize("case", LSTM_CASES, ids=[c["id"] for c in LSTM_CASES])
def test_lstm_reference_gives_quarks_bits(case):
    feeds = contract_inputs(case)
    for op in ("ExtendedLSTM", "VitisLSTM"):
        (y,) = _run(lstm_model(lstm_node_attrs(case), op), feeds)
        assert_same_bits(y, lstm_quark_y(case), f"{case['id']} {op}")


def _lstm_case():
    case = next(c for c in LSTM_CASES if c["shape"][0] > 2 and c["check"] == "bits"
                and c["attrs"]["hidden_size"] > 2)
    return case, contract_inputs(case)


def test_lstm_reference_outputs_and_empty_names():
    """Y_h and Y_c where the node asks for them (an empty name skipped), the
    NumPy API's bits."""
    case, feeds = _lstm_case()
    attrs = lstm_node_attrs(case)
    got = _run(lstm_model(attrs, outputs=("", "Y_h", "Y_c")), feeds)
    api_attrs = {k: v for k, v in attrs.items()}
    want = extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"],
                               outputs="Y_h,Y_c", **api_attrs)
    assert len(got) == 2
    for g, w in zip(got, want, strict=True):
        assert_same_bits(g, w)


def test_lstm_reference_refusals_name_the_operator():
    case, feeds = _lstm_case()
    attrs = dict(lstm_node_attrs(case), input_forget=1)
    with pytest.raises(ValueError, match="ExtendedLSTM node 'lstm_node': input_forget must be 0"):
        _run(lstm_model(attrs), feeds)
    with pytest.raises(TypeError) as info:  # onnx.reference wraps a TypeError in its own
        _run(lstm_model(lstm_node_attrs(case)), dict(feeds, X=feeds["X"].astype(np.float64)))
    assert "ExtendedLSTM: X must be float32, got float64" in str(info.value.__cause__)


def test_in_reference_refusals_name_the_operator():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="VitisInstanceNormalization: scale must be 1-D of "
                                         "length C = 3"):
        _run(in_model("VitisInstanceNormalization"),
             {"x": x, "scale": np.ones(4, np.float32), "B": np.ones(3, np.float32)})


def test_schemas_check_and_infer():
    """onnx.checker accepts both ops under both names; shape inference gives
    y x's shape and the LSTM's outputs from X and the attributes (the default
    direction, bidirectional, included; layout 1)."""
    for op in ("ExtendedInstanceNormalization", "VitisInstanceNormalization"):
        model = in_model(op, x_shape=[1, 64, 56, 56], c=64, y_shape=["a", "b", "c", "d"])
        onnx.checker.check_model(model)
        model.graph.output[0].type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        y = inferred.graph.output[0].type.tensor_type
        assert y.elem_type == onnx.TensorProto.FLOAT
        assert [d.dim_value for d in y.shape.dim] == [1, 64, 56, 56]
    case, _ = _lstm_case()
    attrs = lstm_node_attrs(case)
    del attrs["direction"]
    h = attrs["hidden_size"]
    for op, layout, want in (("ExtendedLSTM", 0, ([7, 2, "b", h], [2, "b", h])),
                             ("VitisLSTM", 1, (["b", 7, 2, h], ["b", 2, h]))):
        x_shape = [7, "b", 5] if layout == 0 else ["b", 7, 5]
        model = lstm_model(dict(attrs, layout=layout), op, x_shape=x_shape,
                           w_shape=[2, 4 * h, 5], r_shape=[2, 4 * h, h], b_shape=[2, 8 * h],
                           outputs=("Y", "Y_h", "Y_c"),
                           y_shapes=[["s", "d", "b", "h"], ["d", "b", "h"], ["d", "b", "h"]])
        onnx.checker.check_model(model)
        for o in model.graph.output:  # what inference is to give
            o.type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        dims = [[d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim]
                for o in inferred.graph.output]
        assert dims == [want[0], want[1], want[1]], op
    with pytest.raises(onnx.checker.ValidationError, match="hidden_size"):
        bad = dict(attrs)
        del bad["hidden_size"]
        onnx.checker.check_model(lstm_model(
            bad, x_shape=[7, 1, 5], w_shape=[2, 4 * h, 5], r_shape=[2, 4 * h, h],
            b_shape=[2, 8 * h], y_shapes=[["s", "d", "b", "h"]]))
