"""The rules of every operator, the one place they are written.

* :mod:`extql.rules.typetable` -- the quantized element types (plain data);
* :mod:`extql.rules.types` -- their Python view (NumPy dtypes, ONNX codes,
  operator names and domains);
* :mod:`extql.rules.linear` -- ExtendedQuantizeLinear / ExtendedDequantizeLinear:
  inputs, attributes, types of the float side;
* :mod:`extql.rules.blocks` -- Quark's block formats: attributes, element
  types, refusals;
* :mod:`extql.rules.dpu` -- Quark's DPU-emulation operators: names, domains,
  the instance norm's refusals.

The plain-data modules (``typetable``, ``linear``, ``blocks``) import nothing
heavier than each other, so that the build reads them by path without numpy:
``tools/gen_*_header.py`` write the C headers of the onnxruntime shim from
them.  Every other layer (the NumPy API, the schemas, the checks, the
fallbacks, the tools) reads the rules here.

The names of :mod:`extql.rules.linear` are also this package's own
(``extql.rules.ATTRIBUTES``, ``extql.rules.default_precision``, ...), as they
were when the package was one module.
"""

from __future__ import annotations

from .linear import (
    ATTRIBUTES,
    DEFAULTS,
    DEQUANTIZE,
    INPUTS,
    MICROSOFT_ATTRIBUTES,
    OTHER_CODES,
    OUTPUT_DTYPE_REQUIRED,
    OUTPUT_TYPES,
    PRECISION_BY_SCALE,
    PRECISION_TYPES,
    QUANTIZE,
    QUANTIZE_SCALE_TYPES,
    QUANTIZE_X_TYPES,
    REAL_TYPES,
    SCALE_TYPES,
    attribute_names,
    default_precision,
)

__all__ = [
    "ATTRIBUTES",
    "DEFAULTS",
    "DEQUANTIZE",
    "INPUTS",
    "MICROSOFT_ATTRIBUTES",
    "OTHER_CODES",
    "OUTPUT_DTYPE_REQUIRED",
    "OUTPUT_TYPES",
    "PRECISION_BY_SCALE",
    "PRECISION_TYPES",
    "QUANTIZE",
    "QUANTIZE_SCALE_TYPES",
    "QUANTIZE_X_TYPES",
    "REAL_TYPES",
    "SCALE_TYPES",
    "attribute_names",
    "default_precision",
]
