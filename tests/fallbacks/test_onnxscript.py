"""Authoring with onnxscript, end to end (docs/guide/onnxscript.rst).

``@onnxscript.script`` functions that use ``extql.quark`` (and the legacy
``vai`` names, standard ops, the script fallbacks) are converted with
``extql.to_model_proto`` and run in onnxruntime with the library at every
optimisation level, through ``attach_fallbacks`` without it, and called
eagerly on NumPy arrays; every route gives the contract's bits
(tests/contract.py) and the NumPy API's.  The guide's code blocks run as
written.  None of it changes an onnxscript object: importing and using
extql leaves onnxscript as it was for everyone else in the process.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import onnxscript.evaluator
import onnxscript.values
import pytest
from contract import assert_same_bits, dequantize, quantize
from onnx_helpers import BF16, run_ort, run_reference
from onnxscript import (
    BFLOAT16,
    DOUBLE,
    FLOAT,
    INT16,
    INT32,
    INT64,
    UINT8,
    UINT16,
    opset12,
    opset18,
)
from onnxscript import opset21 as op

import extql
import extql.fallbacks
import extql.onnx.eager
from extql import quark
from extql.opset import vai

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "onnxscript.rst"

LEVELS = [
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
]


def special_x(shape: tuple[int, ...], span: float, seed: int) -> np.ndarray:
    """Random values of about ``span`` with NaN (two payloads), +-inf, ties
    and out-of-range values in front."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(int(np.prod(shape))) * span).astype(np.float32)
    specials = np.array(
        [np.nan, -np.inf, np.inf, 0.5, 1.5, 2.5, -2.5, 1e30, -1e30, 3.4e38, 65519.0, -0.0],
        np.float32,
    )
    specials[0] = np.array(0x7FC12345, np.uint32).view(np.float32)
    n = min(specials.size, x.size)
    x[:n] = specials[:n]
    return x.reshape(shape)


# --------------------------------------------------------------------------
# The script functions under test (onnxscript reads their source: module level).


@onnxscript.script()
def qdq_int16_axis0(x: FLOAT[3, 5], s: FLOAT[3], zp: INT16[3]) -> tuple[INT16[3, 5], FLOAT[3, 5]]:
    q = quark.ExtendedQuantizeLinear(x, s, zp, axis=0)
    return q, quark.ExtendedDequantizeLinear(q, s, zp, axis=0)


@onnxscript.script()
def qdq_bfloat16(x: FLOAT[2, 7], s: FLOAT, zp: BFLOAT16) -> tuple[BFLOAT16[2, 7], FLOAT[2, 7]]:
    q = quark.ExtendedQuantizeLinear(x, s, zp)
    return q, quark.ExtendedDequantizeLinear(q, s, zp)


@onnxscript.script()
def qdq_uint8_no_zero_point(x: FLOAT[4, 6], s: FLOAT) -> tuple[UINT8[4, 6], FLOAT[4, 6]]:
    q = quark.ExtendedQuantizeLinear(x, s)
    return q, quark.ExtendedDequantizeLinear(q, s)


@onnxscript.script()
def qdq_legacy_uint16(
    x: FLOAT[2, 4], s: FLOAT[4], zp: UINT16[4]
) -> tuple[UINT16[2, 4], FLOAT[2, 4]]:
    q = vai.VitisQuantizeLinear(x, s, zp)
    return q, vai.VitisDequantizeLinear(q, s, zp)


@onnxscript.script()
def relu_qdq_int32(x: FLOAT[2, 6], s: FLOAT, zp: INT32) -> tuple[INT32[2, 6], FLOAT[2, 6]]:
    q = quark.ExtendedQuantizeLinear(op.Relu(x), s, zp)
    return q, op.Identity(quark.ExtendedDequantizeLinear(q, s, zp))


@onnxscript.script()
def abs_qdq_opset18(x: FLOAT[8], s: FLOAT, zp: INT16) -> tuple[INT16[8], FLOAT[8]]:
    q = quark.ExtendedQuantizeLinear(opset18.Abs(x), s, zp)
    return q, quark.ExtendedDequantizeLinear(q, s, zp)


@onnxscript.script()
def qdq_int32_input(x: INT32[2, 8], s: FLOAT[8], zp: INT16[8]) -> tuple[INT16[2, 8], FLOAT[2, 8]]:
    q = quark.ExtendedQuantizeLinear(x, s, zp, axis=1)
    return q, quark.ExtendedDequantizeLinear(q, s, zp, axis=1)


def _case(fn, shape, scale, zp, axis=1, span=1e3, pre=None, opset=21):
    x = special_x(shape, span, seed=len(fn.name))
    return {"fn": fn, "x": x, "s": np.asarray(scale, np.float32),
            "zp": None if zp is None else np.asarray(zp), "axis": axis, "pre": pre,
            "opset": opset}


CASES = {
    "int16 per axis 0": _case(
        qdq_int16_axis0, (3, 5), [0.5, 2.0, 1e-3], np.array([-7, 0, 32000], np.int16), axis=0,
        span=4e4,
    ),
    "bfloat16": _case(
        qdq_bfloat16, (2, 7), 0.75, np.array(1.5, BF16), span=1e38,
    ),
    "uint8 without zero point": _case(qdq_uint8_no_zero_point, (4, 6), 0.5, None, span=300),
    "legacy uint16 per axis": _case(
        qdq_legacy_uint16, (2, 4), [1.0, 0.25, 3.0, 7.0], np.array([0, 9, 60000, 1], np.uint16),
        span=7e4,
    ),
    "int32 after Relu (opset21)": _case(
        relu_qdq_int32, (2, 6), 1e-3, np.array(-2**31 + 5, np.int32), span=3e6,
        pre=lambda x: np.where(x < 0, np.float32(0), x).astype(np.float32),
    ),
    "int16 after Abs (opset18)": _case(
        abs_qdq_opset18, (8,), 0.125, np.array(100, np.int16), span=5e3,
        pre=np.abs, opset=18,
    ),
    "int32 x per axis": _case(
        qdq_int32_input, (2, 8), [1.0, 0.5, 3.0, 1e-3, 1024.0, 7.0, 2.0**-5, 1e5],
        np.array([0, -3, 9, 0, 100, -32768, 32767, 1], np.int16),
    ),
}
# int32 x: the ends of int32, float32's exact range (2^24) and beyond, ties.
CASES["int32 x per axis"]["x"] = np.array(
    [[0, 1, -1, 3, 2**24 + 1, 16777729, 2**31 - 1, -2**31],
     [5, -5, 7, 65519, 2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 123456789, -987654]],
    np.int64).astype(np.int32)


def _feeds(case) -> dict[str, np.ndarray]:
    feeds = {"x": case["x"], "s": case["s"]}
    if case["zp"] is not None:
        feeds["zp"] = case["zp"]
    return feeds


def _expected(case) -> tuple[np.ndarray, np.ndarray]:
    """The contract's q and dequantize(q), independent of extql."""
    x = case["x"] if case["pre"] is None else case["pre"](case["x"])
    q = quantize(x, case["s"], case["zp"], axis=case["axis"])
    return q, dequantize(q, case["s"], case["zp"], axis=case["axis"])


def _numpy_api(case) -> tuple[np.ndarray, np.ndarray]:
    x = case["x"] if case["pre"] is None else case["pre"](case["x"])
    q = extql.quantize_linear(x, case["s"], case["zp"], axis=case["axis"])
    return q, extql.dequantize_linear(q, case["s"], case["zp"], axis=case["axis"])


def _outputs(model: onnx.ModelProto, got: dict) -> list[np.ndarray]:
    return [got[o.name] for o in model.graph.output]


@pytest.mark.parametrize("name", list(CASES))
def test_the_model_loads_in_every_supported_onnxruntime(name):
    case = CASES[name]
    model = extql.to_model_proto(case["fn"])
    onnx.checker.check_model(model, full_check=True)
    imports = {o.domain: o.version for o in model.opset_import}
    # ai.onnx 21 / IR 10: what onnxruntime 1.18 (the oldest supported) loads;
    # a function with standard ops keeps their opset.
    assert imports[""] == case["opset"]
    assert model.ir_version == 10
    assert imports.get(extql.DOMAIN, 1) == 1


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.name)
@pytest.mark.parametrize("name", list(CASES))
def test_converted_model_runs_with_the_library(name, level):
    case = CASES[name]
    model = extql.to_model_proto(case["fn"])
    options = extql.register(ort.SessionOptions())
    options.graph_optimization_level = level
    got = _outputs(model, run_ort(model, _feeds(case), options=options))
    for actual, expected, what in zip(got, _expected(case), ("q", "dq"), strict=True):
        assert_same_bits(actual, expected, f"{name} {what} (onnxruntime + library)")


@pytest.mark.fallback
@pytest.mark.parametrize("name", list(CASES))
def test_converted_model_runs_without_the_library_after_attach(name):
    case = CASES[name]
    model = extql.attach_fallbacks(extql.to_model_proto(case["fn"]))
    got = _outputs(model, run_ort(model, _feeds(case)))
    for actual, expected, what in zip(got, _expected(case), ("q", "dq"), strict=True):
        assert_same_bits(actual, expected, f"{name} {what} (onnxruntime, fallbacks)")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", list(CASES))
def test_eager_call_gives_the_numpy_api_bits(name):
    case = CASES[name]
    args = [case["x"], case["s"]] + ([] if case["zp"] is None else [case["zp"]])
    got = case["fn"](*args)
    for actual, expected, api, what in zip(
        got, _expected(case), _numpy_api(case), ("q", "dq"), strict=True
    ):
        assert isinstance(actual, np.ndarray)
        assert_same_bits(actual, expected, f"{name} {what} (eager)")
        assert_same_bits(actual, api, f"{name} {what} (eager vs NumPy API)")


# --------------------------------------------------------------------------
# The guide's code blocks, as written.


def _guide_source() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"^\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text, flags=re.M)
    assert len(blocks) >= 6, "the guide's python blocks were not found"
    return "\n".join(textwrap.dedent(block) for block in blocks)


@pytest.mark.usefixtures("kernel_isa")
def test_guide_code_blocks_run_as_written(tmp_path, capsys):
    # onnxscript reads a function's source from its file: the blocks are
    # written to one and run as a script.
    path = tmp_path / "onnxscript_guide.py"
    path.write_text(_guide_source(), encoding="utf-8")
    ns = runpy.run_path(str(path), run_name="__main__")
    printed = capsys.readouterr().out
    assert "10 {'com.amd.quark': 1, '': 21}" in printed
    assert re.search(r"ExtendedQuantizeLinear node \S+: the zero point 'zp' .* it is int64",
                     printed)
    x, scale, zp = ns["x"], ns["scale"], ns["zp"]
    expected = dequantize(quantize(x, scale, zp, axis=1), scale, zp, axis=1)
    for key in ("y", "y_portable", "y_eager"):
        assert_same_bits(ns[key], expected, f"guide: {key}")
    half = np.float32(0.5)
    assert_same_bits(ns["b"], quantize(x, half, np.array(0, BF16)), "guide: bfloat16")
    relu_b = np.maximum(quantize(x, half, np.array(0, BF16)).astype(np.float32), 0)
    assert ns["rb"].dtype == BF16
    assert np.array_equal(ns["rb"].astype(np.float32), relu_b), "guide: a bfloat16 Relu"
    s = ns["s"]
    relu = np.maximum(x, np.float32(0))
    assert_same_bits(ns["r"], dequantize(quantize(relu, s), s), "guide: fallbacks in a script")
    assert {f.domain for f in ns["standard_only"].functions} == {"ai.extql.fallbacks"}
    assert {n.domain for n in ns["standard_only"].graph.node} <= {"", "ai.extql.fallbacks"}


# --------------------------------------------------------------------------
# Type checking at conversion.


@onnxscript.script()
def wrong_zero_point(x: FLOAT[4], s: FLOAT, zp: INT64) -> INT64[4]:
    return quark.ExtendedQuantizeLinear(x, s, zp)


@onnxscript.script()
def wrong_x(x: DOUBLE[4], s: FLOAT, zp: INT16) -> INT16[4]:
    return quark.ExtendedQuantizeLinear(x, s, zp)


@onnxscript.script()
def wrong_scale(x: INT16[4], s: DOUBLE, zp: INT16) -> FLOAT[4]:
    return quark.ExtendedDequantizeLinear(x, s, zp)


@onnxscript.script()
def mismatched_zero_point(x: INT16[4], s: FLOAT, zp: UINT8) -> FLOAT[4]:
    return quark.ExtendedDequantizeLinear(x, s, zp)


@onnxscript.script()
def legacy_wrong_zero_point(x: FLOAT[4], s: FLOAT, zp: INT64) -> INT64[4]:
    return vai.VitisQuantizeLinear(x, s, zp)


@onnxscript.script()
def axis_out_of_range(x: FLOAT[2, 3], s: FLOAT[3], zp: INT16[3]) -> INT16[2, 3]:
    return quark.ExtendedQuantizeLinear(x, s, zp, axis=2)


@pytest.mark.parametrize(
    ("fn", "error", "pattern"),
    [
        (wrong_zero_point, TypeError,
         r"^ExtendedQuantizeLinear node \S+: the zero point 'zp' must be one of .*it is int64$"),
        (wrong_x, TypeError,
         r"^ExtendedQuantizeLinear node \S+: x 'x' must be one of float32, float16, bfloat16, "
         r"int32, it is double$"),
        (wrong_scale, TypeError,
         r"^ExtendedDequantizeLinear node \S+: the scale 's' must be one of float32, float16, "
         r"bfloat16, float8e8m0, it is double$"),
        (mismatched_zero_point, TypeError,
         r"^ExtendedDequantizeLinear node \S+: the zero point 'zp' must have the type of x "
         r"\(int16\), it is uint8$"),
        (legacy_wrong_zero_point, TypeError, r"^VitisQuantizeLinear node \S+: the zero point"),
        (axis_out_of_range, ValueError,
         r"^ExtendedQuantizeLinear node \S+: axis 2 is out of range for x of rank 2$"),
    ],
    ids=lambda v: getattr(v, "name", None) or getattr(v, "__name__", "re"),
)
def test_conversion_reports_a_wrong_input_naming_the_operator(fn, error, pattern):
    with pytest.raises(error, match=pattern):
        extql.to_model_proto(fn)


def test_unknown_types_are_left_to_run_time():
    @onnxscript.script()
    def untyped(x, s, zp):
        return quark.ExtendedQuantizeLinear(x, s, zp)

    model = extql.to_model_proto(untyped)
    assert [n.op_type for n in model.graph.node] == ["ExtendedQuantizeLinear"]


# --------------------------------------------------------------------------
# What the conversion keeps as onnxscript makes it.


@onnxscript.script()
def standard_only(x: FLOAT[4]) -> FLOAT[4]:
    return opset18.Abs(x)


def test_models_without_extql_ops_are_untouched():
    assert extql.to_model_proto(standard_only) == standard_only.to_model_proto()


def test_onnxscripts_own_conversion_is_onnxscripts():
    """``fn.to_model_proto()`` is onnxscript's, unchanged: the ai.onnx opset
    it picks for a function of extql ops only is the installed onnx's newest
    (what extql.to_model_proto replaces), and it refuses a function that
    calls a fallback, whose calls it would not spell out."""
    plain = qdq_uint8_no_zero_point.to_model_proto()
    imports = {o.domain: o.version for o in plain.opset_import}
    assert imports[""] == onnx.defs.onnx_opset_version()
    assert [n.op_type for n in plain.graph.node] == [
        n.op_type for n in extql.to_model_proto(qdq_uint8_no_zero_point).graph.node]
    with pytest.raises(TypeError, match=r"^extql fallback ExtendedQuantizeLinear_int16: .*"
                                        r"extql\.to_model_proto\(fn\)"):
        three_fallbacks.to_model_proto()
    with pytest.raises(TypeError, match="expected an onnxscript function"):
        extql.to_model_proto(lambda x: x)


def test_an_explicit_opset_version_is_kept():
    model = extql.to_model_proto(qdq_uint8_no_zero_point, opset_version=17)
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    assert model.ir_version == 10  # onnxscript's choice: never below 10


# --------------------------------------------------------------------------
# Eager details.


@pytest.mark.usefixtures("kernel_isa")
def test_one_op_outside_a_function_returns_an_onnxscript_tensor():
    x = special_x((2, 3), 100.0, seed=1)
    s, zp = np.array(0.5, np.float32), np.array(3, np.int16)
    q = quark.ExtendedQuantizeLinear(x, s, zp)
    assert_same_bits(q.value, quantize(x, s, zp), "one eager op")
    y = quark.ExtendedDequantizeLinear(q, s, zp)
    assert_same_bits(y.value, dequantize(q.value, s, zp), "one eager op (dequantize)")


@pytest.mark.usefixtures("kernel_isa")
def test_eager_scalars_are_zero_d_arrays():
    x = special_x((4, 6), 100.0, seed=2)
    s = np.array(0.5, np.float32)
    q, y = qdq_uint8_no_zero_point(x, s)
    assert_same_bits(q, quantize(x, s), "0-d scale")
    # onnxscript refuses NumPy scalars itself (the guide shows the 0-d array).
    with pytest.raises(TypeError, match="Unexpected input type"):
        qdq_uint8_no_zero_point(x, np.float32(0.5))
    # A Python float arrives as float64, which the operator rejects by name.
    with pytest.raises(TypeError, match="^ExtendedQuantizeLinear: y_scale must be one of "
                                        "float32, float16, bfloat16, float8e8m0, int32, "
                                        "got float64"):
        qdq_uint8_no_zero_point(x, 0.5)


def test_eager_bad_inputs_name_the_operator():
    x = np.zeros((2, 3), np.float32)
    s = np.array(1.0, np.float32)
    with pytest.raises(TypeError, match="^ExtendedQuantizeLinear: y_zero_point must be one of"):
        quark.ExtendedQuantizeLinear(x, s, np.array(0, np.int64))
    with pytest.raises(TypeError, match="^ExtendedQuantizeLinear: unknown attribute 'block'"):
        quark.ExtendedQuantizeLinear(x, s, block=2)
    with pytest.raises(ValueError, match="^ExtendedDequantizeLinear: .*axis"):
        quark.ExtendedDequantizeLinear(np.zeros((2, 3), np.int8), np.ones(3, np.float32),
                                       axis=5)


@pytest.mark.usefixtures("kernel_isa")
def test_the_evaluator_wraps_another_one():
    """With onnx.reference for the standard ops, the Extended ops still run
    on the kernels."""
    case = CASES["int32 after Relu (opset21)"]
    wrapped = extql.onnx.eager.Evaluator(onnxscript.evaluator.OnnxReferenceRuntimeEvaluator())
    with onnxscript.evaluator.default_as(wrapped):
        got = case["fn"](case["x"], case["s"], case["zp"])
    for actual, expected in zip(got, _expected(case), strict=True):
        assert_same_bits(actual, expected, "reference evaluator + kernels")
    assert not isinstance(onnxscript.evaluator.default(), extql.onnx.eager.Evaluator)


@pytest.mark.usefixtures("kernel_isa")
def test_the_evaluator_runs_a_plain_opsets_extended_ops():
    """An ``Opset`` of com.amd.quark made with onnxscript's own class (its ops
    are plain ``Op``): under the Evaluator its calls run on the kernels."""
    plain = onnxscript.values.Opset(extql.DOMAIN, 1)
    assert type(plain.ExtendedQuantizeLinear) is onnxscript.values.Op
    x = special_x((3, 4), 300.0, seed=3)
    s, zp = np.array(0.5, np.float32), np.array(-3, np.int16)
    with onnxscript.evaluator.default_as(extql.onnx.eager.Evaluator()):
        q = plain.ExtendedQuantizeLinear(x, s, zp)
    assert_same_bits(q.value, quantize(x, s, zp), "plain opset under the Evaluator")


# --------------------------------------------------------------------------
# The fallback decompositions called from a user's script functions.

q_int16 = extql.fallbacks.QUANTIZE["int16"]
dq_int16 = extql.fallbacks.DEQUANTIZE["int16"]
q_bf16 = extql.fallbacks.QUANTIZE["bfloat16"]
dq_bf16 = extql.fallbacks.DEQUANTIZE["bfloat16"]
q_u8 = extql.fallbacks.QUANTIZE["default"]
dq_u8 = extql.fallbacks.DEQUANTIZE["default"]


@onnxscript.script(default_opset=op)
def three_fallbacks(
    x: FLOAT[3, 4], s: FLOAT[3], zp: INT16[3], t: FLOAT, bz: BFLOAT16
) -> tuple[FLOAT[3, 4], BFLOAT16[3, 4], FLOAT[3, 4], UINT8[3, 4]]:
    a = dq_int16(q_int16(x, s, zp, axis=0), s, zp, axis=0)
    b = q_bf16(x, t, bz)
    c = q_u8(x, t)
    return a, b, dq_bf16(b, t, bz), c


@onnxscript.script(default_opset=opset18)
def fallback_at_opset18(x: FLOAT[5], t: FLOAT) -> UINT8[5]:
    return opset18.Identity(q_u8(x, t))


@onnxscript.script(default_opset=opset12)
def fallback_at_opset12(x: FLOAT[5], t: FLOAT) -> UINT8[5]:
    return opset12.Identity(q_u8(x, t))


def _three_fallbacks_expected(x, s, zp, t, bz):
    return [
        dequantize(quantize(x, s, zp, axis=0), s, zp, axis=0),
        quantize(x, t, bz),
        dequantize(quantize(x, t, bz), t, bz),
        quantize(x, t),
    ]


THREE = {
    "x": special_x((3, 4), 3e4, seed=5),
    "s": np.array([0.5, 2.0, 1e-3], np.float32),
    "zp": np.array([-3, 0, 17], np.int16),
    "t": np.array(0.25, np.float32),
    "bz": np.array(-1.5, BF16),
}


@pytest.mark.fallback
@pytest.mark.parametrize("runner", ["onnxruntime", "reference"])
def test_fallbacks_called_from_a_script_run_anywhere(runner):
    model = extql.to_model_proto(three_fallbacks)
    onnx.checker.check_model(model, full_check=True)
    names = sorted(f.name for f in model.functions)
    assert names == sorted(
        ["ExtendedQuantizeLinear_int16", "ExtendedDequantizeLinear_int16",
         "ExtendedQuantizeLinear_bfloat16", "ExtendedDequantizeLinear_bfloat16",
         "ExtendedQuantizeLinear_default"]
    )
    assert {n.domain for f in model.functions for n in f.node} == {""}
    run = run_ort if runner == "onnxruntime" else run_reference
    got = _outputs(model, run(model, dict(THREE)))
    for i, (actual, expected) in enumerate(
        zip(got, _three_fallbacks_expected(**THREE), strict=True)
    ):
        assert_same_bits(actual, expected, f"fallbacks in a script, output {i} ({runner})")


def test_fallbacks_called_eagerly():
    got = three_fallbacks(*THREE.values())
    for i, (actual, expected) in enumerate(
        zip(got, _three_fallbacks_expected(**THREE), strict=True)
    ):
        assert_same_bits(actual, expected, f"eager fallbacks, output {i}")


def test_fallback_functions_take_the_model_opset():
    model = extql.to_model_proto(fallback_at_opset18)
    onnx.checker.check_model(model, full_check=True)
    (fn,) = model.functions
    assert {o.domain: o.version for o in fn.opset_import} == {"": 18}
    x = special_x((5,), 300.0, seed=6)
    t = np.array(0.5, np.float32)
    (got,) = _outputs(model, run_ort(model, {"x": x, "t": t}))
    assert_same_bits(got, quantize(x, t), "fallback at opset 18")
    with pytest.raises(ValueError, match="^extql fallback ExtendedQuantizeLinear_default: "
                                         "needs an ai.onnx opset >= 13"):
        extql.to_model_proto(fallback_at_opset12)


def test_fallback_repr_and_standalone_conversion():
    assert "QUANTIZE['int16']" in repr(q_int16)
    with pytest.raises(TypeError, match="call from a @onnxscript.script function"):
        q_int16.to_model_proto()
    proto = dq_bf16.to_function_proto()
    assert list(proto.input) == ["x", "x_scale", "x_zero_point"]
    assert list(proto.attribute) == []
    assert [a.name for a in proto.attribute_proto] == ["axis", "block_size", "output_dtype"]


# --------------------------------------------------------------------------
# In a fresh interpreter: one import is all the set-up.

FRESH = '''
import numpy as np
import onnxruntime as ort
import onnxscript
from onnxscript import FLOAT, INT16
import extql
from extql import quark

@onnxscript.script()
def f(x: FLOAT[2, 3], s: FLOAT[3], zp: INT16[3]) -> INT16[2, 3]:
    return quark.ExtendedQuantizeLinear(x, s, zp)

x = np.array([[1.5, -2.5, 1e9], [np.nan, 0.25, -7.0]], np.float32)
s, zp = np.array([0.5, 1.0, 2.0], np.float32), np.array([1, -1, 3], np.int16)
model = extql.to_model_proto(f)
sess = ort.InferenceSession(model.SerializeToString(), extql.register(ort.SessionOptions()),
                           providers=["CPUExecutionProvider"])
np.save("ort.npy", sess.run(None, {"x": x, "s": s, "zp": zp})[0])
np.save("eager.npy", f(x, s, zp))
np.save("inputs.npy", x)
print(model.ir_version, sorted((o.domain, o.version) for o in model.opset_import))
'''


def test_one_import_is_all_the_set_up(tmp_path):
    script = tmp_path / "fresh.py"
    script.write_text(FRESH, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "10 [('', 21), ('com.amd.quark', 1)]"
    x = np.load(tmp_path / "inputs.npy")
    s, zp = np.array([0.5, 1.0, 2.0], np.float32), np.array([1, -1, 3], np.int16)
    for name in ("ort", "eager"):
        assert_same_bits(np.load(tmp_path / f"{name}.npy"), quantize(x, s, zp), name)


# --------------------------------------------------------------------------
# Nothing of onnxscript is changed, for anyone: importing every extql module
# and using the authoring routes leaves every attribute of every onnxscript
# module and class as it was (a fresh process; the onnxscript modules that
# extql loads are imported first, so that each one is compared).

WORKLOAD = """
import importlib, os, pkgutil
import numpy as np
import extql, extql.opset, extql.tools, extql.fallbacks, extql.reference
from extql import quark
# Every Python module of the package; the onnxruntime library beside them
# (libextql_ort.so) is a shared library, not an extension module.
library = "extql." + os.path.basename(extql.get_library_path()).split(".")[0]
for info in pkgutil.walk_packages(extql.__path__, "extql."):
    if info.name != library:
        importlib.import_module(info.name)
"""

USE = """
import onnxscript
from onnxscript import FLOAT, INT16, opset21 as op

q16 = extql.fallbacks.QUANTIZE["int16"]

@onnxscript.script()
def f(x: FLOAT[2, 3], s: FLOAT, zp: INT16) -> tuple[INT16[2, 3], FLOAT[2, 3]]:
    q = quark.ExtendedQuantizeLinear(x, s, zp)
    return q16(op.Relu(x), s, zp), quark.ExtendedDequantizeLinear(q, s, zp)

x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
f(x, np.array(0.5, np.float32), np.array(1, np.int16))
extql.to_model_proto(f)
extql.fallbacks.QUANTIZE["bfloat16"](x, np.array(0.5, np.float32),
                                     np.array(0, extql.rules.types.QTYPES["bfloat16"].dtype))
"""

SNAPSHOT = """
import json, sys

def onnxscript_modules():
    return sorted(m for m in sys.modules if m == "onnxscript" or m.startswith("onnxscript."))

def snapshot():
    # (module, attribute[, class attribute]) -> the object, for every
    # onnxscript module loaded and every class defined in one.
    out = {}
    for name in onnxscript_modules():
        module = sys.modules[name]
        if module is None:
            continue
        out[(name,)] = module
        for attr, value in list(vars(module).items()):
            out[(name, attr)] = value
            if isinstance(value, type) and value.__module__ == name:
                for class_attr, class_value in list(vars(value).items()):
                    out[(name, attr, class_attr)] = class_value
    return out

def changes(before, after):
    return sorted(".".join(k) for k in set(before) | set(after)
                  if k not in before or k not in after or before[k] is not after[k])
"""


def _run_file(path: Path, code: str) -> list:
    """Run ``code`` as a script (onnxscript reads its functions' source from
    the file); its last line of output, as JSON."""
    path.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=300, cwd=path.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_and_using_extql_changes_no_onnxscript_object(tmp_path):
    modules = _run_file(tmp_path / "probe.py", SNAPSHOT + WORKLOAD + USE
                        + "print(json.dumps(onnxscript_modules()))\n")
    assert "onnxscript._internal.evaluator" in modules
    child = (SNAPSHOT + "import importlib\n"
             + "".join(f"importlib.import_module({m!r})\n" for m in modules)
             + "loaded = onnxscript_modules()\nbefore = snapshot()\n" + WORKLOAD
             + "imported = changes(before, snapshot())\n" + USE
             + "used = changes(before, snapshot())\n"
             + "new = sorted(set(onnxscript_modules()) - set(loaded))\n"
             + "print(json.dumps([imported, used, new]))\n")
    imported, used, new = _run_file(tmp_path / "child.py", child)
    assert imported == [], f"importing extql changed onnxscript: {imported}"
    assert used == [], f"using extql's authoring routes changed onnxscript: {used}"
    assert new == [], f"onnxscript modules the probe did not load: {new}"


def test_the_snapshot_sees_a_patch(tmp_path):
    """The comparison above, on a process that does patch onnxscript."""
    child = (SNAPSHOT + "import onnxscript.evaluator, onnxscript.values\n"
             "before = snapshot()\n"
             "onnxscript.evaluator.set_default("
             "onnxscript.evaluator.OnnxReferenceRuntimeEvaluator())\n"
             "onnxscript.values.OnnxFunction.to_model_proto = lambda self: None\n"
             "print(json.dumps(changes(before, snapshot())))\n")
    found = _run_file(tmp_path / "patch.py", child)
    assert "onnxscript._internal.evaluator._default_evaluator" in found
    assert "onnxscript._internal.values.OnnxFunction.to_model_proto" in found
