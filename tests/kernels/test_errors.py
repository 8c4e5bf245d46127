"""Every bad input is rejected with a TypeError/ValueError naming the operator."""

from __future__ import annotations

import numpy as np
import pytest

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32
Q = "ExtendedQuantizeLinear"
DQ = "ExtendedDequantizeLinear"
X = np.zeros((2, 3, 4), F32)

QUANTIZE_CASES = [
    # (description, args, kwargs, exception, message pattern)
    ("x float64", (X.astype(np.float64), F32(1), np.int8(0)), {}, TypeError,
     "x must be one of float32, float16, bfloat16, int32, got float64"),
    ("x int64", (X.astype(np.int64), F32(1), np.int8(0)), {}, TypeError,
     "x must be one of float32, float16, bfloat16, int32, got int64"),
    ("x uint32", (X.astype(np.uint32), F32(1), np.int8(0)), {}, TypeError,
     "x must be one of float32, float16, bfloat16, int32, got uint32"),
    ("int32 x, int64 scale", (X.astype(np.int32), np.int64(1), np.int8(0)), {}, TypeError,
     "y_scale must be one of float32, float16, bfloat16, float8e8m0, int32, got int64"),
    ("x int8", (X.astype(np.int8), F32(1)), {}, TypeError, "x must be one of float32"),
    ("x strings", (["a", "b"], F32(1)), {}, TypeError, "x must be float32"),
    ("scale float64", (X, np.float64(1), np.int8(0)), {}, TypeError,
     "y_scale must be one of float32, float16, bfloat16, float8e8m0, int32, got float64"),
    ("scale int", (X, np.int16(1), np.int8(0)), {}, TypeError, "y_scale must be one of"),
    ("scale uint16", (X.astype(np.float16), np.ones((), np.uint16)),
     {}, TypeError,
     "y_scale must be one of float32, float16, bfloat16, float8e8m0, int32, got uint16"),
    ("precision int64", (X, F32(1)), {"precision": np.int64}, TypeError,
     "precision must be one of float32, float16, bfloat16, float64, got"),
    ("precision int8 code", (X, F32(1)), {"precision": 3}, TypeError,
     "precision must be one of float32, float16, bfloat16, float64, got 3"),
    ("precision not a type", (X, F32(1)), {"precision": "fast"}, TypeError,
     "precision must be one of"),
    ("output_dtype float32", (X, F32(1)), {"output_dtype": np.float32}, TypeError,
     "output_dtype must be one of int8"),
    ("output_dtype not the zero point's", (X, F32(1), np.int8(0)), {"output_dtype": np.uint8},
     TypeError, "output_dtype uint8 must be the zero point's type int8"),
    ("saturate a string", (X, F32(1)), {"saturate": "yes"}, TypeError,
     "saturate must be a bool"),
    ("zp float32", (X, F32(1), F32(0)), {}, TypeError, "y_zero_point must be one of"),
    ("zp int64", (X, F32(1), np.int64(0)), {}, TypeError, "y_zero_point must be one of"),
    ("zp bool", (X, F32(1), np.bool_(0)), {}, TypeError, "y_zero_point must be one of"),
    ("zp python int", (X, F32(1), 0), {}, TypeError, "does not"),
    ("zp python list", (X, F32(1), [0, 0, 0]), {}, TypeError, "y_zero_point must be a NumPy"),
    ("zp shape vs scalar scale", (X, F32(1), np.zeros(3, np.int8)), {}, ValueError,
     "zero point must have the shape of the scale"),
    ("zp shape vs 1-D scale", (X, np.ones(3, F32), np.zeros(2, np.int8)), {}, ValueError,
     "zero point must have the shape of the scale"),
    ("zp scalar vs 1-D scale", (X, np.ones(3, F32), np.int8(0)), {}, ValueError,
     "zero point must have the shape of the scale"),
    ("zp rank 2", (X, F32(1), np.zeros((1, 1), np.int8)), {}, ValueError,
     "zero point must have the shape of the scale"),
    ("scale rank 2", (X, np.ones((3, 1), F32), np.zeros((3, 1), np.int8)), {}, ValueError,
     "scale must be a scalar or 1-D"),
    ("scale rank 2 one element", (X, np.ones((1, 1), F32)), {}, ValueError,
     "scale must be a scalar or 1-D"),
    ("axis too large", (X, np.ones(3, F32), np.zeros(3, np.int8)), {"axis": 3}, ValueError,
     "axis 3 is out of range for x of rank 3"),
    ("axis too small", (X, np.ones(3, F32), np.zeros(3, np.int8)), {"axis": -4}, ValueError,
     "axis -4 is out of range"),
    ("axis float", (X, np.ones(3, F32)), {"axis": 1.0}, TypeError, "axis must be an integer"),
    ("axis string", (X, np.ones(3, F32)), {"axis": "1"}, TypeError, "axis must be an integer"),
    ("scale length", (X, np.ones(4, F32), np.zeros(4, np.int8)), {"axis": 1}, ValueError,
     "the scale has 4 elements but x has 3 along axis 1"),
    ("empty scale", (X, np.ones(0, F32)), {}, ValueError, "the scale has 0 elements"),
    ("per-axis scale on a scalar x", (F32(1), np.ones(3, F32)), {}, ValueError,
     "needs x of rank >= 1"),
    ("rank-1 x, default axis 1", (np.zeros(3, F32), np.ones(3, F32)), {}, ValueError,
     "axis 1 is out of range for x of rank 1"),
]


@pytest.mark.parametrize(
    "args,kwargs,exc,pattern", [c[1:] for c in QUANTIZE_CASES], ids=[c[0] for c in QUANTIZE_CASES]
)
def test_quantize_rejects(args, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        extql.quantize_linear(*args, **kwargs)
    assert str(info.value).startswith(Q + ":")


QX = np.zeros((2, 3, 4), np.int8)
DEQUANTIZE_CASES = [
    ("x float32", (X, F32(1)), {}, TypeError, "x must be one of"),
    ("x int64", (QX.astype(np.int64), F32(1)), {}, TypeError, "x must be one of"),
    ("x bool", (QX.astype(bool), F32(1)), {}, TypeError, "x must be one of"),
    ("x python list", ([1, 2, 3], F32(1)), {}, TypeError, "x must be a NumPy array"),
    ("scale float64", (QX, np.float64(1)), {}, TypeError,
     "x_scale must be one of float32, float16, bfloat16, float8e8m0, got float64"),
    ("scale int8", (QX, np.int8(1)), {}, TypeError, "x_scale must be one of"),
    ("output_dtype int8", (QX, F32(1)), {"output_dtype": np.int8}, TypeError,
     "output_dtype must be one of float32, float16, bfloat16, got"),
    ("output_dtype a code of no float", (QX, F32(1)), {"output_dtype": 7}, TypeError,
     "output_dtype must be one of float32, float16, bfloat16, got 7"),
    ("zp dtype", (QX, F32(1), np.uint8(0)), {}, TypeError,
     r"x_zero_point must have the dtype of x \(int8\), got uint8"),
    ("zp float for int x", (QX, F32(1), np.float16(0)), {}, TypeError,
     "x_zero_point must have the dtype of x"),
    ("zp python int out of range", (QX, F32(1), 200), {}, ValueError, "not representable"),
    ("zp python float for int x", (QX, F32(1), 1.5), {}, ValueError, "not representable"),
    ("zp shape", (QX, np.ones(3, F32), np.zeros(4, np.int8)), {}, ValueError,
     "zero point must have the shape of the scale"),
    ("scale rank 2", (QX, np.ones((3, 1), F32)), {}, ValueError, "scale must be a scalar or 1-D"),
    ("axis", (QX, np.ones(3, F32)), {"axis": 7}, ValueError, "axis 7 is out of range"),
    ("scale length", (QX, np.ones(2, F32)), {"axis": -1}, ValueError,
     "the scale has 2 elements but x has 4 along axis 2"),
]


@pytest.mark.parametrize(
    "args,kwargs,exc,pattern",
    [c[1:] for c in DEQUANTIZE_CASES],
    ids=[c[0] for c in DEQUANTIZE_CASES],
)
def test_dequantize_rejects(args, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        extql.dequantize_linear(*args, **kwargs)
    assert str(info.value).startswith(DQ + ":")


def test_per_tensor_ignores_bad_axis():
    # The contract: axis is ignored for a per-tensor scale, whatever it is.
    for axis in (-100, 100):
        extql.quantize_linear(X, F32(1), np.int8(0), axis=axis)
        extql.quantize_linear(X, np.ones(1, F32), np.zeros(1, np.int8), axis=axis)
        extql.dequantize_linear(QX, F32(1), np.int8(0), axis=axis)


def test_per_tensor_zero_point_forms_are_interchangeable():
    # () and [1] are both a per-tensor zero point (as in onnxruntime).
    a = extql.quantize_linear(X + 3, F32(1), np.zeros((1,), np.int8))
    b = extql.quantize_linear(X + 3, np.ones(1, F32), np.int8(0))
    np.testing.assert_array_equal(a, b)


def test_set_num_threads_rejects_negative():
    with pytest.raises(ValueError, match="set_num_threads"):
        extql.set_num_threads(-1)
    with pytest.raises(TypeError):
        extql.set_num_threads(1.5)
