"""Inputs for tests of the block formats that reach every lane of the math:
NaN, +-inf, +-0, subnormals, exact ties of each rounding and their
neighbours, values that round past the largest mantissa, huge and tiny block
exponents, and every MX element type's boundaries.

:func:`lane_values` builds a tensor block by block (in the op's own block
layout, so along any axis and with a ragged last block) and then *plants*
rounding cases: the low mantissa bits that the op drops for each element
are set to exactly half (a tie), half -/+ one unit, all ones (rounds up,
past the largest mantissa for the block's largest element) or zeros (on the
grid).  Changing only those bits changes no exponent field, so the block
exponents (and to_bfp_prime's sub-block shifts) stay what they were and the
planted lane is the one the op sees.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from blockfmt_contract import (
    BFP_METHODS,
    DEFINED_BIT_WIDTHS,
    ELEMENT_TYPES,
    F16,
    F32,
    OPS,
    attributes,
    exponent_field,
    family,
    to_blocks,
)


def _bits(*words: int) -> np.ndarray:
    return np.array(words, np.uint32).view(F32)


#: float32 values every op must handle: NaNs (quiet, signalling, negative,
#: with payloads), +-inf, +-0, the smallest / largest subnormals, the smallest
#: normal, the largest finite values and a few ordinary ones.
SPECIALS_F32 = np.concatenate([
    _bits(0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FC12345),
    np.array([np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5], F32),
    _bits(0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00000003),
    _bits(0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0x7F7FFF80),
])
#: float16 counterparts (as float16): NaNs, +-inf, +-0, subnormals, the
#: smallest normal, +-65504.
SPECIALS_F16 = np.concatenate([
    np.array([0x7E00, 0xFE00, 0x7C01, 0x7FFF], np.uint16).view(F16),
    np.array([np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5], F16),
    np.array([0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x7BFF, 0xFBFF], np.uint16).view(F16),
])
#: float32 values whose bfloat16 pre-rounding matters: ties (low half 0x8000)
#: with an even and an odd bit 16, one unit either side, a carry into the
#: exponent, and the largest values, which round to +-inf.
BFLOAT16_CASES = _bits(
    0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x3F7FFFFF, 0x3FFF8000, 0xBF808000,
    0xBF818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x00018000,
    0x80008000, 0x00007FFF,
)


def specials(dtype) -> np.ndarray:
    """The special values of a dtype (float32 or float16), as that dtype."""
    return SPECIALS_F16.copy() if np.dtype(dtype) == F16 else SPECIALS_F32.copy()


#: float32 values whose handling the contract names: NaN, +-inf, +-0, the
#: smallest subnormals, the largest finite values, ties of each rounding.
MIXED_SPECIALS = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754942e-38,
     -1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 0.5, -0.5, 1.5, -2.5, 127.5,
     -127.5, 255.5, -128.5, 0.49999997, -0.49999997, 65504.0, 65520.0, 6e-8, 1.0, -1.0],
    np.float32,
)


def mixed_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of the cases the contract names: integers and exact
    halves and quarters at steps of many sizes (ties of every rounding mode,
    values that round past a block's largest mantissa), a spread of
    exponents from subnormal to near the largest float, and the special
    values at random lanes."""
    size = int(np.prod(shape, dtype=np.int64))
    ints = rng.integers(-(2**9), 2**9, size) + rng.choice([0.0, 0.5, 0.25, 0.75, -0.5], size)
    steps = np.exp2(rng.integers(-30, 30, size).astype(np.float64))
    spread = rng.standard_normal(size) * np.exp2(rng.integers(-140, 120, size).astype(np.float64))
    x = np.where(rng.random(size) < 0.6, ints * steps, spread)
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    k = min(size, max(1, size // 6))
    x[rng.choice(size, k, replace=False)] = rng.choice(MIXED_SPECIALS, k)
    return x.reshape(shape)


def as_dtype(x: np.ndarray, dtype) -> np.ndarray:
    """x as dtype (float32 -> float16 overflows to infinity, quietly)."""
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _dropped_bits(blocks: np.ndarray, op_type: str, a: Mapping[str, object]) -> np.ndarray:
    """For each element of ``blocks`` (float32, [n, block_size]): how many low
    bits of its 24-bit significand the op rounds away (0 when none are or the
    element cannot be rounded: inf, NaN, zero, or a subnormal to_bfp_prime
    flushes)."""
    f = exponent_field(blocks)
    e = np.maximum(f, 1)  # a subnormal's significand sits where e = 1 puts it
    finite_max = np.where(f == 255, 0, f).max(axis=1, keepdims=True)
    if family(op_type) == "mx":
        et = ELEMENT_TYPES[str(a["element_dtype"])]
        if et.ebits == 0:  # int8: the quotient's unit is 2^(E - 133)
            n = finite_max - e + 17
        else:  # v = x / X has exponent e - E + emax; the grid's unit follows
            ev = e - finite_max + et.emax
            n = 23 - et.mbits + np.maximum(0, et.emin - ev)
    elif a["bfp_method"] == "to_bfp":
        n = finite_max - e + 24 - (int(a["bit_width"]) - 9)
    else:
        size, sub = blocks.shape[1], int(a["sub_block_size"])
        sub_max = np.repeat(f.reshape(-1, size // sub, sub).max(axis=2), sub, axis=1)
        shift = np.minimum(finite_max - sub_max, 2 ** int(a["sub_block_shift_bits"]) - 1)
        n = finite_max - shift - f + 24 - (int(a["bit_width"]) - 9)
        n = np.where(f == 0, 0, n)
    return np.where((f == 255) | (blocks == 0), 0, n)


#: The planted patterns of the dropped bits (relative to half = 2^(n-1)).
PATTERNS = ("tie", "below", "above", "ones", "zeros", "keep")


def plant_rounding(blocks: np.ndarray, op_type: str, a: Mapping[str, object],
                   rng: np.random.Generator, lsb: int = 0) -> np.ndarray:
    """The blocks with the dropped bits of each element set to a random
    pattern of :data:`PATTERNS`.  ``lsb``: the lowest significand bit that
    may be set (13 for values that must stay float16)."""
    n = _dropped_bits(blocks, op_type, a)
    u = blocks.view(np.uint32).astype(np.int64)
    f = (u >> 23) & 0xFF
    mu = np.where(f == 0, u & 0x7FFFFF, (u & 0x7FFFFF) | 0x800000)
    k = np.clip(n, 1, 24)
    half = np.int64(1) << (k - 1)
    unit = np.int64(1) << lsb
    choice = rng.integers(0, len(PATTERNS), blocks.shape)
    low = np.select(
        [choice == 0, choice == 1, choice == 2, choice == 3, choice == 4],
        [half, half - unit, half + unit, (np.int64(1) << k) - unit, np.zeros_like(k)],
        default=mu & ((np.int64(1) << k) - 1))
    new_mu = (mu & ~((np.int64(1) << k) - 1)) | low
    # Only where the pattern fits above lsb and keeps the element's exponent
    # field (the implicit bit of a normal, the absence of it in a subnormal).
    ok = (n >= 1) & (n <= 24) & (k - 1 >= lsb) & (low < (np.int64(1) << k))
    ok &= np.where(f == 0, new_mu < 0x800000, (new_mu >= 0x800000) & (new_mu < 0x1000000))
    new = (u & ~np.int64(0x7FFFFF)) | (new_mu & 0x7FFFFF)
    out = np.where(ok, new, u).astype(np.uint32).view(F32)
    return out.reshape(blocks.shape)


#: Block regimes: (name, weight).  The block exponent (the largest field) and
#: the spread of the element exponents below it.
REGIMES = (("ordinary", 6), ("wide", 3), ("equal", 2), ("tiny", 1), ("subnormal", 1),
           ("huge", 1), ("zeros", 1))


def _block_values(rng: np.random.Generator, n_blocks: int, size: int, dtype) -> np.ndarray:
    """float32 blocks ([n_blocks, size]) of random regimes; representable in
    dtype (float16 values keep to float16's range and precision)."""
    half = np.dtype(dtype) == F16
    top_lo, top_hi = (103, 142) if half else (1, 254)
    names = [r for r, _ in REGIMES]
    weights = np.array([w for _, w in REGIMES], float)
    regime = rng.choice(names, n_blocks, p=weights / weights.sum())
    out = np.zeros((n_blocks, size), F32)
    for i, r in enumerate(regime):
        if r == "zeros":
            out[i] = np.where(rng.random(size) < 0.5, -0.0, 0.0)
            continue
        if r == "subnormal":
            frac = rng.integers(1, 2 ** (10 if half else 23), size)
            v = frac * (2.0 ** -24 if half else 2.0 ** -149)
            out[i] = np.where(rng.random(size) < 0.5, -v, v).astype(F32)
            continue
        top = {"ordinary": rng.integers(117, 137), "wide": rng.integers(100, 160),
               "equal": rng.integers(110, 145), "tiny": rng.integers(top_lo, top_lo + 6),
               "huge": rng.integers(top_hi - 4, top_hi + 1)}[r]
        top = int(np.clip(top, top_lo, top_hi))
        spread = {"ordinary": rng.integers(0, 5, size), "wide": rng.integers(0, 41, size),
                  "equal": np.zeros(size, int)}.get(r, rng.integers(0, 8, size))
        field = top - spread
        field[rng.integers(size)] = top  # one element sets the block exponent
        mant = rng.integers(0, 2 ** 23, size)
        sign = rng.integers(0, 2, size)
        bits = (sign << 31) | (np.maximum(field, 0) << 23) | np.where(field > 0, mant, mant >> 1)
        out[i] = bits.astype(np.uint32).view(F32)
    if half:
        with np.errstate(over="ignore"):
            out = out.astype(F16).astype(F32)
    return out


def lane_values(rng: np.random.Generator, shape: tuple[int, ...], op_type: str,
                attrs: Mapping[str, object] | None = None, dtype=F32,
                special_rate: float = 0.04, extra: np.ndarray | None = None) -> np.ndarray:
    """A tensor of ``shape`` and ``dtype`` (float32 or float16) for node
    ``op_type`` with ``attrs``: blocks of random regimes (ordinary, widely
    spread exponents, equal exponents, tiny, all subnormal, huge, all zero),
    about ``special_rate`` of the elements replaced by special values (and
    by ``extra`` values, when given), and then the rounding lanes planted."""
    a = attributes(op_type, attrs)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count <= 1:
        pool = np.concatenate([specials(dtype).astype(F32), rng.standard_normal(4).astype(F32)])
        return rng.choice(pool, shape).astype(dtype) if shape else dtype.type(rng.choice(pool))
    skeleton = np.zeros(shape, F32)
    blocks, back = to_blocks(skeleton, int(a["axis"]), int(a["block_size"]))
    b = _block_values(rng, blocks.shape[0], blocks.shape[1], dtype)
    pool = specials(dtype).astype(F32)
    if extra is not None:
        pool = np.concatenate([pool, np.asarray(extra, F32)])
    hit = rng.random(b.shape) < special_rate
    b[hit] = rng.choice(pool, int(hit.sum()))
    planted = plant_rounding(b, op_type, a, rng, lsb=13 if dtype == F16 else 0)
    if dtype == F16:  # keep only what float16 holds exactly
        with np.errstate(over="ignore"):
            same = planted.astype(F16).astype(F32).view(np.uint32) == planted.view(np.uint32)
        planted = np.where(same, planted, b)
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(back(planted)).astype(dtype)


def mx_boundary_values(element_dtype: str, block_exponent: int) -> np.ndarray:
    """float32 values at the edges of an MX element type's grid, for a block
    whose largest exponent field is ``block_exponent`` (the first value sets
    it): +-largest, half a unit above it (saturates), the smallest normal and
    subnormal, half the smallest subnormal (a tie with 0 -> +0), ties between
    neighbours; for int8 +-127, +-127.5 (ties: 128 clamps to 127, -128 stays)
    and +-127.75, and small ties; all times the block's scale X."""
    et = ELEMENT_TYPES[element_dtype]
    X = 2.0 ** (block_exponent - 127 - et.emax)
    if et.ebits == 0:
        units = np.array([127, 127.5, 127.75, -127, -127.5, -127.75, 0.5, -0.5, 1.5, -1.5,
                          2.5, -2.5, 0.25, -0.25], float) / 64
        top = 2.0 ** 0 * 1.5  # field = block_exponent
    else:
        sub = 2.0 ** (et.emin - et.mbits)  # the smallest subnormal
        step_top = 2.0 ** (et.emax - et.mbits)
        units = np.array([et.largest, -et.largest, et.largest + step_top / 2,
                          -(et.largest + step_top / 2), et.largest + step_top / 4,
                          2.0 ** et.emin, -(2.0 ** et.emin), 2.0 ** et.emin - sub / 2,
                          sub, -sub, sub / 2, -sub / 2, sub * 1.5, -sub * 2.5, sub / 4,
                          2.0 ** et.emin + sub / 2, 1.0 + 2.0 ** -(et.mbits + 1)], float)
        top = 2.0 ** et.emax * 1.5
    values = np.concatenate([[top], units]) * X
    return values.astype(F32)


def compiler_boundary_values(block_exponent: int) -> np.ndarray:
    """float32 blocks ([4, 8]) for the compiler-version kernel at bit_width
    16, whose largest exponent field is ``block_exponent`` (0: a block of
    subnormals): elements of that exponent whose quotient x / s is +-127.5
    (a tie: +128 bumps the block exponent, -128 does not), +-127.75 (rounds
    to +-128 in every mode) or +-127.25 (no bump), with smaller ties after
    them (which the bump re-rounds on the doubled scale)."""
    s = 2.0 ** (block_exponent - 127 - 6)
    rows = [[127.5, -64.5, 65, 0.3, -0.3, 100.25, -99.5, 1.5],
            [-127.5, -64.5, 65, 0.7, -0.5, 100.5, -100.5, 2.5],
            [-127.75, 127.25, 64.5, -65.5, 0.5, -1.5, 3.5, -0.0],
            [127.75, -127.25, 66.5, -66.5, -0.5, 1.5, -3.5, 0.0]]
    return (np.array(rows) * s).astype(F32)


def node_cases(*, families: tuple[str, ...] = ("bfp", "mx"), max_rank: int = 4):
    """A hypothesis strategy of ``(op_type, attrs, x)``: any op name, any
    attributes the contract defines (every method, bit width, block and
    sub-block size, shift, rounding mode, pre-rounding, compiler kernel,
    element type; always a valid axis), ranks 0..max_rank, float32 or
    float16, and an input from :func:`lane_values` (seeded by the draw)."""
    from hypothesis import strategies as st

    @st.composite
    def draw_case(draw):
        fam = draw(st.sampled_from(families))
        ops = [op for op, (_, f) in OPS.items() if f == fam]
        op_type = draw(st.sampled_from(ops))
        block = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 32]))
        if fam == "bfp":
            method = draw(st.sampled_from(BFP_METHODS))
            name = "to_bfp" if method == "to_bfp" else "to_bfp_prime"
            attrs = {"bfp_method": method, "block_size": block,
                     "bit_width": draw(st.sampled_from(list(DEFINED_BIT_WIDTHS[name]))),
                     "rounding_mode": draw(st.integers(0, 2)),
                     "convert_to_bfloat_before_bfp": draw(st.integers(0, 1))}
            if name == "to_bfp":
                attrs["use_compiler_version_cpu_kernel"] = draw(st.integers(0, 1))
            else:
                attrs["sub_block_size"] = draw(st.sampled_from(
                    [d for d in range(1, block + 1) if block % d == 0]))
                attrs["sub_block_shift_bits"] = draw(st.integers(0, 31))
        else:
            attrs = {"element_dtype": draw(st.sampled_from(list(ELEMENT_TYPES))),
                     "block_size": block, "rounding_mode": draw(st.integers(0, 2))}
        rank = draw(st.integers(0, max_rank))
        shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
        if rank:
            axis = draw(st.integers(-rank, rank - 1))
            attrs["axis"] = axis
            shape = list(shape)
            shape[axis] = draw(st.integers(1, 3 * block + 1))
            shape = tuple(shape)
        dtype = draw(st.sampled_from([F32, F16]))
        seed = draw(st.integers(0, 2 ** 32 - 1))
        rate = draw(st.sampled_from([0.0, 0.03, 0.2]))
        x = lane_values(np.random.default_rng(seed), shape, op_type, attrs, dtype,
                        special_rate=rate, extra=BFLOAT16_CASES)
        return op_type, attrs, np.asarray(x)

    return draw_case()
