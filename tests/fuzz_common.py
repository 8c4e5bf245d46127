"""Shared pieces of the fuzzers: an independent statement of which inputs the
contract accepts, and generators of awkward float32 values.

``contract_error`` is written from the operator pages ("Errors" in
docs/operators/extended_quantize_linear.rst and
docs/operators/extended_dequantize_linear.rst: bad input gets a clear error
...), not from extql's validation code, so the fuzzers can tell a wrongly
accepted input (a silently wrong answer) from a wrongly rejected one.  Types
are given by name ("float32", "int8", ..., "bfloat16", or any other
NumPy/ONNX type name, which is never valid).
"""

from __future__ import annotations

import numpy as np
from contract import TYPES

Q = "ExtendedQuantizeLinear"
DQ = "ExtendedDequantizeLinear"

#: The eight quantized types (tests/contract.py's table).
QTYPE_NAMES = tuple(TYPES)
#: The float types of quantize's x and scale and of dequantize's scale
#: (the official operators' T1 / T2, float8e8m0 aside).
REAL_TYPE_NAMES = ("float32", "float16", "bfloat16")
#: Types that are never valid anywhere in the two operators.
WRONG_TYPE_NAMES = ("float64", "int64", "uint64", "bool")


def contract_error(
    op: str,
    x_type: str,
    x_shape: tuple[int, ...],
    s_type: str,
    s_shape: tuple[int, ...],
    zp_type: str | None,
    zp_shape: tuple[int, ...] | None,
    axis: int,
) -> tuple[str, str] | None:
    """None when the contract accepts the inputs, else ``(exception, reason)``:
    "TypeError" for a wrong element type, "ValueError" for a wrong shape or
    axis.  Types are checked first, then the granularity (scale rank, zero
    point shape, axis, scale length), the order the contract lists them.
    ``zp_type`` None means no zero point."""
    if op == Q:
        if x_type not in (*REAL_TYPE_NAMES, "int32"):  # (int32: as the official operator)
            return "TypeError", "x must be one of float32, float16, bfloat16, int32"
        if s_type not in (*REAL_TYPE_NAMES, "int32"):  # (int32: as the official operator)
            return "TypeError", "y_scale must be one of float32, float16, bfloat16"
        if zp_type is not None and zp_type not in QTYPE_NAMES:
            return "TypeError", "y_zero_point must be one of"
    else:
        if x_type not in QTYPE_NAMES:
            return "TypeError", "x must be one of"
        if s_type not in REAL_TYPE_NAMES:
            return "TypeError", "x_scale must be one of float32, float16, bfloat16"
        if zp_type is not None and zp_type != x_type:
            return "TypeError", "x_zero_point must have the dtype of x"
    s_size = int(np.prod(s_shape, dtype=np.int64))
    if len(s_shape) >= 2:
        return "ValueError", "the scale must be a scalar or 1-D"
    if s_size == 1:  # per tensor: the axis is ignored
        if zp_shape is not None and (
            len(zp_shape) >= 2 or int(np.prod(zp_shape, dtype=np.int64)) != 1
        ):
            return "ValueError", "the zero point must have the shape of the scale"
        return None
    if zp_shape is not None and tuple(zp_shape) != tuple(s_shape):
        return "ValueError", "the zero point must have the shape of the scale"
    rank = len(x_shape)
    if rank == 0:
        return "ValueError", "needs x of rank >= 1"
    if not -rank <= axis < rank:
        return "ValueError", "is out of range"
    if s_shape[0] != x_shape[axis % rank]:
        return "ValueError", "elements but x has"
    return None


# ---------------------------------------------------------------------------
# Awkward float32 values
# ---------------------------------------------------------------------------

#: Bit patterns of float32 values that every rule of the contract cares about.
SPECIAL_F32_BITS = np.array(
    [
        0x00000000, 0x80000000,  # +-0
        0x00000001, 0x80000001, 0x007FFFFF, 0x00400000,  # subnormals
        0x00800000, 0x80800000,  # smallest normals
        0x7F7FFFFF, 0xFF7FFFFF,  # largest finite
        0x7F800000, 0xFF800000,  # +-inf
        0x7FC00000, 0xFFC00000,  # quiet NaN, both signs
        0x7F800001, 0xFF800001, 0x7FA00000, 0x7FBFFFFF,  # signalling NaN payloads
        0x7FC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FE01234,  # quiet NaN payloads
        0x3F000000, 0xBF000000, 0x3FC00000, 0x40200000,  # 0.5, -0.5, 1.5, 2.5
        0x477FE000, 0x477FF000, 0x477FEFFF,  # 65504, 65520 (float16 overflow edge)
        0x33800000, 0x33000000, 0x337FFFFF,  # float16 subnormal rounding edges
        0x7F7F0000, 0x7F7F8000, 0x7F7F7FFF,  # bfloat16 largest finite and its edge
        0x4EFFFFFF, 0x4F000000, 0xCF000000, 0x4F800000,  # 2^31 - 128, 2^31, -2^31, 2^32
    ],
    dtype=np.uint32,
)

#: Scales: ordinary, zero, negative, subnormal, huge, tiny, NaN and inf.
SPECIAL_SCALES = np.array(
    [1.0, 0.5, 0.1, 1 / 3, 3.0, 255.0, -1.0, -0.37, 0.0, -0.0, 1e-45, 1e-40, 1.2e-38,
     1e-20, 1e20, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan],
    dtype=np.float32,
)


def awkward_f32(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0,
                style: str = "mixed") -> np.ndarray:
    """float32 values of one style:

    * "normal"  - standard normal times ``scale`` times a few hundred;
    * "ties"    - exact halfway points (k + 0.5) * scale, where rounding matters;
    * "bits"    - uniformly random bit patterns (NaN payloads, subnormals ...);
    * "special" - drawn from SPECIAL_F32_BITS;
    * "mixed"   - each element from any of the above.
    """
    n = int(np.prod(shape, dtype=np.int64))
    s = np.float32(scale) if np.isfinite(scale) and scale != 0 else np.float32(1.0)
    with np.errstate(all="ignore"):
        normal = (rng.standard_normal(n) * 300 * s).astype(np.float32)
        k = rng.integers(-70000, 70000, size=n).astype(np.float32)
        ties = ((k + np.float32(0.5)) * s).astype(np.float32)
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = rng.choice(SPECIAL_F32_BITS, size=n).view(np.float32)
    pick = {"normal": normal, "ties": ties, "bits": bits, "special": special}
    if style in pick:
        out = pick[style]
    else:
        which = rng.integers(0, 4, size=n)
        out = np.choose(which, [normal, ties, bits, special])
    return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)


def random_of_type(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Any bit pattern of a quantized type (or of one of the wrong types)."""
    import ml_dtypes

    n = int(np.prod(shape, dtype=np.int64))
    if name == "bfloat16":
        return rng.integers(0, 2**16, size=n, dtype=np.uint32).astype(np.uint16).view(
            ml_dtypes.bfloat16).reshape(shape)
    if name == "bool":
        return rng.integers(0, 2, size=n).astype(bool).reshape(shape)
    dt = np.dtype(name)
    raw = rng.integers(0, 2**63, size=n * dt.itemsize, dtype=np.uint64).astype(np.uint8)
    return raw.view(dt).reshape(shape).copy()
