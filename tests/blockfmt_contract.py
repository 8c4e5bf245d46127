"""An independent implementation of the block-format contract
(``BFPQuantizeDequantize`` / ``MXQuantizeDequantize`` and their legacy names
``BFPFixNeuron`` / ``MXFixNeuron``), in plain NumPy, written from the text of
``docs/operators`` and sharing no code with extql.

Tests compare every path of extql (NumPy API, onnxruntime kernel, fallbacks,
reference ops) against :func:`expected`, bit for bit (any NaN equals any NaN:
``contract.assert_same_bits``), and every refusal against :func:`refusals`.
Clarity comes first: the math is done on whole arrays of blocks, with the
float32 operations the contract names done as float32 operations and the
integer ones on int64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)

#: op_type -> (domain, family); the legacy names compute the same.
OPS: dict[str, tuple[str, str]] = {
    "BFPQuantizeDequantize": ("com.amd.quark", "bfp"),
    "MXQuantizeDequantize": ("com.amd.quark", "mx"),
    "BFPFixNeuron": ("com.vai.quantize", "bfp"),
    "MXFixNeuron": ("com.vai.quantize", "mx"),
}

#: The attributes and their values when absent (Quark's op defaults).
BFP_DEFAULTS: dict[str, object] = {
    "bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8, "rounding_mode": 0,
    "sub_block_size": 2, "sub_block_shift_bits": 1, "convert_to_bfloat_before_bfp": 0,
    "use_compiler_version_cpu_kernel": 0,
}
MX_DEFAULTS: dict[str, object] = {
    "element_dtype": "int8", "axis": 1, "block_size": 32, "rounding_mode": 0,
}
#: "to_bfp_prime_shared" is an old name of "to_bfp_prime".
BFP_METHODS = ("to_bfp", "to_bfp_prime", "to_bfp_prime_shared")
ROUNDING_MODES = (0, 1, 2)

#: The bit widths for which the contract's formulas are defined, by method.
#: to_bfp needs a largest magnitude M = (2^m - 1) * s > 0 and a scale s that
#: is a float32 for every block exponent (m = bit_width - 9 in 1..23);
#: to_bfp_prime needs a number of dropped bits n >= 0 and a largest mantissa
#: 2^m - 1 >= 0 (m in 0..24).  The contract names no error for the others
#: and Quark's kernels compute something there (a clamp with crossed bounds,
#: a scale of 0, unsigned wrap-around), so :func:`expected` refuses to guess.
DEFINED_BIT_WIDTHS = {"to_bfp": range(10, 33), "to_bfp_prime": range(9, 34)}
#: The sub_block_shift_bits for which Quark's to_bfp_prime computes the
#: contract's cap 2^bits - 1: its kernel shifts a 32-bit 1 left by bits, so
#: 32 and 33 give caps of 0 and 1 on x86 (a shift of 32 or more is undefined
#: in C), and a negative value is no cap at all.
DEFINED_SHIFT_BITS = range(0, 32)


class OutsideContract(NotImplementedError):
    """A node the contract neither refuses nor defines (see
    :data:`DEFINED_BIT_WIDTHS`, :data:`DEFINED_SHIFT_BITS`): no expectation
    exists to test against."""


@dataclass(frozen=True)
class ElementType:
    """An MX element type: exponent and mantissa bits (0 / 0 for int8), the
    largest exponent ``emax`` (the scale is 2^(E - 127 - emax)) and the
    largest magnitude the element saturates at."""

    ebits: int
    mbits: int
    emax: int
    largest: float

    @property
    def emin(self) -> int:
        """The smallest normal exponent, 2 - 2^(ebits - 1)."""
        return 2 - 2 ** (self.ebits - 1)


ELEMENT_TYPES: dict[str, ElementType] = {
    "fp8_e5m2": ElementType(5, 2, 15, 57344.0),
    "fp8_e4m3": ElementType(4, 3, 8, 448.0),
    "fp6_e3m2": ElementType(3, 2, 4, 28.0),
    "fp6_e2m3": ElementType(2, 3, 2, 7.5),
    "fp4_e2m1": ElementType(2, 1, 2, 6.0),
    "int8": ElementType(0, 0, 0, 127.0),
}


# ---------------------------------------------------------------- refusals

@dataclass(frozen=True)
class Refusal:
    """Why a node is refused: the attribute at fault (``"x"`` for the input's
    type), its value and the condition broken.  Every path's error message
    must name the attribute and the value (and the node)."""

    attribute: str
    value: object
    reason: str

    def __str__(self) -> str:
        return f"{self.attribute}={self.value!r}: {self.reason}"


def family(op_type: str) -> str:
    """"bfp" or "mx" for any of the four op names."""
    return OPS[op_type][1]


def attributes(op_type: str, given: Mapping[str, object] | None = None) -> dict[str, object]:
    """The node's full attribute set: the given ones over the defaults.
    An unknown attribute name is a KeyError (a typo in a test, not a case)."""
    defaults = BFP_DEFAULTS if family(op_type) == "bfp" else MX_DEFAULTS
    given = dict(given or {})
    unknown = set(given) - set(defaults)
    if unknown:
        raise KeyError(f"{op_type} has no attribute {sorted(unknown)}")
    return {**defaults, **given}


def refusals(op_type: str, given: Mapping[str, object] | None = None, *,
             rank: int | None = None, dtype=None) -> list[Refusal]:
    """Every reason the contract gives to refuse this node (empty: it runs).

    ``rank`` (when known) checks the axis: it must lie in [-r, r - 1] for a
    rank r >= 2 (rank 0 and 1 ignore it).  ``dtype`` (when known) checks the
    input type: float32 or float16.  The attribute checks need neither, so a
    graph-level check can call this with the attributes only."""
    a = attributes(op_type, given)
    out: list[Refusal] = []
    if dtype is not None and np.dtype(dtype) not in (F32, F16):
        out.append(Refusal("x", str(np.dtype(dtype)), "the input must be float32 or float16"))
    if family(op_type) == "bfp":
        if a["bfp_method"] not in BFP_METHODS:
            out.append(Refusal("bfp_method", a["bfp_method"],
                               f"unknown method (one of {', '.join(BFP_METHODS)})"))
    elif a["element_dtype"] not in ELEMENT_TYPES:
        out.append(Refusal("element_dtype", a["element_dtype"],
                           f"unknown element type (one of {', '.join(ELEMENT_TYPES)})"))
    if a["rounding_mode"] not in ROUNDING_MODES:
        out.append(Refusal("rounding_mode", a["rounding_mode"], "must be 0, 1 or 2"))
    if a["block_size"] < 1:
        out.append(Refusal("block_size", a["block_size"], "must be at least 1"))
    elif (family(op_type) == "bfp" and a["bfp_method"] in BFP_METHODS[1:]
          and (a["sub_block_size"] < 1 or a["block_size"] % a["sub_block_size"])):
        out.append(Refusal("sub_block_size", a["sub_block_size"],
                           f"to_bfp_prime needs block_size ({a['block_size']}) to be a "
                           "multiple of sub_block_size"))
    if rank is not None and rank >= 2 and not -rank <= a["axis"] <= rank - 1:
        out.append(Refusal("axis", a["axis"],
                           f"out of range [{-rank}, {rank - 1}] for rank {rank}"))
    return out


# ---------------------------------------------------------------- the layout

def _f32_bits(x: np.ndarray) -> np.ndarray:
    """The float32 bits as int64 (for shifts and masks without overflow)."""
    return np.array(x, F32).view(np.uint32).astype(np.int64)  # (a copy; 0-d stays 0-d)


def _from_bits(u: np.ndarray) -> np.ndarray:
    return np.asarray(u, np.int64).astype(np.uint32).view(F32)


def exponent_field(x: np.ndarray) -> np.ndarray:
    """E(v): the biased float32 exponent field (bits 23-30) of each value;
    0 for zeros and subnormals, 255 for inf and NaN."""
    return (_f32_bits(x) >> 23) & 0xFF


def pow2(k) -> np.ndarray:
    """2^k as float32 (k an integer array); exact wherever 2^k is a float32
    (down to the subnormal 2^-149)."""
    return np.ldexp(np.float64(1.0), np.asarray(k, np.int64)).astype(F32)


def to_blocks(x: np.ndarray, axis: int, block_size: int):
    """x (float32, at least 2 elements) cut into blocks: an array
    ``[n_blocks, block_size]`` and a function taking such an array back to
    x's shape.  Blocks run along ``axis`` (rank 1: the only axis) from index
    0, for every fixed combination of the other indices; the last block of a
    line is padded with +0 (padded positions are dropped on the way back)."""
    a = 0 if x.ndim == 1 else axis % x.ndim
    moved = np.moveaxis(x, a, -1)
    length = moved.shape[-1]
    lines = moved.reshape(-1, length)
    n_blocks = -(-length // block_size)
    padded = np.zeros((lines.shape[0], n_blocks * block_size), F32)
    padded[:, :length] = lines

    def back(blocks: np.ndarray) -> np.ndarray:
        y = blocks.reshape(lines.shape[0], n_blocks * block_size)[:, :length]
        return np.moveaxis(y.reshape(moved.shape), -1, a)

    return padded.reshape(-1, block_size), back


# ---------------------------------------------------------------- rounding

def round_mode(q: np.ndarray, mode: int) -> np.ndarray:
    """R(q): float32 q rounded to an integer (float32) by rounding mode
    0 (half away from zero), 1 (half toward +inf) or 2 (half to even), with
    the contract's sign of a zero result: modes 0 and 1 follow q (-0.3 -> -0),
    mode 2 gives +0 unless q itself is -0 (-0.3 -> +0)."""
    q = np.asarray(q, F32)
    f = np.floor(q)
    d = q - f  # exact: the fraction of q, in [0, 1)
    if mode == 0:
        t = np.trunc(q)
        r = np.where(np.abs(q - t) >= 0.5, t + np.sign(q), t)
        return np.copysign(r, q).astype(F32)
    if mode == 1:
        r = np.where(d >= 0.5, f + 1, f)
        return np.copysign(r, q).astype(F32)
    odd = np.mod(f, 2) == 1
    r = np.where((d > 0.5) | ((d == 0.5) & odd), f + 1, f)
    zero_sign = np.where(np.signbit(q) & (q == 0), np.float32(-1), np.float32(1))
    return np.where(r == 0, np.copysign(np.float32(0), zero_sign), r).astype(F32)


# ---------------------------------------------------------------- the methods

def _shared_exponent(blocks: np.ndarray, *, count_non_finite: bool) -> np.ndarray:
    """E per block ([n, 1], int64): the largest exponent field; an element
    with field 255 (inf, NaN) counts as 0 unless ``count_non_finite``."""
    f = exponent_field(blocks)
    if not count_non_finite:
        f = np.where(f == 255, 0, f)
    return f.max(axis=1, keepdims=True)


def _to_bfp(b: np.ndarray, bit_width: int, mode: int) -> np.ndarray:
    """bfp_method "to_bfp": one shared exponent, clamped (no exponent bump)."""
    E = _shared_exponent(b, count_non_finite=False)
    m = bit_width - 9
    s = pow2(E - 127 - (m - 1))
    M = (np.ldexp(1.0, E - 126) - np.ldexp(1.0, E - 127 - (m - 1))).astype(F32)
    with np.errstate(all="ignore"):
        v = np.multiply(round_mode(np.divide(b, s, dtype=F32), mode), s, dtype=F32)
        y = np.clip(v, -M, M)
    return np.where(exponent_field(b) == 255, b, y).astype(F32)


def _to_bfp_compiler(b: np.ndarray, bit_width: int, mode: int) -> np.ndarray:
    """``use_compiler_version_cpu_kernel``: two's-complement elements; the
    block exponent goes up by one when an element whose exponent field is the
    block's rounds to 128 or more, or below -128 (the threshold does not
    depend on bit_width).  Elements are then clamped to
    [-2^(E-127) * 2^m, 2^(E-127) * (2^m - 1)] (E after the bump)."""
    E = _shared_exponent(b, count_non_finite=False)
    m = bit_width - 9
    s = pow2(E - 127 - (m - 1))
    with np.errstate(all="ignore"):
        q = round_mode(np.divide(b, s, dtype=F32), mode)
        top = exponent_field(b) == E
        bump = np.any(top & ((q >= 128) | (q < -128)), axis=1, keepdims=True)
        E = E + bump
        s = np.where(bump, np.multiply(s, np.float32(2), dtype=F32), s)
        hi = (np.ldexp(1.0, E - 127) * (2.0 ** m - 1)).astype(F32)
        lo = (-np.ldexp(1.0, E - 127) * 2.0 ** m).astype(F32)
        v = np.multiply(round_mode(np.divide(b, s, dtype=F32), mode), s, dtype=F32)
        y = np.clip(v, lo, hi)
    return np.where(exponent_field(b) == 255, b, y).astype(F32)


def _round_tail(mu: np.ndarray, n: np.ndarray, m: int, negative: np.ndarray,
                mode: int) -> np.ndarray:
    """r: the integer mantissa mu with its n low bits dropped and rounded
    (to_bfp_prime's rule, on int64): n = 0 keeps mu, n > 25 gives 0; below
    half keeps, above half adds one, a tie per mode (0: up; 1: down for a
    negative x, up otherwise; 2: up only when r is odd); a truncation equal
    to 2^m - 1 (the largest mantissa) is kept as it is."""
    k = np.clip(n, 1, 25)
    r = mu >> k
    tail = mu & ((np.int64(1) << k) - 1)
    half = np.int64(1) << (k - 1)
    if mode == 0:
        tie_up = np.ones(mu.shape, bool)
    elif mode == 1:
        tie_up = ~negative
    else:
        tie_up = (r & 1) == 1
    up = (tail > half) | ((tail == half) & tie_up)
    r = np.where(r == 2 ** m - 1, r, r + up)
    return np.where(n == 0, mu, np.where(n > 25, 0, r))


def _to_bfp_prime(b: np.ndarray, bit_width: int, sub_block_size: int, shift_bits: int,
                  mode: int) -> np.ndarray:
    """bfp_method "to_bfp_prime": a block exponent E (inf / NaN count: E =
    255 makes the whole block NaN) and a shift per sub-block, on the integer
    mantissa; subnormal inputs flush to zero; a zero keeps x's sign."""
    n_blocks, size = b.shape
    u = _f32_bits(b)
    f = (u >> 23) & 0xFF
    E = f.max(axis=1, keepdims=True)
    Ej = np.repeat(f.reshape(n_blocks, size // sub_block_size, sub_block_size).max(axis=2),
                   sub_block_size, axis=1)
    shift = np.minimum(E - Ej, 2 ** shift_bits - 1)
    m = bit_width - 9
    mu = np.where(f == 0, 0, (u & 0x7FFFFF) | 0x800000)
    negative = (u >> 31) == 1
    r = _round_tail(mu, E - shift - f + 24 - m, m, negative, mode)
    magnitude = np.ldexp(r.astype(np.float64), E - 127 - shift + 1 - m)
    with np.errstate(over="ignore"):  # (only in the blocks of E = 255, made NaN below)
        y = np.where(negative, -magnitude, magnitude).astype(F32)  # exact; -0 for a zero
    return np.where(E == 255, np.float32(np.nan), y).astype(F32)


def _mx(b: np.ndarray, et: ElementType, mode: int) -> np.ndarray:
    """MXQuantizeDequantize on blocks: scale X = 2^(E - 127 - emax) (a float32,
    not clamped to E8M0's range), elements on the type's grid, y = X * element
    (one float32 multiply)."""
    E = _shared_exponent(b, count_non_finite=False)
    X = pow2(E - 127 - et.emax)
    with np.errstate(all="ignore"):
        v = np.divide(b, X, dtype=F32)
        if et.ebits == 0:  # int8: k / 64, k rounded per mode and clamped
            k = np.clip(round_mode(np.multiply(v, np.float32(64), dtype=F32), mode), -128, 127)
            element = np.multiply(k, np.float32(2.0 ** -6), dtype=F32)
        else:  # round |v| to nearest even on the grid, saturate; a zero is +0
            a = np.abs(v).astype(np.float64)
            _, e = np.frexp(a)  # a = frac * 2^e, frac in [0.5, 1): the exponent is e - 1
            quantum = np.ldexp(1.0, np.maximum(e - 1, et.emin) - et.mbits)
            r = np.minimum(np.rint(a / quantum) * quantum, et.largest)
            element = np.where(r == 0, 0.0, np.copysign(r, v)).astype(F32)
        y = np.multiply(X, element, dtype=F32)
    return np.where(exponent_field(b) == 255, b, y).astype(F32)


# ---------------------------------------------------------------- bfloat16

def bfloat16_round(x: np.ndarray) -> np.ndarray:
    """float32 x rounded to bfloat16 precision (kept as float32) by Quark's
    bit rule, which extql follows for every value but NaN: add the carry of
    round-to-nearest-even on the low 16 bits and clear them (so the largest
    finite values become inf).  A NaN stays the NaN it is."""
    x = np.asarray(x, F32)
    return np.where(np.isnan(x), x, quark_bfloat16_rule(x))


def quark_bfloat16_rule(x: np.ndarray) -> np.ndarray:
    """Quark's bit rule applied to every value, NaN included (Quark turns
    some NaNs into -0 or +-inf).  extql does NOT do this for NaN: tests use it
    only to reproduce the inputs Quark's library computed on."""
    u = _f32_bits(x)
    low = u & 0xFFFF
    carry = (low > 0x8000) | ((low == 0x8000) & (((u >> 16) & 1) == 1))
    return _from_bits(((u + (carry << 16)) & 0xFFFF0000) & 0xFFFFFFFF)


# ---------------------------------------------------------------- the ops

def bfp_quantize_dequantize(x, **attrs) -> np.ndarray:
    """Expected BFPQuantizeDequantize (and BFPFixNeuron) output."""
    return expected("BFPQuantizeDequantize", x, attrs)


def mx_quantize_dequantize(x, **attrs) -> np.ndarray:
    """Expected MXQuantizeDequantize (and MXFixNeuron) output."""
    return expected("MXQuantizeDequantize", x, attrs)


def expected(op_type: str, x, attrs: Mapping[str, object] | None = None) -> np.ndarray:
    """The output of node ``op_type`` (any of the four names) with the given
    attributes on x (float32 or float16; the output has x's dtype and shape;
    x is not modified).  A refused node raises ValueError with the first
    refusal; a bit_width or shift the contract does not define, OutsideContract.
    float16 is widened exactly, computed as float32 and rounded back to
    nearest even."""
    x = np.asarray(x)
    bad = refusals(op_type, attrs, rank=x.ndim, dtype=x.dtype)
    if bad:
        raise ValueError(f"{op_type}: {bad[0]}")
    a = attributes(op_type, attrs)
    if family(op_type) == "bfp":
        method = "to_bfp" if a["bfp_method"] == "to_bfp" else "to_bfp_prime"
        if a["bit_width"] not in DEFINED_BIT_WIDTHS[method]:
            raise OutsideContract(f"{op_type}: bit_width={a['bit_width']} with {method} is not "
                                  "defined by the contract")
        if method == "to_bfp_prime" and a["sub_block_shift_bits"] not in DEFINED_SHIFT_BITS:
            raise OutsideContract(f"{op_type}: sub_block_shift_bits="
                                  f"{a['sub_block_shift_bits']} is not defined by the contract")
    x32 = x.astype(F32)  # a copy: the input is never modified
    if family(op_type) == "bfp" and a["convert_to_bfloat_before_bfp"]:
        x32 = bfloat16_round(x32)
    if x32.size <= 1:  # one element passes through (and nothing is nothing)
        with np.errstate(over="ignore"):  # float16 65504 pre-rounds to 65536: inf
            return x32.astype(x.dtype)
    blocks, back = to_blocks(x32, int(a["axis"]), int(a["block_size"]))
    mode = int(a["rounding_mode"])
    if family(op_type) == "mx":
        y = _mx(blocks, ELEMENT_TYPES[a["element_dtype"]], mode)
    elif a["bfp_method"] == "to_bfp" and a["use_compiler_version_cpu_kernel"]:
        y = _to_bfp_compiler(blocks, int(a["bit_width"]), mode)
    elif a["bfp_method"] == "to_bfp":
        y = _to_bfp(blocks, int(a["bit_width"]), mode)
    else:
        y = _to_bfp_prime(blocks, int(a["bit_width"]), int(a["sub_block_size"]),
                          int(a["sub_block_shift_bits"]), mode)
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(back(y)).astype(x.dtype)
