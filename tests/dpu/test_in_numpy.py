"""extql.extended_instance_normalization (the NumPy API and the kernel)
against Quark 0.13's stored bits (tests/data/dpu/in.*) and the oracle
written from the operator page (tests/in_contract.py): every stored case,
property tests on special values, thread counts, layouts, and every
refusal as a clear error naming the operator."""

from __future__ import annotations

import in_cases
import in_contract as ic
import numpy as np
import pytest
from contract import assert_same_bits, case_rng
from hypothesis import given, settings
from hypothesis import strategies as st
from in_data import CASES, epsilon, inputs, quark_y

import extql

OP = "ExtendedInstanceNormalization"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_gives_quarks_bits(case):
    f = inputs(case)
    y = extql.extended_instance_normalization(f["x"], f["scale"], f["B"],
                                              epsilon=epsilon(case))
    assert y.shape == tuple(case["shape"]) and y.dtype == np.float32
    assert_same_bits(y, quark_y(case), f"{case['id']} {case['kind']}")


_SPECIAL = st.sampled_from([0x7FC00000, 0x7F800000, 0xFF800000, 0x7FFF8001, 0x7F7FFFFF,
                            0x00000001, 0x80000000, 0x3F808000, 0x3F818000, 0x4B800000])


@settings(max_examples=60, deadline=None)
@given(rank=st.integers(2, 5), seed=st.integers(0, 2**31 - 1),
       kind=st.sampled_from(in_cases.KINDS), specials=st.lists(_SPECIAL, max_size=4),
       eps=st.sampled_from([1e-5, 0.0, 1e-3, 0.25, 1e-30]))
def test_matches_the_oracle_on_special_values(rank, seed, kind, specials, eps):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 5, size=rank))
    x = in_cases.values(rng, shape, kind)
    flat = x.reshape(-1).view(np.uint32)
    for u in specials:
        flat[int(rng.integers(0, flat.size))] = u
    g, b = in_cases.params(rng, shape[1], special=bool(rng.integers(0, 2)))
    y = extql.extended_instance_normalization(x, g, b, epsilon=eps)
    assert_same_bits(y, ic.expected(x, g, b, eps), f"{shape} {kind}")


def test_thread_counts_give_the_same_bits():
    rng = case_rng("dpu-in-threads")
    x = in_cases.values(rng, (3, 40, 17, 9), "offset")
    g, b = in_cases.params(rng, 40)
    before = extql.get_num_threads()
    try:
        extql.set_num_threads(1)
        one = extql.extended_instance_normalization(x, g, b)
        extql.set_num_threads(2)
        two = extql.extended_instance_normalization(x, g, b)
    finally:
        extql.set_num_threads(before)
    assert_same_bits(two, one)
    assert_same_bits(one, ic.expected(x, g, b))


def test_non_contiguous_inputs_and_lists():
    rng = case_rng("dpu-in-strides")
    x = in_cases.values(rng, (2, 3, 8, 10), "normal")[:, :, :, ::2]
    g, b = in_cases.params(rng, 3)
    y = extql.extended_instance_normalization(x, g[::1].tolist(), b.tolist())
    assert_same_bits(y, ic.expected(np.ascontiguousarray(x), g, b))


def test_default_epsilon_is_1e_5():
    rng = case_rng("dpu-in-eps")
    x = in_cases.values(rng, (1, 2, 5), "constant")
    g, b = in_cases.params(rng, 2)
    assert_same_bits(extql.extended_instance_normalization(x, g, b),
                     extql.extended_instance_normalization(x, g, b, epsilon=1e-5))


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 0, 4), (2, 3, 0)])
def test_empty(shape):
    c = shape[1]
    y = extql.extended_instance_normalization(np.zeros(shape, np.float32),
                                              np.ones(c, np.float32), np.zeros(c, np.float32))
    assert y.shape == shape and y.dtype == np.float32


@pytest.mark.parametrize(("x", "g", "b", "exc", "words"), [
    (np.zeros((1, 2, 3)), np.ones(2, np.float32), np.ones(2, np.float32), TypeError,
     "x must be float32, got float64"),
    (np.zeros((1, 2, 3), np.float32), np.ones(2, np.float16), np.ones(2, np.float32),
     TypeError, "scale must be float32"),
    (np.zeros((1, 2, 3), np.float32), np.ones(2, np.float32), np.ones(2, np.int32),
     TypeError, "B must be float32"),
    (np.zeros(4, np.float32), np.ones(4, np.float32), np.ones(4, np.float32), ValueError,
     "rank >= 2"),
    (np.zeros((1, 2, 3), np.float32), np.ones(3, np.float32), np.ones(2, np.float32),
     ValueError, "scale must be 1-D of length C = 2"),
    (np.zeros((1, 2, 3), np.float32), np.ones(2, np.float32), np.ones((1, 2), np.float32),
     ValueError, "B must be 1-D of length C = 2"),
    (np.zeros((1, 2, 3), np.float32), np.ones(1, np.float32), np.ones(2, np.float32),
     ValueError, "length C"),
])
def test_refusals_name_the_operator(x, g, b, exc, words):
    with pytest.raises(exc, match=OP) as info:
        extql.extended_instance_normalization(x, g, b)
    assert words in str(info.value)


def test_input_is_not_modified():
    rng = case_rng("dpu-in-inplace")
    x = in_cases.values(rng, (2, 3, 7), "ties")
    g, b = in_cases.params(rng, 3)
    keep = x.copy()
    extql.extended_instance_normalization(x, g, b)
    assert_same_bits(x, keep)
