"""The figures of ``extql analyze``: SQNR, largest error, cosine, clipping.

Every figure is pooled over all the inputs the analysis runs: an
accumulator adds up sums over each sample (in float64) and the figure is
computed from the sums at the end, so that the result is the one of the
tensors concatenated, whatever the number of samples.

``SQNR(ref, test) = 10 * log10(sum(ref**2) / sum((ref - test)**2))`` in dB;
+inf when the tensors are equal, -inf when ``ref`` is all zeros and ``test``
is not, NaN when a value is NaN.

The share of clipped values is the share of quantized values at the bounds
of their type: the integer range (int8: -128 and 127), the largest finite
magnitude of a float type (float16: 65504).  For the block formats
(``BFPQuantizeDequantize``, ``MXQuantizeDequantize``) the bound is the one of
each block, which its largest exponent sets (:func:`block_bounds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "sqnr_db",
    "ErrorSums",
    "CosineSums",
    "clipped_count",
    "block_bounds",
    "block_clipped_count",
]


def sqnr_db(signal: float, noise: float) -> float:
    """``10 * log10(signal / noise)`` for sums of squares: +inf when the
    noise is 0, -inf when only the signal is 0, NaN when either is NaN."""
    if math.isnan(signal) or math.isnan(noise):
        return math.nan
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    if math.isinf(noise):
        return -math.inf if not math.isinf(signal) else math.nan
    if math.isinf(signal):
        return math.inf
    return 10.0 * math.log10(signal / noise)


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64, copy=False).reshape(-1)


class ErrorSums:
    """SQNR and largest absolute error of ``test`` against ``ref``, pooled
    over the pairs given to :meth:`add`."""

    def __init__(self) -> None:
        self.signal = 0.0
        self.noise = 0.0
        self.max_abs = 0.0
        self.count = 0

    def add(self, ref: Any, test: Any) -> None:
        """Add one pair of tensors of the same shape."""
        r, t = _f64(ref), _f64(test)
        if r.shape != t.shape:
            raise ValueError(f"shapes differ: {np.shape(ref)} and {np.shape(test)}")
        d = r - t
        # inf - inf is NaN: equal infinities are no error.
        same = r == t
        if not same.all():
            d = np.where(same, 0.0, d)
        with np.errstate(over="ignore", invalid="ignore"):
            self.signal += float(np.dot(r, r)) if r.size else 0.0
            self.noise += float(np.dot(d, d)) if d.size else 0.0
        if d.size:
            biggest = float(np.max(np.abs(d)))
            if math.isnan(biggest) or biggest > self.max_abs:
                self.max_abs = biggest
        self.count += r.size

    @property
    def sqnr_db(self) -> float:
        return sqnr_db(self.signal, self.noise)

    def merge(self, other: ErrorSums) -> None:
        """Pool ``other`` into this one."""
        self.signal += other.signal
        self.noise += other.noise
        if math.isnan(other.max_abs) or other.max_abs > self.max_abs:
            self.max_abs = other.max_abs
        self.count += other.count


class CosineSums:
    """Cosine similarity of two tensors, pooled over the pairs of :meth:`add`."""

    def __init__(self) -> None:
        self.dot = 0.0
        self.aa = 0.0
        self.bb = 0.0

    def add(self, a: Any, b: Any) -> None:
        x, y = _f64(a), _f64(b)
        with np.errstate(over="ignore", invalid="ignore"):
            self.dot += float(np.dot(x, y)) if x.size else 0.0
            self.aa += float(np.dot(x, x)) if x.size else 0.0
            self.bb += float(np.dot(y, y)) if y.size else 0.0

    @property
    def cosine(self) -> float:
        """1.0 when both are all zeros, 0.0 when one of them is."""
        if math.isnan(self.dot) or math.isnan(self.aa) or math.isnan(self.bb):
            return math.nan
        if self.aa == 0.0 and self.bb == 0.0:
            return 1.0
        if self.aa == 0.0 or self.bb == 0.0:
            return 0.0
        return self.dot / math.sqrt(self.aa * self.bb)


def clipped_count(quantized: np.ndarray, lo: float, hi: float, is_float: bool) -> int:
    """How many values of a quantized tensor are at their type's bounds:
    ``lo`` or ``hi`` for an integer type, a magnitude of ``hi`` (the largest
    finite value) or more for a float type."""
    q = np.asarray(quantized)
    if not q.size:
        return 0
    if is_float:
        v = np.abs(q.astype(np.float32))
        return int(np.count_nonzero(v >= np.float32(hi)))
    if q.dtype.kind not in "iu":  # ml_dtypes' int4 / int2 ...
        q = q.astype(np.int64)
    return int(np.count_nonzero(q == lo) + np.count_nonzero(q == hi))


# --------------------------------------------------------------------------
# Block formats

#: MX element types: (emax, largest magnitude); int8 also reaches -128/64.
MX_ELEMENTS: dict[str, tuple[int, float]] = {
    "fp8_e5m2": (15, 57344.0),
    "fp8_e4m3": (8, 448.0),
    "fp6_e3m2": (4, 28.0),
    "fp6_e2m3": (2, 7.5),
    "fp4_e2m1": (2, 6.0),
    "int8": (0, 127.0 / 64.0),
}
_BFP_PRIME = ("to_bfp_prime", "to_bfp_prime_shared")


def _exponent_field(x: np.ndarray) -> np.ndarray:
    """The biased float32 exponent field (bits 23-30) of each value."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)


def _blocked(a: np.ndarray, axis: int, block: int) -> tuple[np.ndarray, int]:
    """``a`` with ``axis`` moved last and cut into blocks of ``block`` values
    (the last one padded with zeros): shape (..., n_blocks, block).  Returns
    it and the length of the axis before padding."""
    moved = np.moveaxis(a, axis, -1)
    n = moved.shape[-1]
    pad = (-n) % block
    if pad:
        widths = [(0, 0)] * (moved.ndim - 1) + [(0, pad)]
        moved = np.pad(moved, widths)
    return moved.reshape(*moved.shape[:-1], -1, block), n


def _unblocked(b: np.ndarray, n: int, axis: int) -> np.ndarray:
    flat = b.reshape(*b.shape[:-2], -1)[..., :n]
    return np.moveaxis(flat, -1, axis)


def _pow2(e: np.ndarray) -> np.ndarray:
    """2**e as float32 (subnormal where e < -126; exact for e >= -149)."""
    return np.ldexp(np.float32(1.0), e.astype(np.int32)).astype(np.float32)


def block_bounds(x: np.ndarray, op: str, attrs: Mapping[str, Any]
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """The two values each element of a ``BFPQuantizeDequantize`` /
    ``MXQuantizeDequantize`` output (``op`` "bfp" or "mx") reaches at the
    bounds of its block, (largest, smallest), as float32 arrays of x's
    shape; NaN where nothing is a bound (non-finite inputs, a to_bfp_prime
    block with an inf or NaN).  None for a tensor of one element, which
    passes through unchanged.

    The blocks are the operators' (docs/operators): ``block_size``
    consecutive values along ``axis`` (ignored for rank 1), the last block
    padded with zeros; the block's exponent ``E`` is the largest float32
    exponent field in it.  to_bfp: ``+-(2**m - 1) * 2**(E - 127 - (m - 1))``
    with ``m = bit_width - 9``; to_bfp_prime: the same with each sub-block's
    shift; MX: the scale ``2**(E - 127 - emax)`` times the element type's
    largest and smallest values (int8: 127/64 and -128/64).
    """
    x = np.asarray(x)
    if x.size <= 1:
        return None
    xf = x.astype(np.float32)
    if op == "bfp" and int(attrs.get("convert_to_bfloat_before_bfp", 0)) == 1:
        import ml_dtypes

        with np.errstate(over="ignore"):
            xf = xf.astype(ml_dtypes.bfloat16).astype(np.float32)
    axis = int(attrs.get("axis", 1)) % xf.ndim if xf.ndim >= 2 else 0
    block = int(attrs.get("block_size", 8 if op == "bfp" else 32))
    field = _exponent_field(xf)
    invalid = ~np.isfinite(xf)
    if op == "mx":
        element = str(attrs.get("element_dtype", "int8"))
        emax, largest = MX_ELEMENTS[element]
        smallest = -2.0 if element == "int8" else -largest
        e = _block_max(np.where(field == 255, 0, field), axis, block)
        scale = _pow2(e - 127 - emax)
        upper = scale * np.float32(largest)
        lower = scale * np.float32(smallest)
    else:
        m = int(attrs.get("bit_width", 16)) - 9
        if str(attrs.get("bfp_method", "to_bfp")) not in _BFP_PRIME:
            e = _block_max(np.where(field == 255, 0, field), axis, block)
            upper = _pow2(e - 126) - _pow2(e - 127 - (m - 1))
        else:
            e, shift = _prime_exponents(field, axis, block, attrs)
            invalid |= e == 255
            upper = np.float32(2**m - 1) * _pow2(e - 127 - shift + 1 - m)
        lower = -upper
    upper = np.where(invalid, np.nan, upper).astype(np.float32)
    lower = np.where(invalid, np.nan, lower).astype(np.float32)
    return upper, lower


def _block_max(field: np.ndarray, axis: int, block: int) -> np.ndarray:
    """Each element's block maximum of ``field``."""
    fb, n = _blocked(field, axis, block)
    return _unblocked(np.broadcast_to(fb.max(axis=-1, keepdims=True), fb.shape), n, axis)


def _prime_exponents(field: np.ndarray, axis: int, block: int,
                     attrs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """to_bfp_prime: each element's block exponent ``E`` (field 255
    included) and its sub-block's shift ``min(E - E_j, 2**bits - 1)``."""
    sub = int(attrs.get("sub_block_size", 2))
    shift_bits = int(attrs.get("sub_block_shift_bits", 1))
    fb, n = _blocked(field, axis, block)
    big = fb.max(axis=-1, keepdims=True)
    subs = fb.reshape(*fb.shape[:-1], block // sub, sub)
    e_j = subs.max(axis=-1, keepdims=True)
    shift = np.minimum(big[..., None] - e_j, 2**shift_bits - 1)
    e_full = np.broadcast_to(big[..., None], subs.shape).reshape(fb.shape)
    shift_full = np.broadcast_to(shift, subs.shape).reshape(fb.shape)
    return _unblocked(e_full, n, axis), _unblocked(shift_full, n, axis)


def block_clipped_count(x: np.ndarray, y: np.ndarray, op: str,
                        attrs: Mapping[str, Any]) -> int:
    """How many outputs ``y`` of a block-format node with input ``x`` sit at
    a bound of their block (:func:`block_bounds`)."""
    bounds = block_bounds(x, op, attrs)
    if bounds is None:
        return 0
    upper, lower = bounds
    y = np.asarray(y)
    if y.dtype != np.float32:
        # float16 x: the operator rounds its float32 result back to x's type.
        upper = upper.astype(y.dtype).astype(np.float32)
        lower = lower.astype(y.dtype).astype(np.float32)
    yf = y.astype(np.float32)
    with np.errstate(invalid="ignore"):
        at = ((upper > 0) & (yf >= upper)) | ((lower < 0) & (yf <= lower))
    return int(np.count_nonzero(at))
