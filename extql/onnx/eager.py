"""Eager onnxscript evaluation of the Extended operators on extql's kernels.

onnxscript runs a script function called on NumPy arrays ("eager mode") op
by op.  extql's operators run on :func:`extql.quantize_linear` /
:func:`extql.dequantize_linear` there (the same bits as the NumPy API):

* the ops of extql's opsets (``extql.quark``, ``extql.opset.vai``) run them
  themselves when called (:func:`run_op`), whatever onnxscript's default
  evaluator is: nothing of onnxscript is changed for that;
* :class:`Evaluator` is an onnxscript evaluator that does the same for any
  ``com.amd.quark`` / ``com.vai.quantize`` op (an ``Opset`` of those domains
  made elsewhere, a graph attribute's body) and hands every other op to the
  evaluator it wraps -- except that, wrapping onnxscript's onnxruntime
  evaluator, a standard op on bfloat16 values runs in onnx.reference, since
  onnxruntime's Python API takes no bfloat16 arrays.  It is used for a call,
  never installed: ``with onnxscript.evaluator.default_as(Evaluator()):``
  (the fallback functions of :mod:`extql.fallbacks` do so for their own
  eager calls).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxscript.evaluator
from onnxscript import tensor

from .. import rules
from ..api.linear import dequantize_linear, quantize_linear
from ..rules.types import EXTENDED_OPS, QTYPES

__all__ = ["Evaluator", "run_op", "OPS"]

#: (domain, op name) -> True for quantize, False for dequantize.
OPS: dict[tuple[str, str], bool] = EXTENDED_OPS


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


def run_op(name: str, quantize: bool, args: Sequence[Any],
           kwargs: Mapping[str, Any]) -> tensor.Tensor:
    """One Extended / Vitis op called eagerly: its inputs and attributes (as
    :mod:`extql.rules` names them) checked and run on the NumPy API."""
    direction = rules.QUANTIZE if quantize else rules.DEQUANTIZE
    input_names = rules.INPUTS[direction]
    if len(args) > len(input_names):
        raise TypeError(
            f"{name}: takes at most {len(input_names)} inputs "
            f"({', '.join(input_names)}), got {len(args)}"
        )
    inputs = dict(zip(input_names, args, strict=False))
    known = rules.attribute_names(direction)
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
    return tensor.Tensor(kernel(x, scale, zero_point, **attributes))


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
    on ``delegate`` (onnxscript's default evaluator when not given).

    It implements onnxscript's ``Evaluator`` protocol (``eval_op`` /
    ``eval_function``).  Functions are handed to the delegate, which calls
    their Python body; the ops in the body come back through onnxscript's
    default evaluator, so this one is made the default for the call
    (``onnxscript.evaluator.default_as(Evaluator())``).
    """

    def __init__(self, delegate: Any = None) -> None:
        if delegate is None:
            delegate = onnxscript.evaluator.default()
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
            return run_op(op.name, quantize, args, kwargs)
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
