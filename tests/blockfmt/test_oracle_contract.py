"""The oracle of the block formats (tests/blockfmt_contract.py) against the
statements of the contract itself (docs/operators): its worked examples of
the rounding modes, the refusals, the block layout, one-element tensors,
float16 and bfloat16 pre-rounding.  The oracle is what every path of extql
is judged against, so it is checked from two sides: these statements, and
Quark's own bits (test_oracle_vs_quark*.py).
"""

from __future__ import annotations

import blockfmt_contract as bc
import blockfmt_values as bv
import numpy as np
import pytest
from contract import assert_same_bits, case_rng
from hypothesis import given, settings

F32 = np.float32


@pytest.mark.parametrize(("mode", "cases"), [
    (0, {-0.3: -0.0, 0.3: 0.0, -0.5: -1.0, 0.5: 1.0, 2.5: 3.0, -2.5: -3.0, -0.0: -0.0}),
    (1, {-0.3: -0.0, -0.5: -0.0, -2.5: -2.0, 2.5: 3.0, -1.5: -1.0, -0.7: -1.0, -0.0: -0.0}),
    (2, {-0.3: 0.0, -0.5: 0.0, -0.0: -0.0, 2.5: 2.0, 3.5: 4.0, -1.5: -2.0, -2.5: -2.0,
         0.5: 0.0, -0.7: -1.0}),
])
def test_rounding_modes_as_the_contract_states(mode, cases):
    q = np.array(list(cases), F32)
    assert_same_bits(bc.round_mode(q, mode), np.array(list(cases.values()), F32), f"mode {mode}")


@pytest.mark.parametrize(("op", "attrs", "rank", "dtype", "attribute"), [
    ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_primes"}, 2, F32, "bfp_method"),
    ("BFPFixNeuron", {"bfp_method": ""}, 2, F32, "bfp_method"),
    ("MXQuantizeDequantize", {"element_dtype": "fp3"}, 2, F32, "element_dtype"),
    ("MXFixNeuron", {"element_dtype": "FP8_E4M3"}, 2, F32, "element_dtype"),
    ("BFPQuantizeDequantize", {"rounding_mode": 3}, 2, F32, "rounding_mode"),
    ("MXQuantizeDequantize", {"rounding_mode": -1}, 2, F32, "rounding_mode"),
    ("BFPQuantizeDequantize", {"block_size": 0}, 2, F32, "block_size"),
    ("MXQuantizeDequantize", {"block_size": -4}, 1, F32, "block_size"),
    ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "block_size": 10,
                               "sub_block_size": 4}, 2, F32, "sub_block_size"),
    ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime_shared", "block_size": 16,
                               "sub_block_size": 0}, 2, F32, "sub_block_size"),
    ("BFPQuantizeDequantize", {"axis": 2}, 2, F32, "axis"),
    ("MXQuantizeDequantize", {"axis": -4}, 3, F32, "axis"),
    ("BFPQuantizeDequantize", {}, 2, np.float64, "x"),
    ("MXQuantizeDequantize", {}, 2, np.int8, "x"),
])
def test_refusals_name_the_attribute(op, attrs, rank, dtype, attribute):
    bad = bc.refusals(op, attrs, rank=rank, dtype=dtype)
    assert [r.attribute for r in bad] == [attribute]
    assert attribute in str(bad[0]) and repr(bad[0].value) in str(bad[0])
    with pytest.raises(ValueError, match=attribute):
        bc.expected(op, np.zeros((2,) * rank, dtype), attrs)


@pytest.mark.parametrize(("op", "attrs", "rank"), [
    ("BFPQuantizeDequantize", {"axis": 7}, 1),  # rank 1 ignores the axis
    ("BFPQuantizeDequantize", {"axis": -2}, 2),
    ("MXQuantizeDequantize", {"axis": 3}, 4),
    ("BFPQuantizeDequantize", {"block_size": 10, "sub_block_size": 4}, 2),  # to_bfp: unused
    ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "block_size": 12,
                               "sub_block_size": 3}, 2),
])
def test_what_is_not_refused(op, attrs, rank):
    assert bc.refusals(op, attrs, rank=rank, dtype=F32) == []


def test_attributes_are_checked_without_a_shape():
    assert bc.refusals("BFPQuantizeDequantize", {"axis": 9}) == []
    assert [r.attribute for r in bc.refusals("BFPQuantizeDequantize", {"axis": 9}, rank=3)] \
        == ["axis"]


@pytest.mark.parametrize("op", ["BFPQuantizeDequantize", "BFPFixNeuron"])
def test_undefined_widths_and_shifts_have_no_expectation(op):
    x = np.ones((2, 8), F32)
    for attrs in ({"bit_width": 9}, {"bit_width": 33},
                  {"bfp_method": "to_bfp_prime", "bit_width": 34},
                  {"bfp_method": "to_bfp_prime", "sub_block_shift_bits": 32}):
        with pytest.raises(bc.OutsideContract):
            bc.expected(op, x, attrs)


def _blockwise_reference(x, axis, block, fn):
    """Apply fn to each padded block of each line along axis, element by element
    (a slow, index-by-index statement of the layout)."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    length = moved.shape[-1]
    for idx in np.ndindex(moved.shape[:-1]):
        for start in range(0, length, block):
            chunk = np.zeros(block, F32)
            part = moved[idx][start:start + block]
            chunk[:part.size] = part
            out[idx][start:start + block] = fn(chunk[None, :])[0, :part.size]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("shape", [(3, 7, 5), (2, 9), (4, 1, 3, 6)])
@pytest.mark.parametrize("block", [1, 3, 4, 8])
def test_blocks_run_along_the_axis_with_zero_padding(shape, block):
    rng = case_rng("layout", shape, block)
    for axis in range(-len(shape), len(shape)):
        attrs = {"axis": axis, "block_size": block, "rounding_mode": 2}
        x = bv.lane_values(rng, shape, "BFPQuantizeDequantize", attrs)
        want = _blockwise_reference(x, axis % len(shape), block,
                                    lambda b: bc._to_bfp(b, 16, 2))
        assert_same_bits(bc.bfp_quantize_dequantize(x, **attrs), want, f"axis {axis}")


@pytest.mark.parametrize("op", list(bc.OPS))
@pytest.mark.parametrize("shape", [(), (1,), (1, 1, 1)])
def test_one_element_passes_through(op, shape):
    for value in bv.specials(F32):
        x = np.full(shape, value, F32)
        assert_same_bits(bc.expected(op, x, {"axis": 0}), x, f"{op} {value}")


def test_one_element_is_still_pre_rounded_to_bfloat16():
    x = np.array([[1.00390625 + 2 ** -10]], F32)  # not a bfloat16: rounds up
    y = bc.bfp_quantize_dequantize(x, convert_to_bfloat_before_bfp=1)
    assert y[0, 0] == F32(1.0078125)
    x16 = np.array([65504], np.float16)  # rounds to 65536 in bfloat16: inf in float16
    assert np.isposinf(bc.bfp_quantize_dequantize(x16, convert_to_bfloat_before_bfp=1)[0])


def test_bfloat16_pre_rounding_keeps_nan_and_follows_quarks_rule_elsewhere():
    cases = np.concatenate([bv.BFLOAT16_CASES, bv.specials(F32)])
    got = bc.bfloat16_round(cases)
    quark = bc.quark_bfloat16_rule(cases)
    nan = np.isnan(cases)
    assert np.isnan(got[nan]).all()
    assert_same_bits(got[~nan], quark[~nan])
    assert not np.isnan(quark[nan]).all()  # Quark's rule makes some NaNs numbers
    import ml_dtypes
    finite = np.isfinite(cases)  # Quark's rule is round to nearest even on finite values
    assert_same_bits(got[finite], cases[finite].astype(ml_dtypes.bfloat16).astype(F32))


@pytest.mark.parametrize("op", list(bc.OPS))
def test_float16_is_computed_in_float32_and_rounded_back(op):
    rng = case_rng("f16", op)
    x = bv.lane_values(rng, (4, 40), op, {"axis": 1}, np.float16)
    y = bc.expected(op, x, {"axis": 1})
    assert y.dtype == np.float16
    with np.errstate(over="ignore"):
        want = bc.expected(op, x.astype(F32), {"axis": 1}).astype(np.float16)
    assert_same_bits(y, want)


@pytest.mark.parametrize("op", list(bc.OPS))
def test_the_input_is_not_modified(op):
    x = bv.lane_values(case_rng("inplace", op), (3, 17), op, {"axis": 1})
    before = x.copy()
    attrs = {"convert_to_bfloat_before_bfp": 1} if bc.family(op) == "bfp" else {}
    bc.expected(op, x, attrs)
    assert_same_bits(x, before)


def test_the_legacy_names_compute_the_same():
    x = bv.lane_values(case_rng("legacy"), (5, 32), "BFPQuantizeDequantize", {})
    for new, old, attrs in [("BFPQuantizeDequantize", "BFPFixNeuron", {"rounding_mode": 1}),
                            ("MXQuantizeDequantize", "MXFixNeuron", {"element_dtype": "fp4_e2m1"})]:
        assert_same_bits(bc.expected(old, x, attrs), bc.expected(new, x, attrs))
    assert_same_bits(
        bc.bfp_quantize_dequantize(x, bfp_method="to_bfp_prime_shared", block_size=16),
        bc.bfp_quantize_dequantize(x, bfp_method="to_bfp_prime", block_size=16))


def test_to_bfp_clamps_instead_of_bumping_the_exponent():
    s = 2.0 ** -6  # block exponent field 127 (1.x), BFP16: s = 2^(0 - 6)
    x = np.array([1.999, 0.5, -1.999, 0.25, 1.0, -1.0, 0.0, 0.125], F32)
    y = bc.bfp_quantize_dequantize(x, block_size=8)
    assert y[0] == F32(127 * s) and y[2] == F32(-127 * s)


def test_to_bfp_prime_makes_a_block_with_inf_or_nan_all_nan():
    x = np.arange(32, dtype=F32).reshape(2, 16) / 7
    x[0, 3] = np.inf
    y = bc.bfp_quantize_dequantize(x, bfp_method="to_bfp_prime", block_size=16, bit_width=13)
    assert np.isnan(y[0]).all() and not np.isnan(y[1]).any()
    z = bc.bfp_quantize_dequantize(x, block_size=16)  # to_bfp passes inf through
    assert np.isposinf(z[0, 3]) and np.isfinite(np.delete(z[0], 3)).all()


@pytest.mark.parametrize("element", [e for e in bc.ELEMENT_TYPES if e != "int8"])
def test_mx_float_zero_is_positive(element):
    x = np.array([-0.0, -1e-30, 1.0, 0.0, -3e-30], F32)
    assert_same_bits(bc.mx_quantize_dequantize(x, element_dtype=element, block_size=5),
                     np.array([0.0, 0.0, 1.0, 0.0, 0.0], F32))


def test_mx_scale_is_not_clamped_to_e8m0():
    # A block of subnormals: E = 0, X = 2^-142 for fp8_e5m2 (E8M0 stops at
    # 2^-127), so the smallest subnormal is an element (2^-7) and survives.
    x = np.array([2.0 ** -149, -(2.0 ** -149), 3 * 2.0 ** -149, 0.0], F32)
    assert_same_bits(bc.mx_quantize_dequantize(x, element_dtype="fp8_e5m2", block_size=4), x)


def test_mx_int8_at_the_largest_exponent_can_overflow_to_inf():
    x = np.array([-2.0 ** 127 * 1.999, 2.0 ** 127], F32)  # k = -128: -2 * 2^127
    assert_same_bits(bc.mx_quantize_dequantize(x, block_size=2),
                     np.array([-np.inf, 2.0 ** 127], F32))


@settings(max_examples=300, deadline=None)
@given(bv.node_cases())
def test_the_layout_is_blocks_along_the_axis(case):
    """Any node on any input: the output has x's type and shape, equals the
    same node on the input with the axis moved last (rank >= 2), and blocks of
    a line depend only on that line (the output of one line is the output of
    that line alone, when it has more than one element)."""
    op_type, attrs, x = case
    y = bc.expected(op_type, x, attrs)
    assert y.dtype == x.dtype and y.shape == x.shape
    if x.ndim < 2:
        return
    a = attrs["axis"] % x.ndim
    moved = np.moveaxis(x, a, -1)
    last = {**attrs, "axis": -1}
    assert_same_bits(np.moveaxis(bc.expected(op_type, moved, last), -1, a), y, "moved axis")
    line = moved.reshape(-1, moved.shape[-1])[-1:]
    if line.size < 2:  # a tensor of one element passes through whole
        return
    assert_same_bits(bc.expected(op_type, line, last)[0],
                     np.moveaxis(y, a, -1).reshape(-1, moved.shape[-1])[-1], "one line")
