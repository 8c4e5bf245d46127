"""The ``com.amd.quark`` operators as an onnxscript opset: ``extql.quark``.

:data:`quark` (``from extql import quark``) is the onnxscript opset of the
domain ``com.amd.quark`` (version 1), :data:`vai` that of the legacy names
(``com.vai.quantize``)::

    import onnxscript
    from onnxscript import FLOAT, INT16
    import extql
    from extql import quark

    @onnxscript.script()
    def qdq(x: FLOAT["N", 8], s: FLOAT, zp: INT16) -> FLOAT["N", 8]:
        q = quark.ExtendedQuantizeLinear(x, s, zp)
        return quark.ExtendedDequantizeLinear(q, s, zp)

    model = extql.to_model_proto(qdq)  # ai.onnx 21 / IR 10, com.amd.quark 1
    y = qdq(x, s, zp)                   # eagerly, on extql's kernels

* Scripted, their calls are nodes of the operator, type-checked by onnxscript
  against the operators' ONNX schemas, which importing this module registers
  with onnx (:mod:`extql.onnx.schemas`).
* Called eagerly (on NumPy arrays, in a script function or alone), their ops
  run on :func:`extql.quantize_linear` / :func:`extql.dequantize_linear`
  themselves (:class:`QuarkOp`), whatever onnxscript's default evaluator is.
* :func:`to_model_proto` converts a script function into a model every
  supported onnxruntime loads, type-checked (:mod:`extql.onnx.script_export`).

This is onnxscript's own way for an opset to provide its ops: an ``Opset``
subclass whose ops are ``Op`` subclasses.  Importing this module changes
nothing of onnxscript (its default evaluator, its classes) for anyone.
"""

from __future__ import annotations

from typing import Any

from onnxscript.values import Op, Opset

from .onnx.eager import run_op
from .onnx.schemas import QUANTIZE_TYPES, register_schemas
from .onnx.script_export import to_model_proto
from .rules.types import DOMAIN, EXTENDED_OPS, LEGACY_DOMAIN

__all__ = ["quark", "vai", "QuarkOpset", "QuarkOp", "register_schemas", "to_model_proto",
           "QUANTIZE_TYPES"]


class QuarkOp(Op):
    """An Extended / Vitis operator of :class:`QuarkOpset`: scripted like any
    op, and run on extql's kernels when called eagerly."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eager evaluation: an onnxscript ``Tensor`` of the NumPy API's result."""
        return run_op(self.name, EXTENDED_OPS[(self.domain, self.name)], args, kwargs)


class QuarkOpset(Opset):
    """An onnxscript opset of extql's operators (``com.amd.quark`` or
    ``com.vai.quantize``): its ops are :class:`QuarkOp`."""

    def __getitem__(self, opname: str) -> Op | None:
        op = super().__getitem__(opname)
        if op is not None and (self.domain, opname) in EXTENDED_OPS:
            return QuarkOp(self, opname, op.op_schema)
        return op

    def __getattr__(self, attr: str) -> Op:
        op = super().__getattr__(attr)
        if (self.domain, attr) in EXTENDED_OPS:
            return QuarkOp(self, attr, op.op_schema)
        return op


register_schemas()

#: onnxscript opset for ``com.amd.quark`` version 1: ``quark.ExtendedQuantizeLinear``,
#: ``quark.ExtendedDequantizeLinear``.
quark = QuarkOpset(DOMAIN, 1)
#: onnxscript opset for the legacy ``com.vai.quantize`` names.
vai = QuarkOpset(LEGACY_DOMAIN, 1)
