"""Tensors of more than 2**31 elements: the index arithmetic is 64-bit.

Marked ``slow`` (run by ``tox -e slow`` or ``pytest -m slow``): each test
needs 10-12 GiB of memory and minutes of time.  Memory is checked before
allocating (MemAvailable in /proc/meminfo); a machine without enough is
reported as a skip naming the figure.

The tensor has N = 2**31 + 4096 float32 elements (8 GiB; int8 output 2 GiB).
Its values repeat with a prime period (4093), so an element read or written
at an index that wrapped at 2**31 or 2**32 gets a different value; the
per-axis scales repeat with another prime period (97) over 2**19 + 1
channels of 4096 elements, so the last channel starts exactly at 2**31 and
a channel index computed in 32 bits picks a different scale.  Every element
is compared with tests/contract.py, chunk by chunk (the expectation of a
chunk at a time, never a second full-size tensor; per tensor, where the
output repeats with the input, the contract's output for one period).  The same tensors then
go through onnxruntime with extql's library, and its outputs are compared
with the NumPy API's, bit for bit.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from contract import assert_same_bits, dequantize, quantize

import extql

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("kernel_isa")]

N = 2**31 + 4096
INNER = 4096
CHANNELS = N // INNER  # 2**19 + 1: the last channel starts at 2**31
PERIOD = 4093
SCALE_PERIOD = 97
CHUNK = 1 << 24
GIB = 2**30

_cache: dict[str, np.ndarray] = {}


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def need(gib: float) -> None:
    have = available_bytes()
    if have < gib * GIB:
        pytest.skip(f"needs {gib:.0f} GiB of available memory, this machine has "
                    f"{have / GIB:.1f} GiB available now")


def pattern() -> np.ndarray:
    """PERIOD float32 values: ordinary ones, ties, NaN, infinities, +-0."""
    k = np.arange(PERIOD, dtype=np.float32)
    p = (k - 2000) * np.float32(0.37)
    p[::7] = (k[::7] - 2000) + np.float32(0.5)  # halfway points (scale 1 per tensor)
    p[5] = np.nan
    p[6] = np.inf
    p[8] = -np.inf
    p[9] = -0.0
    return p


def big_x() -> np.ndarray:
    """The N-element float32 tensor, x[i] = pattern[i % PERIOD], built once."""
    if "x" not in _cache:
        need(8 + 2 + 1)
        x = np.empty(N, np.float32)
        p = pattern()
        for start in range(0, N, CHUNK):
            stop = min(N, start + CHUNK)
            x[start:stop] = np.resize(np.roll(p, -(start % PERIOD)), stop - start)
        _cache["x"] = x
    return _cache["x"]


def channel_params(dtype) -> tuple[np.ndarray, np.ndarray]:
    d = np.arange(CHANNELS) % SCALE_PERIOD
    s = (np.float32(0.05) + d.astype(np.float32) * np.float32(0.013)).astype(np.float32)
    info = np.iinfo(dtype)
    z = (info.min + (d * 7) % (int(info.max) - int(info.min))).astype(dtype)
    return s, z


def compare_rows(got: np.ndarray, x2d: np.ndarray, expect_rows, rows_per_chunk: int,
                 what: str) -> None:
    """got and x viewed as [rows, INNER]; expect_rows(r0, r1) -> expectation."""
    for r0 in range(0, x2d.shape[0], rows_per_chunk):
        r1 = min(x2d.shape[0], r0 + rows_per_chunk)
        assert_same_bits(got[r0:r1], expect_rows(r0, r1), f"{what} rows {r0}..{r1}")


def test_quantize_per_tensor_beyond_2_31():
    x = big_x()
    need(2 + 0.5)
    s, z = np.float32(1.0), np.int8(-3)
    y = extql.quantize_linear(x, s, z)
    assert y.shape == (N,) and y.dtype == np.int8
    # x[i] = pattern[i % PERIOD] and quantization per tensor is elementwise,
    # so the expectation is the contract on one period, repeated.
    period = quantize(pattern(), s, z)
    for start in range(0, N, CHUNK):
        stop = min(N, start + CHUNK)
        want = np.resize(np.roll(period, -(start % PERIOD)), stop - start)
        assert_same_bits(y[start:stop], want, f"[{start}:{stop}]")
    # the elements around 2**31, spelled out
    for i in (2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1, N - 1):
        assert y[i] == quantize(x[i:i + 1], s, z)[0], i
    _cache["y_per_tensor"] = y


def test_quantize_per_axis_channels_beyond_2_31():
    """Axis 0 of [2**19 + 1, 4096]: channel 2**19 starts at element 2**31."""
    x2d = big_x().reshape(CHANNELS, INNER)
    need(2 + 0.5)
    s, z = channel_params(np.int8)
    y = extql.quantize_linear(x2d, s, z, axis=0)
    rows = CHUNK // INNER
    compare_rows(y, x2d, lambda r0, r1: quantize(x2d[r0:r1], s[r0:r1], z[r0:r1], 0), rows,
                 "per axis 0")
    _cache["y_per_axis"] = y


def test_quantize_last_axis_beyond_2_31():
    """Axis 1 of [N / 4, 4]: the channel changes every element, i % 4 past 2**31."""
    x2d = big_x().reshape(N // 4, 4)
    need(2 + 0.5)
    s = np.array([0.5, 1.0, 3.0, 0.01], np.float32)
    z = np.array([0, 100, 65535, 7], np.uint16)
    y = extql.quantize_linear(x2d, s, z, axis=1)
    rows = CHUNK // 4
    compare_rows(y, x2d, lambda r0, r1: quantize(x2d[r0:r1], s, z, 1), rows, "last axis")
    del y
    gc.collect()


def _ort_quantize(x: np.ndarray, s: np.ndarray, z: np.ndarray, axis: int) -> np.ndarray:
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from ortutil import make_model, session, tensor

    node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["y"],
                            domain="com.amd.quark", axis=axis)
    dims = [f"d{i}" for i in range(x.ndim)]
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                       [helper.make_tensor_value_info("y", TensorProto.INT8, dims)],
                       [tensor("s", s), tensor("z", z)])
    sess = session(model, threads=2)
    y = np.empty(x.shape, np.int8)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x))
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(y))
    sess.run_with_iobinding(binding)
    return y


@pytest.mark.parametrize("form", ["per_tensor", "per_axis"])
def test_onnxruntime_beyond_2_31(form):
    """The same tensors through onnxruntime with the library, compared with
    the NumPy API's outputs (themselves compared with the contract above)."""
    x = big_x()
    key = "y_per_tensor" if form == "per_tensor" else "y_per_axis"
    if key not in _cache:
        pytest.fail(f"run test_quantize_{form} first (it makes the expectation)")
    need(2 + 1)
    if form == "per_tensor":
        got = _ort_quantize(x, np.float32(1.0), np.int8(-3), 0)
    else:
        s, z = channel_params(np.int8)
        got = _ort_quantize(x.reshape(CHANNELS, INNER), s, z, 0).reshape(-1)
    want = _cache.pop(key).reshape(-1)
    for start in range(0, N, CHUNK):
        stop = min(N, start + CHUNK)
        assert_same_bits(got[start:stop], want[start:stop], f"onnxruntime {form} [{start}:{stop}]")
    del got, want
    gc.collect()


def test_dequantize_per_axis_beyond_2_31():
    """int8 [2**19 + 1, 4096] -> float32 (8 GiB out), channels past 2**31."""
    _cache.clear()
    gc.collect()
    need(2 + 8 + 1)
    q = np.empty(N, np.int8)
    p = (np.arange(PERIOD) % 256 - 128).astype(np.int8)
    for start in range(0, N, CHUNK):
        stop = min(N, start + CHUNK)
        q[start:stop] = np.resize(np.roll(p, -(start % PERIOD)), stop - start)
    q2d = q.reshape(CHANNELS, INNER)
    s, z = channel_params(np.int8)
    y = extql.dequantize_linear(q2d, s, z, axis=0)
    assert y.dtype == np.float32 and y.shape == (CHANNELS, INNER)
    compare_rows(y, q2d, lambda r0, r1: dequantize(q2d[r0:r1], s[r0:r1], z[r0:r1], 0),
                 CHUNK // INNER, "dequantize per axis 0")
