"""The static checks of one quantization node: what its types and shapes prove wrong.

:func:`check_node` is shared by ``extql check`` (which reports every
problem), the graph passes (which refuse a model on the first, see
:func:`raise_first_problem`) and the onnxscript conversion hook
(:mod:`extql.onnx.script_export`).  Extended / Vitis nodes are held to extql's
operator documents, com.microsoft QuantizeLinear / DequantizeLinear to
onnxruntime's types for them.
"""

from __future__ import annotations

import onnx

from .. import rules
from ..rules.types import (
    FLOAT_NAMES,
    MS_DEQUANTIZE_TYPES,
    MS_FLOAT_NAMES,
    MS_QUANTIZE_TYPES,
    OUTPUT_CODES,
    PRECISION_CODES,
    QUANTIZE_SCALE_CODES,
    QUANTIZE_X_CODES,
    QUANTIZED_BY_ONNX,
    SCALE_CODES,
    code_of,
)
from .graph import ExtNode, TypeInfo, type_name

_QUANTIZED_NAMES = ", ".join(t.name for t in QUANTIZED_BY_ONNX.values())

__all__ = ["check_node", "raise_first_problem"]


def raise_first_problem(ext: ExtNode, types: dict[str, TypeInfo]) -> None:
    """Raise ``ValueError`` naming the node for the first problem that the
    static types and shapes prove (nothing when all is well or unknown)."""
    problems = check_node(ext, types)
    if problems:
        raise ValueError(f"{ext.label}: {problems[0]}")


#: The float types of quantize's x and the scales (ONNX codes -> names).
REAL_CODES: dict[int, str] = FLOAT_NAMES
REAL_NAMES = ", ".join(REAL_CODES.values())
#: The scale types with which a dequantize needs ``output_dtype``.
_NEEDS_OUTPUT_DTYPE: dict[int, str] = {code_of(n): n for n in rules.OUTPUT_DTYPE_REQUIRED}


def _code_name(code: int) -> str:
    """An ONNX element type code as a type name (or the number)."""
    try:
        return type_name(code)
    except Exception:  # noqa: BLE001 - any code that is no type
        return str(code)


def check_node(ext: ExtNode, types: dict[str, TypeInfo]) -> list[str]:
    """Every problem of one Extended (or com.microsoft Q/DQ) node that the
    static types/shapes prove.  com.microsoft nodes are held to onnxruntime's
    types for them (:mod:`extql.onnx.microsoft`), the Extended ones to extql's.

    Checks the input count, the types of x, the scale and the zero point, the
    scale's rank, the zero point's shape against the scale's, the axis range
    and the scale length against ``D[axis]`` (where the shapes are known).
    Unknown types and shapes are not problems (they are checked at run time).
    """
    node = ext.node
    problems: list[str] = []
    n_in = len(node.input)
    if not 2 <= n_in <= 3:
        return [f"has {n_in} inputs, expected 2 or 3 (x, scale[, zero point])"]
    if len(node.output) != 1:
        problems.append(f"has {len(node.output)} outputs, expected 1")
    if ext.microsoft:
        known = rules.MICROSOFT_ATTRIBUTES
    else:
        known = rules.attribute_names(rules.QUANTIZE if ext.quantize else rules.DEQUANTIZE)
    for attr in node.attribute:
        if attr.name not in known:
            problems.append(
                f"has an unknown attribute {attr.name!r} (only "
                f"{' and '.join(repr(k) for k in known)} {'is' if len(known) == 1 else 'are'} "
                "defined)"
            )
        elif attr.type != onnx.AttributeProto.INT:
            problems.append(f"attribute {attr.name!r} must be an INT")
        elif attr.name == "block_size" and attr.i < 0:
            problems.append(f"attribute 'block_size' must be >= 0, it is {attr.i}")
        elif attr.name == "precision" and attr.i not in PRECISION_CODES:
            problems.append(f"attribute 'precision' must be one of "
                            f"{', '.join(PRECISION_CODES.values())}, it is {_code_name(attr.i)}")
        elif attr.name == "output_dtype" and attr.i not in (
                QUANTIZED_BY_ONNX if ext.quantize else OUTPUT_CODES):
            problems.append(
                f"attribute 'output_dtype' must be one of "
                f"{_QUANTIZED_NAMES if ext.quantize else ', '.join(OUTPUT_CODES.values())}"
                f", it is {_code_name(attr.i)}")
    x_name, s_name = node.input[0], node.input[1]
    z_name = node.input[2] if ext.has_zero_point else None
    if not x_name or not s_name:
        problems.append("x and the scale are required inputs and must not be empty")
        return problems
    x, s = types.get(x_name), types.get(s_name)
    z = types.get(z_name) if z_name else None

    tname = type_name
    if ext.microsoft:
        allowed = MS_QUANTIZE_TYPES if ext.quantize else MS_DEQUANTIZE_TYPES
        floats = dict(MS_FLOAT_NAMES)
    else:
        allowed = set(QUANTIZED_BY_ONNX)
        floats = dict(REAL_CODES)
    names = ", ".join(sorted(tname(c) for c in allowed))
    float_names = " or ".join(floats.values()) if len(floats) < 3 else "one of " + REAL_NAMES
    if ext.quantize:
        # The Extended quantize also takes int32 x, as the official one does.
        x_types = floats if ext.microsoft else QUANTIZE_X_CODES
        if x is not None and x.elem_type not in x_types:
            x_names = float_names if ext.microsoft else "one of " + ", ".join(x_types.values())
            problems.append(f"x {x_name!r} must be {x_names}, it is {tname(x.elem_type)}")
        if z is not None and z.elem_type not in allowed:
            problems.append(
                f"the zero point {z_name!r} must be one of {names}, it is {tname(z.elem_type)}"
            )
    else:
        if x is not None and x.elem_type not in allowed:
            problems.append(f"x {x_name!r} must be one of {names}, it is {tname(x.elem_type)}")
        if x is not None and z is not None and z.elem_type != x.elem_type:
            problems.append(
                f"the zero point {z_name!r} must have the type of x ({tname(x.elem_type)}), "
                f"it is {tname(z.elem_type)}"
            )
    scales = (floats if ext.microsoft
              else QUANTIZE_SCALE_CODES if ext.quantize else SCALE_CODES)
    if s is not None and s.elem_type not in scales:
        problems.append(
            f"the scale {s_name!r} must be "
            f"{float_names if ext.microsoft else 'one of ' + ', '.join(scales.values())}, "
            f"it is {tname(s.elem_type)}"
        )
    if (s is not None and s.elem_type in _NEEDS_OUTPUT_DTYPE and not ext.quantize
            and not any(a.name == "output_dtype" and a.i for a in node.attribute)):
        problems.append(f"a {_NEEDS_OUTPUT_DTYPE[s.elem_type]} scale {s_name!r} needs the "
                        "attribute output_dtype (the output cannot have the scale's type)")
    if (ext.microsoft and ext.quantize and x is not None and s is not None
            and x.elem_type in floats and s.elem_type in floats and x.elem_type != s.elem_type):
        problems.append(
            f"the scale {s_name!r} must have the type of x ({tname(x.elem_type)}), "
            f"it is {tname(s.elem_type)}"
        )
    s_shape = s.shape if s is not None else None
    z_shape = z.shape if z is not None else None
    x_shape = x.shape if x is not None else None
    if not ext.microsoft and ext.block_size > 0:
        return problems + _blocked_problems(ext, x_shape, s_name, s_shape, z_name, z_shape)
    if s_shape is not None and len(s_shape) >= 2:
        problems.append(
            f"the scale {s_name!r} must be a scalar or 1-D, it has shape {s_shape}"
            + ("" if ext.microsoft else " (a blocked scale, of x's rank, needs block_size > 0)")
        )
        return problems
    if s_shape is not None and z_shape is not None:
        s_one = len(s_shape) == 0 or s_shape[0] == 1
        z_one = len(z_shape) == 0 or (len(z_shape) == 1 and z_shape[0] == 1)
        if s_one:
            if not z_one and all(isinstance(d, int) for d in z_shape):
                problems.append(
                    f"the zero point {z_name!r} must have the shape of the scale {s_shape}, "
                    f"it has {z_shape}"
                )
        elif tuple(z_shape) != tuple(s_shape) and all(
            isinstance(d, int) for d in (*z_shape, *s_shape)
        ):
            problems.append(
                f"the zero point {z_name!r} must have the shape of the scale {s_shape}, "
                f"it has {z_shape}"
            )
    per_axis = s_shape is not None and len(s_shape) == 1 and s_shape[0] != 1
    if per_axis and x_shape is not None:
        rank = len(x_shape)
        axis = ext.axis
        if not -rank <= axis < rank:
            problems.append(f"axis {axis} is out of range for x of rank {rank}")
        else:
            dim = x_shape[axis % rank]
            if isinstance(dim, int) and isinstance(s_shape[0], int) and dim != s_shape[0]:
                problems.append(
                    f"the scale has {s_shape[0]} elements but x has {dim} along axis "
                    f"{axis % rank} (shape {x_shape})"
                )
    return problems


def _blocked_problems(ext: ExtNode, x_shape, s_name: str, s_shape, z_name: str | None,
                      z_shape) -> list[str]:
    """The problems of a blocked node (block_size > 0) that the static shapes
    prove: the scale of x's shape except ceil(D / block_size) along axis,
    the zero point of the scale's shape."""
    block = ext.block_size
    problems: list[str] = []
    if x_shape is not None:
        rank = len(x_shape)
        axis = ext.axis
        if rank == 0:
            return [f"blocked quantization (block_size {block}) needs x of rank >= 1"]
        if not -rank <= axis < rank:
            return [f"axis {axis} is out of range for x of rank {rank}"]
        a = axis % rank
        if s_shape is not None and len(s_shape) != rank:
            problems.append(
                f"with block_size {block}, the scale {s_name!r} must have x's rank {rank}, "
                f"it has shape {s_shape}"
            )
        elif s_shape is not None:
            for i, (xd, sd) in enumerate(zip(x_shape, s_shape, strict=True)):
                if not (isinstance(xd, int) and isinstance(sd, int)):
                    continue
                want = -(-xd // block) if i == a else xd
                if sd != want:
                    problems.append(
                        f"with block_size {block} along axis {a}, the scale {s_name!r} must "
                        f"have {want} elements along dimension {i} (x's shape {x_shape}), "
                        f"it has shape {s_shape}"
                    )
                    break
    if (z_shape is not None and s_shape is not None and tuple(z_shape) != tuple(s_shape)
            and all(isinstance(d, int) for d in (*z_shape, *s_shape))):
        problems.append(
            f"the zero point {z_name!r} must have the shape of the scale {s_shape}, "
            f"it has {z_shape}"
        )
    return problems
