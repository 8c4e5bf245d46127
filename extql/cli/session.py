"""onnxruntime sessions of the ``extql`` commands (``run``, ``check``).

A model runs on the CPU provider, with or without the extql library, at the
highest optimisation level onnxruntime loads it at (:func:`stepped_options`).
Inputs and outputs go through an I/O binding so that bfloat16 travels as
``ml_dtypes.bfloat16``, which onnxruntime's Python API cannot hand over
itself.  onnxruntime's errors become one-line :class:`CliError` messages.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import CliError
from .progress import log

__all__ = ["run_model", "library_options", "stepped_options"]


def _session(model_or_path, options):
    """An InferenceSession on the CPU provider; a CliError when onnxruntime
    refuses the model."""
    import onnxruntime as ort

    if not isinstance(model_or_path, str):
        model_or_path = model_or_path.SerializeToString()
    if options is None:
        options = ort.SessionOptions()
    # Errors come back as exceptions and are reported once, in one line; the
    # log would repeat them (and the retry banner onnxruntime prints on stdout
    # when a session fails to load is no use with the CPU provider only).
    options.log_severity_level = 3
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return ort.InferenceSession(model_or_path, sess_options=options,
                                        providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
        message = " ".join(str(exc).split())
        raise CliError(f"onnxruntime cannot load the model: {message}") from None


def run_model(model_or_path, feeds: dict[str, np.ndarray], options=None) -> dict[str, np.ndarray]:
    """Run on the CPU provider and return every output as NumPy (bfloat16 as
    ml_dtypes.bfloat16, which onnxruntime's Python API cannot hand over itself)."""
    import onnxruntime as ort
    from onnx import TensorProto

    typed = hasattr(ort.OrtValue, "ortvalue_from_numpy_with_onnx_type")
    if not typed and any(np.asarray(v).dtype.name == "bfloat16" for v in feeds.values()):
        model_or_path, feeds = _bfloat16_inputs_as_initializers(model_or_path, feeds)
    sess = _session(model_or_path, options)
    binding = sess.io_binding()
    keep = []
    for name, value in feeds.items():
        value = np.asarray(value, order="C")
        if value.dtype.name == "bfloat16":
            ov = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                value.view(np.uint16), TensorProto.BFLOAT16)
        else:
            ov = ort.OrtValue.ortvalue_from_numpy(value)
        keep.append(ov)
        binding.bind_ortvalue_input(name, ov)
    names = [o.name for o in sess.get_outputs()]
    for name in names:
        binding.bind_output(name, "cpu")
    try:
        sess.run_with_iobinding(binding)
    except Exception as exc:  # noqa: BLE001
        message = " ".join(str(exc).split())
        raise CliError(f"onnxruntime failed to run the model: {message}") from None
    results = {}
    for name, ov in zip(names, binding.get_outputs(), strict=True):
        results[name] = _ortvalue_to_numpy(ov)
    return results


def _bfloat16_inputs_as_initializers(model_or_path, feeds):
    """onnxruntime < 1.19 cannot take a bfloat16 input from Python: make such
    inputs initializers holding the given values (same result)."""
    import onnx
    from onnx import TensorProto, helper

    if isinstance(model_or_path, str):
        model = onnx.load(model_or_path)
    else:
        model = onnx.ModelProto()
        model.CopyFrom(model_or_path)
    feeds = dict(feeds)
    for vi in list(model.graph.input):
        value = feeds.get(vi.name)
        if value is not None and np.asarray(value).dtype.name == "bfloat16":
            value = np.asarray(value)
            model.graph.input.remove(vi)
            model.graph.initializer.append(helper.make_tensor(
                vi.name, TensorProto.BFLOAT16, value.shape, value.view(np.uint16).tobytes(),
                raw=True))
            del feeds[vi.name]
    return model, feeds


def _ortvalue_to_numpy(ov) -> np.ndarray:
    """An output as NumPy; bfloat16 copied out of onnxruntime's buffer, which
    ``OrtValue.numpy()`` cannot convert."""
    if ov.data_type() != "tensor(bfloat16)":
        return ov.numpy()
    from ..types import QTYPES

    shape = tuple(ov.shape())
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n, np.uint16)
    if n:
        ctypes.memmove(buf.ctypes.data, ov.data_ptr(), n * 2)
    return buf.view(QTYPES["bfloat16"].dtype).reshape(shape)


def library_options() -> Any:
    """SessionOptions with the extql library registered."""
    import onnxruntime as ort

    from .. import ort as extql_ort

    return extql_ort.register(ort.SessionOptions())


def stepped_options(target, make_options: Callable[[], Any] | None,
                    args: argparse.Namespace) -> Any:
    """SessionOptions (from ``make_options``, or plain ones) at the highest
    optimisation level at which onnxruntime loads ``target`` (a ModelProto or
    a path), with a warning on stderr when that is below the default."""
    import onnxruntime as ort

    from ..ort_levels import SessionError, open_session

    make = make_options or ort.SessionOptions
    options = make()
    model = target.SerializeToString() if not isinstance(target, str) else target
    warned = args.__dict__.setdefault("_warned", [])

    def warn(line: str) -> None:
        if not warned:  # once: the model and its variants (--compare-fallback) say the same
            warned.append(line)
            print(f"warning: {line}", file=sys.stderr)

    try:
        _, level = open_session(model, lambda: options, warn=warn)
    except SessionError as exc:
        raise CliError(f"onnxruntime cannot load the model: {exc}") from None
    log(args, f"optimisation level: {level}")
    return options
