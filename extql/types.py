"""The eight quantized element types: NumPy dtypes, ONNX codes and ranges.

One table that the NumPy API, the graph tools and the tests all read, so that
a type is named the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

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
        return self.name in ("float16", "bfloat16")


_BF16_MAX = float(np.array(0x7F7F, dtype=np.uint16).view(ml_dtypes.bfloat16))

#: The eight types by name, in the order int8, uint8, int16, uint16, int32,
#: uint32, float16, bfloat16.
QTYPES: dict[str, QType] = {
    t.name: t
    for t in (
        QType("int8", np.dtype(np.int8), 3, -128, 127),
        QType("uint8", np.dtype(np.uint8), 2, 0, 255),
        QType("int16", np.dtype(np.int16), 5, -32768, 32767),
        QType("uint16", np.dtype(np.uint16), 4, 0, 65535),
        QType("int32", np.dtype(np.int32), 6, -(2**31), 2**31 - 1),
        QType("uint32", np.dtype(np.uint32), 12, 0, 2**32 - 1),
        QType("float16", np.dtype(np.float16), 10, -65504.0, 65504.0),
        QType("bfloat16", np.dtype(ml_dtypes.bfloat16), 16, -_BF16_MAX, _BF16_MAX),
    )
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
