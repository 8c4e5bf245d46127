"""Every fallback at every onnxruntime optimisation level (no extql library).

onnxruntime rewrites the decomposed graph before it runs it: constant folding,
and no-op elimination, which drops ``Add(v, 0)`` when the 0 is a constant.
That rewrite is wrong for ``v = -0`` (``-0 + +0`` is ``+0``), so a float16 /
bfloat16 quantize of x = -0.0 with a zero point +0 stored as an initializer
would give 0x8000.  The fallbacks must give the contract's bits whatever the
level; here each variant (every type, quantize and dequantize, zero point
absent / zero / negative zero / random) runs at disabled, basic, extended and
all, through attach_fallbacks and through inline_fallbacks, and is compared
with tests/contract.py.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from onnx_helpers import qdq_model, run_ort

import extql

pytestmark = pytest.mark.fallback

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
PASSES = {"attach": extql.attach_fallbacks, "inline": extql.inline_fallbacks}

# x: signed zeros, tiny values that cancel with the zero point, NaN, inf, ties.
X = np.array(
    [-0.0, 0.0, -0.0, 0.0, 1.0, -1.0, 2.5, -2.5, 0.5, -0.5, 3.0, -3.0, np.nan, np.inf,
     -np.inf, 1e-45, -1e-45, 65520.0, -70000.0, 1e30, 127.5, -128.5, 32767.5, 4e9],
    np.float32,
)


def _zero_points(qtype: str) -> dict[str, np.ndarray]:
    dt = TYPES[qtype][0]
    zps = {"zero": np.zeros((), dt)}
    if qtype in FLOAT_TYPES:
        zps["negzero"] = np.array(-0.0, np.float32).astype(dt)
        zps["value"] = np.array(-3.0, np.float32).astype(dt)
    else:
        lo, hi = TYPES[qtype][1], TYPES[qtype][2]
        zps["value"] = np.array(int(lo) // 3 + int(hi) // 3, np.int64).astype(dt)
    return zps


CASES = [(q, name) for q in TYPES for name in _zero_points(q)] + [("uint8", "absent")]


def _options(level: str) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    return options


@pytest.mark.parametrize("how", list(PASSES))
@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("qtype,zp_name", CASES, ids=[f"{q}-{z}" for q, z in CASES])
def test_quantize_every_level(qtype, zp_name, level, how):
    zp = None if zp_name == "absent" else _zero_points(qtype)[zp_name]
    scale = np.float32(1.0)
    model = PASSES[how](qdq_model(qtype if zp is not None else None, [X.size], scale, zp,
                                  chain="q", opset=17))
    got = run_ort(model, {"x": X}, options=_options(level))["y"]
    assert_same_bits(got, quantize(X, scale, zp), f"{how} {level} {qtype} zp={zp_name}")


@pytest.mark.parametrize("how", list(PASSES))
@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("qtype,zp_name", CASES, ids=[f"{q}-{z}" for q, z in CASES])
def test_dequantize_every_level(qtype, zp_name, level, how):
    dt = TYPES[qtype][0]
    zp = None if zp_name == "absent" else _zero_points(qtype)[zp_name]
    if qtype in FLOAT_TYPES:
        with np.errstate(over="ignore"):  # 1e30 and 4e9 become inf in float16
            x = X.astype(dt)
    else:
        lo, hi = TYPES[qtype][1], TYPES[qtype][2]
        x = np.array([lo, hi, 0, 1, -1 if lo < 0 else 2, hi // 2], np.int64).astype(dt)
    scale = np.float32(0.5)
    model = PASSES[how](qdq_model(qtype if zp is not None else None, [x.size], scale, zp,
                                  chain="dq", opset=17))
    got = run_ort(model, {"x": x}, options=_options(level))["z"]
    assert_same_bits(got, dequantize(x, scale, zp), f"{how} {level} {qtype} zp={zp_name}")


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("qtype", FLOAT_TYPES)
def test_negative_zero_with_zero_point_initializer(qtype, level):
    """The case onnxruntime's no-op elimination broke: -0.0 / 1 + (+0) is +0."""
    zp = np.zeros((), TYPES[qtype][0])
    x = np.array([-0.0, 0.0], np.float32)
    model = extql.attach_fallbacks(qdq_model(qtype, [2], np.float32(1.0), zp, chain="q"))
    got = run_ort(model, {"x": x}, options=_options(level))["y"]
    assert got.view(np.uint16).tolist() == [0x0000, 0x0000]
