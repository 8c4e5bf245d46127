"""NumPy arrays in and out of an onnxruntime session, bfloat16 included, on
every supported onnxruntime.

onnxruntime's Python API converts NumPy arrays of the standard dtypes itself,
but not bfloat16 (``ml_dtypes.bfloat16``, which NumPy does not know).  A
bfloat16 buffer crosses the API only as an OrtValue typed ``BFLOAT16`` over
the array's ``uint16`` view, ``OrtValue.ortvalue_from_numpy_with_onnx_type``,
which onnxruntime has from release 1.20 on (:func:`has_typed_ortvalues`).

On older releases (extql supports 1.18) the model is rewritten instead, with
the same results bit for bit:

* a bfloat16 input becomes an initializer holding the fed value
  (:func:`bfloat16_inputs_as_initializers`);
* a bfloat16 output is widened to float32 in the graph by a Cast, which is
  exact, and narrowed back here by dropping the 16 zero low bits
  (:func:`widen_bfloat16_outputs`, :func:`narrow_bfloat16`).

An output that onnxruntime allocates itself (``IOBinding.bind_output``) is
read as NumPy on every release, bfloat16 included, by :func:`to_numpy`.

The packed types (int4, uint4, int2, uint2, float4e2m1: ml_dtypes arrays
of one element per byte) are packed in an OrtValue, 8 / bits per byte, so
an OrtValue cannot share their memory: :func:`ortvalue` packs a copy (an
input), :func:`subbyte_output` allocates an output, and :func:`to_numpy`
unpacks either (:func:`pack` / :func:`unpack`).  float8 arrays cross as
bfloat16 does, typed OrtValues over their bytes (onnxruntime >= 1.20).

onnxruntime and onnx are imported only by the functions that use them, so
``import extql`` stays light.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .rules.types import QTYPES, SMALLFLOAT, SUBBYTE, SmallFloatType, SubByteType, code_of

__all__ = [
    "WIDENED_SUFFIX",
    "has_typed_ortvalues",
    "ortvalue",
    "subbyte_output",
    "is_packed",
    "pack",
    "unpack",
    "bind_inputs",
    "bind_outputs",
    "to_numpy",
    "narrow_bfloat16",
    "bfloat16_inputs_as_initializers",
    "widen_bfloat16_outputs",
    "without_bfloat16_io",
]

_BF16 = QTYPES["bfloat16"].dtype
_ONNX_BF16 = QTYPES["bfloat16"].onnx
_ONNX_FLOAT = code_of("float32")

#: The name :func:`widen_bfloat16_outputs` gives a widened output: the
#: original name with this suffix.
WIDENED_SUFFIX = "__as_float"


def has_typed_ortvalues() -> bool:
    """Whether the installed onnxruntime can bind a bfloat16 buffer from
    Python (``OrtValue.ortvalue_from_numpy_with_onnx_type``, onnxruntime >=
    1.20).  Without it a model's bfloat16 inputs and outputs need
    :func:`without_bfloat16_io`."""
    import onnxruntime as ort

    return hasattr(ort.OrtValue, "ortvalue_from_numpy_with_onnx_type")


def _is_bfloat16(array: Any) -> bool:
    return getattr(array, "dtype", None) == _BF16


#: The types packed 8 / bits per byte (int4, uint4, int2, uint2, float4e2m1).
_PACKED = [*SUBBYTE.values(), *(t for t in SMALLFLOAT.values() if t.bits < 8)]
_SUBBYTE_BY_DTYPE: dict[np.dtype, SubByteType | SmallFloatType] = {t.dtype: t for t in _PACKED}
_SUBBYTE_BY_NAME: dict[str, SubByteType | SmallFloatType] = {
    f"tensor({t.name})": t for t in _PACKED}
#: The float8 types: one byte each, as typed OrtValues.
_FLOAT8_BY_DTYPE: dict[np.dtype, SmallFloatType] = {
    t.dtype: t for t in SMALLFLOAT.values() if t.bits == 8}
_FLOAT8_BY_NAME: dict[str, SmallFloatType] = {
    f"tensor({t.name})": t for t in _FLOAT8_BY_DTYPE.values()}


def is_packed(dtype: np.dtype) -> bool:
    """Whether an OrtValue holds this dtype packed (int4, uint4, int2,
    uint2, float4e2m1), so that it cannot share a NumPy array's memory."""
    return np.dtype(dtype) in _SUBBYTE_BY_DTYPE


def pack(array: np.ndarray) -> np.ndarray:
    """The ONNX bytes of a packed type's array (ml_dtypes int4 / uint4 / int2
    / uint2 / float4_e2m1fn): 8 / bits elements per byte, element k of a byte in its bits
    [k * bits, (k + 1) * bits), the last byte's unused bits 0."""
    t = _SUBBYTE_BY_DTYPE[np.dtype(array.dtype)]
    per, mask = 8 // t.bits, (1 << t.bits) - 1
    # ml_dtypes keeps each value in the low bits of its byte.
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8) & mask
    flat = np.concatenate([flat, np.zeros(-flat.size % per, np.uint8)])
    groups = flat.reshape(-1, per)
    out = np.zeros(groups.shape[0], np.uint8)
    for k in range(per):
        out |= groups[:, k] << (k * t.bits)
    return out


def unpack(packed: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The sub-byte array of ``shape`` and ``dtype`` whose ONNX bytes are
    ``packed`` (the inverse of :func:`pack`)."""
    t = _SUBBYTE_BY_DTYPE[np.dtype(dtype)]
    per, mask = 8 // t.bits, (1 << t.bits) - 1
    n = int(np.prod(shape, dtype=np.int64))
    parts = [(packed >> (k * t.bits)) & mask for k in range(per)]
    flat = np.stack(parts, axis=1).reshape(-1)[:n].astype(np.uint8)
    return flat.view(t.dtype).reshape(shape)


def _packed_ortvalue(shape: tuple[int, ...], t: SubByteType | SmallFloatType) -> Any:
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), t.onnx)


def subbyte_output(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """An OrtValue onnxruntime can write a sub-byte output of ``shape`` into
    (bind it with ``bind_ortvalue_output``; read it with :func:`to_numpy`)."""
    return _packed_ortvalue(shape, _SUBBYTE_BY_DTYPE[np.dtype(dtype)])


def ortvalue(array: np.ndarray) -> Any:
    """An OrtValue over ``array``'s own memory (so an output bound with it is
    written in place); bfloat16 is typed ``BFLOAT16``.

    The array must be C-contiguous and must outlive every run that uses the
    OrtValue (older onnxruntime releases keep no reference to it).  Raises
    ``ValueError`` for a non-contiguous array and ``RuntimeError`` for
    bfloat16 on an onnxruntime without typed OrtValues.  A sub-byte array
    is packed into a new OrtValue (a copy: an input only).
    """
    import onnxruntime as ort

    if not array.flags.c_contiguous:
        raise ValueError("extql.ort_io: an OrtValue needs a C-contiguous array")
    sub = _SUBBYTE_BY_DTYPE.get(array.dtype)
    if sub is not None:
        ov = _packed_ortvalue(array.shape, sub)
        data = pack(array)
        if data.size:
            ctypes.memmove(ov.data_ptr(), data.ctypes.data, data.size)
        return ov
    f8 = _FLOAT8_BY_DTYPE.get(array.dtype)
    if f8 is not None:
        if not has_typed_ortvalues():
            raise RuntimeError(
                f"onnxruntime {ort.__version__} cannot bind a {f8.name} buffer from Python "
                "(no OrtValue.ortvalue_from_numpy_with_onnx_type, onnxruntime >= 1.20)")
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint8), f8.onnx)
    if _is_bfloat16(array):
        if not has_typed_ortvalues():
            raise RuntimeError(
                f"onnxruntime {ort.__version__} cannot bind a bfloat16 buffer from Python "
                "(no OrtValue.ortvalue_from_numpy_with_onnx_type, onnxruntime >= 1.20)")
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), _ONNX_BF16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def bind_inputs(binding: Any, feeds: Mapping[str, Any]) -> list[Any]:
    """Bind each feed (a NumPy array or anything ``np.asarray`` takes; a
    non-contiguous array is copied) as an input of an ``IOBinding``.

    Returns the arrays and OrtValues that must stay alive until the run is
    over."""
    alive: list[Any] = []
    for name, value in feeds.items():
        array = np.asarray(value, order="C")  # (np.ascontiguousarray makes 0-d 1-d)
        ov = ortvalue(array)
        alive += [array, ov]
        binding.bind_ortvalue_input(name, ov)
    return alive


def bind_outputs(binding: Any, outputs: Mapping[str, np.ndarray]) -> list[Any]:
    """Bind preallocated C-contiguous arrays as outputs of an ``IOBinding``:
    a run writes them in place.  Returns the OrtValues that must stay alive
    until the run is over.  (A sub-byte output cannot be written in place:
    bind :func:`subbyte_output`.)"""
    alive: list[Any] = []
    for name, array in outputs.items():
        if array.dtype in _SUBBYTE_BY_DTYPE:
            raise ValueError(f"extql.ort_io: output {name!r} is {array.dtype}, which an "
                             "OrtValue holds packed: bind subbyte_output(...) instead")
        ov = ortvalue(array)
        alive += [array, ov]
        binding.bind_ortvalue_output(name, ov)
    return alive


def to_numpy(value: Any) -> np.ndarray:
    """An OrtValue on the CPU (an output onnxruntime allocated) as a NumPy
    array; bfloat16 is copied out of onnxruntime's buffer as
    ``ml_dtypes.bfloat16``, which ``OrtValue.numpy()`` cannot convert, and
    the packed sub-byte types are unpacked into ml_dtypes' types."""
    sub = _SUBBYTE_BY_NAME.get(value.data_type())
    if sub is not None:
        shape = tuple(value.shape())
        n = int(np.prod(shape, dtype=np.int64))
        packed = np.empty(-(-n * sub.bits // 8), np.uint8)
        if packed.size:
            ctypes.memmove(packed.ctypes.data, value.data_ptr(), packed.size)
        return unpack(packed, sub.dtype, shape)
    f8 = _FLOAT8_BY_NAME.get(value.data_type())
    if f8 is not None:
        shape = tuple(value.shape())
        buf = np.empty(int(np.prod(shape, dtype=np.int64)), np.uint8)
        if buf.size:
            ctypes.memmove(buf.ctypes.data, value.data_ptr(), buf.size)
        return buf.view(f8.dtype).reshape(shape)
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n, np.uint16)
    if n:
        ctypes.memmove(buf.ctypes.data, value.data_ptr(), n * 2)
    return buf.view(_BF16).reshape(shape)


def narrow_bfloat16(wide: np.ndarray) -> np.ndarray:
    """The bfloat16 values that an exact bfloat16 -> float32 Cast widened:
    the high 16 bits of each float32, NaN payloads included."""
    wide = np.asarray(wide, dtype=np.float32)
    return (wide.view(np.uint32) >> 16).astype(np.uint16).view(_BF16)


def _load(model: Any) -> Any:
    """A copy of a ModelProto, or the model a path names."""
    import onnx

    if isinstance(model, str):
        return onnx.load(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _initializer(name: str, array: np.ndarray) -> Any:
    from onnx import helper

    return helper.make_tensor(name, _ONNX_BF16, array.shape, array.view(np.uint16).tobytes(),
                              raw=True)


def bfloat16_inputs_as_initializers(
    model: Any, feeds: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """For an onnxruntime without typed OrtValues: every graph input fed a
    bfloat16 array becomes an initializer holding that array, and leaves the
    feeds.  ``model`` is a ModelProto (not modified) or a path; both come
    back unchanged (the same objects) when no feed is bfloat16."""
    if not any(_is_bfloat16(np.asarray(v)) for v in feeds.values()):
        return model, dict(feeds)
    model = _load(model)
    feeds = dict(feeds)
    for vi in list(model.graph.input):
        value = feeds.get(vi.name)
        if value is not None and _is_bfloat16(np.asarray(value)):
            model.graph.input.remove(vi)
            model.graph.initializer.append(_initializer(vi.name, np.asarray(value, order="C")))
            del feeds[vi.name]
    return model, feeds


def widen_bfloat16_outputs(
    model: Any, names: Iterable[str] | None = None
) -> tuple[Any, dict[str, str]]:
    """For an onnxruntime without typed OrtValues: each bfloat16 graph output
    (of ``names``, or all) is replaced by its exact Cast to float32, named
    with :data:`WIDENED_SUFFIX`; :func:`narrow_bfloat16` takes the values
    back.  ``model`` is a ModelProto (not modified) or a path.  Returns the
    new model and ``{widened name: original name}``."""
    from onnx import helper

    model = _load(model)
    wanted = None if names is None else set(names)
    widened = {}
    for out in model.graph.output:
        if out.type.tensor_type.elem_type != _ONNX_BF16:
            continue
        if wanted is not None and out.name not in wanted:
            continue
        wide = out.name + WIDENED_SUFFIX
        model.graph.node.append(helper.make_node("Cast", [out.name], [wide], to=_ONNX_FLOAT))
        widened[wide] = out.name
        out.name = wide
        out.type.tensor_type.elem_type = _ONNX_FLOAT
    return model, widened


def without_bfloat16_io(
    model: Any, feeds: Mapping[str, Any]
) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """Both rewrites: :func:`bfloat16_inputs_as_initializers` then
    :func:`widen_bfloat16_outputs`.  Returns the new model (a ModelProto),
    the remaining feeds and ``{widened name: original name}``."""
    model, feeds = bfloat16_inputs_as_initializers(model, feeds)
    model, widened = widen_bfloat16_outputs(model)
    return model, feeds, widened
