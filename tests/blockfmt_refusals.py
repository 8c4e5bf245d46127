"""The block-format nodes every path must refuse, for the tests of each path
(tests/blockfmt/test_block_ops.py: the NumPy API, the library, the reference
ops; tests/blockfmt/test_block_tools.py: ``extql check``).

* :data:`REFUSED` -- (op, attributes, rank of x): the contract's undefined
  cases and extql's own bounds; :func:`refused_attribute` names the
  attribute at fault;
* :data:`WRONG_KIND` -- attributes of the wrong kind, with the words that
  name the value;
* :data:`OTHER_X_TYPES` -- types of x no block format takes.
"""

from __future__ import annotations

BFP = "BFPQuantizeDequantize"
MX = "MXQuantizeDequantize"

#: (op, attributes, rank): the contract's undefined cases, and extql's own
#: bounds (bit_width, sub_block_shift_bits: where Quark computes with steps
#: that are no float32 or with undefined shifts).  A rank-1 axis case runs
#: (rank 1 ignores the axis).
REFUSED = [
    (BFP, {"bfp_method": "to_bfp_primes"}, 2),
    (BFP, {"bfp_method": ""}, 2),
    (BFP, {"rounding_mode": 3}, 2),
    (BFP, {"rounding_mode": -1}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "rounding_mode": 7}, 2),
    (BFP, {"block_size": 0}, 2),
    (BFP, {"block_size": -8}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_size": 3}, 2),
    (BFP, {"bfp_method": "to_bfp_prime_shared", "block_size": 8, "sub_block_size": 0}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 8, "sub_block_size": -2}, 2),
    (BFP, {"axis": 2}, 2),
    (BFP, {"axis": -3}, 2),
    (BFP, {"axis": 4}, 4),
    (BFP, {"axis": 3}, 3),
    (BFP, {"bit_width": 9}, 2),
    (BFP, {"bit_width": 8}, 2),
    (BFP, {"bit_width": 33}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "bit_width": 34}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "bit_width": 8}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_shift_bits": -1}, 2),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_shift_bits": 32}, 2),
    (MX, {"element_dtype": "fp8"}, 2),
    (MX, {"element_dtype": "mxfp4"}, 2),
    (MX, {"element_dtype": "INT8"}, 2),
    (MX, {"element_dtype": "it's"}, 2),
    (MX, {"rounding_mode": 5}, 2),
    (MX, {"element_dtype": "fp4_e2m1", "rounding_mode": -2}, 2),
    (MX, {"block_size": 0}, 2),
    (MX, {"axis": -4}, 3),
    (MX, {"axis": 1}, 1),
    ("BFPFixNeuron", {"bfp_method": "to_bfp", "bit_width": 40}, 3),
    ("MXFixNeuron", {"element_dtype": "fp16"}, 3),
]


def refused_id(case: tuple[str, dict, int]) -> str:
    """A test id of a REFUSED case."""
    op, attrs, rank = case
    return f"{op[:3]}-" + "-".join(f"{k}={v}" for k, v in attrs.items()) + f"-r{rank}"


def refused_attribute(attrs: dict) -> tuple[str, object]:
    """The attribute at fault: the one case-specific attribute (not the
    context, bfp_method / block_size, unless it is the only one)."""
    context = {"bfp_method", "block_size"}
    keys = [k for k in attrs if k not in context] or list(attrs)
    return keys[-1], attrs[keys[-1]]


def refused_shape(rank: int) -> tuple[int, ...]:
    """x's shape in a REFUSED case of that rank."""
    return (2, 16, 3, 1)[:rank] if rank else ()


#: Attributes of the wrong kind, with the words naming the value.
WRONG_KIND = [
    ("block_size", "8", "attribute block_size must be an integer, got '8'"),
    ("axis", 1.5, "attribute axis must be an integer, got 1.5"),
    ("rounding_mode", "0", "attribute rounding_mode must be an integer, got '0'"),
    ("axis", 0.1, "attribute axis must be an integer, got 0.10000000149011612"),
    ("block_size", [8, 16], "attribute block_size must be an integer, got [8, 16]"),
]

#: Types of x that no block format takes (NumPy's names, which the refusals use).
OTHER_X_TYPES = ["float64", "int32", "uint8", "bool"]
