"""The block-format kernels through the NumPy API (``extql.bfp_quantize_dequantize``,
``extql.mx_quantize_dequantize``) against the independent oracle
``blockfmt_contract`` (docs/operators/bfp_quantize_dequantize.rst and
mx_quantize_dequantize.rst), bit for bit (any NaN equals any NaN).

* a grid: every method (and its old name), the compiler-version kernel,
  every rounding mode, every MX element type, bit widths, block and sub-block
  sizes (one-element blocks, blocks longer than the kernels' tiles), bfloat16
  pre-rounding, ranks 0 to 4, every axis (negative too), lines that are not
  a multiple of the block, one-element and empty tensors, float16 -- on data
  with exact rounding ties, values that round past the largest mantissa,
  subnormals, zeros of both signs, infinities and NaN;
* hypothesis properties: special values at every lane;
* ``out=``: into x itself, into another array, refused when wrong; x never
  modified;
* any cut of the work items into ranges gives the whole tensor's bits;
* AMD Quark 0.13's own library's bits (tests/data/quark) on every BFP / MX
  node of the models its quantizer wrote.

The behaviours every path shares (Quark's single-node grid, any node the
contract defines, the defaults, two threads, the refusals) are tested on
every path, this one included, in tests/blockfmt/test_block_ops.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from blockfmt_contract import (
    BFP_DEFAULTS,
    ELEMENT_TYPES,
    MX_DEFAULTS,
    expected,
    family,
)
from blockfmt_data import (
    BLOCK_MODELS,
    block_nodes,
    model_values,
)
from blockfmt_values import MIXED_SPECIALS, as_dtype, mixed_values
from contract import assert_same_bits, case_rng
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import extql
from extql.api import blocks as block_formats
from extql.rules import blocks as block_rules

# Every test runs extql's kernels on every instruction-set variant
# (tests/conftest.py): the grid and the properties check each variant against
# one expectation (each_isa), the others run once per variant (kernel_isa).

BFP = "BFPQuantizeDequantize"
MX = "MXQuantizeDequantize"
API = {BFP: extql.bfp_quantize_dequantize, MX: extql.mx_quantize_dequantize}


def _blocky_data(rng: np.random.Generator, shape: tuple[int, ...], axis: int,
                 block: int) -> np.ndarray:
    """mixed_values with a scale of its own per block along ``axis``, from 2^-149
    to 2^120: blocks of subnormals next to blocks of huge values, so that
    every range of a block's step (subnormal, beyond 2^126, between) meets
    its neighbours in one tile."""
    axis %= len(shape)
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block)
    exps = rng.integers(-149, 120, blocks).astype(np.float64)
    exps = np.repeat(exps, block, axis=axis).take(range(shape[axis]), axis=axis)
    with np.errstate(over="ignore", under="ignore"):
        x = (mixed_values(rng, shape).astype(np.float64) * np.exp2(exps - 10)).astype(np.float32)
    return x


def _check(op: str, x: np.ndarray, attrs: dict, what: str = "", isas=None) -> np.ndarray:
    """Run the API on x and compare with the oracle (``op``: any of the four
    names) on the variant in force, or on each of ``isas`` (each_isa); x must
    stay as it was."""
    before = x.copy()
    want = expected(op, x, attrs)
    for isa in isas() if isas is not None else [""]:
        got = (API[BFP] if family(op) == "bfp" else API[MX])(x, **attrs)
        assert_same_bits(got, want, f"{isa} {op} {attrs} {what}")
        assert_same_bits(x, before, f"{isa}: x was modified")
    return got


# ---------------------------------------------------------------- the grid

def _bfp_configs() -> list[dict]:
    out: list[dict] = []
    for mode in (0, 1, 2):
        for bf16 in (0, 1):
            out.append({"rounding_mode": mode, "convert_to_bfloat_before_bfp": bf16})
            out.append({"rounding_mode": mode, "convert_to_bfloat_before_bfp": bf16,
                        "use_compiler_version_cpu_kernel": 1})
            out.append({"bfp_method": "to_bfp_prime", "block_size": 16, "rounding_mode": mode,
                        "convert_to_bfloat_before_bfp": bf16})
        out.append({"bfp_method": "to_bfp_prime_shared", "block_size": 16,
                    "rounding_mode": mode})
    for bits in (10, 11, 13, 17, 24, 32):
        out.append({"bit_width": bits, "rounding_mode": 2})
        out.append({"bit_width": bits, "use_compiler_version_cpu_kernel": 1})
    for bits in (9, 10, 11, 13, 17, 24, 32, 33):
        out.append({"bfp_method": "to_bfp_prime", "bit_width": bits, "block_size": 16,
                    "rounding_mode": 1})
    for block in (1, 3, 16, 33, 1500):
        out.append({"block_size": block})
        out.append({"block_size": block, "use_compiler_version_cpu_kernel": 1})
    for block, sub, shift in ((16, 4, 2), (16, 16, 3), (16, 1, 0), (8, 2, 8), (12, 3, 31),
                              (1, 1, 1), (1200, 300, 4), (6, 2, 1)):
        out.append({"bfp_method": "to_bfp_prime", "block_size": block, "sub_block_size": sub,
                    "sub_block_shift_bits": shift, "rounding_mode": 0})
    return out


def _mx_configs() -> list[dict]:
    out = [{"element_dtype": name, "rounding_mode": mode}
           for name in ELEMENT_TYPES for mode in (0, 1, 2)]
    for block in (1, 7, 8, 1500):
        out += [{"element_dtype": "int8", "block_size": block},
                {"element_dtype": "fp8_e4m3", "block_size": block, "rounding_mode": 2}]
    return out


CONFIGS = [(BFP, c) for c in _bfp_configs()] + [(MX, c) for c in _mx_configs()]

#: (shape, axis): rank 0 to 4, the blocks along the last axis (contiguous) or
#: another one (columns; more columns than a kernel chunk too), negative
#: axes, an axis a rank-1 tensor ignores, lines not a multiple of the block,
#: one element, nothing.
LAYOUTS = [
    ((37,), 1), ((37,), -5), ((4, 45), -1), ((45, 4), 0), ((3, 19, 5), 1), ((3, 5, 19), -1),
    ((2, 3, 17, 4), 2), ((2, 3, 4, 17), -1), ((2, 33, 3, 2), -3), ((2, 21, 300), 1),
    ((1, 3000), 1), ((), 1), ((1,), 0), ((1, 1, 1), 2), ((0, 8), 1), ((3, 0), 0),
]


def _id(value) -> str:
    return "-".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)


@pytest.mark.parametrize("shape,axis", LAYOUTS, ids=[f"{s}@{a}" for s, a in LAYOUTS])
@pytest.mark.parametrize("op,attrs", CONFIGS, ids=[f"{o[:3]}-{_id(c)}" for o, c in CONFIGS])
def test_matches_contract(op, attrs, shape, axis, each_isa):
    """float32 and float16."""
    x = mixed_values(case_rng(op, _id(attrs), shape, axis), shape)
    for dtype in (np.float32, np.float16):
        _check(op, as_dtype(x, np.dtype(dtype)), {**attrs, "axis": axis}, isas=each_isa)


@pytest.mark.parametrize("shape,axis", [((7, 300), -1), ((4, 40, 9), 1), ((3, 64, 20), 1),
                                        ((2, 40, 400), 1)])
@pytest.mark.parametrize("op,attrs", [(o, c) for o, c in CONFIGS if c.get("block_size", 1) < 100],
                         ids=[f"{o[:3]}-{_id(c)}" for o, c in CONFIGS
                              if c.get("block_size", 1) < 100])
def test_blocks_of_every_scale_side_by_side(op, attrs, shape, axis, each_isa):
    """Blocks from subnormal to near the largest float32 next to each other
    (each kernel path: contiguous blocks in tiles, columns, narrow columns),
    float32 and float16."""
    block = attrs.get("block_size", 8 if op == BFP else 32)
    x = _blocky_data(case_rng(op, "blocky", _id(attrs), shape), shape, axis, block)
    for dtype in (np.float32, np.float16):
        _check(op, as_dtype(x, np.dtype(dtype)), {**attrs, "axis": axis}, isas=each_isa)


# ---------------------------------------------------------------- hypothesis

_lanes = st.one_of(st.sampled_from(MIXED_SPECIALS.tolist()), st.floats(width=32, allow_nan=True))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=arrays(np.float32, st.integers(1, 70), elements=_lanes),
       method=st.sampled_from(["to_bfp", "to_bfp_prime"]), mode=st.sampled_from([0, 1, 2]),
       compiler=st.sampled_from([0, 1]), bf16=st.sampled_from([0, 1]),
       bits=st.integers(10, 32), block=st.sampled_from([1, 2, 4, 8, 16, 24]),
       f16=st.booleans())
def test_bfp_special_values_every_lane(each_isa, x, method, mode, compiler, bf16, bits, block,
                                       f16):
    attrs = {"bfp_method": method, "rounding_mode": mode, "bit_width": bits,
             "block_size": block, "sub_block_size": 2 if block % 2 == 0 else 1,
             "use_compiler_version_cpu_kernel": compiler,
             "convert_to_bfloat_before_bfp": bf16, "axis": 0}
    _check(BFP, as_dtype(x, np.float16) if f16 else x, attrs, isas=each_isa)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=arrays(np.float32, st.tuples(st.integers(1, 9), st.integers(1, 40)), elements=_lanes),
       element=st.sampled_from(sorted(ELEMENT_TYPES)), mode=st.sampled_from([0, 1, 2]),
       block=st.sampled_from([1, 3, 8, 32]), axis=st.sampled_from([0, 1, -1, -2]),
       f16=st.booleans())
def test_mx_special_values_every_lane(each_isa, x, element, mode, block, axis, f16):
    attrs = {"element_dtype": element, "rounding_mode": mode, "block_size": block,
             "axis": axis}
    _check(MX, as_dtype(x, np.float16) if f16 else x, attrs, isas=each_isa)


# ---------------------------------------------------------------- out=

OUT_CASES = [
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "rounding_mode": 2}),
    (BFP, {"convert_to_bfloat_before_bfp": 1}),
    (MX, {"element_dtype": "fp6_e3m2", "axis": 0}),
]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("op,attrs", OUT_CASES, ids=[o[:3] + _id(a) for o, a in OUT_CASES])
def test_out_in_place_and_separate(op, attrs, dtype):
    x = as_dtype(mixed_values(case_rng(op, "out", _id(attrs)), (6, 40, 7)), np.dtype(dtype))
    want = expected(op, x, attrs)
    out = np.full_like(x, 7)
    assert API[op](x, **attrs, out=out) is out
    assert_same_bits(out, want, "out=")
    assert API[op](x, **attrs, out=x) is x
    assert_same_bits(x, want, "out=x")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("op", [BFP, MX])
def test_out_refused_when_wrong(op):
    x = mixed_values(case_rng(op, "bad out"), (4, 16))
    with pytest.raises(TypeError, match=f"{op}.*dtype"):
        API[op](x, out=np.empty((4, 16), np.float16))
    with pytest.raises(ValueError, match=f"{op}.*shape"):
        API[op](x, out=np.empty((16, 4), np.float32))
    buf = np.zeros(80, np.float32)
    buf[:64] = x.reshape(-1)
    with pytest.raises(ValueError, match=f"{op}.*overlaps"):
        API[op](buf[:64].reshape(4, 16), out=buf[16:].reshape(4, 16))
    with pytest.raises(ValueError, match=f"{op}.*C-contiguous"):
        API[op](x, out=np.empty((16, 4), np.float32).T)


# ---------------------------------------------------------------- ranges

RANGE_CASES = [
    (BFP, {"axis": -1}, (5, 203)),
    (BFP, {"axis": 1, "use_compiler_version_cpu_kernel": 1, "block_size": 5}, (3, 17, 40)),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "axis": 1}, (2, 50, 3)),
    (MX, {"element_dtype": "fp8_e5m2", "axis": 0, "block_size": 7}, (30, 300)),
    (MX, {"axis": -1, "block_size": 2000}, (3, 4100)),
]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("op,attrs,shape", RANGE_CASES,
                         ids=[f"{o[:3]}-{_id(a)}-{s}" for o, a, s in RANGE_CASES])
def test_any_split_into_ranges_gives_the_same_bits(op, attrs, shape):
    """The range entry point, run on any cut of the work items (one per
    block-row), gives the whole tensor's bits -- what a thread pool of any
    size does."""
    rng = case_rng(op, "ranges", _id(attrs))
    x = _blocky_data(rng, shape, attrs["axis"], attrs.get("block_size", 8 if op == BFP else 32))
    a = (block_rules.check_bfp if op == BFP else block_rules.check_mx)(attrs)
    kernel = block_formats._bfp_kernel(a) if op == BFP else block_formats._mx_kernel(a)
    axis = attrs["axis"] % len(shape)
    items = (int(np.prod(shape[:axis])) * -(-shape[axis] // a.block_size))
    want = expected(op, x, attrs)
    for _ in range(4):
        cuts = sorted(set(rng.integers(0, items + 1, rng.integers(1, 6)).tolist()) | {0, items})
        got = block_formats._run(op, x, a.axis, None, splits=cuts, **kernel)
        assert_same_bits(got, want, f"cuts {cuts}")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("op", [BFP, MX])
def test_python_numbers_are_float32(op):
    values = [[0.1, -2.5, 3.0, 7.75, 1e-39, 100.0, 0.0, -0.0]]
    x = np.asarray(values, np.float32)
    assert_same_bits(API[op](values), expected(op, x, {}), "list")


# ---------------------------------------------------------------- Quark's own bits

def _api(op_type: str):
    return API[BFP] if family(op_type) == "bfp" else API[MX]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_quarks_bits_in_the_models_it_wrote(name):
    stored = model_values(name)
    count = 0
    for _, node, attrs in block_nodes(name):
        y = _api(node.op_type)(stored[f"node_in__{node.name}"], **attrs)
        assert_same_bits(y, stored[f"node_out__{node.name}"], f"{name}: {node.name} {attrs}")
        count += 1
    assert count >= 4, name


# ---------------------------------------------------------------- the rules' data

def test_rules_tables_match_the_contract():
    """block_rules' defaults and element table are the contract's (the
    oracle's independent copy of them)."""
    assert {n: d for n, _, d in block_rules.BFP_ATTRIBUTES} == BFP_DEFAULTS
    assert {n: d for n, _, d in block_rules.MX_ATTRIBUTES} == MX_DEFAULTS
    assert set(block_rules.MX_ELEMENTS) == set(ELEMENT_TYPES)
    for name, el in block_rules.MX_ELEMENTS.items():
        ref = ELEMENT_TYPES[name]
        assert (el.ebits, el.mbits, el.emax, el.largest) == (ref.ebits, ref.mbits, ref.emax,
                                                             ref.largest), name
    assert {m for m, _ in block_rules.BFP_METHODS} == {"to_bfp", "to_bfp_prime",
                                                       "to_bfp_prime_shared"}
