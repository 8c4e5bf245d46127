"""The NumPy API: validation and dtype dispatch in front of the kernels.

``quantize_linear`` and ``dequantize_linear`` follow the numeric contract
(docs/operators: the formulas, rounding and saturation of each type) bit
for bit.  Everything that can be wrong with the inputs is found
here, before the kernels run, and reported as a ``TypeError`` (a wrong type)
or a ``ValueError`` (a wrong shape or axis) whose message names the operator.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import _kernels
from ..rules.linear import DEFAULTS
from ..rules.types import (
    DEFAULT_QTYPE,
    E8M0_DTYPE,
    E8M0_NAME,
    FLOAT64_CODE,
    FLOAT_CODES,
    FLOAT_DTYPES,
    FLOAT_NAMES,
    INT32_CODE,
    PRECISION_CODES,
    QUANTIZE_SCALE_CODES,
    QUANTIZE_X_CODES,
    QUANTIZED,
    SCALE_CODES,
    QuantizedType,
    SmallFloatType,
    SubByteType,
    default_precision,
    quantized_type_of,
)
from .out import output_array

__all__ = ["quantize_linear", "dequantize_linear", "set_num_threads", "get_num_threads"]

QUANTIZE = "ExtendedQuantizeLinear"
DEQUANTIZE = "ExtendedDequantizeLinear"
_TYPE_NAMES = ", ".join(QUANTIZED)
_FLOAT_NAMES = ", ".join(FLOAT_NAMES.values())
_X_NAMES = ", ".join(QUANTIZE_X_CODES.values())
_BY_CODE = {t.onnx: t for t in QUANTIZED.values()}
_INT32 = INT32_CODE


def _has_dtype(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "dtype")


def _float32(op: str, name: str, value: Any) -> np.ndarray:
    """An ndarray of float32: NumPy input must be float32 already; Python
    numbers and sequences are converted."""
    if _has_dtype(value):
        arr = np.asarray(value)
        if arr.dtype != np.float32:
            raise TypeError(f"{op}: {name} must be float32, got {arr.dtype}")
        return arr
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{op}: {name} must be float32 numbers: {exc}") from None


def _floating(op: str, name: str, value: Any) -> tuple[np.ndarray, int]:
    """An ndarray of float32, float16 or bfloat16 and its ONNX code: NumPy
    input keeps its dtype (one of the three); Python numbers and sequences
    become float32."""
    if _has_dtype(value):
        arr = np.asarray(value)
        code = FLOAT_CODES.get(arr.dtype)
        if code is None:
            raise TypeError(f"{op}: {name} must be one of {_FLOAT_NAMES}, got {arr.dtype}")
        return arr, code
    return _float32(op, name, value), FLOAT_CODES[np.dtype(np.float32)]


def _quantize_input(op: str, value: Any) -> tuple[np.ndarray, int]:
    """Quantize's x and its ONNX code: one of the float types, or int32 (as
    the official QuantizeLinear allows; the kernels round it to float32)."""
    if _has_dtype(value):
        arr = np.asarray(value)
        if arr.dtype == np.int32:
            return arr, _INT32
        if arr.dtype not in FLOAT_CODES:
            raise TypeError(f"{op}: x must be one of {_X_NAMES}, got {arr.dtype}")
    return _floating(op, "x", value)


def _scale(op: str, name: str, value: Any,
           integer: bool = False) -> tuple[np.ndarray, int, bool]:
    """The scale, its ONNX code and whether it was float8e8m0: such a scale
    (a power of two, or NaN) is widened to float32 exactly and is then a
    float32 scale (the division and the arithmetic are float32's).
    ``integer``: an int32 scale is taken too (quantize's, as the official
    QuantizeLinear allows)."""
    if _has_dtype(value):
        arr = np.asarray(value)
        if arr.dtype == E8M0_DTYPE:
            return arr.astype(np.float32), FLOAT_CODES[np.dtype(np.float32)], True
        if integer and arr.dtype == np.int32:
            return arr, _INT32, False
        if arr.dtype not in FLOAT_CODES:
            names = (QUANTIZE_SCALE_CODES if integer else SCALE_CODES).values()
            raise TypeError(f"{op}: {name} must be one of {', '.join(names)}, got {arr.dtype}")
    return (*_floating(op, name, value), False)


def _float_type(op: str, name: str, value: Any, wide: bool = False) -> int:
    """The ONNX code of a float type given as a dtype (np.float16,
    ml_dtypes.bfloat16, "float32", ...) or as an ONNX code; ``wide``:
    float64 too (quantize's precision)."""
    codes = {**FLOAT_CODES, np.dtype(np.float64): FLOAT64_CODE} if wide else FLOAT_CODES
    try:
        code = operator.index(value)
    except TypeError:
        try:
            code = codes.get(np.dtype(value))
        except TypeError:
            code = None
    else:
        code = code if code in codes.values() else None
    if code is None:
        names = (PRECISION_CODES if wide else FLOAT_NAMES).values()
        raise TypeError(f"{op}: {name} must be one of {', '.join(names)}, got {value!r}")
    return code


def _scales(scale: np.ndarray, stype: int, prec: int) -> np.ndarray:
    """The scale as float32, rounded to the precision of the division (the
    kernels take float32 scales; an int32 one is rounded to nearest even
    into float32 first, as an int32 x is)."""
    if stype == prec == FLOAT_CODES[np.dtype(np.float32)]:
        return scale
    f32 = np.empty(scale.shape, np.float32)
    _kernels.convert_scales(stype, prec, _bytes(scale), f32.reshape(-1))
    return f32


def _granularity(
    op: str, shape: tuple[int, ...], scale: np.ndarray, zero_point: np.ndarray | None, axis: Any
) -> tuple[int, int]:
    """Check scale, zero point and axis against x's shape; return (D, inner).

    Per-tensor quantization is D = 1, inner = size; per-axis quantization of
    shape (..., D, inner...) walks channel (i // inner) % D.
    """
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {type(axis).__name__}") from None
    if scale.ndim >= 2:
        raise ValueError(
            f"{op}: the scale must be a scalar or 1-D, got shape {scale.shape} "
            "(a blocked scale, of x's rank, needs block_size > 0)"
        )
    per_tensor = scale.size == 1
    if zero_point is not None:
        if per_tensor:
            if zero_point.ndim >= 2 or zero_point.size != 1:
                raise ValueError(
                    f"{op}: the zero point must have the shape of the scale {scale.shape}, "
                    f"got {zero_point.shape}"
                )
        elif zero_point.shape != scale.shape:
            raise ValueError(
                f"{op}: the zero point must have the shape of the scale {scale.shape}, "
                f"got {zero_point.shape}"
            )
    size = int(np.prod(shape, dtype=np.int64))
    if per_tensor:
        return 1, size
    rank = len(shape)
    if rank == 0:
        raise ValueError(
            f"{op}: a per-axis scale of shape {scale.shape} needs x of rank >= 1, got a scalar"
        )
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for x of rank {rank}")
    axis %= rank
    if scale.shape[0] != shape[axis]:
        raise ValueError(
            f"{op}: the scale has {scale.shape[0]} elements but x has {shape[axis]} "
            f"along axis {axis} (shape {shape})"
        )
    inner = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    return shape[axis], inner


def _block_size(op: str, block_size: Any) -> int:
    try:
        block = operator.index(block_size)
    except TypeError:
        raise TypeError(
            f"{op}: block_size must be an integer, got {type(block_size).__name__}"
        ) from None
    if block < 0:
        raise ValueError(f"{op}: block_size must be >= 0, got {block}")
    return block


def _blocked_granularity(
    op: str, shape: tuple[int, ...], scale: np.ndarray, zero_point: np.ndarray | None,
    axis: Any, block: int,
) -> tuple[int, int]:
    """Check a blocked scale (ONNX's block_size): the rank of x, x's shape
    except ceil(D / block_size) along axis, the zero point of its shape.
    Return (D, inner) of x along axis."""
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {type(axis).__name__}") from None
    rank = len(shape)
    if rank == 0:
        raise ValueError(f"{op}: blocked quantization (block_size {block}) needs x of rank >= 1")
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for x of rank {rank}")
    axis %= rank
    blocks = -(-shape[axis] // block)
    expected = shape[:axis] + (blocks,) + shape[axis + 1 :]
    if scale.shape != expected:
        raise ValueError(
            f"{op}: with block_size {block} along axis {axis}, the scale must have shape "
            f"{expected} (x's shape {shape} with ceil({shape[axis]} / {block}) = {blocks} "
            f"blocks along the axis), got {scale.shape}"
        )
    if zero_point is not None and zero_point.shape != scale.shape:
        raise ValueError(
            f"{op}: the zero point must have the shape of the scale {scale.shape}, "
            f"got {zero_point.shape}"
        )
    inner = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    return shape[axis], inner


def _dense(arr: np.ndarray) -> np.ndarray:
    """The array C-contiguous *and aligned* to its element size, copied only
    when it is not.  (np.ascontiguousarray keeps an unaligned buffer, e.g.
    np.frombuffer at an odd offset, and the kernels read typed elements:
    an unaligned float pointer is undefined behaviour in C, which the
    compiler may turn into aligned vector loads that fault.)"""
    return np.require(arr, requirements=["C_CONTIGUOUS", "ALIGNED"])


def _bytes(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous, aligned array (what the kernels take)."""
    return _dense(arr).reshape(-1).view(np.uint8)


def _zero_point_bytes(zp: np.ndarray | None, qt: QuantizedType) -> np.ndarray | None:
    """The zero point as the kernels take it: its bytes, a sub-byte type's
    values as int8 / uint8 and a small float's as float32 (exact: the
    carrier holds every value)."""
    if zp is None:
        return None
    if isinstance(qt, SubByteType):
        zp = zp.astype(qt.carrier.dtype)
    elif isinstance(qt, SmallFloatType):
        zp = zp.astype(np.float32)
    return _bytes(zp)


def quantize_linear(
    x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = DEFAULTS["axis"],
    block_size: int = DEFAULTS["block_size"], output_dtype: Any = None, precision: Any = None,
    saturate: bool = bool(DEFAULTS["saturate"]), out: np.ndarray | None = None,
) -> np.ndarray:
    """ExtendedQuantizeLinear: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``.

    ``x`` and ``y_scale`` are float32, float16 or ``ml_dtypes.bfloat16``
    (Python numbers: float32); ``x`` may also be int32 (as the official
    operator allows), which is rounded to nearest even into float32 first,
    as ONNX's Cast does, and is then a float32 ``x``; the scale may also be
    ``ml_dtypes.float8_e8m0fnu`` (widened to float32 exactly).  The zero
    point's dtype (int8, uint8, int16, uint16, int32, uint32, float16,
    ``ml_dtypes.bfloat16``, or the sub-byte
    ``ml_dtypes.int4``, ``uint4``, ``int2``, ``uint2``, one element per
    byte) is the output type; without one the output is ``output_dtype``,
    else uint8, with zero point 0.  A scalar (or one-element) scale quantizes per tensor, a 1-D
    scale per axis ``axis``.  Integers: NaN gives the lowest value, +-inf
    saturate.  float16 / bfloat16: ``x / s + zp`` in float32, saturated to the
    largest finite value, rounded to nearest even; NaN stays NaN.

    The division is done in the precision ``precision`` (a float dtype or
    its ONNX code), by default the scale's type, as ONNX's QuantizeLinear
    defines it: for float16 / bfloat16, x and the scale are rounded to it and
    so is their quotient (float32: the float32 division).

    The scale may also be int32 (as the official operator allows); the
    default precision is then float64, as ONNX's reference divides (with a
    float ``precision`` the scale is rounded to float32 first, as an int32 x
    is).  Precision float64 (``np.float64``, any x and scale): the quotient
    of the exact values in float64, rounded there to an integer for the
    integer types or added to the zero point for float16, bfloat16 and
    float4e2m1 (float8 takes none), then rounded once to float32, which the
    formula above takes with a scale of 1 (and, for those float types, no
    further zero point).

    ``block_size`` > 0: blocked quantization along ``axis``, as ONNX's
    QuantizeLinear-21 defines it: the scale (and zero point) has x's shape
    except ``ceil(D / block_size)`` along the axis, and element ``d`` of the
    axis uses block ``d // block_size``.

    float8 (``ml_dtypes.float8_e4m3fn``, ``float8_e4m3fnuz``,
    ``float8_e5m2``, ``float8_e5m2fnuz``) and ``ml_dtypes.float4_e2m1fn``:
    ``x / s`` (float4: ``+ zp``) in float32, rounded once to nearest even
    into the type; float8 takes no zero point (its value is ignored, as
    onnxruntime's and ONNX's reference QuantizeLinear do).  ``saturate``
    (float8 only, ONNX's attribute): out-of-range values and infinities
    become the largest finite value; with ``saturate=False`` they become
    infinity (float8e5m2) or NaN.  The other types always saturate.

    ``output_dtype``: the output type (a dtype or ONNX code), the zero
    point's when both are given.

    ``out``: an array to write the result into (and return) instead of a new
    one -- writeable, C-contiguous, of the output's dtype and shape, not
    overlapping an input (see :mod:`extql.api.out`).
    """
    op = QUANTIZE
    block = _block_size(op, block_size)
    x_arr, xtype = _quantize_input(op, x)
    scale, stype, _ = _scale(op, "y_scale", y_scale, integer=True)
    if precision is not None:
        prec = _float_type(op, "precision", precision, wide=True)
    else:
        prec = default_precision(stype)
    if not isinstance(saturate, (bool, np.bool_, int, np.integer)):
        raise TypeError(f"{op}: saturate must be a bool, got {type(saturate).__name__}")
    want = None if output_dtype is None else _quantized_type(op, output_dtype)
    if y_zero_point is None:
        qt, zp = want or DEFAULT_QTYPE, None
    else:
        if not _has_dtype(y_zero_point):
            raise TypeError(
                f"{op}: y_zero_point must be a NumPy array or scalar of one of {_TYPE_NAMES} "
                f"(it sets the output type; a Python {type(y_zero_point).__name__} does not), "
                "for example np.int8(0)"
            )
        zp = np.asarray(y_zero_point)
        qt = quantized_type_of(zp.dtype)
        if qt is None:
            raise TypeError(f"{op}: y_zero_point must be one of {_TYPE_NAMES}, got {zp.dtype}")
        if want is not None and want is not qt:
            raise TypeError(
                f"{op}: output_dtype {want.name} must be the zero point's type {qt.name}"
            )
    if block:
        D, inner = _blocked_granularity(op, x_arr.shape, scale, zp, axis, block)
    else:
        D, inner = _granularity(op, x_arr.shape, scale, zp, axis)
    y = output_array(op, out, x_arr.shape, qt.dtype, {"x": x_arr, "y_scale": scale,
                                                      "y_zero_point": zp})
    flags = _kernels.UNPACKED | (0 if saturate else _kernels.NO_SATURATE)
    if prec == FLOAT64_CODE:
        # The division in float64: the scale as it is (int32) or widened to
        # float32 exactly.
        f32 = FLOAT_CODES[np.dtype(np.float32)]
        exact = scale if stype == _INT32 else _scales(scale, stype, f32)
        _kernels.quantize_f64(
            qt.onnx, xtype, _INT32 if stype == _INT32 else f32, _bytes(x_arr), _bytes(exact),
            _zero_point_bytes(zp, qt), _bytes(y), x_arr.size, D, inner, scale.size,
            block=block, flags=flags,
        )
        return y
    _kernels.quantize(
        qt.onnx,
        xtype,
        prec,
        _bytes(x_arr),
        _dense(_scales(scale, stype, prec)).reshape(-1),
        _zero_point_bytes(zp, qt),
        _bytes(y),
        x_arr.size,
        D,
        inner,
        block=block,
        flags=flags,
    )
    return y


def _quantized_type(op: str, value: Any) -> QuantizedType:
    """One of the quantized types, given as a dtype or an ONNX code."""
    try:
        qt = _BY_CODE.get(operator.index(value))
    except TypeError:
        try:
            qt = quantized_type_of(np.dtype(value))
        except TypeError:
            qt = None
    if qt is None:
        raise TypeError(f"{op}: output_dtype must be one of {_TYPE_NAMES}, got {value!r}")
    return qt


def _python_number(op: str, v: Any, qt: QuantizedType) -> int | float:
    """A zero-point element as a Python int or float (exact)."""
    try:
        return operator.index(v)  # int, bool, NumPy integers
    except TypeError:
        pass
    if isinstance(v, (float, np.floating, np.generic)) and not isinstance(v, np.complexfloating):
        try:
            return float(v)  # every float type widens to a double exactly
        except (TypeError, ValueError):
            pass
    raise TypeError(
        f"{op}: x_zero_point must be numbers of type {qt.name}, got {type(v).__name__}"
    )


def _to_float_type(v: int | float, qt: QuantizedType) -> Any:
    """v in float16 / bfloat16 (inf when out of range, NaN for NaN)."""
    try:
        d = float(v)
    except OverflowError:  # a Python int beyond the double range
        d = float("inf") if v > 0 else float("-inf")
    with np.errstate(over="ignore"):
        return np.array(d, dtype=np.float64).astype(qt.dtype)[()]


def _dequantize_zero_point(op: str, value: Any, qt: QuantizedType) -> np.ndarray:
    """The zero point as an array of x's type; a Python number is taken as
    that type when it fits exactly."""
    if _has_dtype(value):
        zp = np.asarray(value)
        if zp.dtype != qt.dtype:
            raise TypeError(
                f"{op}: x_zero_point must have the dtype of x ({qt.name}), got {zp.dtype}"
            )
        return zp
    # Python numbers (or nested sequences of them): each is converted on its
    # own and compared with the original in Python's exact int/float
    # arithmetic, so no value that the type does not hold is rounded into it
    # (a float64 comparison would take 2**62 + 1 as 2**62).
    try:
        raw = np.asarray(value, dtype=object)
    except ValueError as exc:  # ragged sequences
        raise TypeError(f"{op}: x_zero_point must be numbers of type {qt.name}: {exc}") from None
    zp = np.empty(raw.shape, dtype=qt.dtype)
    flat = zp.reshape(-1)
    for i, v in enumerate(raw.reshape(-1)):
        v = _python_number(op, v, qt)
        if qt.is_float:
            y = _to_float_type(v, qt)
            exact = v != v or float(y) == v  # NaN stays NaN
        else:
            exact = v == v and qt.lo <= v <= qt.hi and v == int(v)
            y = int(v) if exact else 0
        if not exact:
            raise ValueError(f"{op}: x_zero_point {value!r} is not representable as {qt.name}")
        flat[i] = y
    return zp


def dequantize_linear(
    x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = DEFAULTS["axis"],
    block_size: int = DEFAULTS["block_size"], output_dtype: Any = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """ExtendedDequantizeLinear: ``y = float32(x - x_zero_point) * x_scale``.

    ``x`` is one of the quantized types (bfloat16 as
    ``ml_dtypes.bfloat16``; int4, uint4, int2, uint2, float8 and float4e2m1
    as ml_dtypes' types, one element per byte; a float8 zero point must be
    0), the zero point (optional, default 0) has x's
    dtype and the scale's shape, the scale is float32, float16 or bfloat16
    (or ``ml_dtypes.float8_e8m0fnu``, widened to float32 exactly, with an
    ``output_dtype``).
    The difference is exact and rounds once to float32 before one float32
    multiply; the result has x's shape and the type ``output_dtype`` (a float
    dtype or its ONNX code), by default the scale's, rounded to nearest even
    into it.

    ``block_size`` > 0: blocked, as for :func:`quantize_linear`.

    ``out``: an array of the output's type and x's shape to write the result
    into (and return) instead of a new one; a float32 one may be ``x`` itself
    when x is int32 / uint32 (see :mod:`extql.api.out`).
    """
    op = DEQUANTIZE
    block = _block_size(op, block_size)
    if not _has_dtype(x):
        raise TypeError(
            f"{op}: x must be a NumPy array of one of {_TYPE_NAMES}, got {type(x).__name__}"
        )
    x_arr = np.asarray(x)
    qt = quantized_type_of(x_arr.dtype)
    if qt is None:
        raise TypeError(f"{op}: x must be one of {_TYPE_NAMES}, got {x_arr.dtype}")
    scale, stype, e8m0 = _scale(op, "x_scale", x_scale)
    if e8m0 and output_dtype is None:
        raise TypeError(f"{op}: a {E8M0_NAME} x_scale needs output_dtype (the output cannot "
                        "have the scale's type)")
    ytype = stype if output_dtype is None else _float_type(op, "output_dtype", output_dtype)
    zp = None if x_zero_point is None else _dequantize_zero_point(op, x_zero_point, qt)
    if (zp is not None and isinstance(qt, SmallFloatType) and qt.is_float8
            and np.any(zp.astype(np.float32) != 0)):
        raise ValueError(
            f"{op}: x_zero_point of {qt.name} must be 0 (a float8 dequantize takes no zero "
            "point, as the official DequantizeLinear requires)"
        )
    if block:
        D, inner = _blocked_granularity(op, x_arr.shape, scale, zp, axis, block)
    else:
        D, inner = _granularity(op, x_arr.shape, scale, zp, axis)
    f32 = FLOAT_CODES[np.dtype(np.float32)]
    y = output_array(op, out, x_arr.shape, FLOAT_DTYPES[ytype],
                     {"x": x_arr, "x_scale": scale, "x_zero_point": zp},
                     in_place="x" if ytype == f32 else None)
    _kernels.dequantize(
        qt.onnx,
        ytype,
        _bytes(x_arr),
        _dense(_scales(scale, stype, f32)).reshape(-1),
        _zero_point_bytes(zp, qt),
        _bytes(y),
        x_arr.size,
        D,
        inner,
        block=block,
        flags=_kernels.UNPACKED,
    )
    return y


def set_num_threads(n: int | None) -> None:
    """Set the number of threads the kernels use (None or 0: the default,
    which is ``EXTQL_NUM_THREADS`` or the number of cores)."""
    n = 0 if n is None else operator.index(n)
    if n < 0:
        raise ValueError(f"extql.set_num_threads: n must be >= 0, got {n}")
    _kernels.set_num_threads(n)


def get_num_threads() -> int:
    """The number of threads the kernels use for large tensors."""
    return _kernels.get_num_threads()
