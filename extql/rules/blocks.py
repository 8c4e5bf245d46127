"""The rules of Quark's block formats: attributes, element types, refusals.

``BFPQuantizeDequantize`` and ``MXQuantizeDequantize`` (docs/operators:
bfp_quantize_dequantize, mx_quantize_dequantize) take their whole behaviour
from node attributes.  This module is the one place those attributes are
written: their defaults, the values each one accepts, the element types of
MX with their exponent / mantissa bits, emax and largest magnitude, and the
checks that refuse what Quark's own library leaves undefined (it crashes,
aborts the process or reads uninitialised memory there).  The NumPy API, the
onnxruntime library (through a C header generated from the tables), the
reference ops and ``extql check`` all read it, so that a value is accepted or
refused with the same words everywhere.

Plain data and checks, no numpy: the tables are tuples of numbers and
strings, and the words of every refusal are templates (:data:`MESSAGES`),
so that ``tools/gen_block_rules_header.py`` writes them into C
(``extql/src/extql_block_rules.h``, at build time) as
``tools/gen_types_header.py`` writes ``extql/src/extql_types.h`` from
``extql/rules/typetable.py``.

The checks raise ``TypeError`` for a value of the wrong kind (a string where
an integer belongs) and ``ValueError`` for a value outside the accepted ones;
each message names the operator (and the node, when given), the attribute
and the value.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from .._entrypoints import BLOCK_KINDS

__all__ = [
    "BFP_OP",
    "MX_OP",
    "BFP_LEGACY_OP",
    "MX_LEGACY_OP",
    "X_TYPES",
    "BFP_ATTRIBUTES",
    "MX_ATTRIBUTES",
    "BFP_METHODS",
    "METHOD_TO_BFP",
    "METHOD_TO_BFP_PRIME",
    "KERNEL_MX",
    "ROUNDING_MODES",
    "BIT_WIDTH_RANGE",
    "SUB_BLOCK_SHIFT_BITS_RANGE",
    "MX_ELEMENT_ROWS",
    "MX_ELEMENTS",
    "MXElement",
    "BFPAttrs",
    "MXAttrs",
    "SIGN_AND_EXPONENT_BITS",
    "MESSAGES",
    "CHOICES",
    "refusal",
    "check_bfp",
    "check_mx",
    "check_axis",
    "check_x_type",
]

#: The operators (domain com.amd.quark) and their legacy names (com.vai.quantize).
BFP_OP = "BFPQuantizeDequantize"
MX_OP = "MXQuantizeDequantize"
BFP_LEGACY_OP = "BFPFixNeuron"
MX_LEGACY_OP = "MXFixNeuron"

#: The types of x (and y): name, ONNX ``TensorProto.DataType`` code.  float16
#: is widened exactly to float32, computed, and rounded back (nearest even).
X_TYPES: tuple[tuple[str, int], ...] = (("float32", 1), ("float16", 10))

#: BFPQuantizeDequantize's attributes in Quark's order: name, kind ("s" a
#: string, "i" an integer) and the value when absent (Quark's op defaults).
BFP_ATTRIBUTES: tuple[tuple[str, str, Any], ...] = (
    ("bfp_method", "s", "to_bfp"),
    ("axis", "i", 1),
    ("bit_width", "i", 16),
    ("block_size", "i", 8),
    ("rounding_mode", "i", 0),
    ("sub_block_size", "i", 2),
    ("sub_block_shift_bits", "i", 1),
    ("convert_to_bfloat_before_bfp", "i", 0),
    ("use_compiler_version_cpu_kernel", "i", 0),
)

#: MXQuantizeDequantize's attributes, as BFP_ATTRIBUTES.
MX_ATTRIBUTES: tuple[tuple[str, str, Any], ...] = (
    ("element_dtype", "s", "int8"),
    ("axis", "i", 1),
    ("block_size", "i", 32),
    ("rounding_mode", "i", 0),
)

#: The kernels' operation codes (the ``kind`` of their parameter struct,
#: ExtqlBlockParams, whose codes extql/_entrypoints.py lists): BFP's two
#: methods and MX.
METHOD_TO_BFP = dict(BLOCK_KINDS)["BFP"]
METHOD_TO_BFP_PRIME = dict(BLOCK_KINDS)["BFP_PRIME"]
KERNEL_MX = dict(BLOCK_KINDS)["MX"]

#: bfp_method values and the method each one means: one shared exponent per
#: block, or a shared exponent with a shift per sub-block (MX4 / MX6 / MX9).
#: "to_bfp_prime_shared" is the old name of "to_bfp_prime" (Quark accepts it).
BFP_METHODS: tuple[tuple[str, int], ...] = (
    ("to_bfp", METHOD_TO_BFP),
    ("to_bfp_prime", METHOD_TO_BFP_PRIME),
    ("to_bfp_prime_shared", METHOD_TO_BFP_PRIME),
)

#: rounding_mode values: 0 half away from zero, 1 half toward +inf, 2 half
#: to even (each with its own sign-of-zero rule, docs/operators).
ROUNDING_MODES: tuple[tuple[int, str], ...] = (
    (0, "half away from zero"),
    (1, "half toward +inf"),
    (2, "half to even"),
)

#: The bits of a BFP element besides its mantissa: a sign and 8 exponent
#: bits (m = bit_width - SIGN_AND_EXPONENT_BITS mantissa bits).
SIGN_AND_EXPONENT_BITS = 9

#: bit_width by method (m = bit_width - 9 mantissa bits beside a sign and 8
#: exponent bits): to_bfp takes m in 1..23, where every block's step
#: 2^(E - 126 - m) and largest magnitude (2^m - 1) * step are float32 values;
#: to_bfp_prime m in 0..24, where the count of dropped mantissa bits is never
#: negative.  Outside them Quark's library clamps with crossed bounds,
#: divides by a step of 0 or wraps its bit count around: undefined, refused.
BIT_WIDTH_RANGE: dict[int, tuple[int, int]] = {
    METHOD_TO_BFP: (10, 32),
    METHOD_TO_BFP_PRIME: (9, 33),
}

#: sub_block_shift_bits (to_bfp_prime): the largest sub-block shift is
#: 2^bits - 1 (from 8 up no cap: no shift exceeds 254); Quark shifts a 32-bit
#: 1 by it, which C defines for 0..31.
SUB_BLOCK_SHIFT_BITS_RANGE: tuple[int, int] = (0, 31)

#: MX element types: name, exponent bits, mantissa bits, emax (the scale is
#: 2^(E - 127 - emax) for the block's largest float32 exponent field E), the
#: largest magnitude, and the lowest value.  int8 (exponent bits 0) is a
#: fixed-point element k * 2^-6, k in [-128, 127].
MX_ELEMENT_ROWS: tuple[tuple[str, int, int, int, float, float], ...] = (
    ("int8", 0, 0, 0, 127.0, -128.0),
    ("fp8_e5m2", 5, 2, 15, 57344.0, -57344.0),
    ("fp8_e4m3", 4, 3, 8, 448.0, -448.0),
    ("fp6_e3m2", 3, 2, 4, 28.0, -28.0),
    ("fp6_e2m3", 2, 3, 2, 7.5, -7.5),
    ("fp4_e2m1", 2, 1, 2, 6.0, -6.0),
)


class MXElement:
    """One row of MX_ELEMENT_ROWS, by field name."""

    __slots__ = ("name", "ebits", "mbits", "emax", "largest", "lowest")

    def __init__(self, name: str, ebits: int, mbits: int, emax: int,
                 largest: float, lowest: float) -> None:
        self.name, self.ebits, self.mbits, self.emax = name, ebits, mbits, emax
        self.largest, self.lowest = largest, lowest

    @property
    def is_int(self) -> bool:
        """The fixed-point int8 element (no exponent bits)."""
        return self.ebits == 0

    def __repr__(self) -> str:
        return (f"MXElement({self.name!r}, ebits={self.ebits}, mbits={self.mbits}, "
                f"emax={self.emax}, largest={self.largest})")


#: element_dtype -> MXElement.
MX_ELEMENTS: dict[str, MXElement] = {row[0]: MXElement(*row) for row in MX_ELEMENT_ROWS}

#: The words of every refusal, after "<operator>: " (or "<operator> node
#: '<name>': "): key -> a ``str.format`` template.  A field written
#: ``{f!r}`` is a string shown as Python's repr shows it, ``{f!s}`` a text
#: given as it is, a field of :data:`CHOICES` the accepted values of the
#: tables, any other an integer.  The onnxruntime library writes the same
#: words: ``tools/gen_block_rules_header.py`` makes each template a C function
#: of its fields.
MESSAGES: dict[str, str] = {
    "unknown_attribute": "unknown attribute {name!r} (it takes {names!s})",
    "not_string": "attribute {name!s} must be a string, got {value!s}",
    "not_integer": "attribute {name!s} must be an integer, got {value!s}",
    "bfp_method": "bfp_method {value!r} is not one of {bfp_methods}",
    "bit_width": ("bit_width {value} is outside [{lo}, {hi}] (bfp_method {method!r}: a sign, "
                  "8 exponent bits and {mlo} to {mhi} mantissa bits)"),
    "block_size": "block_size {value} must be >= 1",
    "rounding_mode": "rounding_mode {value} is not one of {rounding_modes}",
    "sub_block_size": ("sub_block_size {value} must be >= 1 and divide block_size {block} "
                       "(bfp_method {method!r})"),
    "sub_block_shift_bits": ("sub_block_shift_bits {value} is outside [{lo}, {hi}] "
                             "(bfp_method {method!r})"),
    "element_dtype": "element_dtype {value!r} is not one of {element_types}",
    "axis": "axis {value} is outside [{lo}, {hi}] for x of rank {rank}",
    "x_type": "x must be one of {x_types}, got {value!s}",
}

#: The accepted values the messages list, from the tables.
CHOICES: dict[str, str] = {
    "bfp_methods": ", ".join(repr(n) for n, _ in BFP_METHODS),
    "rounding_modes": ", ".join(f"{m} ({text})" for m, text in ROUNDING_MODES),
    "element_types": ", ".join(repr(n) for n in MX_ELEMENTS),
    "x_types": ", ".join(name for name, _ in X_TYPES),
}

#: The messages of a value of the wrong kind (TypeError); the others are
#: ValueError.
TYPE_ERRORS = frozenset({"not_string", "not_integer", "x_type"})


def refusal(key: str, op: str, node: str | None = None, **fields: Any) -> str:
    """The message of refusal ``key`` (:data:`MESSAGES`) for the operator
    (and node), with its fields."""
    return f"{_where(op, node)}: " + MESSAGES[key].format(**CHOICES, **fields)


def _refuse(key: str, op: str, node: str | None, **fields: Any) -> Exception:
    """The exception of refusal ``key``: TypeError or ValueError."""
    kind = TypeError if key in TYPE_ERRORS else ValueError
    return kind(refusal(key, op, node, **fields))


class BFPAttrs:
    """BFPQuantizeDequantize's checked attributes (check_bfp)."""

    __slots__ = ("method", "method_name", "axis", "bit_width", "block_size", "rounding_mode",
                 "sub_block_size", "sub_block_shift_bits", "bfloat_first", "compiler")

    def __init__(self, **values: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, values[name])

    @property
    def mantissa_bits(self) -> int:
        """m = bit_width - 9 (a sign bit and 8 exponent bits)."""
        return self.bit_width - SIGN_AND_EXPONENT_BITS

    def __repr__(self) -> str:
        return "BFPAttrs(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


class MXAttrs:
    """MXQuantizeDequantize's checked attributes (check_mx)."""

    __slots__ = ("element", "axis", "block_size", "rounding_mode")

    def __init__(self, element: MXElement, axis: int, block_size: int,
                 rounding_mode: int) -> None:
        self.element, self.axis = element, axis
        self.block_size, self.rounding_mode = block_size, rounding_mode

    def __repr__(self) -> str:
        return (f"MXAttrs(element={self.element.name!r}, axis={self.axis}, "
                f"block_size={self.block_size}, rounding_mode={self.rounding_mode})")


def _where(op: str, node: str | None) -> str:
    return f"{op} node {node!r}" if node else op


def _attrs(op: str, node: str | None, table: tuple[tuple[str, str, Any], ...],
           given: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes with their defaults, each of its kind; unknown names refused."""
    known = {name for name, _, _ in table}
    for name in given:
        if name not in known:
            raise _refuse("unknown_attribute", op, node, name=name,
                          names=", ".join(sorted(known)))
    out: dict[str, Any] = {}
    for name, kind, default in table:
        value = given.get(name, default)
        if value is None:
            value = default
        if kind == "s":
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if not isinstance(value, str):
                raise _refuse("not_string", op, node, name=name, value=repr(value))
        else:
            if isinstance(value, bool):
                value = int(value)
            try:
                value = operator.index(value)
            except TypeError:
                raise _refuse("not_integer", op, node, name=name, value=repr(value)) from None
        out[name] = value
    return out


def _rounding(op: str, node: str | None, mode: int) -> int:
    if mode not in {m for m, _ in ROUNDING_MODES}:
        raise _refuse("rounding_mode", op, node, value=mode)
    return mode


def _block_size(op: str, node: str | None, block: int) -> int:
    if block < 1:
        raise _refuse("block_size", op, node, value=block)
    return block


def check_bfp(attrs: Mapping[str, Any] | None = None, node: str | None = None, *,
              op: str = BFP_OP) -> BFPAttrs:
    """BFPQuantizeDequantize's attributes (missing ones take their defaults),
    checked.  Raises TypeError / ValueError naming the operator (``op``: the
    legacy name BFPFixNeuron where a node has it; and ``node``), the
    attribute and the value."""
    a = _attrs(op, node, BFP_ATTRIBUTES, attrs or {})
    methods = dict(BFP_METHODS)
    name = a["bfp_method"]
    if name not in methods:
        raise _refuse("bfp_method", op, node, value=name)
    method = methods[name]
    lo, hi = BIT_WIDTH_RANGE[method]
    if not lo <= a["bit_width"] <= hi:
        raise _refuse("bit_width", op, node, value=a["bit_width"], lo=lo, hi=hi, method=name,
                      mlo=lo - SIGN_AND_EXPONENT_BITS, mhi=hi - SIGN_AND_EXPONENT_BITS)
    block = _block_size(op, node, a["block_size"])
    _rounding(op, node, a["rounding_mode"])
    if method == METHOD_TO_BFP_PRIME:
        sub = a["sub_block_size"]
        if sub < 1 or block % sub:
            raise _refuse("sub_block_size", op, node, value=sub, block=block, method=name)
        slo, shi = SUB_BLOCK_SHIFT_BITS_RANGE
        if not slo <= a["sub_block_shift_bits"] <= shi:
            raise _refuse("sub_block_shift_bits", op, node, value=a["sub_block_shift_bits"],
                          lo=slo, hi=shi, method=name)
    return BFPAttrs(
        method=method, method_name=a["bfp_method"], axis=a["axis"], bit_width=a["bit_width"],
        block_size=block, rounding_mode=a["rounding_mode"],
        sub_block_size=a["sub_block_size"], sub_block_shift_bits=a["sub_block_shift_bits"],
        bfloat_first=int(a["convert_to_bfloat_before_bfp"] != 0),
        compiler=int(a["use_compiler_version_cpu_kernel"] != 0),
    )


def check_mx(attrs: Mapping[str, Any] | None = None, node: str | None = None, *,
             op: str = MX_OP) -> MXAttrs:
    """MXQuantizeDequantize's attributes (missing ones take their defaults),
    checked.  Raises TypeError / ValueError naming the operator (``op``: the
    legacy name MXFixNeuron where a node has it; and ``node``), the
    attribute and the value."""
    a = _attrs(op, node, MX_ATTRIBUTES, attrs or {})
    element = MX_ELEMENTS.get(a["element_dtype"])
    if element is None:
        raise _refuse("element_dtype", op, node, value=a["element_dtype"])
    return MXAttrs(element, a["axis"], _block_size(op, node, a["block_size"]),
                   _rounding(op, node, a["rounding_mode"]))


def check_axis(op: str, axis: int, rank: int, node: str | None = None) -> int:
    """The axis the blocks run along, in [0, rank): rank 0 and 1 ignore the
    attribute (0); from rank 2 it must be in [-rank, rank - 1] (negative
    counts from the back)."""
    if rank <= 1:
        return 0
    if not -rank <= axis < rank:
        raise _refuse("axis", op, node, value=axis, lo=-rank, hi=rank - 1, rank=rank)
    return axis % rank


def check_x_type(op: str, dtype_name: str, code: int | None,
                 node: str | None = None) -> int:
    """x's ONNX type code when it is one of X_TYPES (the name and the code of
    the dtype of x; code None: none of ONNX's), else TypeError."""
    if code not in {c for _, c in X_TYPES}:
        raise _refuse("x_type", op, node, value=dtype_name)
    return code
