"""The ONNX operator schemas of extql's operators, registered with onnx.

:func:`register_schemas` registers ``com.amd.quark::ExtendedQuantizeLinear``
/ ``ExtendedDequantizeLinear`` (version 1), the legacy
``com.vai.quantize::VitisQuantizeLinear`` / ``VitisDequantizeLinear`` and,
unless something else did, onnxruntime's ``com.microsoft`` QuantizeLinear /
DequantizeLinear in onnx's schema registry (once per process).  With them:

* onnxscript type-checks calls: ``quark.ExtendedQuantizeLinear(x, s, zp)``
  inside an ``@onnxscript.script`` function has a known signature (the inputs
  and attributes of :mod:`extql.rules`), and the model it builds passes
  ``onnx.checker.check_model`` with the type constraints of the operator
  documents (the types of :mod:`extql.rules`; the zero point and output one
  of the quantized types the installed onnx has);
* onnx shape inference knows the output type and shape of every Extended node
  (the zero point's type, or ``output_dtype``, or uint8, for quantize; the
  scale's type or ``output_dtype`` for dequantize; the shape of x), which
  ``extql check`` and the graph passes use.

The registered schemas carry the type/shape inference of the official
QuantizeLinear/DequantizeLinear-21 (output type from the zero point, or the
scale; shape of x), which is what the Extended operators specify too.  (onnx
< 1.18 cannot attach an inference function to a Python schema: there the
types are checked but not inferred through the Extended nodes.)

An inference function set from Python is held by onnx's C++ schema registry
as a wrapper around a Python object.  The registry is a C++ static, destroyed
after the interpreter has finalised; destroying a wrapper then touches a dead
interpreter (onnx 1.20-1.22 crash with SIGSEGV at exit, 1.19 waits forever
for the GIL).  So the schemas registered here are deregistered again by an
``atexit`` handler, while the interpreter is still alive (see
:func:`_deregister_schemas`).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable

import onnx
import onnx.defs

from .. import rules
from ..types import (
    DOMAIN,
    LEGACY_DOMAIN,
    MS_DEQUANTIZE_NAMES,
    MS_DOMAIN,
    MS_FLOAT_NAMES,
    MS_QUANTIZE_NAMES,
    OP_NAMES,
    QUANTIZED,
    code_of,
)

__all__ = ["register_schemas", "tensor_types", "QUANTIZE_TYPES"]


def _onnx_name(name: str) -> str | None:
    """onnx's name of a type (``float`` for float32), or None when the
    installed onnx does not have it."""
    try:
        text = onnx.helper.tensor_dtype_to_string(code_of(name))
    except (KeyError, ValueError):
        return None
    return text.replace("TensorProto.", "").lower()


def tensor_types(names: Iterable[str]) -> list[str]:
    """The type strings (``tensor(float)``, ...) of the named types that the
    installed onnx has (int2 / uint2 from onnx 1.20)."""
    return [f"tensor({n})" for n in map(_onnx_name, names) if n is not None]


#: Type strings of the zero point / quantized tensor: every quantized type
#: the installed onnx has.
QUANTIZE_TYPES = tensor_types(QUANTIZED)

def _attributes(names: Iterable[str]) -> list[onnx.defs.OpSchema.Attribute]:
    """The named attributes of :data:`extql.rules.ATTRIBUTES`, with their
    defaults and meanings."""
    return [onnx.defs.OpSchema.Attribute(name, onnx.helper.make_attribute(name, default), what)
            for name, default, _, what in rules.ATTRIBUTES if name in names]


_lock = threading.Lock()
_done = False
#: (name, version, domain) of each schema this module registered itself.
_registered: list[tuple[str, int, str]] = []


def _schema(name: str, domain: str, quantize: bool) -> onnx.defs.OpSchema:
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    direction = rules.QUANTIZE if quantize else rules.DEQUANTIZE
    x, scale, zero_point = rules.INPUTS[direction]
    if quantize:
        inputs = [
            FP(x, "T1", "N-D full precision input tensor to be quantized."),
            FP(scale, "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP(zero_point, "T3", "Zero point, shape of the scale; default uint8 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Quantized tensor, shape of x.")]
        constraints = [
            ("T1", tensor_types(rules.QUANTIZE_X_TYPES), "The type of x."),
            ("T2", tensor_types(rules.QUANTIZE_SCALE_TYPES), "The type of the scale."),
            ("T3", QUANTIZE_TYPES, "The type of the zero point and y."),
        ]
        infer_from = "QuantizeLinear"
        doc = "y = saturate(round_half_even(x / y_scale) + y_zero_point) (AMD Quark)."
    else:
        inputs = [
            FP(x, "T1", "N-D quantized input tensor."),
            FP(scale, "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP(zero_point, "T1", "Zero point, shape of the scale; default 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Tensor of x's shape, of output_dtype or the scale's type.")]
        constraints = [
            ("T1", QUANTIZE_TYPES, "The type of x and the zero point."),
            ("T2", tensor_types(rules.SCALE_TYPES), "The type of the scale."),
            ("T3", tensor_types(rules.OUTPUT_TYPES), "The type of y."),
        ]
        infer_from = "DequantizeLinear"
        doc = "y = (x - x_zero_point) * x_scale (AMD Quark)."
    schema = onnx.defs.OpSchema(
        name,
        domain,
        1,
        doc,
        inputs=inputs,
        outputs=outputs,
        type_constraints=constraints,
        attributes=_attributes(rules.attribute_names(direction)),
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        # The official operator's inference, of the newest opset this onnx
        # has (output_dtype from opset 23).
        official = onnx.defs.get_schema(infer_from, onnx.defs.onnx_opset_version(), "")
        schema.set_type_and_shape_inference_function(
            official.get_type_and_shape_inference_function()
        )
    return schema


#: Types of onnxruntime's com.microsoft QuantizeLinear / DequantizeLinear
#: (float side; quantized side), for type inference through Quark's models.
_MS_FLOAT_TYPES = tensor_types(MS_FLOAT_NAMES.values())


def _microsoft_schema(quantize: bool) -> onnx.defs.OpSchema:
    """com.microsoft QuantizeLinear / DequantizeLinear (version 1), as
    onnxruntime defines them, so that onnx shape inference (which has no
    onnxruntime contrib schemas) infers types through the nodes AMD Quark
    writes."""
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    if quantize:
        name, infer_from = "QuantizeLinear", "QuantizeLinear"
        inputs = [FP("x", "T1", "Input."), FP("y_scale", "T1", "Scale."),
                  FP("y_zero_point", "T2", "Zero point.", param_option=optional)]
        outputs = [FP("y", "T2", "Quantized tensor.")]
        constraints = [("T1", _MS_FLOAT_TYPES, "x and scale."),
                       ("T2", tensor_types(MS_QUANTIZE_NAMES), "Zero point and y.")]
    else:
        name, infer_from = "DequantizeLinear", "DequantizeLinear"
        inputs = [FP("x", "T1", "Quantized input."), FP("x_scale", "T2", "Scale."),
                  FP("x_zero_point", "T1", "Zero point.", param_option=optional)]
        outputs = [FP("y", "T2", "Dequantized tensor.")]
        constraints = [("T1", tensor_types(MS_DEQUANTIZE_NAMES), "x and zero point."),
                       ("T2", _MS_FLOAT_TYPES, "Scale and y.")]
    schema = onnx.defs.OpSchema(
        name, MS_DOMAIN, 1, f"onnxruntime contrib {name} (registered by extql).",
        inputs=inputs, outputs=outputs, type_constraints=constraints,
        attributes=_attributes(rules.MICROSOFT_ATTRIBUTES),
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        official = onnx.defs.get_schema(infer_from, 21, "")
        schema.set_type_and_shape_inference_function(
            official.get_type_and_shape_inference_function()
        )
    return schema


def register_schemas() -> None:
    """Register the operator schemas with onnx (idempotent, thread-safe): the
    four Extended / Vitis ones, and com.microsoft QuantizeLinear /
    DequantizeLinear unless something else registered those already."""
    global _done
    with _lock:
        if _done:
            return
        for domain in (DOMAIN, LEGACY_DOMAIN):
            for name, quantize in zip(OP_NAMES[domain], (True, False), strict=True):
                try:
                    onnx.defs.get_schema(name, 1, domain)
                except onnx.defs.SchemaError:
                    onnx.defs.register_schema(_schema(name, domain, quantize))
                    _registered.append((name, 1, domain))
        for name, quantize in (("QuantizeLinear", True), ("DequantizeLinear", False)):
            try:
                onnx.defs.get_schema(name, 1, MS_DOMAIN)
            except onnx.defs.SchemaError:
                onnx.defs.register_schema(_microsoft_schema(quantize))
                _registered.append((name, 1, MS_DOMAIN))
        if _registered:
            atexit.register(_deregister_schemas)
        _done = True


def _deregister_schemas() -> None:
    """Remove the schemas registered by :func:`register_schemas` (run at exit).

    Their inference functions wrap Python objects; onnx's registry would
    otherwise destroy them after the interpreter is gone, which crashes or
    hangs the process at exit with onnx < 1.23.
    """
    global _done
    deregister = getattr(onnx.defs, "deregister_schema", None)
    with _lock:
        while _registered:
            name, version, domain = _registered.pop()
            if deregister is not None:
                try:
                    deregister(name, version, domain)
                except onnx.defs.SchemaError:
                    pass
        _done = False
