"""The native onnxruntime ops: the custom-op library and its registration.

extql's onnxruntime library ``libextql_ort`` (beside the extension; no Python
in it) exports ``RegisterCustomOps``, which registers
``ExtendedQuantizeLinear`` / ``ExtendedDequantizeLinear``, Quark's block
formats ``BFPQuantizeDequantize`` / ``MXQuantizeDequantize`` and its DPU
emulations ``ExtendedInstanceNormalization`` / ``ExtendedLSTM`` (domain
``com.amd.quark``, version 1), and the legacy names Quark's own library uses,
``VitisQuantizeLinear`` / ``VitisDequantizeLinear`` / ``BFPFixNeuron`` /
``MXFixNeuron`` / ``VitisInstanceNormalization`` / ``VitisLSTM`` (domain
``com.vai.quantize``), on the CPU execution provider::

    import onnxruntime as ort, extql
    so = extql.register(ort.SessionOptions())
    sess = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])

The ops compute with the same kernels as the NumPy API, so both give the same
bits, and reject what the NumPy API rejects, with the same messages, as an
onnxruntime error that names the operator and node.  Work on large tensors is
spread over the session's own intra-op thread pool (``intra_op_num_threads``).
The block formats run in place (the output in the input's buffer) where
onnxruntime allows it: from :data:`INFERENCE_ONNXRUNTIME`, for an input that
is an activation with no other use.

One difference from Quark's own library: a node without an ``axis``
attribute quantizes per axis along axis 1, as the operator documents say;
Quark's library silently uses axis 0 there.

Hosts without Python (C, C++, C#, Java, Rust, Triton, onnxruntime-genai)
register the same file, ``get_library_path(standalone=True)``: it has no
Python dependency.

extql works with whichever onnxruntime build provides the ``onnxruntime``
module (the CPU package, onnxruntime-gpu, -openvino, -directml, ...): the
operators run on the CPU execution provider of any of them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "get_library_path",
    "standalone_name",
    "onnxruntime_distributions",
    "ONNXRUNTIME_BUILDS",
    "ONNXRUNTIME_HINT",
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


#: The file name of the onnxruntime library, by ``sys.platform`` prefix (else
#: the Linux name).  It sits beside the package's modules (setup.py).
STANDALONE_NAMES = {"win": "extql_ort.dll", "darwin": "libextql_ort.dylib"}
STANDALONE_NAME_LINUX = "libextql_ort.so"


def standalone_name(platform: str | None = None) -> str:
    """The library's file name on ``platform`` (default: this one's
    ``sys.platform``): ``libextql_ort.so``, ``libextql_ort.dylib`` or
    ``extql_ort.dll``."""
    platform = sys.platform if platform is None else platform
    for prefix, name in STANDALONE_NAMES.items():
        if platform.startswith(prefix):
            return name
    return STANDALONE_NAME_LINUX


def _package_dir() -> Path:
    """The directory of the installed ``extql`` package (where the library
    is), whichever module of it this is."""
    top = sys.modules[__name__.partition(".")[0]]
    return Path(str(top.__file__)).resolve().parent


def get_library_path(*, standalone: bool = False) -> str:
    """The path of the shared object to pass to
    ``SessionOptions.register_custom_ops_library`` (or to any onnxruntime
    host's registration of a custom-op library).

    It is ``libextql_ort`` (:func:`standalone_name`) beside the package's
    modules: the kernels and the custom-op shim, with no Python in it, so the
    same file serves a Python process and, with ``standalone=True``, hosts in
    other languages (C, C++, C#, Java, Rust, Triton, onnxruntime-genai).
    Without ``standalone`` the extension ``extql._kernels`` is imported first:
    it links against the library and keeps it loaded for the life of the
    process, so onnxruntime's own load/unload of the library never unmaps
    code a session still uses.  Raises ``FileNotFoundError`` naming the file
    when it is missing.
    """
    if not standalone:
        from . import _kernels  # noqa: F401  (loads the library, keeps it loaded)
    path = _package_dir() / standalone_name()
    if not path.is_file():
        raise FileNotFoundError(f"extql: the onnxruntime library {path} is missing")
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


#: The onnxruntime builds on PyPI (and Ryzen AI's) that provide the
#: ``onnxruntime`` module, for the hints that say how to get one.  Which one
#: is installed is found from the installed distributions' files
#: (:func:`onnxruntime_distributions`), not from this list.
ONNXRUNTIME_BUILDS = (
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "onnxruntime-qnn",
    "onnxruntime-rocm",
    "onnxruntime-vitisai (Ryzen AI)",
)

#: How to get an onnxruntime, for every message that says it is missing.
ONNXRUNTIME_HINT = (
    'install an onnxruntime build: pip install "extql[onnxruntime]" for the CPU package '
    f"(onnxruntime), or the build for your hardware: {', '.join(ONNXRUNTIME_BUILDS)}"
)


def onnxruntime_distributions() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution that provides the
    ``onnxruntime`` module (onnxruntime, onnxruntime-gpu, -openvino, ...),
    found from the distributions' files without importing onnxruntime.  More
    than one means they overwrite each other's files."""
    names = importlib.metadata.packages_distributions().get("onnxruntime", [])
    found: dict[str, str] = {}
    for name in names:
        try:
            found.setdefault(name, importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:  # metadata without files
            continue
    return sorted(found.items())


def _installed_onnxruntime() -> str:
    """The onnxruntime row of ``extql info``: version and the distribution
    that provides the module, without importing it."""
    dists = onnxruntime_distributions()
    if not dists:
        try:
            module = importlib.util.find_spec("onnxruntime")
        except (ImportError, ValueError):  # ValueError: sys.modules["onnxruntime"] is None
            module = None
        if module is not None:
            return "installed, from no distribution pip knows (a source build?)"
        return f"not installed ({ONNXRUNTIME_HINT})"
    text = "; ".join(f"{version} ({name})" for name, version in dists)
    if len(dists) > 1:
        text += (": several distributions provide the onnxruntime module and overwrite each "
                 "other's files; uninstall all of them and install the one you need")
    return text


def info_rows() -> list[tuple[str, str]]:
    """Rows for ``extql info``: library paths and onnxruntime versions."""
    try:
        path = get_library_path()
    except (ImportError, RuntimeError) as exc:
        path = f"unavailable ({exc})"
    try:
        standalone = get_library_path(standalone=True)
    except FileNotFoundError:
        standalone = f"not in this build ({standalone_name()} is not beside the package)"
    return [
        ("ort library", path),
        ("standalone library", standalone),
        ("onnxruntime", _installed_onnxruntime()),
        ("ort supported", f">= {MIN_ONNXRUNTIME}"),
        ("ort tested", ", ".join(TESTED_ONNXRUNTIME)),
    ]
