"""float16 / bfloat16 x, scales and outputs and the attributes precision /
output_dtype through extql's onnxruntime library, against the contract, bit
for bit: every onnxruntime optimisation level, one and two threads, scales
and zero points as initializers or inputs, per tensor, per axis (NCHW) and
blocked.  Run once per kernel variant (conftest.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from contract import (
    BF16,
    REAL_TYPES,
    TYPES,
    assert_same_bits,
    dequantize,
    full_param,
    quantize,
)
from onnx import TensorProto
from ortutil import DQ, LEVELS, Q, node_model, run, run_unaligned, session

import extql
from extql import ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

CODE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        BF16: TensorProto.BFLOAT16}
SPECIAL = np.array([0.0, -0.0, 2049.0, 2051.0, 257.0, 65520.0, -7e4, 1e30, np.inf, -np.inf,
                    np.nan, 0.5, 2.5, 6e-8], np.float32)
# (x shape, axis, block size, granularity)
LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 3, 5, 7), 1, 0, "axis"),
           ((4, 64), 1, 16, "blocked")]


def _session(model, level, threads: int) -> ort.InferenceSession:
    return session(model, threads=threads, level=level)


def _inputs(rng, shape, axis, block, kind, x_dtype, s_dtype, zp_name):
    x = (rng.standard_normal(shape) * 300).astype(np.float32)
    flat = x.reshape(-1)
    flat[: SPECIAL.size] = SPECIAL
    with np.errstate(over="ignore"):
        x = x.astype(x_dtype)
    a = axis % len(shape)
    pshape = {"tensor": (), "axis": (shape[a],),
              "blocked": shape[:a] + (-(-shape[a] // max(block, 1)),) + shape[a + 1:]}[kind]
    s = ((rng.random(pshape) + 0.05) * 0.37).astype(np.float32).astype(s_dtype)
    dt, lo, hi = TYPES[zp_name]
    if zp_name in ("float16", "bfloat16"):
        z = (rng.standard_normal(pshape) * 3).astype(np.float32).astype(dt)
    else:
        z = rng.integers(max(lo, -1000), min(hi, 1000), pshape, endpoint=True).astype(dt)
    return x, np.asarray(s), np.asarray(z)


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize(("x_type", "s_type", "precision"), [
    ("float16", "float16", None), ("bfloat16", "bfloat16", None), ("float32", "float16", None),
    ("float16", "float32", None), ("float32", "float32", "bfloat16"),
    ("float16", "float16", "float32"),
])
@pytest.mark.parametrize("zp_name", ["int8", "uint16", "int32", "float16"])
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_quantize_in_onnxruntime(level, x_type, s_type, precision, zp_name, shape, axis, block,
                                 kind):
    rng = np.random.default_rng(1)
    x, s, z = _inputs(rng, shape, axis, block, kind, REAL_TYPES[x_type], REAL_TYPES[s_type],
                      zp_name)
    attrs = {} if precision is None else {"precision": CODE[REAL_TYPES[precision]]}
    model, feeds, dtype = node_model(Q, x, s, z, axis=axis, block_size=block or None,
                                     params="input" if kind == "axis" else "const", attrs=attrs)
    (y,) = run(_session(model, level, 2 if kind == "blocked" else 1), feeds, [dtype], [shape])
    prec = None if precision is None else REAL_TYPES[precision]
    want = quantize(x, full_param(s, shape, axis, block), full_param(z, shape, axis, block),
                    axis=axis, precision=prec)
    assert_same_bits(y, want, f"{x_type}/{s_type} precision {precision} -> {zp_name} {kind}")


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("s_type", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("zp_name", ["int8", "uint8", "int16", "int32", "bfloat16"])
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_dequantize_in_onnxruntime(level, s_type, zp_name, shape, axis, block, kind):
    """The output has the scale's type (output_dtype, when given, says the same)."""
    rng = np.random.default_rng(2)
    x32, s, z = _inputs(rng, shape, axis, block, kind, np.float32, REAL_TYPES[s_type], zp_name)
    q = extql.quantize_linear(x32, np.float32(0.05), z.reshape(-1)[:1].reshape(()))
    attrs = {"output_dtype": CODE[REAL_TYPES[s_type]]} if kind == "axis" else {}
    model, feeds, dtype = node_model(DQ, q, s, z, axis=axis, block_size=block or None,
                                     attrs=attrs)
    assert dtype == REAL_TYPES[s_type]
    (y,) = run(_session(model, level, 1), feeds, [dtype], [shape])
    want = dequantize(q, full_param(s, shape, axis, block), full_param(z, shape, axis, block),
                      axis=axis)
    assert_same_bits(y, want, f"DQ {zp_name} scale {s_type} {kind}")


def test_large_float16_model_split_across_threads():
    """A float16 activation quantized and dequantized in one model, large
    enough to be split on the session's threads and streamed."""
    rng = np.random.default_rng(3)
    shape = (8, 64, 56, 56)
    x = (rng.standard_normal(shape) * 30).astype(np.float16)
    s = (rng.random(64) * 0.3 + 0.01).astype(np.float16)
    z = rng.integers(-5, 5, 64).astype(np.int8)
    model, feeds, dtype = node_model(Q, x, s, z, axis=1)
    (y,) = run(_session(model, LEVELS[-1], 2), feeds, [dtype], [shape])
    assert_same_bits(y, quantize(x, s, z, axis=1))
    model, feeds, dtype = node_model(DQ, y, s, z, axis=1)
    (back,) = run(_session(model, LEVELS[-1], 2), feeds, [dtype], [shape])
    assert back.dtype == np.float16
    assert_same_bits(back, dequantize(y, s, z, axis=1))


# (bfloat16 buffers can be bound from Python from onnxruntime 1.20 on.)
@pytest.mark.parametrize(("op", "s_type"), [(Q, "float16"), (DQ, "float16")] + (
    [(Q, "bfloat16")] if ort_io.has_typed_ortvalues() else []))
def test_unaligned_float16_buffers(op, s_type):
    """float16 / bfloat16 x, scale and output at odd addresses: the shim
    stages them through aligned copies and converts the staged scale."""
    rng = np.random.default_rng(12)
    fdt = REAL_TYPES[s_type]
    x = (rng.standard_normal((3, 200)) * 40).astype(np.float32).astype(fdt)
    s = np.array([0.37, 1.1, 3.3], np.float32).astype(fdt)
    z = np.array([1, -2, 5], np.int16)
    if op == DQ:
        x = quantize(x, s, z, axis=0)
        want = dequantize(x, s, z, axis=0)
    else:
        want = quantize(x, s, z, axis=0)
    model, _, out_dtype = node_model(op, x, s, z, axis=0, params="input")
    out = run_unaligned(_session(model, LEVELS[-1], 1), {"x": x, "s": s, "z": z}, out_dtype,
                        x.shape)
    assert_same_bits(out, want, f"{op} {s_type} unaligned")
