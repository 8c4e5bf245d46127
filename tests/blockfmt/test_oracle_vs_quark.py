"""The oracle of the block formats (tests/blockfmt_contract.py) against the
bits of AMD Quark 0.13's own custom-op library, stored in tests/data/blockfmt
by tools/make_blockfmt_grid.py: a grid of one-node models over every
attribute, rank, axis and input type, with inputs that reach every lane.

Bit for bit (any NaN equals any NaN).  The grid's coverage is itself tested:
a grid that stopped reaching a lane (ties of each mode, values past the
largest mantissa, exponent bumps, saturation, specials) would fail here.
"""

from __future__ import annotations

from collections import Counter

import blockfmt_contract as bc
import numpy as np
import pytest
from blockfmt_data import GRID_CASES, GRID_MANIFEST, assert_quarks_bits, grid_arrays
from contract import assert_same_bits

CASES = GRID_CASES


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oracle_gives_quarks_bits(case):
    x, quark_y = grid_arrays(case)
    assert x.dtype == np.dtype(case["dtype"]) and list(x.shape) == case["shape"]
    y = bc.expected(case["op_type"], x, case["attrs"])
    assert_quarks_bits(y, case)
    if case["check"] == "quark_bfloat_nan" and x.dtype == np.float32:
        # Quark's rule, NaNs included, on the input gives all of Quark's bits
        # (float16 inputs: onnxruntime's widening Cast quiets some signalling
        # NaNs and not others, so the rule's input is not known there).
        rounded = bc.quark_bfloat16_rule(x)
        plain = {**case["attrs"], "convert_to_bfloat_before_bfp": 0}
        assert_same_bits(bc.expected(case["op_type"], rounded, plain), quark_y, case["id"])


def test_grid_covers_every_attribute():
    seen: dict[str, Counter] = {}
    for case in CASES:
        a = bc.attributes(case["op_type"], case["attrs"])
        for key, value in [*a.items(), ("op_type", case["op_type"]), ("dtype", case["dtype"]),
                           ("rank", len(case["shape"])), ("check", case["check"])]:
            seen.setdefault(key, Counter())[str(value)] += 1
    assert set(seen["op_type"]) == set(bc.OPS)
    assert set(seen["bfp_method"]) == set(bc.BFP_METHODS)
    assert set(seen["element_dtype"]) == set(bc.ELEMENT_TYPES)
    assert set(seen["rounding_mode"]) == {"0", "1", "2"}
    assert {"16", "13", "11", "10", "32", "9", "33"} <= set(seen["bit_width"])
    assert {"0", "1", "2", "3", "8", "31"} <= set(seen["sub_block_shift_bits"])
    assert {"1", "3", "5", "7", "12", "17", "33", "64"} <= set(seen["block_size"])
    assert set(seen["convert_to_bfloat_before_bfp"]) == {"0", "1"}
    assert set(seen["use_compiler_version_cpu_kernel"]) == {"0", "1"}
    assert set(seen["dtype"]) == {"float32", "float16"}
    assert set(seen["rank"]) == {"0", "1", "2", "3", "4"}
    assert {str(a) for a in range(-4, 4)} <= set(seen["axis"])
    assert set(seen["check"]) == {"bits", "quark_bfloat_nan"}
    # every case that had to be left out is named, with the reason
    reasons = " ".join(s["reason"] for s in GRID_MANIFEST["skipped"])
    for word in ("element_dtype", "bfp_method", "block_size", "rounding_mode",
                 "sub_block_size", "axis", "bit_width"):
        assert word in reasons


def _lanes(case: dict, x: np.ndarray, y: np.ndarray) -> Counter:
    """Which lanes of the math this case's input reaches."""
    found: Counter = Counter()
    x32 = x.astype(np.float32)
    found["nan"] += int(np.isnan(x32).any())
    found["inf"] += int(np.isinf(x32).any())
    found["negative zero"] += int((np.signbit(x32) & (x32 == 0)).any())
    found["subnormal"] += int(((x32 != 0) & (bc.exponent_field(x32) == 0)).any())
    if x.size <= 1:
        return found
    a = bc.attributes(case["op_type"], case["attrs"])
    blocks, _ = bc.to_blocks(x32, a["axis"], a["block_size"])
    f = bc.exponent_field(blocks)
    E = np.where(f == 255, 0, f).max(axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        if bc.family(case["op_type"]) == "mx":
            et = bc.ELEMENT_TYPES[a["element_dtype"]]
            v = blocks / bc.pow2(E - 127 - et.emax)
            if et.ebits == 0:
                q = v * np.float32(64)
                found[f"int8 tie mode {a['rounding_mode']}"] += int((q - np.floor(q) == 0.5).any())
                found["int8 clamp"] += int((np.abs(q) >= 127.5).any())
            else:
                found[f"{a['element_dtype']} saturates"] += int((np.abs(v) > et.largest).any())
                found[f"{a['element_dtype']} subnormal"] += int(
                    ((np.abs(v) < 2.0 ** et.emin) & (v != 0)).any())
        elif a["bfp_method"] == "to_bfp":
            m = a["bit_width"] - 9
            q = blocks / bc.pow2(E - 127 - (m - 1))
            kind = "compiler" if a["use_compiler_version_cpu_kernel"] else "to_bfp"
            found[f"{kind} tie mode {a['rounding_mode']}"] += int((q - np.floor(q) == 0.5).any())
            found[f"{kind} past the largest"] += int((np.abs(q) > 2 ** m - 0.5).any())
            if kind == "compiler":
                r = bc.round_mode(q, a["rounding_mode"])
                found["compiler bump"] += int(((f == E) & (r >= 128)).any())
                found["compiler -128 kept"] += int(((f == E) & (r == -128)).any())
        else:
            found["to_bfp_prime nan block"] += int((f == 255).any())
    return found


def test_grid_reaches_every_lane():
    found: Counter = Counter()
    for case in CASES:
        x, y = grid_arrays(case)
        found.update(_lanes(case, x, y))
    wanted = ["nan", "inf", "negative zero", "subnormal", "int8 clamp", "compiler bump",
              "compiler -128 kept", "to_bfp_prime nan block"]
    wanted += [f"{k} tie mode {m}" for k in ("int8", "to_bfp", "compiler") for m in (0, 1, 2)]
    wanted += [f"{k} past the largest" for k in ("to_bfp", "compiler")]
    wanted += [f"{e} {what}" for e in bc.ELEMENT_TYPES if e != "int8"
               for what in ("saturates", "subnormal")]
    missing = [w for w in wanted if found[w] < 3]
    assert not missing, f"lanes reached by fewer than 3 cases: {missing}"
