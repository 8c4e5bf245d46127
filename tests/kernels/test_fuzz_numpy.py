"""Fuzzing the NumPy API: what tests/kernels/test_properties.py does not cover.

test_properties.py draws shapes up to rank 4 and float32 values from
hypothesis's float strategy.  Here the values are built to hit the rules
(exact ties, every NaN payload, subnormals, signed zeros, the edges of each
range, huge / tiny / zero / negative / NaN scales, zero points at the ends
of their range or NaN), shapes go to rank 5 with zero-sized dimensions, the
arrays come in every memory layout NumPy can hand over (Fortran order,
strided, reversed, unaligned, read-only), and arbitrary -- mostly wrong --
combinations of dtypes, shapes and axes must either compute the contract or
raise the TypeError / ValueError the contract names (tests/fuzz_common.py),
never another exception and never a crash.

``EXTQL_FUZZ_EXAMPLES`` sets the number of examples per test (default 150;
the ``fuzz`` tox env runs more).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from contract import FLOAT_TYPES, TYPES, assert_same_bits, dequantize, quantize
from fuzz_common import (
    DQ,
    QTYPE_NAMES,
    SPECIAL_SCALES,
    WRONG_TYPE_NAMES,
    Q,
    awkward_f32,
    contract_error,
    random_of_type,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

EXAMPLES = int(os.environ.get("EXTQL_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
LAYOUTS = ("c", "fortran", "strided", "reversed", "transposed", "unaligned", "readonly")


def relayout(a: np.ndarray, layout: str) -> np.ndarray:
    """The same values as ``a`` in another memory layout."""
    if layout == "fortran" and a.ndim:
        out = np.asfortranarray(a)
    elif layout == "strided" and a.ndim:
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        big[..., 1::2] = a
        out = big[..., 1::2]
    elif layout == "reversed" and a.ndim:
        out = a[::-1].copy()[::-1]
    elif layout == "transposed" and a.ndim >= 2:
        out = a.T.copy().T
    elif layout == "unaligned" and a.dtype.itemsize > 1:
        raw = bytearray(a.nbytes + 1)
        out = np.frombuffer(memoryview(raw)[1:], dtype=a.dtype).reshape(a.shape)
        out[...] = a  # frombuffer of a bytearray is writable
        assert a.size == 0 or not out.flags.aligned
    elif layout == "readonly":
        out = a.copy()
        out.setflags(write=False)
    else:
        out = a.copy()
    assert out.shape == a.shape
    return out


@st.composite
def shapes_and_axes(draw, max_rank: int = 5, max_elements: int = 4096):
    """(shape, per_axis, axis, pshape): rank 0..max_rank, dims 0..7."""
    rank = draw(st.integers(0, max_rank))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=rank, max_size=rank)))
    while int(np.prod(shape, dtype=np.int64)) > max_elements:
        shape = tuple(max(1, d // 2) for d in shape)
    per_axis = rank > 0 and draw(st.booleans())
    if per_axis:
        axis = draw(st.integers(-rank, rank - 1))
        pshape = (shape[axis],)
    else:
        axis = draw(st.integers(-9, 9))  # ignored per tensor, even out of range
        pshape = draw(st.sampled_from([(), (1,)]))
    return shape, per_axis, axis, pshape


def _scales(rng: np.random.Generator, pshape: tuple[int, ...], kind: str) -> np.ndarray:
    n = int(np.prod(pshape, dtype=np.int64))
    if kind == "special":
        s = rng.choice(SPECIAL_SCALES, size=n)
    elif kind == "positive":
        s = (rng.random(n) * 2 + 1e-3).astype(np.float32)
    else:  # any bit pattern
        s = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return s.astype(np.float32).reshape(pshape)


def _zero_points(rng: np.random.Generator, name: str, pshape: tuple[int, ...]) -> np.ndarray:
    """Zero points at the ends of the range, zero or anywhere; float16 /
    bfloat16 zero points of any bit pattern (NaN, inf, subnormal, -0)."""
    dt, lo, hi = TYPES[name]
    n = int(np.prod(pshape, dtype=np.int64))
    if name in FLOAT_TYPES:
        return random_of_type(rng, name, pshape)
    ends = np.array([lo, hi, 0, lo + 1, hi - 1], dtype=np.int64)
    anywhere = rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)
    pick = np.where(rng.random(n) < 0.5, rng.choice(ends, size=n), anywhere)
    return pick.astype(dt).reshape(pshape)


@FUZZ
@given(
    name=st.sampled_from(list(TYPES)),
    geometry=shapes_and_axes(),
    style=st.sampled_from(["normal", "ties", "bits", "special", "mixed"]),
    scale_kind=st.sampled_from(["special", "positive", "bits"]),
    with_zp=st.booleans(),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
)
def test_quantize_awkward_values(name, geometry, style, scale_kind, with_zp, layout, seed):
    shape, _, axis, pshape = geometry
    rng = np.random.default_rng(seed)
    scale = _scales(rng, pshape, scale_kind)
    base = float(scale.reshape(-1)[0]) if scale.size else 1.0
    x = awkward_f32(rng, shape, base, style)
    zp = _zero_points(rng, name, pshape) if with_zp else None
    want = quantize(x, scale, zp, axis)
    got = extql.quantize_linear(
        relayout(x, layout), relayout(scale, layout),
        None if zp is None else relayout(zp, layout), axis=axis,
    )
    assert_same_bits(got, want, f"quantize {name} {shape} axis={axis} {layout}")
    assert got.flags.c_contiguous and got.flags.writeable


@FUZZ
@given(
    name=st.sampled_from(list(TYPES)),
    geometry=shapes_and_axes(),
    scale_kind=st.sampled_from(["special", "positive", "bits"]),
    with_zp=st.booleans(),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
)
def test_dequantize_awkward_values(name, geometry, scale_kind, with_zp, layout, seed):
    shape, _, axis, pshape = geometry
    rng = np.random.default_rng(seed)
    q = random_of_type(rng, name, shape)  # every bit pattern of the type
    scale = _scales(rng, pshape, scale_kind)
    zp = _zero_points(rng, name, pshape) if with_zp else None
    want = dequantize(q, scale, zp, axis)
    got = extql.dequantize_linear(
        relayout(q, layout), relayout(scale, layout),
        None if zp is None else relayout(zp, layout), axis=axis,
    )
    assert_same_bits(got, want, f"dequantize {name} {shape} axis={axis} {layout}")


# ---------------------------------------------------------------------------
# Arbitrary (mostly wrong) combinations: the contract's answer or its error
# ---------------------------------------------------------------------------

ANY_TYPE = st.sampled_from(("float32",) + QTYPE_NAMES + WRONG_TYPE_NAMES)
SMALL_SHAPE = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def _array(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name == "float32":
        return awkward_f32(rng, shape, 1.0, "mixed")
    return random_of_type(rng, name, shape)


@st.composite
def any_call(draw):
    """A call with each input of any type and any small shape; shapes are
    often made consistent, so valid and invalid calls both come up."""
    op = draw(st.sampled_from([Q, DQ]))
    x_type = draw(st.one_of(st.just("float32" if op == Q else "int8"), ANY_TYPE))
    x_shape = draw(SMALL_SHAPE)
    s_type = draw(st.one_of(st.just("float32"), ANY_TYPE))
    form = draw(st.sampled_from(["per_tensor", "per_axis", "any"]))
    axis = draw(st.integers(-6, 6))
    if form == "per_tensor":
        s_shape = draw(st.sampled_from([(), (1,)]))
    elif form == "per_axis" and x_shape and -len(x_shape) <= axis < len(x_shape):
        s_shape = (x_shape[axis],)
    else:
        s_shape = draw(SMALL_SHAPE)
    zp_type = draw(st.one_of(st.none(), st.just(x_type), ANY_TYPE))
    zp_shape = None
    if zp_type is not None:
        zp_shape = draw(st.one_of(st.just(s_shape), SMALL_SHAPE))
    return op, x_type, x_shape, s_type, s_shape, zp_type, zp_shape, axis


@FUZZ
@given(call=any_call(), seed=st.integers(0, 2**32 - 1))
def test_any_call_computes_or_raises_the_contract_error(call, seed):
    op, x_type, x_shape, s_type, s_shape, zp_type, zp_shape, axis = call
    rng = np.random.default_rng(seed)
    x = _array(rng, x_type, x_shape)
    scale = _array(rng, s_type, s_shape)
    zp = None if zp_type is None else _array(rng, zp_type, zp_shape)
    expected = contract_error(op, x_type, x_shape, s_type, s_shape, zp_type, zp_shape, axis)
    fn = extql.quantize_linear if op == Q else extql.dequantize_linear
    what = f"{op}(x {x_type}{x_shape}, s {s_type}{s_shape}, zp {zp_type}{zp_shape}, axis={axis})"
    if expected is None:
        got = fn(x, scale, zp, axis=axis)
        ref = quantize if op == Q else dequantize
        assert_same_bits(got, ref(x, scale, zp, axis), what)
        return
    exc_name, reason = expected
    with pytest.raises((TypeError, ValueError)) as info:
        fn(x, scale, zp, axis=axis)
    assert type(info.value).__name__ == exc_name, f"{what}: {info.value!r}"
    message = str(info.value)
    assert message.startswith(op + ":"), f"{what}: the message does not name {op}: {message}"
    assert reason in message, f"{what}: expected {reason!r} in {message!r}"


@FUZZ
@given(
    name=st.sampled_from(list(TYPES)),
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    form=st.sampled_from(["list", "python_scalar", "numpy_scalar", "0d"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_python_inputs_match_arrays(name, shape, form, seed):
    """x and the scale as Python lists / numbers / NumPy scalars give the
    bits of the same values as float32 arrays."""
    rng = np.random.default_rng(seed)
    x = awkward_f32(rng, shape, 1.0, "mixed")
    s = np.float32(rng.choice(SPECIAL_SCALES))
    zp = _zero_points(rng, name, ())
    if form == "list":
        x_in, s_in = x.tolist(), [float(s)]
    elif form == "python_scalar":
        x_in, s_in = (float(x.reshape(-1)[0]) if x.size else 0.0), float(s)
    elif form == "numpy_scalar":
        x_in, s_in = (x.reshape(-1)[0] if x.size else np.float32(0)), s
    else:
        x_in, s_in = (x.reshape(-1)[:1].reshape(()) if x.size else np.float32(1)), s
    # The values as NumPy converts them to float32 (a Python float round
    # trip quiets a signalling NaN, so the expectation is built from that).
    x = np.asarray(x_in, dtype=np.float32)
    got = extql.quantize_linear(x_in, s_in, zp)
    assert_same_bits(got, quantize(x, s, zp), f"{name} {form}")
    # dequantize: the zero point as a Python number of the same value
    q = quantize(x, s, zp)
    py_zp = float(zp) if name in FLOAT_TYPES else int(zp)
    if name in FLOAT_TYPES and not np.isfinite(py_zp):
        return  # inf / NaN Python floats: checked by the exactness rule below
    got = extql.dequantize_linear(q, s_in, py_zp)
    assert_same_bits(got, dequantize(q, s, zp), f"{name} {form} python zero point")


@FUZZ
@given(name=st.sampled_from(list(TYPES)), value=st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)))
def test_python_zero_point_exact_or_rejected(name, value):
    """A Python number as dequantize's zero point is used when the type holds
    it exactly and rejected with a ValueError/TypeError otherwise."""
    dt = TYPES[name][0]
    q = np.zeros(3, dt)
    as_f64 = float(value) if abs(value) < 2**1000 else 0.0
    lo, hi = TYPES[name][1], TYPES[name][2]
    if name in FLOAT_TYPES:
        with np.errstate(all="ignore"):
            big = np.inf if value > 0 else -np.inf
            cast = float(np.array(as_f64).astype(dt)) if abs(value) < 2**1000 else big
        # Python compares int and float exactly (NumPy would round the int).
        fits = value != value or cast == value
    else:
        fits = value == value and lo <= value <= hi and value == int(value)
    if fits:
        got = extql.dequantize_linear(q, np.float32(1), value)
        exact = np.array(float(value) if name in FLOAT_TYPES else int(value)).astype(dt)
        assert_same_bits(got, dequantize(q, np.float32(1), exact), name)
    else:
        with pytest.raises((TypeError, ValueError), match=DQ):
            extql.dequantize_linear(q, np.float32(1), value)
