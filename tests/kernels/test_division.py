"""The quantize quotient x / s has the bits of the IEEE float32 division.

The 8- and 16-bit quantize of the copies with FMA (AVX2, AVX-512), and the
32-bit one with the zero point 0, take the quotient by the reciprocal
y = RN(1 / s) and two correction steps (``quotient_fma`` in
extql/kernels/formula.pxi) for scales 2^-60 <= |s| <= 2^60 that are not
powers of two; the other copies, types, zero points and scales divide (or
multiply by an exact reciprocal).  docs/development.rst ("The division") proves that the
quantized value is the division's; these tests check it the way the
division itself is checked: against the contract (tests/contract.py, NumPy's
float32 division), on every float32 ``x`` of whole binades of the quotient
(ties and their neighbours included) for scales chosen to be hard (the
largest reciprocal errors, mantissas of all ones, the ends of the range the
proof covers and just past them, subnormal and negative scales), on tiny and
huge quotients, and as hypothesis properties of near-tie values.  The
``slow`` test runs every one of the 2^32 float32 values for each hard scale.
Each test computes the expectation once and checks every kernel variant
against it (conftest.py's ``each_isa``), each with both ways of taking the
quotient (``extql_quotient``: the CPU picks the division or the corrections,
and the other must give the same bits on a CPU that picks it).
"""

from __future__ import annotations

import numpy as np
import pytest
from contract import TYPES, assert_same_bits, quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import extql
from extql import _kernels

F32 = np.float32
NARROW = ["int8", "uint8", "int16", "uint16"]
#: The 32-bit types take the reciprocal with the zero point 0 only.
WIDE = ["int32", "uint32"]


def _f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(F32)[0]


#: Scales that are hard for a division by the reciprocal: y = RN(1 / s) with
#: (almost) the largest relative error (mantissas of all ones, 1 + ulp), the
#: quantizers' usual ones, the ends of the range where the kernels use the
#: reciprocal (2^-60 <= |s| <= 2^60) and just past them (they divide), tiny,
#: subnormal and negative scales.
HARD = [
    F32(0.37), F32(1 / 3), F32(0.1), F32(6 / 255), F32(2.0 / 65535), F32(3.0),
    _f32(0x3F7FFFFF), _f32(0x3FFFFFFF), _f32(0x3F800001), _f32(0x3FC00001), _f32(0x3F7FFFFE),
    F32(-0.37), F32(1.5 * 2.0**-60), F32(1.5 * 2.0**-61), F32(1.5 * 2.0**59),
    F32(1.5 * 2.0**60), F32(np.nextafter(F32(2.0**-60), F32(1))), F32(1e-30), F32(3e-41),
]


def _between(lo: float, hi: float, step: int = 1) -> np.ndarray:
    """Every float32 in [lo, hi) (0 < lo < hi; every step-th one), and their
    negatives."""
    a = np.array([lo, hi], F32).view(np.uint32)
    bits = np.arange(int(a[0]), int(a[1]), step, dtype=np.uint32)
    pos = bits.view(F32)
    return np.concatenate([pos, -pos])


@pytest.fixture
def each_variant(each_isa):
    """A function iterating each_isa's variants, each with the quotient by
    the division and by the corrections in turn (their names: "avx512/fma",
    ...; the baseline has no FMA and always divides, so it runs once); the
    CPU's choice is restored after."""
    def variants():
        try:
            for isa in each_isa():
                for method in ("division",) if isa == "baseline" else ("fma", "division"):
                    _kernels.set_quotient(method)
                    assert _kernels.quotient() == method
                    yield f"{isa}/{method}"
        finally:
            _kernels.set_quotient(None)
    return variants


def _check(isas, x: np.ndarray, s: np.float32, name: str, zp: int = 0, what: str = "") -> None:
    """Every variant of ``isas`` (each_variant) against one expectation."""
    dt = TYPES[name][0]
    z = np.array(zp, dt)
    expected = quantize(x, s, z, 1)
    for isa in isas():
        assert_same_bits(extql.quantize_linear(x, s, z), expected,
                         f"{isa}: quantize {name} s={s!r} zp={zp} {what}")


@pytest.mark.parametrize("s", HARD, ids=[f"{float(s):.9g}" for s in HARD])
def test_every_x_of_a_quotient_binade(s, each_variant):
    """Every x whose quotient lies in [2^13, 2^14) (int16: the last bit of the
    quotient decides the rounding of every tie k + 0.5 and of its
    neighbours); every 4th x whose quotient lies in [2^5, 2^6) for int8 and
    uint8 and in [2^14, 2^15) for uint16 (the same steps of the quotient;
    test_every_float32_x takes every x)."""
    a = abs(float(s))
    _check(each_variant, _between(a * 2.0**13, a * 2.0**14), s, "int16",
           what="quotients in [2^13, 2^14)")
    x = _between(a * 2.0**5, a * 2.0**6, 4)
    _check(each_variant, x, s, "int8", what="quotients in [2^5, 2^6)")
    _check(each_variant, x, s, "uint8", 3, what="quotients in [2^5, 2^6)")
    _check(each_variant, _between(a * 2.0**14, a * 2.0**15, 4), s, "uint16", 32768,
           "quotients in [2^14, 2^15)")
    # 32-bit: in [2^22, 2^23) every quotient is an integer or a tie; from
    # 2^24 on the quotient's bits are the value (uint32 past 2^31).
    _check(each_variant, _between(a * 2.0**22, a * 2.0**23, 8), s, "int32",
           what="quotients in [2^22, 2^23)")
    _check(each_variant, _between(a * 2.0**31, a * 2.0**32, 32), s, "uint32",
           what="quotients in [2^31, 2^32)")


@pytest.mark.parametrize("name", NARROW + WIDE)
def test_tiny_and_huge_quotients(name, each_variant):
    """Where the proof's conditions end: |x| around 2^-100, quotients around
    2^-124 and the subnormals, |x| around |s| * 2^33 (the bound the
    reciprocal path clamps x to) and beyond to the largest floats, with the
    scales at the ends of the reciprocal's range."""
    parts = [_between(2.0**-103, 2.0**-97, 997), _between(1e-45, 2.0**-120, 4099)]
    for e in (20, 31, 32, 33, 34, 40):
        parts.append(np.geomspace(2.0**e * 0.5, 2.0**e * 2, 4097).astype(F32))
    parts.append(np.array([3.4028235e38, 1e38, np.inf, -np.inf, np.nan, 0.0, -0.0], F32))
    base = np.concatenate(parts)
    for s in HARD:
        a = abs(float(s))
        with np.errstate(over="ignore"):
            scaled = np.concatenate([base, -base, (base * F32(a)).astype(F32)])
            scaled = np.concatenate([scaled, -scaled])
        zp = 0 if name in WIDE else int(TYPES[name][1] + 1)
        _check(each_variant, scaled, s, name, zp, "tiny and huge")


@pytest.mark.parametrize("name", NARROW + WIDE)
def test_hard_scales_per_channel(name, each_variant):
    """One tensor whose channels take the reciprocal, the division and the
    multiply, each with near-tie values of its own scale."""
    s = np.array(HARD + [F32(0.5), F32(2.0**-70)], F32)
    k = np.arange(-300, 300, dtype=F32)
    with np.errstate(over="ignore", under="ignore"):
        rows = [np.concatenate([((k + F32(0.5)) * c).astype(F32)] * 3) for c in s]
    x = np.stack(rows)
    x[:, 600:1200] = np.nextafter(x[:, 600:1200], F32(np.inf))
    x[:, 1200:] = np.nextafter(x[:, 1200:], F32(-np.inf))
    dt = TYPES[name][0]
    zp = np.resize(np.array([TYPES[name][1] + 7, 0, TYPES[name][2] - 3], np.int64), len(s))
    zp = zp.astype(dt)
    for axis, xx in ((0, x), (1, np.ascontiguousarray(x.reshape(1, *x.shape)))):
        expected = quantize(xx, s, zp, axis)
        for isa in each_variant():
            assert_same_bits(extql.quantize_linear(xx, s, zp, axis=axis), expected,
                             f"{isa}: quantize {name} per channel axis={axis}")


NORMAL_SCALES = st.floats(min_value=2.0**-70, max_value=2.0**70, width=32,
                          allow_subnormal=False).map(F32)


# (each_variant is a function of the test, not of an example: it holds no state)
@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(NORMAL_SCALES, st.sampled_from(HARD)),
       k=st.integers(-40000, 40000),
       ulps=st.lists(st.integers(-3, 3), min_size=1, max_size=7),
       negative_scale=st.booleans())
def test_near_ties_property(each_variant, s, k, ulps, negative_scale):
    """x = RN((k + 1/2) * s) and its neighbours up to 3 ulps away, for any
    scale: the quotients closest to the ties of the rounding to integers."""
    s = F32(-s if negative_scale else s)
    with np.errstate(over="ignore", under="ignore"):
        x0 = F32(F32(k + 0.5) * s)
    xs = [x0]
    for u in ulps:
        x = x0
        for _ in range(abs(u)):
            x = np.nextafter(x, F32(np.inf) if u > 0 else F32(-np.inf))
        xs.append(x)
    x = np.array(xs * 16, F32)  # at several lane positions
    for name in NARROW + WIDE:
        _check(each_variant, x, s, name, 0, f"near k={k} + 1/2")


@pytest.mark.slow
@pytest.mark.parametrize("s", HARD, ids=[f"{float(s):.9g}" for s in HARD])
def test_every_float32_x(s, each_variant):
    """All 2^32 float32 values of x (chunk by chunk), int8 and int16."""
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(F32)
        _check(each_variant, x, s, "int16", what=f"x bits [{start:#x}, +{chunk:#x})")
        _check(each_variant, x, s, "int8", 5, what=f"x bits [{start:#x}, +{chunk:#x})")
