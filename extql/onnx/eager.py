"""Eager onnxscript evaluation of the Extended operators on extql's kernels.

onnxscript runs a script function called on NumPy arrays ("eager mode") op
by op through its default evaluator, which builds a one-node onnxruntime
session per op.  Such a session does not have extql's library, so it cannot
run ``com.amd.quark`` ops.  :class:`Evaluator` wraps another onnxscript
evaluator: the four Extended / legacy Vitis ops run on
:func:`extql.quantize_linear` / :func:`extql.dequantize_linear` (the same
bits as the NumPy API), every other op and function goes to the wrapped
evaluator unchanged -- except that, wrapping onnxscript's onnxruntime
evaluator, a standard op on bfloat16 values runs in onnx.reference, since
onnxruntime's Python API takes no bfloat16 arrays.

Importing :mod:`extql.opset` (``from extql import quark``) calls
:func:`install`, which wraps onnxscript's current default evaluator once.  To
use another evaluator for the other ops, wrap it::

    import onnxscript.evaluator
    from extql.onnx.eager import Evaluator

    onnxscript.evaluator.set_default(
        Evaluator(onnxscript.evaluator.OnnxReferenceRuntimeEvaluator())
    )
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxscript.evaluator
from onnxscript import tensor

from ..numpy_api import dequantize_linear, quantize_linear
from ..types import EXTENDED_OPS, QTYPES

__all__ = ["Evaluator", "install", "OPS"]

#: (domain, op name) -> True for quantize, False for dequantize.
OPS: dict[tuple[str, str], bool] = EXTENDED_OPS

_INPUTS = {True: ("x", "y_scale", "y_zero_point"), False: ("x", "x_scale", "x_zero_point")}


def _array(op: str, name: str, value: Any) -> np.ndarray | None:
    """The NumPy value of one eager input (an onnxscript Tensor, an array, a
    NumPy scalar; a Python float for x / the scale means float32)."""
    if value is None:
        return None
    if isinstance(value, tensor.Tensor):
        return value.value
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if isinstance(value, float) and not name.endswith("zero_point"):
        return np.asarray(value, dtype=np.float32)
    raise TypeError(
        f"{op}: {name} must be a NumPy array (a 0-d array for a scalar, e.g. "
        f"np.array(1, dtype=np.int16)), got {type(value).__name__}"
    )


_BFLOAT16 = QTYPES["bfloat16"].dtype
_ONNX_BFLOAT16 = QTYPES["bfloat16"].onnx


def _has_bfloat16(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether an op call takes a bfloat16 tensor or casts to bfloat16."""
    for value in args:
        if isinstance(value, (list, tuple)):
            if _has_bfloat16(value, {}):
                return True
            continue
        array = value.value if isinstance(value, tensor.Tensor) else value
        if getattr(array, "dtype", None) == _BFLOAT16:
            return True
    return kwargs.get("to") == _ONNX_BFLOAT16


class Evaluator:
    """An onnxscript evaluator: the Extended ops on extql's kernels, the rest
    on ``delegate`` (onnxscript's evaluator when not given).

    It implements onnxscript's ``Evaluator`` protocol (``eval_op`` /
    ``eval_function``).  Functions are handed to the delegate, which calls
    their Python body; the ops in the body come back here through
    onnxscript's default evaluator, so this one must be the default
    (:func:`onnxscript.evaluator.set_default` or ``default_as``).
    """

    def __init__(self, delegate: Any = None) -> None:
        if delegate is None:
            delegate = onnxscript.evaluator.ORTEvaluator()
        if isinstance(delegate, Evaluator):
            delegate = delegate.delegate
        if not (hasattr(delegate, "eval_op") and hasattr(delegate, "eval_function")):
            raise TypeError(
                "extql.onnx.eager.Evaluator: the delegate must be an onnxscript evaluator "
                f"(with eval_op and eval_function), got {type(delegate).__name__}"
            )
        self.delegate = delegate
        self._reference = onnxscript.evaluator.OnnxReferenceRuntimeEvaluator()

    def eval_op(self, op: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Run one op: Extended / Vitis ones here, others on the delegate."""
        quantize = OPS.get((op.domain, op.name))
        if quantize is not None:
            return tensor.Tensor(self._run(op, quantize, args, kwargs))
        if isinstance(self.delegate, onnxscript.evaluator.ORTEvaluator) and _has_bfloat16(
            args, kwargs
        ):
            # onnxruntime's Python API takes no bfloat16 arrays: onnx.reference
            # runs these ops (standard ops on bfloat16, as in the bfloat16
            # fallbacks) instead of failing.
            return self._reference.eval_op(op, args, kwargs)
        return self.delegate.eval_op(op, args, kwargs)

    def eval_function(self, function: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Run a script function: its body calls back into :meth:`eval_op`."""
        return self.delegate.eval_function(function, args, kwargs)

    @staticmethod
    def _run(op: Any, quantize: bool, args: Sequence[Any], kwargs: Mapping[str, Any]):
        name = op.name
        input_names = _INPUTS[quantize]
        if len(args) > len(input_names):
            raise TypeError(
                f"{name}: takes at most {len(input_names)} inputs "
                f"({', '.join(input_names)}), got {len(args)}"
            )
        inputs = dict(zip(input_names, args, strict=False))
        schema = op.op_schema
        known = set(schema.attributes) if schema is not None else {"axis"}
        attributes: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in input_names:
                if key in inputs:
                    raise TypeError(f"{name}: input {key!r} given twice")
                inputs[key] = value
            elif key in known:
                if value is not None:
                    attributes[key] = value.value if isinstance(value, tensor.Tensor) else value
            else:
                raise TypeError(
                    f"{name}: unknown attribute {key!r} (the operator has "
                    f"{', '.join(sorted(known))})"
                )
        x, scale, zero_point = (_array(name, k, inputs.get(k)) for k in input_names)
        if x is None or scale is None:
            raise TypeError(f"{name}: x and the scale are required inputs")
        kernel = quantize_linear if quantize else dequantize_linear
        return kernel(x, scale, zero_point, **attributes)


_lock = threading.Lock()


def install() -> Evaluator:
    """Make onnxscript's default evaluator run the Extended ops on extql's
    kernels (wrapping the current default; idempotent).  Returns the default."""
    with _lock:
        current = onnxscript.evaluator.default()
        if isinstance(current, Evaluator):
            return current
        wrapped = Evaluator(current)
        onnxscript.evaluator.set_default(wrapped)
        return wrapped
