"""The ``com.amd.quark`` operators as an onnxscript opset, with ONNX schemas.

Importing this module registers ONNX operator schemas for
``com.amd.quark::ExtendedQuantizeLinear`` / ``ExtendedDequantizeLinear``
(version 1) and the legacy ``com.vai.quantize::VitisQuantizeLinear`` /
``VitisDequantizeLinear`` in onnx's schema registry (once per process).  With
them:

* onnxscript type-checks calls: ``quark.ExtendedQuantizeLinear(x, s, zp)``
  inside an ``@onnxscript.script`` function has a known signature (2 or 3
  inputs, an ``axis`` attribute), and the model it builds passes
  ``onnx.checker.check_model`` with the type constraints of the operator
  documents (x float32, float16, bfloat16 or int32, the scale float32,
  float16, bfloat16 or float8e8m0;
  zero point and output one of the quantized types the installed onnx has)
  and the official attributes;
* onnx shape inference knows the output type and shape of every Extended node
  (the zero point's type, or ``output_dtype``, or uint8, for quantize; the
  scale's type or ``output_dtype`` for dequantize; the shape of x), which
  ``extql check`` and the graph passes use.

Example::

    import onnxscript
    from onnxscript import FLOAT, INT16, opset21 as op
    from extql.opset import quark

    @onnxscript.script(default_opset=op)
    def qdq(x: FLOAT["N", 8], s: FLOAT, zp: INT16) -> FLOAT["N", 8]:
        q = quark.ExtendedQuantizeLinear(x, s, zp)
        return quark.ExtendedDequantizeLinear(q, s, zp)

    model = qdq.to_model_proto()  # imports com.amd.quark version 1

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

import onnx
import onnx.defs
from onnxscript.values import Opset

from .types import (
    DOMAIN,
    LEGACY_DOMAIN,
    MS_DEQUANTIZE_NAMES,
    MS_DOMAIN,
    MS_QUANTIZE_NAMES,
    QUANTIZED,
)

__all__ = ["quark", "vai", "register_schemas", "QUANTIZE_TYPES"]

#: Type strings of the zero point / quantized tensor: every quantized type
#: the installed onnx has (int2 / uint2 from onnx 1.20).
QUANTIZE_TYPES = [f"tensor({name})" for name in QUANTIZED
                  if hasattr(onnx.TensorProto, name.upper())]
#: quantize's x, dequantize's output.
REAL_TYPES = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
#: The scale: those and float8e8m0 (where the installed onnx has it).
SCALE_TYPES = REAL_TYPES + (["tensor(float8e8m0)"] if hasattr(onnx.TensorProto, "FLOAT8E8M0")
                            else [])
#: The attributes (name, default, meaning); dequantize has the first three.
_ATTRIBUTES = [
    ("axis", 1, "Axis of per-axis and blocked quantization."),
    ("block_size", 0, "Blocked quantization: the size of a block along axis (0: none)."),
    ("output_dtype", 0, "The output type (0: the zero point's / the scale's)."),
    ("precision", 0, "The precision of the division (0: the scale's type; float64 for an "
                     "int32 scale)."),
    ("saturate", 1, "float8 outputs only."),
]

_lock = threading.Lock()
_done = False
#: (name, version, domain) of each schema this module registered itself.
_registered: list[tuple[str, int, str]] = []


def _schema(name: str, domain: str, quantize: bool) -> onnx.defs.OpSchema:
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    if quantize:
        inputs = [
            FP("x", "T1", "N-D full precision input tensor to be quantized."),
            FP("y_scale", "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP("y_zero_point", "T3", "Zero point, shape of y_scale; default uint8 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Quantized tensor, shape of x.")]
        constraints = [
            ("T1", REAL_TYPES + ["tensor(int32)"], "The type of x."),
            ("T2", SCALE_TYPES + ["tensor(int32)"], "The type of y_scale."),
            ("T3", QUANTIZE_TYPES, "The type of y_zero_point and y."),
        ]
        infer_from = "QuantizeLinear"
        doc = "y = saturate(round_half_even(x / y_scale) + y_zero_point) (AMD Quark)."
    else:
        inputs = [
            FP("x", "T1", "N-D quantized input tensor."),
            FP("x_scale", "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP("x_zero_point", "T1", "Zero point, shape of x_scale; default 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Tensor of x's shape, of output_dtype or the scale's type.")]
        constraints = [
            ("T1", QUANTIZE_TYPES, "The type of x and x_zero_point."),
            ("T2", SCALE_TYPES, "The type of x_scale."),
            ("T3", REAL_TYPES, "The type of y."),
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
        attributes=[
            onnx.defs.OpSchema.Attribute(name, onnx.helper.make_attribute(name, value), what)
            for name, value, what in _ATTRIBUTES
            if quantize or name not in ("precision", "saturate")
        ],
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
_MS_FLOAT_TYPES = ["tensor(float)", "tensor(float16)"]

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
                       ("T2", [f"tensor({n})" for n in MS_QUANTIZE_NAMES], "Zero point and y.")]
    else:
        name, infer_from = "DequantizeLinear", "DequantizeLinear"
        inputs = [FP("x", "T1", "Quantized input."), FP("x_scale", "T2", "Scale."),
                  FP("x_zero_point", "T1", "Zero point.", param_option=optional)]
        outputs = [FP("y", "T2", "Dequantized tensor.")]
        constraints = [("T1", [f"tensor({n})" for n in MS_DEQUANTIZE_NAMES], "x and zero point."),
                       ("T2", _MS_FLOAT_TYPES, "Scale and y.")]
    schema = onnx.defs.OpSchema(
        name, MS_DOMAIN, 1, f"onnxruntime contrib {name} (registered by extql).",
        inputs=inputs, outputs=outputs, type_constraints=constraints,
        attributes=[onnx.defs.OpSchema.Attribute(
            "axis", onnx.helper.make_attribute("axis", 1), "Axis of per-axis quantization.")],
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
        for domain, (q, dq) in (
            (DOMAIN, ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear")),
            (LEGACY_DOMAIN, ("VitisQuantizeLinear", "VitisDequantizeLinear")),
        ):
            for name, quantize in ((q, True), (dq, False)):
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


register_schemas()

#: onnxscript opset for ``com.amd.quark`` version 1: ``quark.ExtendedQuantizeLinear``,
#: ``quark.ExtendedDequantizeLinear``.
quark = Opset(DOMAIN, 1)
#: onnxscript opset for the legacy ``com.vai.quantize`` names.
vai = Opset(LEGACY_DOMAIN, 1)

# onnxscript integration: eager calls run these ops on extql's kernels, and
# to_model_proto() gives models that onnxruntime loads (extql.onnx.eager,
# extql.onnx.script_export).
from .onnx import eager, script_export  # noqa: E402

eager.install()
script_export.install()
