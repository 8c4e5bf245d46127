"""The ExtendedInstanceNormalization oracle (tests/in_contract.py) against the
bits of AMD Quark 0.13's own custom-op library, stored in tests/data/dpu by
tools/make_dpu_in_grid.py: one-node models of both names, ranks 2 to 5 up to
1 x 64 x 56 x 56, with NaN / inf, ties, large offsets and several epsilons.

Bit for bit.  The grid's coverage is itself tested: a grid that stopped
reaching a lane (a negative or non-finite variance, msc32 differing from the
float formula, ties, every rank and both names) fails here.
"""

from __future__ import annotations

from collections import Counter

import in_contract as ic
import numpy as np
import pytest
from contract import assert_same_bits
from in_data import CASES, MANIFEST, epsilon, inputs, quark_y


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oracle_gives_quarks_bits(case):
    f = inputs(case)
    y = ic.expected(f["x"], f["scale"], f["B"], epsilon(case))
    assert_same_bits(y, quark_y(case), f"{case['id']} {case['kind']} {case['shape']}")


def test_grid_covers_ranks_names_shapes_and_epsilons():
    assert {c["op_type"] for c in CASES} == set(ic.OPS)
    assert {len(c["shape"]) for c in CASES} == {2, 3, 4, 5}
    shapes = {tuple(c["shape"]) for c in CASES}
    assert {(1, 64, 56, 56), (1, 256, 14, 14), (1, 1)} <= shapes
    eps = {c["epsilon"] for c in CASES}
    assert None in eps and 0.0 in eps and len(eps) >= 5
    reasons = " ".join(MANIFEST["skipped"])
    for word in ("float32", "rank", "length"):
        assert word in reasons


def test_grid_reaches_every_lane():
    lanes: Counter = Counter()
    values: Counter = Counter()
    for case in CASES:
        if np.prod(case["shape"]) > 20000:
            continue  # the small cases reach the lanes; the oracle is slow there
        f = inputs(case)
        ic.expected(f["x"], f["scale"], f["B"], epsilon(case), lanes=lanes)
        b = f["x"].view(np.uint32)
        values["tie"] += int(((b & 0xFFFF) == 0x8000).sum())
        values["nan"] += int(np.isnan(f["x"]).sum())
        values["inf"] += int(np.isinf(f["x"]).sum())
        values["subnormal"] += int(((b & 0x7F800000) == 0).sum() - (f["x"] == 0).sum())
        values["param special"] += int((~np.isfinite(f["scale"])).sum())
    for lane in ("var", "var negative", "var non-finite", "mean non-finite",
                 "msc32 differs from float c - a*a"):
        assert lanes[lane] >= 1, lane
    for kind in ("tie", "nan", "inf", "subnormal", "param special"):
        assert values[kind] >= 1, kind


def test_outputs_are_bfloat16_values():
    for case in CASES[:5]:
        assert not (quark_y(case).view(np.uint32) & 0xFFFF).any()
