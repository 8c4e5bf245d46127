"""ExtendedLSTM on every instruction-set variant of the kernels: each stored
case of AMD Quark 0.13's library (tests/data/dpu/lstm.*) gives Quark's bits
on each variant this build and CPU have, Y_h / Y_c the same bits on each;
the step's dot products at their extremes give the oracle's
(tests/lstm_contract.py)."""

from __future__ import annotations

import lstm_contract as lc
import numpy as np
import pytest
from contract import assert_same_bits
from lstm_cases import make_case
from lstm_data import CASES, contract_inputs, quark_y

import extql


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_variant_gives_quarks_bits(case, each_isa):
    feeds = contract_inputs(case)
    first = None
    for isa in each_isa():
        got = extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"],
                                  outputs="Y,Y_h,Y_c", **case["attrs"])
        assert_same_bits(got[0], quark_y(case), f"{case['id']} on {isa}")
        if first is None:
            first = got
        for a, b, name in zip(got[1:], first[1:], ("Y_h", "Y_c"), strict=True):
            assert_same_bits(a, b, f"{case['id']} {name} on {isa}")


@pytest.mark.parametrize("n_in,hidden", [(301, 37), (64, 16), (3, 70), (600, 300)])
def test_dot_products_at_their_extremes(n_in, hidden, each_isa):
    """The step's integer dot products (int16 pairs multiplied into int32
    sums, blocks of 128 pairs, SIMD tiles of 32 or 64 gates and a scalar
    tail) where their sums are largest: x, and h at the first step (y's
    zero point 0), at -32768 throughout; each gate's weights at 32767, at
    -32768 or at random ones of the two (the largest sums of either sign);
    input sizes past one block of pairs, odd sizes (a zero row), gate
    counts that end in a partial tile.  Scales small enough that the gate
    sums do not saturate, so a wrong dot product shows."""
    attrs, feeds = make_case(np.random.default_rng(n_in), 3, n_in, hidden, symmetric=False)
    attrs.update(x_scale=2.0**-17, w_scale=2.0**-17, r_scale=2.0**-21, y_scale=2.0**-15,
                 y_zero_point=0)
    rng = np.random.default_rng(hidden)
    feeds["X"] = np.full(feeds["X"].shape, -1e30, np.float32)
    for name in ("W", "R"):
        shape = feeds[name].shape
        kind = rng.integers(0, 3, shape[:2])[..., None]
        feeds[name] = np.select([kind == 0, kind == 1], [np.float32(1e30), np.float32(-1e30)],
                                np.where(rng.random(shape) < 0.5, -1e30, 1e30)).astype(np.float32)
    want = lc.expected(attrs, feeds["X"], feeds["W"], feeds["R"], feeds["B"])
    for isa in each_isa():
        got = extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"],
                                  outputs="Y,Y_h,Y_c", **attrs)
        for g, exp, name in zip(got, want, ("Y", "Y_h", "Y_c"), strict=True):
            assert_same_bits(g, exp, f"{name} on {isa}")
