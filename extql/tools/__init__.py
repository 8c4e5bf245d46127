"""extql's tools for ONNX models with quantization nodes, one module per concern.

* :mod:`~extql.tools.lint` -- whole-model integrity (type codes, dangling inputs);
* :mod:`~extql.tools.attach` -- :func:`extql.attach_fallbacks`;
* :mod:`~extql.tools.inline` -- :func:`extql.inline_fallbacks`;
* :mod:`~extql.tools.lower` -- :func:`extql.lower_to_standard`;
* :mod:`~extql.tools.fold` -- :func:`extql.fold_constants`;
* :mod:`~extql.tools.optimize` -- :func:`extql.optimize`;
* :mod:`~extql.tools.compare` -- node-by-node comparison of the native and
  the fallback path (``extql run --compare-fallback``);
* :mod:`~extql.tools.analyze` -- :func:`extql.analyze` (``extql analyze``),
  with its quantization points (:mod:`~extql.tools.analyze_points`),
  figures (:mod:`~extql.tools.analyze_metrics`), what-if variants
  (:mod:`~extql.tools.analyze_whatif`) and report
  (:mod:`~extql.tools.analyze_report`, :mod:`~extql.tools.analyze_svg`).

What they share -- finding the Extended (and com.microsoft) Q/DQ nodes,
static types, the static checks of a node, onnxruntime's com.microsoft Q/DQ
-- is the onnx layer's (:mod:`extql.onnx`).  They need onnx; ``import extql``
does not load them.  The names below are also available here, loaded on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module that defines it (relative to extql).
_LAZY: dict[str, str] = {
    "ExtNode": ".onnx.graph",
    "TypeInfo": ".onnx.graph",
    "extended_nodes": ".onnx.graph",
    "infer_types": ".onnx.graph",
    "model_opset": ".onnx.graph",
    "check_node": ".onnx.check",
    "attach_fallbacks": ".tools.attach",
    "inline_fallbacks": ".tools.inline",
    "lower_to_standard": ".tools.lower",
    "fold_constants": ".tools.fold",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], "extql"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'extql.tools' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
