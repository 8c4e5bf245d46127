"""The native onnxruntime ops: the custom-op library and its registration.

extql's onnxruntime library ``libextql_ort`` (beside the extension; no Python
in it) exports ``RegisterCustomOps``, which registers
``ExtendedQuantizeLinear`` / ``ExtendedDequantizeLinear`` (domain
``com.amd.quark``, version 1) and the legacy names Quark's own library uses,
``VitisQuantizeLinear`` / ``VitisDequantizeLinear`` (domain
``com.vai.quantize``), on the CPU execution provider::

    import onnxruntime as ort, extql
    so = extql.register(ort.SessionOptions())
    sess = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])

The ops compute with the same kernels as the NumPy API, so both give the same
bits, and reject what the NumPy API rejects, with the same messages, as an
onnxruntime error that names the operator and node.  Work on large tensors is
spread over the session's own intra-op thread pool (``intra_op_num_threads``).

One difference from Quark's own library: a node without an ``axis``
attribute quantizes per axis along axis 1, as the operator documents say;
Quark's library silently uses axis 0 there.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "get_library_path",
    "register",
    "info_rows",
    "MIN_ONNXRUNTIME",
    "TESTED_ONNXRUNTIME",
    "INFERENCE_ONNXRUNTIME",
]

#: The oldest onnxruntime the library supports (C API version 18); older
#: runtimes refuse the registration with a message that says so.
MIN_ONNXRUNTIME = "1.18"

#: The onnxruntime releases the shim was tested against: the oldest supported
#: and the newest at the time of release.
TESTED_ONNXRUNTIME = ("1.18.1", "1.32.0")

#: The first onnxruntime on which the library takes part in onnxruntime's
#: graph inference: a node's output gets the type its ``output_dtype`` says
#: (a dequantize to another type than the scale's, a quantize without zero
#: point to another type than uint8) and x's shape, where x's rank is known
#: when the session is made.  Older runtimes type a custom operator's output
#: from its inputs only (and crash on the inference callback of a node with
#: an empty zero-point name), so there ``output_dtype`` can only repeat the
#: type the inputs give.
INFERENCE_ONNXRUNTIME = "1.24"

_SessionOptions = TypeVar("_SessionOptions")


def _library_filename() -> str:
    """The onnxruntime library's file name on this platform (setup.py)."""
    if sys.platform == "win32":
        return "extql_ort.dll"
    if sys.platform == "darwin":
        return "libextql_ort.dylib"
    return "libextql_ort.so"


def get_library_path(standalone: bool = False) -> str:
    """The path of the shared object to pass to
    ``SessionOptions.register_custom_ops_library`` (or to any onnxruntime
    host's registration of a custom-op library).

    It is ``libextql_ort`` beside the extension: the kernels and the
    custom-op shim, with no Python in it, so the same file serves a Python
    process and, with ``standalone=True``, hosts without Python (C, C++, C#,
    Java, Rust, Triton, onnxruntime-genai).  From Python the extension
    ``extql._kernels`` is imported first: it links against the library and
    keeps it loaded for the life of the process, so onnxruntime's own
    load/unload of the library never unmaps code a session still uses.
    """
    from . import _kernels

    here = getattr(_kernels, "__file__", None)
    if not here:
        raise RuntimeError("extql: the compiled extension extql._kernels has no file path")
    path = Path(here).with_name(_library_filename())
    if not path.is_file():
        raise RuntimeError(f"extql: the onnxruntime library {path} is missing")
    return str(path)


def register(session_options: _SessionOptions) -> _SessionOptions:
    """Register extql's custom ops with an ``onnxruntime.SessionOptions`` and
    return the same object (so it can be used inline).

    Raises onnxruntime's error when the installed onnxruntime is older than
    :data:`MIN_ONNXRUNTIME` (the message names the version needed), and
    ``TypeError`` when the argument cannot register a custom-op library.
    """
    method: Any = getattr(session_options, "register_custom_ops_library", None)
    if not callable(method):
        raise TypeError(
            "extql.register: expected an onnxruntime.SessionOptions, got "
            f"{type(session_options).__name__}"
        )
    method(get_library_path())
    return session_options


def _installed_onnxruntime() -> str | None:
    """The installed onnxruntime version, without importing it."""
    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino"):
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def info_rows() -> list[tuple[str, str]]:
    """Rows for ``extql info``: library path and onnxruntime versions."""
    try:
        path = get_library_path()
    except (ImportError, RuntimeError) as exc:
        path = f"unavailable ({exc})"
    installed = _installed_onnxruntime()
    return [
        ("ort library", path),
        ("onnxruntime", installed if installed else "not installed"),
        ("ort supported", f">= {MIN_ONNXRUNTIME}"),
        ("ort tested", ", ".join(TESTED_ONNXRUNTIME)),
    ]
