"""The operator rules, the one place they are written.

What the two operators take and what they do when a node leaves something
out: the inputs' names, the attributes with their defaults, the types of the
float side, the precision of the division and the output's type.  The
operator pages state them (docs/operators/extended_quantize_linear.rst,
docs/operators/extended_dequantize_linear.rst).

Plain data with no imports, like the type table (``extql/rules/typetable.py``),
so that the build reads it without numpy or onnx: every Python layer reads it
(the NumPy API through :mod:`extql.rules.types`, the schemas, the checks, the
fallbacks, the eager ops, the graph passes), and ``tools/gen_types_header.py``
writes the C header ``extql/src/extql_rules.h`` the onnxruntime shim compiles
with.  Types are named as users read them (``float32``, ``int32``, ...; the
quantized ones as in the type table).
"""

from __future__ import annotations

#: The operators (as the NumPy API's messages name them), by direction.
QUANTIZE = "quantize"
DEQUANTIZE = "dequantize"

#: The inputs of each operator, in order, as the operator documents name them.
INPUTS: dict[str, tuple[str, str, str]] = {
    QUANTIZE: ("x", "y_scale", "y_zero_point"),
    DEQUANTIZE: ("x", "x_scale", "x_zero_point"),
}

#: The attributes: name, default, the operators that take it, meaning.  Every
#: one is an INT.  ``output_dtype`` and ``precision`` 0 mean "not given": the
#: output type and the precision then follow from the inputs (below).
ATTRIBUTES: tuple[tuple[str, int, tuple[str, ...], str], ...] = (
    ("axis", 1, (QUANTIZE, DEQUANTIZE), "Axis of per-axis and blocked quantization."),
    ("block_size", 0, (QUANTIZE, DEQUANTIZE),
     "Blocked quantization: the size of a block along axis (0: none)."),
    ("output_dtype", 0, (QUANTIZE, DEQUANTIZE),
     "The output type (0: the zero point's / the scale's)."),
    ("precision", 0, (QUANTIZE,),
     "The precision of the division (0: the scale's type; float64 for an int32 scale)."),
    ("saturate", 1, (QUANTIZE,), "float8 outputs only."),
)

#: name -> default, for every attribute.
DEFAULTS: dict[str, int] = {name: default for name, default, _, _ in ATTRIBUTES}


def attribute_names(direction: str) -> tuple[str, ...]:
    """The attributes of the operator ``direction`` (QUANTIZE or DEQUANTIZE)."""
    return tuple(name for name, _, ops, _ in ATTRIBUTES if direction in ops)


#: The attribute of the onnxruntime com.microsoft QuantizeLinear /
#: DequantizeLinear (their only one; its default is the same ``axis``).
MICROSOFT_ATTRIBUTES: tuple[str, ...] = ("axis",)

#: The float side: quantize's x and scale, dequantize's scale and output.
REAL_TYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
#: Quantize's x: those and int32 (as the official QuantizeLinear allows; it
#: is rounded to nearest even into float32 first).
QUANTIZE_X_TYPES: tuple[str, ...] = (*REAL_TYPES, "int32")
#: Dequantize's scale: the real types and float8e8m0 (widened to float32
#: exactly).
SCALE_TYPES: tuple[str, ...] = (*REAL_TYPES, "float8e8m0")
#: Quantize's scale: those and int32 (as the official QuantizeLinear allows).
QUANTIZE_SCALE_TYPES: tuple[str, ...] = (*SCALE_TYPES, "int32")
#: Dequantize's ``output_dtype``.
OUTPUT_TYPES: tuple[str, ...] = REAL_TYPES
#: Quantize's ``precision``: the real types and float64.
PRECISION_TYPES: tuple[str, ...] = (*REAL_TYPES, "float64")

#: The precision of the division when a node gives none, where it is not the
#: scale's own type: float64 for an int32 scale (as ONNX's reference divides;
#: a float type would round the scale), float32 for a float8e8m0 scale (which
#: widens to float32 exactly).
PRECISION_BY_SCALE: dict[str, str] = {"int32": "float64", "float8e8m0": "float32"}


def default_precision(scale_type: str) -> str:
    """The precision of a quantize without ``precision``, by its scale's type."""
    return PRECISION_BY_SCALE.get(scale_type, scale_type)


#: Scale types with which a dequantize needs ``output_dtype`` (the output
#: cannot have the scale's type).
OUTPUT_DTYPE_REQUIRED: tuple[str, ...] = ("float8e8m0",)

#: ONNX's ``TensorProto.DataType`` codes of the types above that are not in
#: the type table (``extql/rules/typetable.py`` has the quantized ones and
#: float8e8m0).
OTHER_CODES: dict[str, int] = {"float32": 1, "float64": 11}
