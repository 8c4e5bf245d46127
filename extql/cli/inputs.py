"""The input arrays of ``extql run``: given in ``--inputs``, or random.

The arrays of ``--inputs`` must have the element types the model declares
(bfloat16 arrays, which ``np.savez`` stores as 2-byte void, are taken as
bfloat16); missing inputs get random values of the declared type and shape,
symbolic dimensions sized by ``--dim`` (default 1).  Every problem is a
one-line :class:`CliError` naming the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import CliError

__all__ = ["MAX_RANDOM_ELEMENTS", "graph_inputs", "complete_feeds"]

#: Random inputs larger than this many elements are refused (a mistaken --dim
#: or a damaged shape would otherwise exhaust the memory).
MAX_RANDOM_ELEMENTS = 1 << 31


def graph_inputs(model) -> list[Any]:
    """The model's inputs that are not initializers (the ones to feed)."""
    initializer_names = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializer_names]


def complete_feeds(source, inputs: list[Any], feeds: dict[str, np.ndarray],
                   rng: np.random.Generator, dims: dict[str, int],
                   on_random=None) -> None:
    """Fill ``feeds`` in place: a random value for every input of ``inputs``
    it lacks (``on_random(name, value)`` is told of each), bfloat16 read back
    as bfloat16, then every array checked against its input's declared type
    (``source`` names the file the arrays came from)."""
    unknown = sorted(set(feeds) - {i.name for i in inputs})
    if unknown:
        raise CliError(f"{source}: has arrays for {unknown}, which are not inputs of the "
                       f"model (inputs: {[i.name for i in inputs]})")
    for vi in inputs:
        if vi.name not in feeds:
            value = feeds[vi.name] = _random_input_or_error(vi, rng, dims)
            if on_random is not None:
                on_random(vi.name, value)
    # bfloat16 arrays saved by NumPy come back as void: take them as bfloat16.
    for vi in inputs:
        value = feeds[vi.name]
        if value.dtype.kind == "V" and value.dtype.itemsize == 2:
            feeds[vi.name] = value.view(_np_dtype_or_error(vi))
    _check_feed_types(source, inputs, feeds)


def _np_dtype(elem: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type (bfloat16, the sub-byte and
    small float types: ml_dtypes', which an older onnx may not map)."""
    import onnx

    from ..rules.types import QUANTIZED_BY_ONNX

    known = QUANTIZED_BY_ONNX.get(elem)
    if known is not None:
        return known.dtype
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))


def _np_dtype_or_error(vi) -> np.dtype:
    """The NumPy dtype of a graph input, or a CliError naming the input."""
    try:
        return _np_dtype(vi.type.tensor_type.elem_type)
    except (KeyError, ValueError, TypeError):
        raise CliError(f"input {vi.name!r} has element type {vi.type.tensor_type.elem_type}, "
                       "which has no NumPy type; give it in --inputs") from None


def _check_feed_types(source, inputs, feeds: dict[str, np.ndarray]) -> None:
    """A CliError naming the file and the input when an array of --inputs
    does not have the element type the model declares for it."""
    for vi in inputs:
        value = feeds.get(vi.name)
        if value is None or not vi.type.HasField("tensor_type"):
            continue
        if vi.type.tensor_type.elem_type == 0:  # not declared: onnxruntime decides
            continue
        want = _np_dtype_or_error(vi)
        if value.dtype != want:
            raise CliError(f"{source}: the array {vi.name!r} is {value.dtype}, but the model's "
                           f"input {vi.name!r} is {want}; convert it with .astype()")


def _random_input_or_error(vi, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    """:func:`_random_input`, with impossible shapes and types as CliErrors."""
    if vi.type.HasField("tensor_type"):
        _np_dtype_or_error(vi)
        bad = [d.dim_value for d in vi.type.tensor_type.shape.dim
               if d.HasField("dim_value") and d.dim_value < 0]
        if bad:
            raise CliError(f"input {vi.name!r} has a negative dimension {bad[0]}")
        sizes = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
                 for d in vi.type.tensor_type.shape.dim]
        if int(np.prod(sizes, dtype=object)) > MAX_RANDOM_ELEMENTS:
            raise CliError(f"input {vi.name!r} of shape {sizes} is too big for a random value; "
                           "give it in --inputs or choose smaller --dim sizes")
    try:
        return _random_input(vi, rng, dims)
    except (ValueError, MemoryError) as exc:
        raise CliError(f"cannot make a random value for input {vi.name!r} ({exc}); "
                       "give it in --inputs or set its size with --dim") from None


def _random_input(vi, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    """A random value of the input's type and shape: floats around +-4,
    integers over the type's range (at most 32 bits), booleans."""
    if not vi.type.HasField("tensor_type"):
        raise CliError(f"input {vi.name!r} is not a tensor; give it in --inputs")
    tt = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
             for d in tt.shape.dim]
    dtype = _np_dtype(tt.elem_type)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return (rng.standard_normal(shape) * 4).astype(np.float32).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -(2**31)), min(int(info.max), 2**31 - 1)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise CliError(f"input {vi.name!r} has type {dtype}: give it in --inputs")
