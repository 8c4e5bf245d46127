"""onnxruntime sessions of the ``extql`` commands (``run``, ``check``).

A model runs on the CPU provider, with or without the extql library, at the
highest optimisation level onnxruntime loads it at (:func:`stepped_options`).
Inputs and outputs go through an I/O binding (:mod:`extql.ort_io`) so that
bfloat16 travels as ``ml_dtypes.bfloat16``, which onnxruntime's Python API
cannot hand over itself.  onnxruntime's errors become one-line
:class:`CliError` messages.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ort_io
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
    if not ort_io.has_typed_ortvalues():
        model_or_path, feeds = ort_io.bfloat16_inputs_as_initializers(model_or_path, feeds)
    sess = _session(model_or_path, options)
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, feeds)  # kept until the run is over
    names = [o.name for o in sess.get_outputs()]
    for name in names:
        binding.bind_output(name, "cpu")
    try:
        sess.run_with_iobinding(binding)
    except Exception as exc:  # noqa: BLE001
        message = " ".join(str(exc).split())
        raise CliError(f"onnxruntime failed to run the model: {message}") from None
    del alive
    return {name: ort_io.to_numpy(ov)
            for name, ov in zip(names, binding.get_outputs(), strict=True)}


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
