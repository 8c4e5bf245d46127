"""An independent implementation of the numeric contract (the operator pages
docs/operators/extended_quantize_linear.rst,
docs/operators/extended_dequantize_linear.rst and docs/operators/types.rst),
in plain NumPy + ml_dtypes, written from the text and sharing no code with
extql.

Tests compare every path of extql (NumPy API, onnxruntime kernel, fallbacks,
reference ops) against these functions, bit for bit.
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)

#: name -> (dtype, low, high); float types carry their largest finite value.
TYPES: dict[str, tuple[np.dtype, float, float]] = {
    "int8": (np.dtype(np.int8), -128, 127),
    "uint8": (np.dtype(np.uint8), 0, 255),
    "int16": (np.dtype(np.int16), -32768, 32767),
    "uint16": (np.dtype(np.uint16), 0, 65535),
    "int32": (np.dtype(np.int32), -(2**31), 2**31 - 1),
    "uint32": (np.dtype(np.uint32), 0, 2**32 - 1),
    "float16": (np.dtype(np.float16), -65504.0, 65504.0),
    "bfloat16": (BF16, -3.3895313892515355e38, 3.3895313892515355e38),
}
INT_TYPES = [n for n in TYPES if not n.startswith(("float", "bfloat"))]
FLOAT_TYPES = ["float16", "bfloat16"]
#: The sub-byte types (ONNX's int4 / uint4 / int2 / uint2; one element per
#: byte in NumPy): name -> (dtype, low, high), as TYPES.
SUBBYTE_TYPES: dict[str, tuple[np.dtype, float, float]] = {
    "int4": (np.dtype(ml_dtypes.int4), -8, 7),
    "uint4": (np.dtype(ml_dtypes.uint4), 0, 15),
    "int2": (np.dtype(ml_dtypes.int2), -2, 1),
    "uint2": (np.dtype(ml_dtypes.uint2), 0, 3),
}
#: The small float types (ONNX's float8 types and float4e2m1): name ->
#: (dtype, -max, max).  float8 quantize takes no zero point; out of range
#: values saturate to +-max, or with saturate=False become what ml_dtypes'
#: conversion (ONNX's table) makes of them: inf (float8e5m2) or NaN.
SMALLFLOAT_TYPES: dict[str, tuple[np.dtype, float, float]] = {
    name: (np.dtype(getattr(ml_dtypes, ml)), -float(ml_dtypes.finfo(getattr(ml_dtypes, ml)).max),
           float(ml_dtypes.finfo(getattr(ml_dtypes, ml)).max))
    for name, ml in [("float8e4m3fn", "float8_e4m3fn"), ("float8e4m3fnuz", "float8_e4m3fnuz"),
                     ("float8e5m2", "float8_e5m2"), ("float8e5m2fnuz", "float8_e5m2fnuz"),
                     ("float4e2m1", "float4_e2m1fn")]
}
#: Every quantized type, by name: the eight, the sub-byte ones, the small floats.
ALL_TYPES = {**TYPES, **SUBBYTE_TYPES, **SMALLFLOAT_TYPES}


def case_rng(*key) -> np.random.Generator:
    """A generator seeded from a test case's parameters, the same in every
    process (Python's hash of a str is not: it changes per process)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def type_name(dtype: np.dtype) -> str:
    for name, (dt, _, _) in ALL_TYPES.items():
        if dt == np.dtype(dtype):
            return name
    raise KeyError(dtype)


def normal_with_specials(rng: np.random.Generator, shape, spread: float,
                         specials: np.ndarray) -> np.ndarray:
    """float32 standard normal values times ``spread`` with the first
    ``specials`` (as many as fit) at random places."""
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    flat = x.reshape(-1)
    k = min(flat.size, specials.size)
    flat[rng.choice(flat.size, k, replace=False)] = specials[:k]
    return x


def expand_blocks(v, axis: int, block: int, length: int) -> np.ndarray:
    """A blocked parameter (ONNX's block_size: x's shape with ceil(D / block)
    along axis) repeated to x's shape: element d of the axis takes block
    d // block."""
    v = np.asarray(v)
    return np.take(np.repeat(v, block, axis=axis), np.arange(length), axis=axis)


def full_param(v, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale or zero point as the contract's functions take it: a blocked
    one (block > 0) expanded to x's shape, any other as it is."""
    if not block:
        return np.asarray(v)
    a = axis % len(shape)
    return expand_blocks(v, a, block, shape[a])


def param_shape(shape: tuple[int, ...], axis: int, block: int, kind: str) -> tuple[int, ...]:
    """The scale's (and zero point's) shape for x's shape: kind "tensor" (a
    scalar), "axis" (1-D along axis) or "blocked" (x's shape with
    ceil(D / block) along axis)."""
    a = axis % len(shape)
    if kind == "tensor":
        return ()
    if kind == "axis":
        return (shape[a],)
    return shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]


def zero_points(rng: np.random.Generator, name: str, pshape: tuple[int, ...],
                bound: int | None = None) -> np.ndarray:
    """Random zero points of the type name: float16 / bfloat16 around 0,
    0 for the small floats (float8 takes none), integers over the type's
    range (within +-bound when given)."""
    dt, lo, hi = ALL_TYPES[name]
    if name in FLOAT_TYPES:
        return np.asarray((rng.standard_normal(pshape) * 4).astype(np.float32).astype(dt))
    if name in SMALLFLOAT_TYPES:
        return np.zeros(pshape, dt)
    if bound is not None:
        lo, hi = max(lo, -bound), min(hi, bound)
    return np.asarray(rng.integers(int(lo), int(hi), pshape, endpoint=True, dtype=np.int64)
                      .astype(dt))


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """Broadcast a per-tensor (size 1) or per-axis (1-D) parameter against x;
    a parameter of x's rank >= 2 (an expanded blocked one) is taken as it is."""
    v = np.asarray(v)
    if v.ndim == ndim and ndim >= 2:
        return v
    if v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.shape[0]
    return v.reshape(shape)


#: The float types of quantize's x and scale and of dequantize's scale and
#: output (the official operators' T1 / T2), by name.
REAL_TYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16,
}


def _real(v) -> np.ndarray:
    """v as an array of one of REAL_TYPES (other input, int32 x included:
    float32, rounded to nearest even)."""
    v = np.asarray(v)
    return v if v.dtype in REAL_TYPES.values() else v.astype(np.float32)


def _round_to(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 values rounded to nearest even into dtype and widened back
    (exactly) to float32; overflow gives +-inf."""
    with np.errstate(all="ignore"):
        return v.astype(dtype).astype(np.float32)


def quantize(x, scale, zero_point=None, axis: int = 1, dtype=None,
             precision=None, saturate: bool = True) -> np.ndarray:
    """Expected ExtendedQuantizeLinear output.

    x and scale are float32, float16 or bfloat16; x may also be int32, which
    is rounded to nearest even into float32 first (NumPy's conversion, as
    ONNX's Cast does) and is then a float32 x.  The division is done in
    ``precision`` (a dtype), by default the scale's type, as ONNX's
    QuantizeLinear-23 says: in float16 / bfloat16, x and the scale are
    rounded to that type, and their quotient is the correctly rounded one
    of that type.

    The scale may also be int32: with a float ``precision`` it is rounded to
    nearest even into float32 (and then to the precision) like an int32 x;
    without one the precision is float64, as the NumPy division of
    ``onnx.reference`` is.  Precision float64 (any x and scale): the quotient
    of the exact values is taken in float64, rounded there to an integer
    (integer types) or added to the zero point (the float types but
    float8, which take no zero point), rounded once to float32, and that
    float32 value goes through the formula below with a scale of 1 (and no
    zero point for the float types)."""
    scale = np.asarray(scale)
    if precision is None:
        prec = np.dtype(np.float64) if scale.dtype == np.int32 else _real(scale).dtype
    else:
        prec = np.dtype(precision)
    if zero_point is None:
        dtype = np.dtype(np.uint8) if dtype is None else np.dtype(dtype)
        zero_point = np.zeros(scale.shape, dtype)
    zp = np.asarray(zero_point)
    name = type_name(zp.dtype)
    x = np.asarray(x)
    z = _along(zp, x.ndim, axis)
    if prec == np.float64:
        with np.errstate(all="ignore"):
            q = np.divide(x.astype(np.float64), _along(scale, x.ndim, axis).astype(np.float64))
            if name in FLOAT_TYPES or name == "float4e2m1":
                v = (q + z.astype(np.float64)).astype(np.float32)
                z = np.full(z.shape, -0.0, np.float32)  # x + -0 is x, -0 included
            elif name in SMALLFLOAT_TYPES:
                v = q.astype(np.float32)
            else:
                v = np.rint(q).astype(np.float32)
        return _formula(v, z, name, saturate)
    x, scale = _real(x).astype(np.float32), _real(scale).astype(np.float32)
    if prec != np.float32:
        x, scale = _round_to(x, prec), _round_to(scale, prec)
    s = _along(scale, x.ndim, axis)
    with np.errstate(all="ignore"):
        v = np.divide(x, s, dtype=np.float32)  # one IEEE float32 division
        if prec != np.float32:
            # float32 has more than 2p + 2 bits of float16's / bfloat16's p:
            # the float32 quotient rounded again is the correctly rounded one.
            v = _round_to(v, prec)
    return _formula(v, z, name, saturate)


def _formula(v: np.ndarray, z: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    """The float32 quotient v (x / scale) through the rest of the formula:
    the zero point, saturation and the rounding into type name."""
    dt, lo, hi = ALL_TYPES[name]
    shape = v.shape
    with np.errstate(all="ignore"):
        if name in SMALLFLOAT_TYPES:
            if name == "float4e2m1":  # (float8 takes no zero point)
                v = np.add(v, z.astype(np.float32), dtype=np.float32)
            if saturate or name == "float4e2m1":
                v = np.where(np.isnan(v), v, np.clip(v, np.float32(lo), np.float32(hi)))
            return np.asarray(v.astype(dt), dtype=dt).reshape(shape)  # one rounding
        if name in FLOAT_TYPES:
            v = np.add(v, z.astype(np.float32), dtype=np.float32)
            v = np.where(np.isnan(v), v, np.clip(v, np.float32(lo), np.float32(hi)))
            return np.asarray(v.astype(dt), dtype=dt).reshape(shape)
        r = np.rint(v).astype(np.float64)  # half to even; exact in float64
        total = r + z.astype(np.float64)  # exact while |r| < 2^53
        # r may be huge (up to 3.4e38); the sum is then far outside any range
        # and saturates whatever its rounding.  NaN -> lo; +-inf saturate.
        total = np.where(np.isnan(total), lo, np.clip(total, lo, hi))
        return total.astype(np.int64).astype(dt).reshape(shape)


def dequantize(x, scale, zero_point=None, axis: int = 1, output_dtype=None) -> np.ndarray:
    """Expected ExtendedDequantizeLinear output: float32 arithmetic, the result
    rounded to nearest even into ``output_dtype``, by default the scale's type
    (float32, float16 or bfloat16)."""
    x = np.asarray(x)
    scale = _real(scale)
    out = scale.dtype if output_dtype is None else np.dtype(output_dtype)
    scale = scale.astype(np.float32)
    name = type_name(x.dtype)
    zp = np.zeros(scale.shape, x.dtype) if zero_point is None else np.asarray(zero_point)
    s = _along(scale, x.ndim, axis)
    z = _along(zp, x.ndim, axis)
    with np.errstate(all="ignore"):
        if name in SMALLFLOAT_TYPES:
            # A zero point of 0 (float8's only one) leaves x as it is, -0 too.
            zf = z.astype(np.float32)
            xf = x.astype(np.float32)
            d = np.where(zf == 0, xf, np.subtract(xf, zf, dtype=np.float32))
        elif name in FLOAT_TYPES:
            d = np.subtract(x.astype(np.float32), z.astype(np.float32), dtype=np.float32)
        else:
            d = (x.astype(np.int64) - z.astype(np.int64)).astype(np.float32)
        return np.multiply(d, s, dtype=np.float32).reshape(x.shape).astype(out)


_SMALL_DTYPES = {dt for dt, _, _ in SMALLFLOAT_TYPES.values()}


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of an array, for exact comparison (NaN payloads included)."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fV" or a.dtype == BF16 else a


def _isnan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype == BF16 or a.dtype in _SMALL_DTYPES:
        return np.isnan(a.astype(np.float32))
    return np.zeros(a.shape, bool)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Same dtype, shape and bits; on failure show the first differing elements.

    Every bit counts, NaN payloads included, with one exception: where both
    arrays hold a NaN, any NaN matches.  IEEE 754 leaves open which payload
    an operation returns when two NaNs meet (x86 returns the first operand's
    and compilers may swap the operands of a multiply), so no implementation
    can promise those bits.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    a, e = bits(actual).reshape(-1), bits(expected).reshape(-1)
    both_nan = _isnan(actual).reshape(-1) & _isnan(expected).reshape(-1)
    bad = np.flatnonzero((a != e) & ~both_nan)
    if bad.size:
        i = bad[:8]
        raise AssertionError(
            f"{what}: {bad.size} of {a.size} elements differ; at {i.tolist()}: "
            f"got {actual.reshape(-1)[i].tolist()} expected {expected.reshape(-1)[i].tolist()}"
        )
