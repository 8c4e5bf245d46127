"""extql's tools for ONNX models with quantization nodes, one module per concern.

* :mod:`~extql.tools.graph` -- what they all share: finding the Extended
  (and com.microsoft) Q/DQ nodes, the subgraph walk, static types, names;
* :mod:`~extql.tools.check` -- the static checks of one node (``extql check``);
* :mod:`~extql.tools.lint` -- whole-model integrity (type codes, dangling inputs);
* :mod:`~extql.tools.attach` -- :func:`extql.attach_fallbacks`;
* :mod:`~extql.tools.inline` -- :func:`extql.inline_fallbacks`;
* :mod:`~extql.tools.lower` -- :func:`extql.lower_to_standard`;
* :mod:`~extql.tools.fold` -- :func:`extql.fold_constants`;
* :mod:`~extql.tools.optimize` -- :func:`extql.optimize`;
* :mod:`~extql.tools.microsoft` -- onnxruntime's com.microsoft Q/DQ and
  operators nobody implements;
* :mod:`~extql.tools.compare` -- node-by-node comparison of the native and
  the fallback path (``extql run --compare-fallback``);
* :mod:`~extql.tools.analyze` -- :func:`extql.analyze` (``extql analyze``),
  with its quantization points (:mod:`~extql.tools.analyze_points`),
  figures (:mod:`~extql.tools.analyze_metrics`), what-if variants
  (:mod:`~extql.tools.analyze_whatif`) and report
  (:mod:`~extql.tools.analyze_report`, :mod:`~extql.tools.analyze_svg`).

They need onnx; ``import extql`` does not load them.  The names below are
also available here, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule that defines it.
_LAZY: dict[str, str] = {
    "ExtNode": "graph",
    "TypeInfo": "graph",
    "extended_nodes": "graph",
    "infer_types": "graph",
    "model_opset": "graph",
    "check_node": "check",
    "attach_fallbacks": "attach",
    "inline_fallbacks": "inline",
    "lower_to_standard": "lower",
    "fold_constants": "fold",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'extql.tools' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
