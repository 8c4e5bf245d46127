"""The ExtendedInstanceNormalization oracle's helpers (tests/in_contract.py)
against the operator page's own statements
(docs/operators/extended_instance_normalization.rst): the bfloat16 rounding
rule from the bits (ties to even, NaN payloads carrying), the exponent-grid
rounding ``rnd``, ``msc32`` as ``c - a*b`` and the refusals."""

from __future__ import annotations

import math

import in_contract as ic
import numpy as np
import pytest


def _f(u: int) -> np.float32:
    return np.array([u], dtype=np.uint32).view(np.float32)[0]


def _u(v) -> int:
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


@pytest.mark.parametrize(("u", "want"), [
    (0x3F808000, 0x3F800000),   # tie, bit 16 clear: down
    (0x3F818000, 0x3F820000),   # tie, bit 16 set: up
    (0x3F808001, 0x3F810000),   # above the tie: up
    (0x3F807FFF, 0x3F800000),   # below: down
    (0x7F7FFFFF, 0x7F800000),   # the largest float32 rounds to inf
    (0x7FC00000, 0x7FC00000),   # the quiet NaN stays
    (0x7FFF8001, 0x80000000),   # a NaN whose low half is above 0x8000 carries: -0
    (0xFF800000, 0xFF800000),
])
def test_bf_from_the_bits(u, want):
    assert _u(ic.bf(np.array([_f(u)]))[0]) == want


def test_rnd_rounds_onto_the_grid_of_exponent_m():
    one = np.float32(1.0)
    assert ic.rnd(_f(0x3F800001), 127) == one                  # 1 + ulp: tie to even
    assert _u(ic.rnd(_f(0x3F800003), 127)) == 0x3F800004       # 1 + 3 ulp: tie, up
    assert ic.rnd(np.float32(1.75), 150) == np.float32(2.0)    # X = 2^23: integers
    assert ic.rnd(np.float32(1.25), 149) == np.float32(1.0)    # X = 2^22: halves, tie
    assert ic.rnd(np.float32(-3.0), 151) == np.float32(-4.0)   # X = -2^24: evens, tie
    assert ic.rnd(np.float32(5.0), 151) == np.float32(4.0)


@pytest.mark.parametrize(("a", "b", "c"), [(2.0, 3.0, 10.0), (0.5, 0.5, 1.0), (1.25, 1.25, 0.0),
                                           (-3.0, -3.0, 9.0)])
def test_msc32_is_c_minus_ab_on_exact_values(a, b, c):
    assert ic.msc32(np.float32(a), np.float32(b), np.float32(c)) == np.float32(c - a * b)


def test_msc32_is_near_the_float_formula():
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = np.float32(rng.normal(0, 10))
        c = np.float32(a * a * rng.uniform(1.0, 3.0))
        got = float(ic.msc32(a, a, c))
        exact = float(c) - float(a) ** 2
        assert math.isclose(got, exact, rel_tol=1e-5, abs_tol=float(c) * 2**-22)


def test_statistics_are_sequential_float32_sums():
    # 1 + 2^-24 ... sums differently in order: 2^24 then +1 is lost each step
    x = np.array([[[2.0**24] + [1.0] * 7]], dtype=np.float32)
    y = ic.expected(x, np.ones(1, np.float32), np.zeros(1, np.float32), 0.0)
    assert np.isfinite(y).all()
    v = ic.bf(x).reshape(1, -1)
    mean_b, _ = ic.statistics(v, 0.0)
    assert mean_b[0] == ic.bf(np.array([np.float32(2.0**24) * np.float32(1 / 8)]))[0]


def test_instance_with_nan_is_nan_others_not():
    x = np.ones((1, 2, 4), np.float32) * np.arange(4, dtype=np.float32)
    x[0, 0, 1] = np.nan
    y = ic.expected(x, np.ones(2, np.float32), np.zeros(2, np.float32))
    assert np.isnan(y[0, 0]).all() and np.isfinite(y[0, 1]).all()


@pytest.mark.parametrize(("args", "words"), [
    ((np.float64, (1, 2, 3), (2,), (2,)), "x is not float32"),
    ((np.float32, (5,), (5,), (5,)), "rank below 2"),
    ((np.float32, (1, 2, 3), (3,), (2,)), "scale is not of length C"),
    ((np.float32, (1, 2, 3), (2,), (1, 2)), "B is not of length C"),
])
def test_problems(args, words):
    assert words in " ".join(ic.problems(*args))


def test_no_problem_on_a_good_node():
    assert ic.problems(np.float32, (2, 3), (3,), (3,)) == []
