"""extql: AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear, fast and exact.

* :func:`quantize_linear` / :func:`dequantize_linear` -- the NumPy API.
* :func:`bfp_quantize_dequantize` / :func:`mx_quantize_dequantize` -- Quark's
  block formats, in NumPy.
* :func:`extended_lstm` -- Quark's DPU emulation of an LSTM, in NumPy.
* :func:`get_library_path` / :func:`register` -- the native onnxruntime ops.

The ONNX tools (fallbacks, the model tools of :mod:`extql.tools`, reference ops)
import onnx only when used.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from . import api, rules  # noqa: F401 - the packages, as attributes of extql
from ._version import __version__
from .api import (
    bfp_quantize_dequantize,
    dequantize_linear,
    extended_instance_normalization,
    extended_lstm,
    get_num_threads,
    mx_quantize_dequantize,
    quantize_linear,
    set_num_threads,
)
from .rules import blocks as _block_rules
from .rules import types
from .rules.types import DOMAIN, LEGACY_DOMAIN

#: Module paths of the releases before the NumPy API and the rules became
#: the packages :mod:`extql.api` and :mod:`extql.rules`: the same module
#: objects under their earlier names (``import extql.types``,
#: ``from extql.block_rules import check_bfp``, ...).  Each is loaded by
#: ``import extql`` anyway.
_EARLIER_PATHS: dict[str, Any] = {
    "types": types,
    "block_rules": _block_rules,
    "numpy_api": api.linear,
    "numpy_out": api.out,
    "block_formats": api.blocks,
}
for _name, _module in _EARLIER_PATHS.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _module)
    globals().setdefault(_name, _module)
del _name, _module

__all__ = [
    "__version__",
    "DOMAIN",
    "LEGACY_DOMAIN",
    "quantize_linear",
    "dequantize_linear",
    "bfp_quantize_dequantize",
    "mx_quantize_dequantize",
    "extended_instance_normalization",
    "extended_lstm",
    "set_num_threads",
    "get_num_threads",
    "have_openmp",
    "get_library_path",
    "register",
]


def have_openmp() -> bool:
    """True when the kernels were compiled with OpenMP (else they run serially)."""
    from . import _kernels

    return _kernels.have_openmp()


# Submodules and names that need onnx / onnxruntime, loaded on first use so
# that ``import extql`` stays light.  name -> (module, attribute or None).
_LAZY: dict[str, tuple[str, str | None]] = {
    "attach_fallbacks": (".tools.attach", "attach_fallbacks"),
    "inline_fallbacks": (".tools.inline", "inline_fallbacks"),
    "lower_to_standard": (".tools.lower", "lower_to_standard"),
    "fold_constants": (".tools.fold", "fold_constants"),
    "optimize": (".tools.optimize", "optimize"),
    "analyze": (".tools.analyze", "analyze"),
    "reference": (".reference", None),
    "fallbacks": (".fallbacks", None),
    "opset": (".opset", None),
    "quark": (".opset", "quark"),
    "to_model_proto": (".opset", "to_model_proto"),
    "get_library_path": (".ort", "get_library_path"),
    "register": (".ort", "register"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module, __name__)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'extql' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
