"""The fallback functions' variants by name, without onnxscript.

An Extended node's fallback is the function of its *variant*: the zero
point's type (``"int8"``, ..., ``"float4e2m1"``), or ``"default"`` without a
zero point; a quantize of precision float64 takes the variant's
``"<variant>-float64"`` overload.  :mod:`extql.onnx.fallback_protos` builds
the functions; the passes that only name a variant
(:func:`extql.lower_to_standard`) import this module, which does not load
onnxscript.
"""

from __future__ import annotations

from ..rules.types import QUANTIZED, QUANTIZED_BY_ONNX
from .graph import type_name

__all__ = ["VARIANTS", "FLOAT64", "FLOAT64_VARIANTS", "float64_overload", "split_overload",
           "variant"]

#: Variant names: one per quantized type, plus "default" (no zero point).
VARIANTS: tuple[str, ...] = (*QUANTIZED, "default")


#: The suffix of the quantize functions of precision float64 (the attribute
#: ``precision`` 11, the default for an int32 scale): their ``overload`` is
#: ``"<variant>-float64"`` (``"int8-float64"``, ``"default-float64"``, ...).
FLOAT64 = "-float64"
#: The overloads of the precision-float64 quantize functions, one per variant.
FLOAT64_VARIANTS: tuple[str, ...] = tuple(f"{v}{FLOAT64}" for v in VARIANTS)


def float64_overload(variant: str) -> str:
    """The overload of a variant's precision-float64 quantize function."""
    return f"{variant}{FLOAT64}"


def split_overload(overload: str) -> tuple[str, bool]:
    """``(variant, float64)`` of an overload: ``"int8"`` -> ``("int8",
    False)``, ``"int8-float64"`` -> ``("int8", True)``."""
    if overload.endswith(FLOAT64):
        return overload[: -len(FLOAT64)], True
    return overload, False


def variant(zero_point_type: int | None) -> str:
    """The variant for a zero point's ONNX type code: its type name, or
    ``"default"`` for None (no zero point).  Raises ``ValueError`` for a
    type that is not a quantized type."""
    if zero_point_type is None:
        return "default"
    qt = QUANTIZED_BY_ONNX.get(zero_point_type)
    if qt is None:
        raise ValueError(
            f"zero point type {type_name(zero_point_type)} is not one "
            f"of {', '.join(QUANTIZED)}"
        )
    return qt.name
