"""ExtendedLSTM on every instruction-set variant of the kernels: each stored
case of AMD Quark 0.13's library (tests/data/dpu/lstm.*) gives Quark's bits
on each variant this build and CPU have, Y_h / Y_c the same bits on each."""

from __future__ import annotations

import pytest
from contract import assert_same_bits
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
