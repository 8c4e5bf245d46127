"""Quantize with an int32 scale, and with precision float64, through extql's
onnxruntime library: every optimisation level, one and two threads, the
scale and zero point as initializers or inputs, per tensor / per channel of
an NCHW activation / blocked, the zero point given or absent, the legacy
name; against the contract (tests/contract.py), bit for bit.  Plus what the
library says of a precision it does not know and of an int32 dequantize
scale.  Run once per kernel variant (conftest.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from contract import BF16, assert_same_bits, full_param, param_shape, quantize, zero_points
from int32_cases import int32_scales, make_x
from onnx import TensorProto
from ortutil import DQ, LEVELS, Q, node_model, run, session
from packaging.version import Version

from extql import ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

X_TYPES = [np.int32, np.float32, np.float16]
LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 3, 5, 7), 1, 0, "axis"),
           ((4, 64), 1, 16, "blocked")]
# Output types the library takes and Python can fetch (float8 from 1.20,
# int4 from 1.21: tests/ort/test_ort_subbyte.py).
LIBRARY_TYPES = (["int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16"]
                 + (["float8e4m3fn"] if ort_io.has_typed_ortvalues() else [])
                 + (["int4"] if Version(ort.__version__) >= Version("1.21") else []))


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("precision", [None, BF16], ids=["float64", "bfloat16"])
@pytest.mark.parametrize("xtype", X_TYPES, ids=["int32", "float32", "float16"])
@pytest.mark.parametrize("zp_name", LIBRARY_TYPES)
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_int32_scale_in_the_library(level, precision, xtype, zp_name, shape, axis, block, kind):
    rng = np.random.default_rng(21)
    x = make_x(rng, shape, np.dtype(xtype))
    pshape = param_shape(shape, axis, block, kind)
    s = np.asarray(int32_scales(rng, pshape))
    z = np.asarray(zero_points(rng, zp_name, pshape, bound=1000))
    attrs = {} if precision is None else {"precision": TensorProto.BFLOAT16}
    model, feeds, dtype = node_model(Q, x, s, z, axis=axis, block_size=block or None,
                                     params="input" if kind == "axis" else "const", attrs=attrs)
    sess = session(model, threads=2 if kind == "blocked" else 1, level=level)
    (y,) = run(sess, feeds, [dtype], [shape])
    want = quantize(x, full_param(s, shape, axis, block), full_param(z, shape, axis, block),
                    axis=axis, precision=precision)
    assert_same_bits(y, want, f"{np.dtype(xtype)} x, int32 scale, precision {precision} -> "
                              f"{zp_name} {kind}")


@pytest.mark.parametrize("s_type", [np.float32, np.float16, BF16])
@pytest.mark.parametrize("zp_name", ["int8", "uint16", "int32", "float16", "bfloat16"])
@pytest.mark.parametrize("legacy", [False, True], ids=["extended", "vitis"])
def test_precision_float64_attribute(s_type, zp_name, legacy):
    """precision = float64 (TensorProto.DOUBLE) on a float scale: the same
    float64 stage, for the Extended and the legacy name."""
    rng = np.random.default_rng(22)
    shape = (2, 3, 5, 7)
    x = make_x(rng, shape, np.dtype(np.float32))
    s = np.asarray((rng.random(3) * 7 + 0.01).astype(np.float32).astype(s_type))
    z = np.asarray(zero_points(rng, zp_name, (3,), bound=1000))
    model, feeds, dtype = node_model(Q, x, s, z, axis=1, legacy=legacy,
                                     attrs={"precision": TensorProto.DOUBLE})
    (y,) = run(session(model), feeds, [dtype], [shape])
    assert_same_bits(y, quantize(x, s, z, axis=1, precision=np.float64),
                     f"{np.dtype(s_type)} scale, precision float64 -> {zp_name}")


@pytest.mark.parametrize("zp_form", ["absent", "empty"])
@pytest.mark.parametrize("threads", [1, 2])
def test_int32_scale_without_zero_point(zp_form, threads):
    """uint8 output; a tensor large enough to be split between threads."""
    rng = np.random.default_rng(23)
    x = rng.integers(-4000, 4000, (8, 64, 28, 28), endpoint=True).astype(np.int32)
    s = np.int32(7)
    model, feeds, dtype = node_model(Q, x, s, None, zp_form=zp_form)
    assert np.dtype(dtype) == np.uint8
    (y,) = run(session(model, threads=threads), feeds, [dtype], [x.shape])
    assert_same_bits(y, quantize(x, s), f"int32 scale, zero point {zp_form}")


def test_errors_name_the_operator():
    """An int32 dequantize scale and a precision that is no float type fail
    with the operator's name."""
    x = np.zeros((2, 3), np.int8)
    model, feeds, _ = node_model(DQ, x, np.int32(2), np.int8(0), declare_output=False)
    with pytest.raises(Exception, match="ExtendedDequantizeLinear.*x_scale must be one of "
                                        "float32, float16, bfloat16, got int32"):
        run(session(model), feeds, [np.float32], [x.shape])
    xq = np.zeros((2, 3), np.float32)
    model, feeds, dtype = node_model(Q, xq, np.float32(2), np.int8(0),
                                     attrs={"precision": TensorProto.INT32})
    with pytest.raises(Exception, match="ExtendedQuantizeLinear.*the attribute precision must be "
                                        "one of float32, float16, bfloat16, float64, got int32"):
        run(session(model), feeds, [dtype], [xq.shape])
