"""The NumPy API of Quark's block formats: BFPQuantizeDequantize and MXQuantizeDequantize.

Both are fake quantizations (quantize, then dequantize): the result has x's
dtype and shape.  Blocks of ``block_size`` consecutive elements along ``axis``
share an exponent (docs/operators/bfp_quantize_dequantize.rst and
mx_quantize_dequantize.rst have the math).  The attributes are checked by
:mod:`extql.rules.blocks` (the same checks as the onnxruntime library's and
``extql check``'s); x and ``out`` here, then the kernels run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernels
from ..rules.blocks import (
    BFP_OP,
    KERNEL_MX,
    MX_OP,
    X_TYPES,
    BFPAttrs,
    MXAttrs,
    check_axis,
    check_bfp,
    check_mx,
    check_x_type,
)
from .out import output_array

__all__ = ["bfp_quantize_dequantize", "mx_quantize_dequantize"]

_X_CODES = {np.dtype(name): code for name, code in X_TYPES}


def _input(op: str, x: Any) -> tuple[np.ndarray, int]:
    """x as an ndarray of float32 or float16 and its ONNX code; NumPy input
    must have one of the two dtypes, Python numbers and sequences become
    float32."""
    if isinstance(x, (np.ndarray, np.generic)) or hasattr(x, "dtype"):
        arr = np.asarray(x)
        return arr, check_x_type(op, str(arr.dtype), _X_CODES.get(arr.dtype))
    try:
        arr = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{op}: x must be float32 or float16 numbers: {exc}") from None
    return arr, _X_CODES[np.dtype(np.float32)]


def _layout(op: str, shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, D, inner) of x with the blocks along ``axis`` (checked)."""
    rank = len(shape)
    if rank <= 1:
        return 1, (shape[0] if rank else 1), 1
    axis = check_axis(op, axis, rank)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, shape[axis], inner


def _bfp_kernel(a: BFPAttrs) -> dict[str, Any]:
    """The kernel's parameters of checked BFP attributes."""
    return {"kind": a.method, "block": a.block_size, "rounding": a.rounding_mode,
            "mbits": a.mantissa_bits, "bfloat_first": a.bfloat_first, "compiler": a.compiler,
            "sub_block": a.sub_block_size, "shift_bits": a.sub_block_shift_bits}


def _mx_kernel(a: MXAttrs) -> dict[str, Any]:
    """The kernel's parameters of checked MX attributes."""
    el = a.element
    return {"kind": KERNEL_MX, "block": a.block_size, "rounding": a.rounding_mode,
            "mbits": el.mbits, "ebits": el.ebits, "emax": el.emax, "largest": el.largest}


def _run(op: str, x: Any, axis: int, out: np.ndarray | None, *, kind: int, block: int,
         rounding: int, mbits: int, bfloat_first: int = 0, compiler: int = 0,
         sub_block: int = 1, shift_bits: int = 0, ebits: int = 0, emax: int = 0,
         largest: float = 0.0, splits: list[int] | None = None) -> np.ndarray:
    """x checked, then the kernel into a new array or ``out``.  ``splits``
    (tests): run the kernel's range entry point on these work-item
    boundaries in turn, as a thread pool may cut the tensor."""
    arr, code = _input(op, x)
    outer, D, inner = _layout(op, arr.shape, axis)
    y = output_array(op, out, arr.shape, arr.dtype, {"x": arr}, in_place="x")
    if arr.size == 0:
        return y
    src = np.require(arr, requirements=["C_CONTIGUOUS", "ALIGNED"])
    _kernels.block_quantize_dequantize(
        kind, block, rounding, mbits, bfloat_first, compiler, sub_block, shift_bits,
        ebits, emax, largest, code, src.reshape(-1).view(np.uint8),
        y.reshape(-1).view(np.uint8), outer, D, inner, _kernels.get_num_threads(),
        splits=splits)
    return y


def bfp_quantize_dequantize(
    x: Any, *, bfp_method: str = "to_bfp", axis: int = 1, bit_width: int = 16,
    block_size: int = 8, rounding_mode: int = 0, sub_block_size: int = 2,
    sub_block_shift_bits: int = 1, convert_to_bfloat_before_bfp: int = 0,
    use_compiler_version_cpu_kernel: int = 0, out: np.ndarray | None = None,
) -> np.ndarray:
    """BFPQuantizeDequantize: block floating point, quantized and dequantized.

    ``x`` is float32 or float16 (Python numbers: float32); the result has its
    dtype and shape.  Blocks of ``block_size`` elements along ``axis`` (rank 1:
    the only axis; a negative axis counts from the back; the last block of a
    line is short) share the exponent of their largest element:

    * ``bfp_method="to_bfp"`` (BFP16: ``bit_width`` 16, ``block_size`` 8):
      every element becomes a multiple of 2^(E - 126 - m), m = bit_width - 9,
      rounded per ``rounding_mode`` (0 half away from zero, 1 half toward +inf,
      2 half to even) and clamped; inf and NaN pass through.
      ``use_compiler_version_cpu_kernel=1`` is Quark's second kernel
      (two's-complement elements, the exponent raised by one when an element
      rounds to +-128).
    * ``"to_bfp_prime"`` (or its old name ``"to_bfp_prime_shared"``; MX4 / MX6 /
      MX9): a shared exponent with a shift of up to 2^sub_block_shift_bits - 1
      per sub-block of ``sub_block_size`` elements; subnormals flush to zero; a
      block holding an inf or NaN becomes NaN.

    ``convert_to_bfloat_before_bfp=1`` rounds x to bfloat16 precision first
    (a NaN stays NaN).  A tensor of one element passes through unchanged
    (after that rounding).  float16 is computed in float32 and rounded back.

    ``out``: an array of x's dtype and shape to write into (and return); it
    may be x itself.  x is never modified otherwise.  A bad attribute raises
    ``ValueError`` / ``TypeError`` naming the operator, attribute and value.
    """
    a = check_bfp({
        "bfp_method": bfp_method, "axis": axis, "bit_width": bit_width,
        "block_size": block_size, "rounding_mode": rounding_mode,
        "sub_block_size": sub_block_size, "sub_block_shift_bits": sub_block_shift_bits,
        "convert_to_bfloat_before_bfp": convert_to_bfloat_before_bfp,
        "use_compiler_version_cpu_kernel": use_compiler_version_cpu_kernel,
    })
    return _run(BFP_OP, x, a.axis, out, **_bfp_kernel(a))


def mx_quantize_dequantize(
    x: Any, *, element_dtype: str = "int8", axis: int = 1, block_size: int = 32,
    rounding_mode: int = 0, out: np.ndarray | None = None,
) -> np.ndarray:
    """MXQuantizeDequantize: OCP microscaling, quantized and dequantized.

    ``x`` is float32 or float16 (Python numbers: float32); the result has its
    dtype and shape.  Each block of ``block_size`` elements along ``axis`` (as
    for :func:`bfp_quantize_dequantize`) has the power-of-two scale
    X = 2^(E - 127 - emax) of its largest float32 exponent E, and each element
    becomes X times an element of ``element_dtype``: "int8" (k * 2^-6, k in
    [-128, 127], rounded per ``rounding_mode`` as BFP's), or the float types
    "fp8_e5m2", "fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1" (nearest even,
    saturated, a zero is +0; ``rounding_mode`` must be 0, 1 or 2 but is not
    used).  inf and NaN pass through.  A tensor of one element passes through
    unchanged; float16 is computed in float32 and rounded back.

    ``out``: as for :func:`bfp_quantize_dequantize`.
    """
    a = check_mx({"element_dtype": element_dtype, "axis": axis, "block_size": block_size,
                  "rounding_mode": rounding_mode})
    return _run(MX_OP, x, a.axis, out, **_mx_kernel(a))
