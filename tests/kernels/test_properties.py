"""Property tests: random shapes, axes, types and values against the contract,
every kernel variant against each example's one expectation (each_isa,
conftest.py)."""

from __future__ import annotations

import numpy as np
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import extql

F32 = np.dtype(np.float32)
ANY_F32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
# Scales: any float32, with the interesting ones drawn often.
SCALES = st.one_of(
    ANY_F32,
    st.sampled_from(
        [float(np.float32(v)) for v in (0.0, -0.0, 1.0, -1.0, 0.5, 1e-38, 1e-45, 3e38, 0.1, 1 / 3)]
    ),
)


@st.composite
def problems(draw):
    """(x, scale, zero_point or None, axis, type name) with consistent shapes."""
    name = draw(st.sampled_from(list(TYPES)))
    dt, lo, hi = TYPES[name]
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank)))
    per_axis = rank > 0 and draw(st.booleans())
    if per_axis:
        axis = draw(st.integers(-rank, rank - 1))
        pshape = (shape[axis],)
    else:
        axis = draw(st.integers(-6, 6))
        pshape = draw(st.sampled_from([(), (1,)]))
    x = draw(arrays(F32, shape, elements=ANY_F32))
    scale = draw(arrays(F32, pshape, elements=SCALES))
    if name in FLOAT_TYPES:
        with np.errstate(over="ignore"):  # float32 -> float16 overflow is the point
            zp = draw(arrays(F32, pshape, elements=ANY_F32)).astype(dt)
    else:
        zp = draw(arrays(np.int64, pshape, elements=st.integers(lo, hi))).astype(dt)
    if draw(st.booleans()):
        zp = None
    return x, scale, zp, axis, name


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problems())
def test_quantize_matches_contract(each_isa, problem):
    x, scale, zp, axis, name = problem
    want = quantize(x, scale, zp, axis)
    for isa in each_isa():
        got = extql.quantize_linear(x, scale, zp, axis=axis)
        assert_same_bits(got, want, f"{isa}: {name} axis={axis}")


@st.composite
def dequantize_problems(draw):
    x, scale, zp, axis, name = draw(problems())
    dt = TYPES[name][0]
    # Any bit pattern of the type: every integer, and every float16/bfloat16
    # including subnormals, infinities and NaN payloads.
    raw = draw(arrays(np.dtype(f"u{dt.itemsize}"), x.shape))
    return raw.view(dt), scale, zp, axis, name


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dequantize_problems())
def test_dequantize_matches_contract(each_isa, problem):
    q, scale, zp, axis, name = problem
    want = dequantize(q, scale, zp, axis)
    for isa in each_isa():
        got = extql.dequantize_linear(q, scale, zp, axis=axis)
        assert_same_bits(got, want, f"{isa}: {name} axis={axis}")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(list(TYPES)),
    st.integers(1, 3),
    st.integers(65_536, 300_000),
    st.integers(1, 4),
)
def test_large_parallel_matches_contract(each_isa, name, d, n, threads):
    """Sizes above the parallel minimum, split over a varying thread count."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n * d) * 1e3).astype(np.float32).reshape(d, n)
    s = (rng.random(d) + 0.01).astype(np.float32)
    dt = TYPES[name][0]
    zp = np.zeros(d, dt)
    extql.set_num_threads(threads)
    q = quantize(x, s, zp, 0)
    want = dequantize(q, s, zp, 0)
    try:
        for isa in each_isa():
            assert_same_bits(extql.quantize_linear(x, s, zp, axis=0), q, f"{isa}: {name}")
            assert_same_bits(extql.dequantize_linear(q, s, zp, axis=0), want, f"{isa}: {name}")
    finally:
        extql.set_num_threads(0)
