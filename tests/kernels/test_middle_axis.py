"""Per-axis quantization along a middle axis with short runs, against the
contract, bit for bit, on every kernel variant (conftest.py: kernel_isa runs
a test once per variant; each_isa checks every variant against one
expectation, where the expectation is the cost).

A middle axis walks the tensor as [outer, D, inner]: runs of ``inner``
elements share a channel.  The kernels take short runs in one pass with the
scale and zero point expanded per element (over a period of D * inner
elements, or in windows when a range holds less than a period or the period
is long), and write streamed outputs (>= 16 MiB) with streaming stores only,
the groups that straddle two runs through a buffer.  So the cases here are:
runs of 1 to 70 elements, axis lengths that make the period short and long,
ranges split across threads at chunk boundaries that fall anywhere in a run,
outputs that start misaligned, and outputs large enough to stream.
"""

from __future__ import annotations

import numpy as np
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize

import extql
from extql import _kernels

F32 = np.float32
ALL_TYPES = list(TYPES)


def _params(name: str, rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel scales (both signs, various magnitudes) and zero points."""
    dt, lo, hi = TYPES[name]
    s = (rng.choice(np.array([0.37, 1 / 3, 2.0, -0.5, 3e-3], F32), d)
         * (1 + rng.random(d))).astype(F32)
    if name in FLOAT_TYPES:
        z = (rng.standard_normal(d) * 4).astype(F32).astype(dt)
    else:
        z = rng.integers(lo, hi, d, endpoint=True, dtype=np.int64).astype(dt)
    return s, z


def _x(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values across the types' ranges, with ties and saturating values."""
    n = int(np.prod(shape))
    v = rng.standard_normal(n) * rng.choice([1.0, 100.0, 3e4, 3e9], n)
    ties = rng.integers(-70000, 70000, n) + 0.5
    return np.where(rng.random(n) < 0.2, ties, v).astype(F32).reshape(shape)


def _q(name: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Any bit pattern of the type (NaN, inf, subnormals for the float types)."""
    dt = TYPES[name][0]
    raw = rng.integers(0, 2**32, int(np.prod(shape)), dtype=np.uint64).astype(np.uint32)
    return raw.astype(f"u{dt.itemsize}").view(dt).reshape(shape)


def _misaligned(a: np.ndarray, offset: int) -> np.ndarray:
    """An empty array like a whose data starts offset elements into a buffer."""
    buf = np.empty(a.size + offset, a.dtype)
    return buf[offset:].reshape(a.shape)


@pytest.fixture(params=[1, 2], ids=["t1", "t2"])
def threads(request):
    _kernels.set_num_threads(request.param)
    yield request.param
    _kernels.set_num_threads(0)


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("inner", list(range(1, 71)))
def test_short_runs_every_length(name, inner, each_isa):
    """Runs of 1..70 elements, an odd batch (so the threads' chunks end
    anywhere in a run) and an axis whose period is short (D = 3) or longer
    than the windows (D = 37, inner >= 28); one thread for odd lengths, two
    for even ones."""
    _kernels.set_num_threads(2 if inner % 2 == 0 else 1)
    try:
        rng = np.random.default_rng(inner * 31 + ALL_TYPES.index(name))
        for d in (3, 37):
            outer = max(2, 70001 // (d * inner) + 1)
            shape = (outer, d, inner)
            s, z = _params(name, rng, d)
            x = _x(rng, shape)
            q = _q(name, rng, shape)
            want_q, want_dq = quantize(x, s, z, axis=1), dequantize(q, s, z, axis=1)
            for isa in each_isa():
                assert_same_bits(extql.quantize_linear(x, s, z, axis=1), want_q,
                                 f"{isa}: Q {name} {shape}")
                assert_same_bits(extql.dequantize_linear(q, s, z, axis=1), want_dq,
                                 f"{isa}: DQ {name} {shape}")
    finally:
        _kernels.set_num_threads(0)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("shape", [(2, 131072 // 49 + 3, 49), (1, 2000, 49), (3, 43700, 3),
                                   (1, 65536 // 63 + 5, 63), (2, 2100, 1, 31)])
def test_long_periods(name, shape, threads):
    """Short runs whose period (D * inner) is longer than the kernels expand
    at once, or longer than a thread's range: the windowed walk."""
    rng = np.random.default_rng(shape[1] + ALL_TYPES.index(name))
    s, z = _params(name, rng, shape[1])
    x = _x(rng, shape)
    assert_same_bits(extql.quantize_linear(x, s, z, axis=1),
                     quantize(x, s, z, axis=1), f"Q {name} {shape}")
    q = _q(name, rng, shape)
    assert_same_bits(extql.dequantize_linear(q, s, z, axis=1),
                     dequantize(q, s, z, axis=1), f"DQ {name} {shape}")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("offset", [0, 1, 3])
@pytest.mark.parametrize("shape", [(5, 9, 7, 7), (3, 4, 13, 5), (2, 5, 40, 1), (6, 7, 1, 33)])
def test_misaligned_outputs_and_no_zero_point(name, offset, shape, threads):
    """Outputs that start off the vector alignment; zero point absent."""
    rng = np.random.default_rng(offset * 7 + ALL_TYPES.index(name))
    s, z = _params(name, rng, shape[1])
    x = _x(rng, shape)
    out = _misaligned(np.empty(shape, TYPES[name][0]), offset)
    extql.quantize_linear(x, s, z, axis=1, out=out)
    assert_same_bits(out, quantize(x, s, z, axis=1), f"Q {name} {shape}")
    q = _q(name, rng, shape)
    out = _misaligned(np.empty(shape, F32), offset)
    extql.dequantize_linear(q, s, None, axis=1, out=out)
    assert_same_bits(out, dequantize(q, s, None, axis=1), f"DQ {name} {shape}")


# Outputs of at least EXTQL_STREAM_MIN_BYTES (16 MiB) are streamed: a float32
# dequantize output of 4.2M elements, a quantize output of 16.8M bytes.
STREAM_SHAPES = {
    "short": (1338, 64, 7, 7),    # period path (runs of 49)
    "mid": (23, 1024, 14, 13),    # streamed runs of 182, period too long
    "odd": (8, 113, 61, 79),      # streamed runs of 4819, odd lengths
    "windows": (2, 40000, 1, 53),  # runs of 53, period too long: windows
}


#: (shape, type): each shape with two of the four output widths, each width
#: in two shapes (a streamed test moves 16 MiB or more).
STREAM_CASES = [("short", "int8"), ("short", "int32"), ("mid", "uint16"), ("mid", "bfloat16"),
                ("odd", "int8"), ("odd", "bfloat16"), ("windows", "uint16"),
                ("windows", "int32")]


@pytest.mark.parametrize("case,name", STREAM_CASES)
def test_streamed_outputs(name, case, each_isa):
    """Both directions' outputs of 16 MiB or more (streamed), misaligned, at 1
    and 2 threads."""
    shape = STREAM_SHAPES[case]
    rng = np.random.default_rng(len(case) + ALL_TYPES.index(name))
    s, z = _params(name, rng, shape[1])
    q = _q(name, rng, shape)
    out = _misaligned(np.empty(shape, F32), 1)
    assert out.nbytes >= _kernels.stream_min_bytes()
    want_dq = dequantize(q, s, z, axis=1)
    # The quantize output in the same shape, the batch grown until it streams.
    dt = TYPES[name][0]
    grow = -(-_kernels.stream_min_bytes() // (int(np.prod(shape)) * dt.itemsize))
    shape_q = (shape[0] * grow,) + shape[1:]
    x = _x(rng, shape_q)
    outq = _misaligned(np.empty(shape_q, dt), 1)
    assert outq.nbytes >= _kernels.stream_min_bytes()
    want_q = quantize(x, s, z, axis=1)
    try:
        for threads in (1, 2):
            _kernels.set_num_threads(threads)
            for isa in each_isa():
                out.fill(0)
                extql.dequantize_linear(q, s, z, axis=1, out=out)
                assert_same_bits(out, want_dq, f"{isa} t{threads}: DQ {name} {shape}")
                outq.fill(0)
                extql.quantize_linear(x, s, z, axis=1, out=outq)
                assert_same_bits(outq, want_q, f"{isa} t{threads}: Q {name} {shape_q}")
    finally:
        _kernels.set_num_threads(0)
