"""The fallback decompositions as functions a user's onnxscript code calls.

:data:`extql.fallbacks.QUANTIZE` / :data:`~extql.fallbacks.DEQUANTIZE` hold,
per variant (a quantized type name, or ``"default"`` for no zero point), a
:class:`FallbackFunction`: an onnxscript ``OnnxFunction`` with the operator's
signature ``(x, scale, zero_point, axis=1, block_size=0, ...)`` with its
other attributes (quantize: ``precision``, float8's ``saturate``,
``output_dtype``; dequantize: ``output_dtype``; ``precision`` and dequantize's
``output_dtype`` default to the scale's type, as for the operator) and any of
its types (``"default"`` ignores its third input).  Bound to a name, it is
called like any script function::

    import onnxscript
    from onnxscript import FLOAT, INT16, opset21 as op
    import extql, extql.fallbacks

    q_int16 = extql.fallbacks.QUANTIZE["int16"]

    @onnxscript.script(default_opset=op)
    def f(x: FLOAT["N", 4], s: FLOAT[4], zp: INT16[4]) -> INT16["N", 4]:
        return q_int16(x, s, zp, axis=1)

    model = extql.to_model_proto(f)

* Converted (:func:`extql.to_model_proto`), the call is a node of the domain
  :data:`~extql.onnx.fallback_protos.FALLBACK_DOMAIN` (``ai.extql.fallbacks``),
  operator ``ExtendedQuantizeLinear_int16``, and the model carries its
  definition: the same flat body of standard ops that
  :func:`extql.attach_fallbacks` adds (:func:`extql.fallbacks.function_proto`),
  under a name of its own per variant, so one model can call several
  variants.  Such a model runs in any ONNX runtime, with or without extql's
  library.  onnxscript's own ``f.to_model_proto()`` refuses such a function
  with a ``TypeError`` that says so: it would leave the calls' precision to
  the definition's float32 default.
* Called eagerly on NumPy arrays, the decomposition's ops run one by one in
  onnxscript's evaluator (for the call, :class:`extql.onnx.eager.Evaluator`
  around onnxscript's default: standard ops on bfloat16 run in
  onnx.reference): the fallback's own bits, which are the kernels'.

Precision float64 (quantize's ``precision`` 11, which is also what an int32
scale without ``precision`` means): the same entry (``QUANTIZE["int8"]``)
takes it.  Eagerly it runs the precision-float64 decomposition
(:func:`extql.fallbacks.function_proto` of ``"int8-float64"``); converted,
:func:`extql.onnx.script_export.finish_model` points such calls at that
function (``ExtendedQuantizeLinear_int8-float64``, added to the model),
from a constant ``precision`` or the scale's static type; a quantize call
with neither is an error at conversion, never a float32 division by default.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript.evaluator
from onnxscript.values import OnnxFunction, Opset

from .. import rules
from ..rules.types import (
    E8M0_CODE,
    E8M0_DTYPE,
    FLOAT64_CODE,
    FLOAT_CODES,
    INT32_CODE,
    default_precision,
    is_float8,
)
from .eager import Evaluator
from .fallback_protos import (
    FALLBACK_DOMAIN,
    MODEL_OPSET,
    fallback_proto,
    float64_overload,
    operator_script,
    variant_opset,
)

__all__ = ["FallbackFunction", "exporting"]

_EXPORTING: contextvars.ContextVar[bool] = contextvars.ContextVar("extql_exporting",
                                                                  default=False)


@contextlib.contextmanager
def exporting() -> Iterator[None]:
    """The conversion of a script function by :func:`extql.to_model_proto`,
    which spells out what a fallback call leaves to the scale's type:
    onnxscript may read the fallbacks' definitions within it."""
    token = _EXPORTING.set(True)
    try:
        yield
    finally:
        _EXPORTING.reset(token)


_FLOAT32 = FLOAT_CODES[np.dtype(np.float32)]


def _scale_code(scale: Any) -> int:
    """The ONNX code of an eager scale's type (float32 when it is not one of
    the scale types)."""
    dtype = np.asarray(getattr(scale, "value", scale)).dtype
    if dtype == np.int32:
        return INT32_CODE
    if dtype == E8M0_DTYPE:
        return E8M0_CODE
    return FLOAT_CODES.get(dtype, _FLOAT32)


def _eager_body(quantize: bool, variant: str, body: Callable) -> Callable:
    """The eager body of a fallback: the operator's attributes with their
    meaning -- ``precision`` / ``output_dtype`` 0 stand for the scale's type
    (:func:`extql.rules.linear.default_precision`: float64 for an int32 scale, as
    the converted call gets from :func:`extql.onnx.script_export.finish_model`)
    -- and, for the "default" variants, the zero point optional (the
    decomposition ignores it), so that ``f(x, scale)`` is a valid call.
    Precision float64 runs the variant's precision-float64 decomposition."""
    float8 = is_float8(variant)
    defaults = rules.DEFAULTS
    if quantize:

        def ExtendedQuantizeLinear(x, y_scale, y_zero_point=None, axis: int = defaults["axis"],
                                   block_size: int = defaults["block_size"],
                                   precision: int = defaults["precision"],
                                   saturate: int = defaults["saturate"],
                                   output_dtype: int = defaults["output_dtype"]):
            precision = precision or default_precision(_scale_code(y_scale))
            attrs = {"axis": axis, "block_size": block_size, "precision": precision,
                     "output_dtype": output_dtype}
            if float8:
                attrs["saturate"] = saturate
            if precision == FLOAT64_CODE:
                script = operator_script(True, float64_overload(variant))
                return script.function(x, y_scale, y_zero_point, **attrs)
            return body(x, y_scale, y_zero_point, **attrs)

        return ExtendedQuantizeLinear

    def ExtendedDequantizeLinear(x, x_scale, x_zero_point=None, axis: int = defaults["axis"],
                                 block_size: int = defaults["block_size"],
                                 output_dtype: int = defaults["output_dtype"]):
        # (a scale of no float type, float8e8m0 included: float32, the
        # definition's default; the NumPy API and the library want
        # output_dtype there)
        dtype = np.asarray(getattr(x_scale, "value", x_scale)).dtype
        return body(x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                    output_dtype=output_dtype or FLOAT_CODES.get(dtype, _FLOAT32))

    return ExtendedDequantizeLinear


class FallbackFunction(OnnxFunction):
    """One fallback decomposition as an onnxscript function: its definition
    is the flat FunctionProto of :func:`extql.fallbacks.function_proto`,
    named per variant in :data:`FALLBACK_DOMAIN`; its eager body is the
    onnxscript source of the decomposition."""

    def __init__(self, quantize: bool, variant: str) -> None:
        body = operator_script(quantize, variant)
        proto = fallback_proto(quantize, variant, max(MODEL_OPSET, variant_opset(variant)))
        self._proto = proto
        self._ready = False
        self.quantize = quantize
        self.variant = variant
        pyfun = _eager_body(quantize, variant, body.function)
        super().__init__(
            Opset(FALLBACK_DOMAIN, 1), pyfun, ir.serde.deserialize_function(proto), body.source, {}
        )
        self._ready = True

    @property
    def function_ir(self) -> Any:
        """The definition, for onnxscript's conversion within
        :func:`extql.to_model_proto` (anywhere else: a ``TypeError``, since
        the calls' attributes would not be spelled out)."""
        if self._ready and not _EXPORTING.get():
            raise TypeError(
                f"extql fallback {self.name}: a script function that calls it converts with "
                "extql.to_model_proto(fn), which gives each call the precision and output "
                "type of its scale's type (onnxscript's fn.to_model_proto() would leave them "
                "to the definition's float32 defaults)"
            )
        return self._function_ir

    @function_ir.setter
    def function_ir(self, value: Any) -> None:
        self._function_ir = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eager evaluation: the decomposition's standard ops one by one, in
        onnxscript's default evaluator wrapped for this call by
        :class:`~extql.onnx.eager.Evaluator` (which runs bfloat16 ops in
        onnx.reference)."""
        with onnxscript.evaluator.default_as(Evaluator()):
            return super().__call__(*args, **kwargs)

    def to_function_proto(self) -> onnx.FunctionProto:
        """The function definition (standard ops only, ai.onnx opset 21)."""
        out = onnx.FunctionProto()
        out.CopyFrom(self._proto)
        return out

    def to_model_proto(self, **kwargs: Any) -> onnx.ModelProto:
        raise TypeError(
            f"{self.name} is a function to call from a @onnxscript.script function; for a "
            "model of one operator, script one that calls it (or the extql.quark op)"
        )

    def __repr__(self) -> str:
        kind = "QUANTIZE" if self.quantize else "DEQUANTIZE"
        return f"<extql fallback {kind}[{self.variant!r}]: {FALLBACK_DOMAIN}::{self.name}>"
