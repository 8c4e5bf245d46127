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

onnxruntime and onnx are imported only by the functions that use them, so
``import extql`` stays light.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .types import QTYPES

__all__ = [
    "WIDENED_SUFFIX",
    "has_typed_ortvalues",
    "ortvalue",
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
_ONNX_FLOAT = 1  # onnx.TensorProto.FLOAT

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


def ortvalue(array: np.ndarray) -> Any:
    """An OrtValue over ``array``'s own memory (so an output bound with it is
    written in place); bfloat16 is typed ``BFLOAT16``.

    The array must be C-contiguous and must outlive every run that uses the
    OrtValue (older onnxruntime releases keep no reference to it).  Raises
    ``ValueError`` for a non-contiguous array and ``RuntimeError`` for
    bfloat16 on an onnxruntime without typed OrtValues.
    """
    import onnxruntime as ort

    if not array.flags.c_contiguous:
        raise ValueError("extql.ort_io: an OrtValue needs a C-contiguous array")
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
    until the run is over."""
    alive: list[Any] = []
    for name, array in outputs.items():
        ov = ortvalue(array)
        alive += [array, ov]
        binding.bind_ortvalue_output(name, ov)
    return alive


def to_numpy(value: Any) -> np.ndarray:
    """An OrtValue on the CPU (an output onnxruntime allocated) as a NumPy
    array; bfloat16 is copied out of onnxruntime's buffer as
    ``ml_dtypes.bfloat16``, which ``OrtValue.numpy()`` cannot convert."""
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
