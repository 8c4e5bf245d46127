"""ExtendedInstanceNormalization on every instruction-set variant of the
kernels (its statistics are summed 16 instances side by side, staged with
AVX2 / AVX-512 code where the CPU has it): each stored case of AMD Quark
0.13's library (tests/data/dpu/in.*) gives Quark's bits on each variant this
build and CPU have, and the oracle's (tests/in_contract.py) on whole groups
of instances, remainders and blocks with short tails."""

from __future__ import annotations

import in_cases
import in_contract as ic
import pytest
from contract import assert_same_bits, case_rng
from in_data import CASES, epsilon, inputs, quark_y

import extql


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_variant_gives_quarks_bits(case, each_isa):
    f = inputs(case)
    want = quark_y(case)
    for isa in each_isa():
        y = extql.extended_instance_normalization(f["x"], f["scale"], f["B"],
                                                  epsilon=epsilon(case))
        assert_same_bits(y, want, f"{case['id']} {case['kind']} on {isa}")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("shape", [(1, 16, 300), (2, 13, 129), (3, 5, 7, 40), (1, 32, 128),
                                   (1, 17, 130), (2, 16, 135)])
def test_instances_summed_side_by_side(shape):
    # The kernel sums 16 instances' statistics at once in blocks of 128
    # elements, staged 8 elements at a time (extql/kernels/dpu_in.pxi):
    # whole groups, a remainder of instances, blocks and stages with a
    # short tail, at every instruction set.
    rng = case_rng(f"dpu-in-lanes-{shape}")
    x = in_cases.values(rng, shape, "offset")
    g, b = in_cases.params(rng, shape[1], special=True)
    for threads in (1, 2):
        before = extql.get_num_threads()
        try:
            extql.set_num_threads(threads)
            y = extql.extended_instance_normalization(x, g, b)
        finally:
            extql.set_num_threads(before)
        assert_same_bits(y, ic.expected(x, g, b), f"{shape} {threads} threads")
