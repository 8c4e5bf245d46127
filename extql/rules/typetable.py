"""The table of the quantized element types, the one place they are written.

Plain data with no imports, so that the build can read it without numpy or
ml_dtypes: ``extql/rules/types.py`` turns it into :class:`extql.rules.types.QType` objects
for Python, and ``tools/gen_types_header.py`` (run by ``setup.py`` at build
time) writes the C header ``extql/src/extql_types.h`` from it.
"""

#: One row per type: name, ONNX ``TensorProto.DataType`` code, element size in
#: bytes, and the saturation bounds lo / hi (the integer range, or the largest
#: finite value of float16 / bfloat16).  The order is the order of every type
#: list users see (messages, ``--help``, documentation).
QTYPE_ROWS: tuple[tuple[str, int, int, float, float], ...] = (
    ("int8", 3, 1, -128, 127),
    ("uint8", 2, 1, 0, 255),
    ("int16", 5, 2, -32768, 32767),
    ("uint16", 4, 2, 0, 65535),
    ("int32", 6, 4, -(2**31), 2**31 - 1),
    ("uint32", 12, 4, 0, 2**32 - 1),
    ("float16", 10, 2, -float.fromhex("0x1.ffcp15"), float.fromhex("0x1.ffcp15")),
    ("bfloat16", 16, 2, -float.fromhex("0x1.fep127"), float.fromhex("0x1.fep127")),
)

#: The two floating-point types among them (the others are integers).
FLOAT_TYPES: tuple[str, ...] = ("float16", "bfloat16")

#: The output type of a quantize without a zero point (and the zero point's
#: type then: uint8 0).
DEFAULT_TYPE: str = "uint8"

#: The scale-only type of QuantizeLinear-25 / DequantizeLinear-25: name
#: (ONNX's), ONNX code, ml_dtypes' name.  Its values are powers of two (2^-127
#: to 2^127) and NaN, each exactly a float32: extql widens it to float32 once
#: and computes as with a float32 scale.
E8M0_SCALE: tuple[str, int, str] = ("float8e8m0", 24, "float8_e8m0fnu")

#: The ai.onnx opset from which ONNX's own operators (Cast, QuantizeLinear)
#: take each type beyond the eight (those exist in every opset the fallback
#: functions take: 13 and later).
ONNX_TYPE_OPSET: dict[str, int] = {
    "float8e4m3fn": 19, "float8e4m3fnuz": 19, "float8e5m2": 19, "float8e5m2fnuz": 19,
    "int4": 21, "uint4": 21, "float4e2m1": 23, "int2": 25, "uint2": 25, "float8e8m0": 25,
}

#: The types whose ``com.microsoft`` QuantizeLinear / DequantizeLinear
#: (onnxruntime's contrib operators, which AMD Quark writes for these types)
#: mean the same bits as the Extended operators, for float32 x and scale.
MICROSOFT_TYPES: tuple[str, ...] = ("int8", "uint8", "int16", "uint16")

#: Types ``com.microsoft`` DequantizeLinear (not QuantizeLinear) also takes
#: among the eight; its int32 ``x - zero_point`` wraps in 32 bits.
MICROSOFT_DEQUANTIZE_TYPES: tuple[str, ...] = ("int32",)

#: The packed sub-byte types: int4 / uint4 (ONNX opset 21) and int2 / uint2
#: (opset 25): name, ONNX ``TensorProto.DataType`` code, bits, lo, hi.  ONNX
#: tensors pack 8 // bits of them per byte, element k of a byte in its bits
#: [k * bits, (k + 1) * bits); NumPy (ml_dtypes) holds one per byte, in the
#: low bits.  The kernels compute them through the 8-bit type of their
#: signedness, which holds every value.
SUBBYTE_ROWS: tuple[tuple[str, int, int, int, int], ...] = (
    ("int4", 22, 4, -8, 7),
    ("uint4", 21, 4, 0, 15),
    ("int2", 26, 2, -2, 1),
    ("uint2", 25, 2, 0, 3),
)

#: The small float types of QuantizeLinear-19 (float8) and -23 (float4):
#: name (ONNX's), ONNX code, ml_dtypes' name, bits, exponent bits, mantissa
#: bits, exponent bias, largest finite value, and the encoding of the special
#: values:
#:   "fn"   no infinities; NaN has every exponent and mantissa bit set;
#:   "fnuz" no infinities, no negative zero; the one NaN is 0x80;
#:   "ieee" infinities and NaNs as IEEE 754 (all exponent bits set);
#:   "none" neither infinities nor NaN (float4e2m1).
#: float4e2m1 is packed two per byte in ONNX tensors, as int4 is.  The
#: kernels compute them through float32.
SMALLFLOAT_ROWS: tuple[tuple[str, int, str, int, int, int, int, float, str], ...] = (
    ("float8e4m3fn", 17, "float8_e4m3fn", 8, 4, 3, 7, 448.0, "fn"),
    ("float8e4m3fnuz", 18, "float8_e4m3fnuz", 8, 4, 3, 8, 240.0, "fnuz"),
    ("float8e5m2", 19, "float8_e5m2", 8, 5, 2, 15, 57344.0, "ieee"),
    ("float8e5m2fnuz", 20, "float8_e5m2fnuz", 8, 5, 2, 16, 57344.0, "fnuz"),
    ("float4e2m1", 23, "float4_e2m1fn", 4, 2, 1, 1, 6.0, "none"),
)

#: The sub-byte types ``com.microsoft`` QuantizeLinear / DequantizeLinear
#: also take.
MICROSOFT_SUBBYTE_TYPES: tuple[str, ...] = ("int4", "uint4")
