"""``out=`` on quantize_linear / dequantize_linear: the result is written into
the given array (the contract's bits, nothing allocated for it), and every
array that cannot take it is refused with a message naming the operator."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from contract import TYPES, assert_same_bits, dequantize, quantize

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

Q, DQ = "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"
# Above the 64K-element threshold, so the kernels run on several threads too.
SHAPE = (4, 3, 9000)


def _x(shape=SHAPE, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 1000).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return x


def _zero_point(name: str, n: int | None) -> np.ndarray:
    dtype = TYPES[name][0]
    values = np.arange(n if n is not None else 1) % 5
    zp = values.astype(np.float32).astype(dtype)
    return zp if n is not None else zp.reshape(())


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_write_into_out(name, per_axis):
    x = _x()
    scale = np.array([0.5, 0.25, 2.0], np.float32) if per_axis else np.float32(0.75)
    zp = _zero_point(name, 3 if per_axis else None)
    dtype = TYPES[name][0]
    out = np.full(SHAPE, 7, dtype=dtype)
    got = extql.quantize_linear(x, scale, zp, axis=1, out=out)
    assert got is out
    expected = quantize(x, scale, zp, axis=1)
    assert_same_bits(out, expected, f"quantize {name} out=")
    yout = np.full(SHAPE, 7, np.float32)
    got = extql.dequantize_linear(expected, scale, zp, axis=1, out=yout)
    assert got is yout
    assert_same_bits(yout, dequantize(expected, scale, zp, axis=1), f"dequantize {name} out=")


@pytest.mark.parametrize("name", ["int32", "uint32"])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_over_x_itself(name, per_axis):
    """A 4-byte x may be overwritten by its own float32 result."""
    dtype = TYPES[name][0]
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max, SHAPE, dtype=dtype,
                                          endpoint=True)
    scale = np.array([0.5, 3e-7, 2.0], np.float32) if per_axis else np.float32(1e-3)
    zp = (np.array([7, 0, 2**20], dtype) if per_axis else dtype.type(5))
    expected = dequantize(x, scale, zp, axis=1)
    got = extql.dequantize_linear(x, scale, zp, axis=1, out=x.view(np.float32))
    assert got.base is x or got.base is x.base
    assert_same_bits(x.view(np.float32), expected, f"in-place dequantize {name}")


def test_out_allocates_nothing_for_the_result():
    """With out=, the only allocations are small ones (nothing of the
    output's size); without it, the output is allocated."""
    x = _x((1 << 20,))
    out = np.empty(x.shape, np.int16)
    zp = np.int16(0)
    extql.quantize_linear(x, np.float32(0.5), zp, out=out)  # warm up
    tracemalloc.start()
    try:
        extql.quantize_linear(x, np.float32(0.5), zp, out=out)
        _, with_out = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fresh = extql.quantize_linear(x, np.float32(0.5), zp)
        _, without = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert with_out < out.nbytes // 16, with_out
    assert without >= fresh.nbytes, without


def _refusals():
    x = _x((2, 3, 4))
    q = np.zeros((2, 3, 4), np.int16)
    ro = np.zeros((2, 3, 4), np.int16)
    ro.flags.writeable = False
    raw = np.zeros(2 * 3 * 4 * 2 + 1, np.uint8)
    unaligned = raw[1:].view(np.int16).reshape(2, 3, 4)
    big = np.zeros((2, 3, 8), np.int16)
    return x, [
        (Q, [1, 2], TypeError, "out must be a numpy.ndarray, got list"),
        (Q, np.zeros((2, 3, 4), np.int8), TypeError, "out must have the output's dtype int16"),
        (Q, np.zeros((2, 3, 5), np.int16), ValueError, "out must have the output's shape"),
        (Q, np.zeros((24,), np.int16), ValueError, "out must have the output's shape"),
        (Q, ro, ValueError, "out is read-only"),
        (Q, big[:, :, ::2], ValueError, "out must be C-contiguous"),
        (Q, unaligned, ValueError, "out must be aligned"),
        (Q, x.reshape(-1).view(np.int16)[:24].reshape(2, 3, 4), ValueError,
         "out overlaps the input x"),
        (DQ, np.zeros((2, 3, 4), np.float64), TypeError, "out must have the output's dtype "
                                                         "float32"),
        (DQ, np.zeros((2, 3, 4), np.float32)[:, ::-1], ValueError, "out must be C-contiguous"),
    ], q


@pytest.mark.parametrize("case", range(10))
def test_unusable_out_is_refused(case):
    x, cases, q = _refusals()
    op, out, error, message = cases[case]
    before = None if not isinstance(out, np.ndarray) else out.copy()
    with pytest.raises(error, match=rf"^{op}: {message}"):
        if op == Q:
            extql.quantize_linear(x, np.float32(0.5), np.int16(0), out=out)
        else:
            extql.dequantize_linear(q, np.float32(0.5), np.int16(0), out=out)
    if before is not None:
        assert_same_bits(out, before, "a refused out is left as it was")


def test_out_overlapping_scale_or_zero_point_or_a_shifted_x_is_refused():
    scale = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=rf"^{Q}: out overlaps the input y_scale"):
        extql.quantize_linear(np.zeros(4, np.float32), scale, np.zeros(4, np.uint32), axis=0,
                              out=scale.view(np.uint32))
    backing = np.zeros(12, np.int16)
    zp = backing[:6]
    with pytest.raises(ValueError, match=rf"^{DQ}: out overlaps the input x_zero_point"):
        extql.dequantize_linear(np.zeros(6, np.int16), np.ones(6, np.float32), zp, axis=0,
                                out=backing.view(np.float32))
    # dequantize over x shifted by one element is not "x itself".
    buf = np.zeros(13, np.int32)
    with pytest.raises(ValueError, match=rf"^{DQ}: out overlaps the input x"):
        extql.dequantize_linear(buf[:12], np.float32(1), out=buf[1:].view(np.float32))
    # nor over a 2-byte x (the float32 result is wider than the input).
    q16 = np.zeros(24, np.int16)
    with pytest.raises(ValueError, match=rf"^{DQ}: out overlaps the input x"):
        extql.dequantize_linear(q16[:12], np.float32(1), out=q16.view(np.float32))
