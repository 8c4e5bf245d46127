"""The ``out=`` argument of ``quantize_linear`` / ``dequantize_linear``.

Writing into a caller's array saves the allocation and, for large outputs,
the page faults of touching fresh memory (which cost more than the kernel
itself).  The kernels write the output as one flat, C-ordered buffer of the
output type, so ``out`` must be exactly that: a writeable, C-contiguous,
aligned ``numpy.ndarray`` of the output's dtype and shape.  It must not
overlap an input -- the kernels read the scale and zero point throughout
and may read ``x`` ahead of the element they write -- except that
dequantize may write over ``x`` itself when ``x`` is a 4-byte type viewed
as float32 in the same memory (element i is read before element i is
written, and no other element of ``x`` is read for it).  A wrong ``out``
raises ``TypeError`` (not an array, wrong dtype) or ``ValueError`` (shape,
layout, overlap), naming the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["output_array"]


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` are C-contiguous arrays over exactly the same bytes."""
    return (
        a.flags.c_contiguous and b.flags.c_contiguous and a.nbytes == b.nbytes
        and a.itemsize == b.itemsize
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def output_array(
    op: str,
    out: Any,
    shape: tuple[int, ...],
    dtype: np.dtype,
    inputs: dict[str, np.ndarray | None],
    in_place: str | None = None,
) -> np.ndarray:
    """A fresh output array when ``out`` is None; else ``out`` itself, checked
    (module docstring).  ``inputs`` maps the operator's input names to their
    arrays; ``in_place`` names the one input ``out`` may be identical to."""
    dtype = np.dtype(dtype)
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{op}: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{op}: out must have the output's dtype {dtype}, got {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{op}: out must have the output's shape {tuple(shape)}, "
                         f"got {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{op}: out is read-only")
    if not out.flags.c_contiguous:
        raise ValueError(f"{op}: out must be C-contiguous (a strided view cannot be written "
                         "in place; pass np.ascontiguousarray(...) and copy back)")
    if not out.flags.aligned:
        raise ValueError(f"{op}: out must be aligned to its element size")
    if out.size == 0:
        return out
    for name, arr in inputs.items():
        if arr is None or not np.may_share_memory(out, arr):
            continue
        if name == in_place and _same_buffer(out, arr):
            continue
        try:
            overlaps = np.shares_memory(out, arr, max_work=10**6)
        except Exception:  # noqa: BLE001 - numpy's TooHardError: take it as overlapping
            overlaps = True
        if not overlaps:
            continue
        allowed = (f" (only an out over exactly the same memory as {in_place}, of the same "
                   "element size, is allowed)" if in_place else "")
        raise ValueError(f"{op}: out overlaps the input {name}{allowed}")
    return out
