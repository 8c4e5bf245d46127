"""Bad models and bad inputs fail with an onnxruntime error that names the
operator and the problem -- never a crash.

Every case runs in one child process (this file run as a script), which
reports each case as it finishes; a crash (abort, segfault) of the child is
therefore seen, and pinned on the case that was running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

Q, DQ = "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"
F32 = np.float32

# name -> (operator named in the message, words of the problem)
EXPECT: dict[str, tuple[str, str]] = {
    "q_x_int8": (Q, "x must be one of float32, float16, bfloat16, int32, got int8"),
    "q_x_float64": (Q, "x must be one of float32, float16, bfloat16, int32, got float64"),
    "q_scale_int16": (Q, "y_scale must be one of float32, float16, bfloat16, int32, got int16"),
    "q_x_int32_scale_int64": (Q, "y_scale must be one of float32, float16, bfloat16, int32, "
                                 "got int64"),
    "q_precision_int8": (Q, "the attribute precision must be one of float32, float16, bfloat16, "
                            "float64, got int8"),
    "q_output_dtype_float32": (Q, "the attribute output_dtype must be one of int8"),
    "q_output_dtype_not_zp": (Q, "the attribute output_dtype (int8) must be the zero point's "
                                 "type int16"),
    "dq_output_dtype_int8": (DQ, "the attribute output_dtype must be one of float32, float16, "
                                 "bfloat16, got int8"),
    "q_zp_int64": (Q, "y_zero_point must be one of"),
    "q_zp_float32": (Q, "y_zero_point must be one of"),
    "dq_x_float32": (DQ, "x must be one of"),
    "dq_zp_type_differs": (DQ, "x_zero_point must have the dtype of x (int8), got uint8"),
    "dq_scale_int32": (DQ, "x_scale must be one of float32, float16, bfloat16, got int32"),
    "q_axis_out_of_range": (Q, "axis 3 is out of range for x of rank 3"),
    "q_axis_negative_out_of_range": (Q, "axis -4 is out of range for x of rank 3"),
    "dq_axis_out_of_range": (DQ, "axis 5 is out of range for x of rank 2"),
    "q_scale_length": (Q, "the scale has 4 elements but x has 3 along axis 1"),
    "dq_scale_length": (DQ, "the scale has 2 elements but x has 5 along axis 2"),
    "q_scale_rank2": (Q, "the scale must be a scalar or 1-D, got shape (1, 3)"),
    "dq_scale_rank2": (DQ, "the scale must be a scalar or 1-D, got shape (3, 1)"),
    "q_zp_shape_per_axis": (Q, "the zero point must have the shape of the scale (3,), got (2,)"),
    "dq_zp_shape_per_tensor": (DQ, "the zero point must have the shape of the scale (), got (2,)"),
    "q_zp_rank2_per_tensor": (
        Q, "the zero point must have the shape of the scale (1,), got (1, 1)"
    ),
    "q_zp_scalar_per_axis": (Q, "the zero point must have the shape of the scale (3,), got ()"),
    "q_scalar_x_per_axis": (Q, "needs x of rank >= 1, got a scalar"),
    "q_runtime_scale_length": (Q, "the scale has 7 elements but x has 3 along axis 1"),
    "dq_runtime_zp_shape": (DQ, "the zero point must have the shape of the scale (4,), got (3,)"),
    "q_axis_float_attribute": (Q, "the attribute axis must be an integer"),
    "vitis_q_axis_out_of_range": ("VitisQuantizeLinear", "axis 2 is out of range"),
    "vitis_dq_zp_type_differs": ("VitisDequantizeLinear", "x_zero_point must have the dtype of x"),
    "q_empty_x_bad_scale": (Q, "the scale has 2 elements but x has 3 along axis 1"),
    # Regressions found by the structure fuzzer (tests/ort/test_fuzz_structure.py):
    # an axis of another attribute type was silently read as the default 1 ...
    "q_axis_string_attribute": (Q, "the attribute axis must be an integer, got the string '0'"),
    "q_axis_ints_attribute": (Q, "the attribute axis must be an integer, got an attribute of"),
    "dq_axis_floats_attribute": (DQ, "the attribute axis must be an integer, got an attribute"),
    "q_axis_tensor_attribute": (Q, "the attribute axis must be an integer, got an attribute of"),
    "vitis_q_axis_string_attribute": ("VitisQuantizeLinear", "axis must be an integer"),
    # ... and with the output's type declared, types that fit no typed
    # registration met onnxruntime's generic "Type Error" first.
    "dq_scale_int8_output_declared": (DQ, "x_scale must be one of float32, float16, bfloat16, "
                                          "got int8"),
    "dq_x_float32_output_declared": (DQ, "x must be one of"),
    "q_x_int8_no_zp_output_declared": (Q, "x must be one of float32, float16, bfloat16, int32, "
                                          "got int8"),
    "q_scale_int16_zp_int16_output_declared": (Q, "y_scale must be one of float32, float16, "
                                                  "bfloat16, int32, got int16"),
    "q_zp_float32_output_declared": (Q, "y_zero_point must be one of"),
}


def _cases():
    """name -> (model, feeds); built in the child only."""
    import onnx
    from onnx import helper
    from ortutil import make_model, tensor, value_info

    def node(op, names, inits, inputs, feeds, domain="com.amd.quark", out_type=None, **attrs):
        n = helper.make_node(op, names, ["y"], domain=domain, name="bad", **attrs)
        outs = [value_info("y", out_type)]
        return make_model([n], inputs, outs, inits, domains=(domain,)), feeds

    def q(x, s, zp=None, *, runtime=(), op=Q, domain="com.amd.quark", **attrs):
        values = {"x": np.asarray(x), "s": np.asarray(s)}
        if zp is not None:
            values["z"] = np.asarray(zp)
        inputs, inits, feeds = [], [], {}
        for name, v in values.items():
            if name == "x" or name in runtime:
                inputs.append(value_info(name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype),
                                         v.shape))
                feeds[name] = v
            else:
                inits.append(tensor(name, v))
        return node(op, list(values), inits, inputs, feeds, domain=domain, **attrs)

    x3 = np.ones((2, 3, 5), F32)
    i8 = np.ones((2, 3, 5), np.int8)
    return {
        "q_x_int8": q(i8, F32(1), np.int8(0)),
        "q_x_float64": q(x3.astype(np.float64), F32(1), np.int8(0)),
        "q_scale_int16": q(x3, np.int16(1), np.int8(0)),
        "q_x_int32_scale_int64": q(x3.astype(np.int32), np.int64(1), np.int8(0)),
        "q_precision_int8": q(x3, F32(1), np.int8(0), precision=onnx.TensorProto.INT8),
        "q_output_dtype_float32": q(x3, F32(1), output_dtype=onnx.TensorProto.FLOAT),
        "q_output_dtype_not_zp": q(x3, F32(1), np.int16(0), output_dtype=onnx.TensorProto.INT8),
        "dq_output_dtype_int8": q(i8, F32(1), np.int8(0), op=DQ,
                                  output_dtype=onnx.TensorProto.INT8),
        "q_zp_int64": q(x3, F32(1), np.int64(0)),
        "q_zp_float32": q(x3, F32(1), F32(0)),
        "dq_x_float32": q(x3, F32(1), op=DQ),
        "dq_zp_type_differs": q(i8, F32(1), np.uint8(0), op=DQ),
        "dq_scale_int32": q(i8, np.int32(1), np.int8(0), op=DQ),
        "q_axis_out_of_range": q(x3, np.ones(3, F32), np.zeros(3, np.int8), axis=3),
        "q_axis_negative_out_of_range": q(x3, np.ones(3, F32), np.zeros(3, np.int8), axis=-4),
        "dq_axis_out_of_range": q(np.ones((3, 4), np.int8), np.ones(3, F32), op=DQ, axis=5),
        "q_scale_length": q(x3, np.ones(4, F32), np.zeros(4, np.uint8)),
        "dq_scale_length": q(i8, np.ones(2, F32), np.zeros(2, np.int8), op=DQ, axis=2),
        "q_scale_rank2": q(x3, np.ones((1, 3), F32), np.zeros((1, 3), np.int8)),
        "dq_scale_rank2": q(i8, np.ones((3, 1), F32), op=DQ),
        "q_zp_shape_per_axis": q(x3, np.ones(3, F32), np.zeros(2, np.int8)),
        "dq_zp_shape_per_tensor": q(i8, F32(1), np.zeros(2, np.int8), op=DQ),
        "q_zp_rank2_per_tensor": q(x3, np.ones(1, F32), np.zeros((1, 1), np.int8)),
        "q_zp_scalar_per_axis": q(x3, np.ones(3, F32), np.int8(0)),
        "q_scalar_x_per_axis": q(F32(1), np.ones(3, F32), np.zeros(3, np.int8)),
        "q_runtime_scale_length": q(x3, np.ones(7, F32), runtime=("s",)),
        "dq_runtime_zp_shape": q(np.ones((4, 4), np.int8), np.ones(4, F32),
                                 np.zeros(3, np.int8), runtime=("s", "z"), op=DQ),
        "q_axis_float_attribute": q(x3, np.ones(3, F32), np.zeros(3, np.int8), axis=1.0),
        "vitis_q_axis_out_of_range": q(np.ones((2, 2), F32), np.ones(2, F32), np.zeros(2, np.int8),
                                       op="VitisQuantizeLinear", domain="com.vai.quantize",
                                       axis=2),
        "vitis_dq_zp_type_differs": q(i8, F32(1), np.int16(0), op="VitisDequantizeLinear",
                                      domain="com.vai.quantize"),
        "q_empty_x_bad_scale": q(np.ones((0, 3), F32), np.ones(2, F32), np.zeros(2, np.int8)),
        "q_axis_string_attribute": q(np.ones((4, 4), F32), np.ones(4, F32), np.zeros(4, np.int8),
                                     axis="0"),
        "q_axis_ints_attribute": q(np.ones((4, 4), F32), np.ones(4, F32), np.zeros(4, np.int8),
                                   axis=[0]),
        "dq_axis_floats_attribute": q(np.ones((4, 4), np.int8), np.ones(4, F32), op=DQ,
                                      axis=[0.0]),
        "q_axis_tensor_attribute": q(np.ones((4, 4), F32), np.ones(4, F32), np.zeros(4, np.int8),
                                     axis=helper.make_tensor("a", onnx.TensorProto.INT64, [], [0])),
        "vitis_q_axis_string_attribute": q(np.ones((2, 2), F32), np.ones(2, F32),
                                           np.zeros(2, np.int8), op="VitisQuantizeLinear",
                                           domain="com.vai.quantize", axis="0"),
        "dq_scale_int8_output_declared": q(i8, np.int8(1), np.int8(0), op=DQ,
                                           out_type=onnx.TensorProto.FLOAT),
        "dq_x_float32_output_declared": q(x3, F32(1), op=DQ, out_type=onnx.TensorProto.FLOAT),
        "q_x_int8_no_zp_output_declared": q(i8, F32(1), out_type=onnx.TensorProto.UINT8),
        "q_scale_int16_zp_int16_output_declared": q(
            x3, np.int16(1), np.int16(0), out_type=onnx.TensorProto.INT16),
        "q_zp_float32_output_declared": q(x3, F32(1), F32(0), out_type=onnx.TensorProto.FLOAT),
    }


def _child() -> None:
    """Run every case; print one JSON line per case as soon as it is done."""
    from ortutil import session

    print(json.dumps({"event": "start"}), flush=True)
    for name, (model, feeds) in _cases().items():
        print(json.dumps({"event": "begin", "case": name}), flush=True)
        stage, message = "create", ""
        try:
            sess = session(model)
            stage = "run"
            sess.run(None, feeds)
            stage = "ok"
        except Exception as exc:  # the error is the result
            message = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"event": "end", "case": name, "stage": stage, "message": message}),
              flush=True)


@pytest.fixture(scope="module")
def child_results() -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    results: dict[str, dict] = {}
    running = None
    for line in proc.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event["event"] == "begin":
            running = event["case"]
        elif event["event"] == "end":
            results[event["case"]] = event
            running = None
    assert proc.returncode == 0, (
        f"the child process died (exit code {proc.returncode}) while running case "
        f"{running!r}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return results


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_bad_model_rejected(case, child_results):
    op, words = EXPECT[case]
    assert case in child_results, f"case {case} did not report"
    result = child_results[case]
    assert result["stage"] != "ok", f"{case}: ran without an error"
    message = result["message"]
    assert op in message, f"{case}: the message does not name {op}: {message}"
    assert words in message, f"{case}: expected {words!r} in: {message}"


def test_every_case_is_built():
    """The child builds exactly the cases the expectations list."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    assert set(_cases()) == set(EXPECT)


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    # tests/, where the helper modules (ortutil) live.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _child()
