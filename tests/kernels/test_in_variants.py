"""ExtendedInstanceNormalization on every instruction-set variant of the
kernels (its statistics are summed 16 instances side by side, staged with
AVX2 / AVX-512 code where the CPU has it): each stored case of AMD Quark
0.13's library (tests/data/dpu/in.*) gives Quark's bits on each variant this
build and CPU have, and the oracle's (tests/in_contract.py) on whole groups
of instances, remainders and blocks with short tails."""

from __future__ import annotations

import in_cases
import in_contract as ic
import numpy as np
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
    # The kernel sums 16 instances' statistics at once, transposed in
    # blocks of 128 elements (8 x 8 stages with AVX2) or 16 x 16 tiles
    # (AVX-512) with a staged tail (extql/kernels/dpu_in.pxi): whole groups,
    # a remainder of instances, blocks, stages and tiles with a short tail,
    # at every instruction set.
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


def test_float32_square_sums_are_the_double_steps():
    """The claim the AVX2 sums rest on (extql/kernels/dpu_in.pxi,
    docs/development.rst "The instance norm's sums"): for every bfloat16
    value v with |v| >= 2^-63, or v 0, inf or NaN, and any float32 sq,
    float32 sq + v * v is float(double(sq) + double(v)²); below 2^-63 it is
    not (so the kernel's test for those values is needed)."""
    v = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
    rng = case_rng("dpu-in-square-sums")
    sq = np.concatenate([
        (rng.integers(0, 0x7F800000, 4000, dtype=np.uint32)).view(np.float32),
        np.array([0.0, np.inf, np.nan, 1.0, 2.0**-149, 3.4e38], np.float32)])
    a = np.abs(v)
    ok = (a >= np.float32(2.0**-63)) | (a == 0) | ~np.isfinite(v)
    with np.errstate(all="ignore"):
        for s in sq:
            f32 = (np.float32(s) + v * v).astype(np.float32)
            f64 = (np.float64(s) + v.astype(np.float64) ** 2).astype(np.float32)
            same = (f32.view(np.uint32) == f64.view(np.uint32)) | (np.isnan(f32) & np.isnan(f64))
            assert same[ok].all(), (s, v[ok][~same[ok]][:4])
        differ = 0
        for s in np.float32(2.0**-149) * np.arange(1, 200, dtype=np.float32):
            f32 = (s + v[~ok] * v[~ok]).astype(np.float32)
            f64 = (np.float64(s) + v[~ok].astype(np.float64) ** 2).astype(np.float32)
            differ += int(np.count_nonzero(f32 != f64))
    assert differ > 100, differ


@pytest.mark.parametrize("where", ["one block", "every other block", "all", "one lane",
                                   "in one tile"])
def test_blocks_with_tiny_values_take_the_double_steps(where, each_isa):
    """Blocks of 128 elements (AVX-512: tiles of 16) holding a value
    0 < |bf(x)| < 2^-63 are summed in double steps, the others in float32
    ones, one instance's chain going through both: the oracle's bits on
    every variant (16 instances, blocks of 128 and a short tail; one tiny
    value in one lane; tiny values inside one tile only)."""
    rng = case_rng("dpu-in-tiny-blocks", where)
    shape = (1, 16, 3 * 128 + 40)
    x = in_cases.values(rng, shape, "offset")
    tiny = (rng.standard_normal(shape) * 2.0**-70).astype(np.float32)
    if where == "one lane":
        x[0, 11, 200] = tiny[0, 11, 200]
    elif where == "in one tile":
        x[0, 3:6, 161:170] = tiny[0, 3:6, 161:170]
    else:
        blocks = {"one block": [1], "every other block": [0, 2], "all": [0, 1, 2, 3]}[where]
        for k in blocks:
            lanes = slice(None) if where == "all" else slice(k % 16, k % 16 + 3)
            x[0, lanes, k * 128: k * 128 + 40] = tiny[0, lanes, k * 128: k * 128 + 40]
    g, b = in_cases.params(rng, shape[1])
    want = ic.expected(x, g, b)
    for isa in each_isa():
        assert_same_bits(extql.extended_instance_normalization(x, g, b), want,
                         f"{where} on {isa}")


def test_a_long_run_of_tiny_squares_is_summed_in_double_steps(each_isa):
    """One instance whose sum of squares is 2^-122 and then grows by 2^17
    squares of a value below 2^-63 (a float32 square is subnormal and
    rounded there): the double steps' sum differs from the float32 steps'
    by about 1.5 %, and with epsilon 0 that reaches the output.  Every
    variant gives the oracle's bits, in every tile of the run."""
    rng = case_rng("dpu-in-tiny-run")
    n = 2**17 + 1
    x = in_cases.values(rng, (1, 16, n), "offset")
    x[0, 7, 0] = np.float32(2.0**-61)
    x[0, 7, 1:] = np.array([0x1B010000], np.uint32).view(np.float32)[0]
    g, b = in_cases.params(rng, 16)
    want = ic.expected(x, g, b, epsilon=0.0)
    # the float32 steps' sum against the double steps' (the values are
    # all alike after the first)
    v = ic.bf(x[0, 7])
    sq32 = np.float32(v[0] * v[0])
    sq64 = sq32
    tail32, tail64 = np.float32(v[1] * v[1]), np.float64(v[1]) ** 2
    for _ in range(n - 1):
        sq32 = np.float32(sq32 + tail32)
        sq64 = np.float32(np.float64(sq64) + tail64)
    assert abs(float(sq32) / float(sq64) - 1) > 0.005, (sq32, sq64)
    for isa in each_isa():
        y = extql.extended_instance_normalization(x, g, b, epsilon=0.0)
        assert_same_bits(y, want, f"long tiny run on {isa}")
