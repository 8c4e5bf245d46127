"""The quantized element types: NumPy dtypes, ONNX codes and ranges.

The Python view of the type table ``extql/rules/typetable.py`` (the one place the
types are written; the C header ``extql/src/extql_types.h`` is generated from
it), read by the NumPy API, the graph tools and the tests, so that a type is
named the same way everywhere.  With them, the operator names and domains the
graph tools look for, the type sets of onnxruntime's ``com.microsoft``
QuantizeLinear / DequantizeLinear, all derived from the table, and the type
sets of the operator rules (:mod:`extql.rules`) by ONNX code.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import linear as rules
from .typetable import (
    DEFAULT_TYPE,
    E8M0_SCALE,
    FLOAT_TYPES,
    MICROSOFT_DEQUANTIZE_TYPES,
    MICROSOFT_SUBBYTE_TYPES,
    MICROSOFT_TYPES,
    ONNX_TYPE_OPSET,
    QTYPE_ROWS,
    SMALLFLOAT_ROWS,
    SUBBYTE_ROWS,
)

__all__ = [
    "QType",
    "QTYPES",
    "BY_ONNX",
    "DEFAULT_QTYPE",
    "qtype_of",
    "DOMAIN",
    "LEGACY_DOMAIN",
    "OP_NAMES",
    "EXTENDED_OPS",
    "MS_DOMAIN",
    "MS_QDQ",
    "MS_EXACT_TYPES",
    "MS_QUANTIZE_NAMES",
    "MS_DEQUANTIZE_NAMES",
    "MS_QUANTIZE_TYPES",
    "MS_DEQUANTIZE_TYPES",
    "SubByteType",
    "SUBBYTE",
    "SmallFloatType",
    "SMALLFLOAT",
    "QUANTIZED",
    "QUANTIZED_BY_ONNX",
    "QuantizedType",
    "quantized_type_of",
    "type_opset",
    "FLOAT_CODES",
    "FLOAT_DTYPES",
    "FLOAT_NAMES",
    "MS_FLOAT_NAMES",
    "E8M0_NAME",
    "E8M0_CODE",
    "E8M0_DTYPE",
    "SCALE_CODES",
    "INT32_CODE",
    "FLOAT64_CODE",
    "QUANTIZE_SCALE_CODES",
    "QUANTIZE_X_CODES",
    "OUTPUT_CODES",
    "PRECISION_CODES",
    "code_of",
    "default_precision",
]

#: The ONNX domain of ExtendedQuantizeLinear / ExtendedDequantizeLinear.
DOMAIN = "com.amd.quark"
#: The domain of the legacy names VitisQuantizeLinear / VitisDequantizeLinear.
LEGACY_DOMAIN = "com.vai.quantize"
#: (quantize op, dequantize op) of each domain: the current and the legacy names.
OP_NAMES: dict[str, tuple[str, str]] = {
    DOMAIN: ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear"),
    LEGACY_DOMAIN: ("VitisQuantizeLinear", "VitisDequantizeLinear"),
}
#: (domain, op_type) -> True for quantize, False for dequantize, for the four
#: Extended / Vitis operators.
EXTENDED_OPS: dict[tuple[str, str], bool] = {
    (domain, name): i == 0 for domain, names in OP_NAMES.items() for i, name in enumerate(names)
}
#: onnxruntime's contrib operator domain (its QuantizeLinear / DequantizeLinear).
MS_DOMAIN = "com.microsoft"
#: op_type -> True for quantize, False for dequantize, in :data:`MS_DOMAIN`.
MS_QDQ: dict[str, bool] = {"QuantizeLinear": True, "DequantizeLinear": False}


@dataclass(frozen=True)
class QType:
    """One quantized element type.

    ``lo``/``hi`` are the saturation bounds: the integer range, or the largest
    finite value for float16/bfloat16.
    """

    name: str
    dtype: np.dtype
    onnx: int  # onnx.TensorProto.DataType
    lo: float
    hi: float

    @property
    def is_float(self) -> bool:
        return self.name in FLOAT_TYPES


def _dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


#: The eight types by name, in the order int8, uint8, int16, uint16, int32,
#: uint32, float16, bfloat16.
QTYPES: dict[str, QType] = {
    name: QType(name, _dtype(name), onnx, lo, hi) for name, onnx, _size, lo, hi in QTYPE_ROWS
}

#: The same types by ONNX ``TensorProto`` data type code.
BY_ONNX: dict[int, QType] = {t.onnx: t for t in QTYPES.values()}
#: The output type of a quantize without a zero point.
DEFAULT_QTYPE: QType = QTYPES[DEFAULT_TYPE]


@dataclass(frozen=True)
class SubByteType:
    """int4 / uint4 / int2 / uint2: packed ``8 // bits`` per byte in ONNX
    tensors, one per byte (``dtype``, ml_dtypes' type) in NumPy.  The
    kernels compute them through ``carrier``, the 8-bit type of the same
    signedness, which holds every value."""

    name: str
    onnx: int
    bits: int
    lo: int
    hi: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(getattr(ml_dtypes, self.name))

    @property
    def is_float(self) -> bool:
        return False

    @property
    def carrier(self) -> QType:
        return min((t for t in QTYPES.values() if not t.is_float and (t.lo < 0) == (self.lo < 0)),
                   key=lambda t: t.dtype.itemsize)


#: int4, uint4, int2 and uint2 by name.
SUBBYTE: dict[str, SubByteType] = {row[0]: SubByteType(*row) for row in SUBBYTE_ROWS}


@dataclass(frozen=True)
class SmallFloatType:
    """float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1
    (ONNX's names; ``dtype`` is ml_dtypes' type, one element per byte in
    NumPy; float4e2m1 is packed two per byte in ONNX tensors).  ``special``:
    how infinities and NaN are encoded (``_typetable.SMALLFLOAT_ROWS``).
    The kernels compute them through float32."""

    name: str
    onnx: int
    ml_name: str
    bits: int
    ebits: int
    mbits: int
    bias: int
    max: float
    special: str

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(getattr(ml_dtypes, self.ml_name))

    @property
    def is_float(self) -> bool:
        return True

    @property
    def is_float8(self) -> bool:
        return self.bits == 8

    @property
    def lo(self) -> float:
        return -self.max

    @property
    def hi(self) -> float:
        return self.max


#: Any quantized type.
QuantizedType = QType | SubByteType | SmallFloatType

#: The small float types by name (ONNX's: float8e4m3fn, ...).
SMALLFLOAT: dict[str, SmallFloatType] = {
    row[0]: SmallFloatType(*row) for row in SMALLFLOAT_ROWS
}
#: Every quantized type extql computes: the eight, the sub-byte ones, the
#: small floats.
QUANTIZED: dict[str, QuantizedType] = {
    **QTYPES, **SUBBYTE, **SMALLFLOAT}
#: The same by ONNX code.
QUANTIZED_BY_ONNX: dict[int, QuantizedType] = {t.onnx: t for t in QUANTIZED.values()}
_CODE: dict[str, int] = {**{n: t.onnx for n, t in QTYPES.items()},
                         **{n: t.onnx for n, t in SUBBYTE.items()}}
#: Names of the zero point / output types of com.microsoft QuantizeLinear
#: (onnxruntime's CPU kernels), and of the x / zero point types of its
#: DequantizeLinear.
MS_QUANTIZE_NAMES: tuple[str, ...] = (*MICROSOFT_TYPES, *MICROSOFT_SUBBYTE_TYPES)
MS_DEQUANTIZE_NAMES: tuple[str, ...] = (*MS_QUANTIZE_NAMES, *MICROSOFT_DEQUANTIZE_TYPES)
#: ONNX codes of the types whose com.microsoft Q/DQ mean the Extended operators' bits.
MS_EXACT_TYPES: frozenset[int] = frozenset(QTYPES[n].onnx for n in MICROSOFT_TYPES)
#: ONNX codes of :data:`MS_QUANTIZE_NAMES` / :data:`MS_DEQUANTIZE_NAMES`.
MS_QUANTIZE_TYPES: frozenset[int] = frozenset(_CODE[n] for n in MS_QUANTIZE_NAMES)
MS_DEQUANTIZE_TYPES: frozenset[int] = frozenset(_CODE[n] for n in MS_DEQUANTIZE_NAMES)
_BY_DTYPE: dict[np.dtype, QType] = {t.dtype: t for t in QTYPES.values()}


def qtype_of(dtype: np.dtype | type) -> QType | None:
    """The QType of a NumPy dtype, or None when it is not one of the eight."""
    try:
        return _BY_DTYPE.get(np.dtype(dtype))
    except TypeError:
        return None


_QUANTIZED_BY_DTYPE: dict[np.dtype, QuantizedType] = {
    t.dtype: t for t in QUANTIZED.values()
}


def quantized_type_of(dtype: np.dtype | type) -> QuantizedType | None:
    """The type of a NumPy dtype among :data:`QUANTIZED`, or None."""
    try:
        return _QUANTIZED_BY_DTYPE.get(np.dtype(dtype))
    except TypeError:
        return None


def is_float8(name: str) -> bool:
    """Whether the quantized type ``name`` is one of the four float8 types
    (the ones with ``saturate``)."""
    t = SMALLFLOAT.get(name)
    return t is not None and t.is_float8


def type_opset(name: str) -> int:
    """The oldest ai.onnx opset whose Cast / QuantizeLinear take the
    quantized type ``name`` (13 for the eight: older than any opset extql's
    graph tools write)."""
    return ONNX_TYPE_OPSET.get(name, 13)


def code_of(name: str) -> int:
    """The ONNX code of a type the operator rules name (``float32``,
    ``float64``, ``float8e8m0`` or a quantized type)."""
    if name in QUANTIZED:
        return QUANTIZED[name].onnx
    if name == E8M0_SCALE[0]:
        return E8M0_SCALE[1]
    return rules.OTHER_CODES[name]


def _codes(names: tuple[str, ...]) -> dict[int, str]:
    return {code_of(name): name for name in names}


#: The float types' names by ONNX code (float32, float16, bfloat16): the
#: floating-point side of the operators -- quantize's x and scale,
#: dequantize's scale and output (:data:`extql.rules.linear.REAL_TYPES`).
FLOAT_NAMES: dict[int, str] = _codes(rules.REAL_TYPES)
#: The same by dtype -> ONNX code.
FLOAT_CODES: dict[np.dtype, int] = {
    (np.dtype(np.float32) if name == "float32" else QTYPES[name].dtype): code
    for code, name in FLOAT_NAMES.items()
}
#: The same, by ONNX code.
FLOAT_DTYPES: dict[int, np.dtype] = {code: dtype for dtype, code in FLOAT_CODES.items()}

#: The float8e8m0 scale type (QuantizeLinear-25 / DequantizeLinear-25): a
#: scale only, widened to float32 exactly.
E8M0_NAME: str = E8M0_SCALE[0]
E8M0_CODE: int = E8M0_SCALE[1]
E8M0_DTYPE: np.dtype = np.dtype(getattr(ml_dtypes, E8M0_SCALE[2]))
#: The scale's types by ONNX code: the float types and float8e8m0.
SCALE_CODES: dict[int, str] = _codes(rules.SCALE_TYPES)
#: ONNX's codes of int32 and float64 (TensorProto.INT32 / DOUBLE).
INT32_CODE: int = code_of("int32")
FLOAT64_CODE: int = code_of("float64")
#: Quantize's scale types: the scale's types and int32 (as the official
#: QuantizeLinear allows; dequantize's scale is never an integer).
QUANTIZE_SCALE_CODES: dict[int, str] = _codes(rules.QUANTIZE_SCALE_TYPES)
#: Quantize's x types: the float types and int32.
QUANTIZE_X_CODES: dict[int, str] = _codes(rules.QUANTIZE_X_TYPES)
#: Dequantize's output types (``output_dtype``).
OUTPUT_CODES: dict[int, str] = _codes(rules.OUTPUT_TYPES)
#: Quantize's ``precision``: the float types and float64 (the division in
#: float64, the default for an int32 scale, as onnx.reference's is).
PRECISION_CODES: dict[int, str] = _codes(rules.PRECISION_TYPES)


def default_precision(scale_code: int) -> int:
    """The ONNX code of a quantize's precision without the attribute, by the
    ONNX code of its scale's type (:func:`extql.rules.linear.default_precision`:
    the scale's type, float64 for int32, float32 for float8e8m0)."""
    name = QUANTIZE_SCALE_CODES.get(scale_code)
    return scale_code if name is None else code_of(rules.default_precision(name))


#: The float side of onnxruntime's com.microsoft QuantizeLinear /
#: DequantizeLinear (its CPU kernels: float32 and float16), by ONNX code.
MS_FLOAT_NAMES: dict[int, str] = {code: FLOAT_NAMES[code]
                                  for code in (FLOAT_CODES[np.dtype(np.float32)],
                                               QTYPES["float16"].onnx)}
