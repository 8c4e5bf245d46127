"""The eight quantized element types: NumPy dtypes, ONNX codes and ranges.

The Python view of the type table ``extql/_typetable.py`` (the one place the
types are written; the C header ``extql/src/extql_types.h`` is generated from
it), read by the NumPy API, the graph tools and the tests, so that a type is
named the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ._typetable import FLOAT_TYPES, QTYPE_ROWS

__all__ = ["QType", "QTYPES", "BY_ONNX", "qtype_of", "DOMAIN", "LEGACY_DOMAIN"]

#: The ONNX domain of ExtendedQuantizeLinear / ExtendedDequantizeLinear.
DOMAIN = "com.amd.quark"
#: The domain of the legacy names VitisQuantizeLinear / VitisDequantizeLinear.
LEGACY_DOMAIN = "com.vai.quantize"


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
_BY_DTYPE: dict[np.dtype, QType] = {t.dtype: t for t in QTYPES.values()}


def qtype_of(dtype: np.dtype | type) -> QType | None:
    """The QType of a NumPy dtype, or None when it is not one of the eight."""
    try:
        return _BY_DTYPE.get(np.dtype(dtype))
    except TypeError:
        return None
