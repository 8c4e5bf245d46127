"""The ExtendedLSTM oracle (tests/lstm_contract.py) against the bits of AMD
Quark 0.13's own custom-op library, stored in tests/data/dpu by
tools/make_dpu_lstm_grid.py: one-node models of both names from 1 x 1 x 1 to
sequence 16, input 64, hidden 64 and Quark's own size, symmetric and
asymmetric, with the parameters that reach the contract's rarer lanes.

Bit for bit.  The grid's coverage is itself tested: a grid that stopped
reaching a lane (every output shift, y_zero_point below 32768, the wrapped
factor, saturated gate constants, wrapped gate sums, clamped and wrapped h,
NaN / -inf / saturating / tie inputs) fails here.
"""

from __future__ import annotations

from collections import Counter

import lstm_contract as lc
import numpy as np
import pytest
from contract import assert_same_bits
from lstm_data import CASES, MANIFEST, contract_inputs, inputs, quark_y


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oracle_gives_quarks_bits(case):
    feeds = contract_inputs(case)
    y, y_h, y_c = lc.expected(case["attrs"], feeds["X"], feeds["W"], feeds["R"], feeds["B"])
    assert_same_bits(y, quark_y(case), f"{case['id']} {case['group']}")
    # Y_h is the last step's h of each direction (the reverse one's is at time 0)
    assert_same_bits(y_h[0], y[-1, 0], "Y_h forward")
    assert_same_bits(y_h[1], y[0, 1], "Y_h reverse")
    assert y_c.dtype == np.float32 and y_c.shape == y_h.shape


def test_plus_inf_is_where_quark_and_the_contract_part():
    (case,) = [c for c in CASES if c["check"] == "quark_plus_inf"]
    feeds = inputs(case)
    y = lc.expected(case["attrs"], feeds["X"], feeds["W"], feeds["R"], feeds["B"])[0]
    assert not np.array_equal(y, quark_y(case))


def test_grid_covers_sizes_names_and_parameters():
    ops = Counter(c["op_type"] for c in CASES)
    assert set(ops) == set(lc.OPS)
    sizes = {(c["shape"][0], c["shape"][2], c["attrs"]["hidden_size"]) for c in CASES}
    assert (80, 64, 128) in sizes and (16, 64, 64) in sizes and (1, 1, 1) in sizes
    assert {s for s, _, _ in sizes} >= set(range(1, 14)) | {16}
    zps = [c["attrs"]["y_zero_point"] for c in CASES]
    assert min(zps) == 0 and max(zps) == 65535 and any(z < 32768 for z in zps)
    symmetric = [c for c in CASES if all(c["attrs"][f"{p}_zero_point"] == 32768
                                         for p in lc.QPARAMS)]
    assert len(symmetric) >= 10 and len(CASES) - len(symmetric) >= 10
    reasons = " ".join(MANIFEST["skipped"])
    for word in ("batch", "direction", "layout", "shift", "zero point"):
        assert word in reasons


def test_grid_reaches_every_lane():
    lanes: Counter = Counter()
    for case in CASES:
        if case["group"] == "quark_size":
            continue  # its lanes are the core's; the oracle takes seconds there
        feeds = contract_inputs(case)
        lc.expected(case["attrs"], feeds["X"], feeds["W"], feeds["R"], feeds["B"], lanes=lanes)
    wanted = [f"oh {k}" for k in range(16, 33) if k not in range(17, 20) and k not in (21, 22, 23)]
    wanted += ["factor exponent 31", "factor wrapped", "ohs clamped", "ohz below zero",
               "zero factor", "x NaN", "x -inf", "x saturates", "x tie", "h clamped",
               "h wrapped", "gate sum wrapped", "gate constant clamped", "srs tie"]
    missing = [w for w in wanted if lanes[w] < 1]
    assert not missing, f"lanes no case reaches: {missing}"
