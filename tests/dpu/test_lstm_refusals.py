"""ExtendedLSTM's refusals in Python (the NumPy API and extql.rules.lstm, which
the reference op and ``extql check`` read): every one names the operator and
the problem, as a TypeError / ValueError, never a crash or a silent answer."""

from __future__ import annotations

import numpy as np
import pytest
from lstm_cases import make_case

import extql
from extql.rules import lstm as rules

pytestmark = pytest.mark.usefixtures("kernel_isa")


@pytest.fixture(scope="module")
def case():
    return make_case(np.random.default_rng(1), 4, 6, 5, batch=2, symmetric=True)


def call(case, **change):
    attrs, feeds = case
    args = {"x": feeds["X"], "w": feeds["W"], "r": feeds["R"], "b": feeds["B"]}
    kw = dict(attrs)
    for k, v in change.items():
        (args if k in args else kw)[k] = v
    return extql.extended_lstm(args.pop("x"), args.pop("w"), args.pop("r"), args.pop("b"),
                               **kw)


def test_the_case_runs(case):
    assert call(case).shape == (4, 2, 2, 5)


@pytest.mark.parametrize(("change", "words"), [
    ({"hidden_size": 0}, "hidden_size must be at least 1"),
    ({"hidden_size": 4}, "W must have shape [2, 16, 6]"),
    ({"hidden_size": None}, "missing required attribute(s) hidden_size"),
    ({"y_scale": None}, "missing required attribute(s) y_scale"),
    ({"x_scale": 0.0}, "x_scale must be a positive finite"),
    ({"w_scale": -1e-3}, "w_scale must be a positive finite"),
    ({"r_scale": float("nan")}, "r_scale must be a positive finite"),
    ({"b_scale": 1e39}, "b_scale must be a positive finite"),
    ({"y_scale": 1e-50}, "y_scale must be a positive finite"),
    ({"x_zero_point": 65536}, "x_zero_point must be a uint16 value"),
    ({"y_zero_point": -1}, "y_zero_point must be a uint16 value"),
    ({"direction": "both"}, "direction must be one of"),
    ({"layout": 2}, "layout must be 0 or 1"),
    ({"direction": "forward"}, "W must have shape [1, 20, 6] (direction 'forward'"),
    # oh = 24 + 16 - ceil(log2(1 / 0.05)) = 35
    ({"y_scale": 0.05}, "shift oh = 35 from y_scale is outside [0, 32]"),
    # ax = 15 - ceil(log2(0.25 * 2^24)) = -7; 15 - ceil(log2(1e-14 * 2^24)) = 37
    ({"x_scale": 0.5, "w_scale": 0.5}, "shift ax = -7 from x_scale * w_scale"),
    ({"x_scale": 1e-7, "w_scale": 1e-7}, "shift ax = 37"),
    ({"r": np.zeros((2, 20, 4), np.float32)}, "R must have shape [2, 20, 5]"),
    ({"b": np.zeros((2, 20), np.float32)}, "B must have shape [2, 40]"),
    ({"x": np.zeros((4, 6), np.float32)}, "X must have rank 3"),
    ({"x": np.zeros((4, 1, 0), np.float32)}, "X's input size must be at least 1"),
])
def test_value_refusals(case, change, words):
    with pytest.raises(ValueError, match="ExtendedLSTM") as info:
        call(case, **change)
    assert words in str(info.value)


@pytest.mark.parametrize(("change", "words"), [
    ({"x": np.zeros((4, 2, 6), np.float64)}, "X must be float32, got float64"),
    ({"w": np.zeros((2, 20, 6), np.int16)}, "W must be float32, got int16"),
    ({"b": np.zeros((2, 40), np.float16)}, "B must be float32, got float16"),
    ({"hidden_size": 5.0}, "hidden_size must be an integer"),
    ({"x_zero_point": "32768"}, "x_zero_point must be an integer"),
    ({"y_scale": "0.1"}, "y_scale must be a float"),
    ({"layout": True}, "layout must be an integer"),
])
def test_type_refusals(case, change, words):
    with pytest.raises(TypeError, match="ExtendedLSTM") as info:
        call(case, **change)
    assert words in str(info.value)


@pytest.mark.parametrize("outputs", ["", "Y,Y", "Z", "Y_h,Q"])
def test_outputs_refusal(case, outputs):
    with pytest.raises(ValueError, match="outputs must name"):
        call(case, outputs=outputs)


def _attrs(case, **kw):
    return {**case[0], **kw}


@pytest.mark.parametrize(("change", "words"), [
    ({"input_forget": 1}, "input_forget must be 0"),
    ({"activations": ["Sigmoid", "Tanh", "Tanh"]}, "activations is not supported"),
    ({"clip": 3.0}, "clip is not supported"),
    ({"activation_alpha": [1.0]}, "activation_alpha is not supported"),
    ({"bogus": 1}, "unknown attribute 'bogus'"),
])
def test_node_attribute_refusals(case, change, words):
    with pytest.raises(ValueError, match="VitisLSTM node 'n7'") as info:
        rules.check_lstm(_attrs(case, **change), rules.LEGACY_OP, "n7")
    assert words in str(info.value)


def test_missing_attributes_are_all_named(case):
    attrs = {k: v for k, v in case[0].items() if k not in ("x_scale", "b_zero_point")}
    with pytest.raises(ValueError, match="x_scale, b_zero_point"):
        rules.check_lstm(attrs)


def test_optional_onnx_inputs_are_named():
    names = [name for name, _ in rules.REFUSED_INPUTS.values()]
    assert names == ["sequence_lens", "initial_h", "initial_c", "P"]
    assert rules.INPUTS == ("X", "W", "R", "B") and rules.OUTPUTS == ("Y", "Y_h", "Y_c")
