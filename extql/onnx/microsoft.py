"""``com.microsoft`` QuantizeLinear / DequantizeLinear, and custom ops extql cannot run.

AMD Quark ends quantization by rewriting every Extended Q/DQ node of type
int8, uint8, int16 or uint16 (and int32 dequantize with a zero point of 0)
into onnxruntime's contrib operators ``com.microsoft::QuantizeLinear`` /
``DequantizeLinear`` (docs/differences.rst, "Models as Quark writes them").  A real
Quark model mixes them with Extended nodes, so extql treats them as
first-class:

* their meaning, as onnxruntime's CPU kernels compute it: ``axis`` defaults
  to 1, the zero point is optional (0; uint8 output for quantize without
  one), the quantized type is int8, uint8, int16, uint16, int4 or uint4
  (int32 for dequantize, whose ``x - zero_point`` is computed in 32 bits and
  wraps);
* :func:`to_extended` renames them to the Extended operators where both mean
  the same bits (float32 x and scale; 8/16-bit types; int32 dequantize with
  no zero point or a constant all-zero one), which the fallbacks and the
  graph passes then handle like any Extended node;
* :func:`unsupported_nodes` names every node of a custom domain that neither
  extql nor onnxruntime implements (another vendor's custom op, for
  example), so that tools report them instead of ignoring them.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto

from ..api.linear import dequantize_linear
from ..rules.types import (
    DEFAULT_QTYPE,
    DOMAIN,
    EXTENDED_OPS,
    MS_DEQUANTIZE_TYPES,
    MS_DOMAIN,
    MS_EXACT_TYPES,
    MS_QDQ,
    MS_QUANTIZE_TYPES,
    OP_NAMES,
    QTYPES,
)
from .blocks import BLOCK_OPS
from .check import check_node
from .dpu import DPU_OPS
from .graph import (
    constant_value,
    copy_model,
    drop_unused_imports,
    extended_nodes,
    graphs,
    infer_types,
    model_opset,
    type_name,
)

__all__ = [
    "MS_DOMAIN",
    "MS_QDQ",
    "MS_QUANTIZE_TYPES",
    "MS_DEQUANTIZE_TYPES",
    "is_microsoft_qdq",
    "to_extended",
    "unsupported_nodes",
    "int32_difference",
    "int32_wraps",
    "reference_dequantize_int32",
]

# (MS_DOMAIN, MS_QDQ and the type sets are the type table's, extql.rules.types.)
_INT32 = QTYPES["int32"]

# Domains whose every operator is known without onnxruntime's help.
_STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


def is_microsoft_qdq(node: onnx.NodeProto) -> bool:
    """True for a com.microsoft QuantizeLinear / DequantizeLinear node."""
    return node.domain == MS_DOMAIN and node.op_type in MS_QDQ


def to_extended(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every com.microsoft Q/DQ node (subgraphs too)
    renamed to ExtendedQuantizeLinear / ExtendedDequantizeLinear.

    Only where both give the same bits: float32 x and scale, an 8/16-bit
    type, or int32 dequantize without a zero point or with a constant
    all-zero one.  Any other com.microsoft Q/DQ node raises a ``ValueError``
    that names it and says why; the ``com.amd.quark`` opset import is added
    when a node was renamed, the ``com.microsoft`` one dropped when no node
    of that domain is left.
    """
    out = copy_model(model)
    nodes = [e for e in extended_nodes(out, microsoft=True) if e.microsoft]
    if not nodes:
        return out
    types = infer_types(out)
    for ext in nodes:
        problems = check_node(ext, types)
        if problems:
            raise ValueError(f"{ext.label}: {problems[0]}")
        node = ext.node
        code = _quantized_type(ext, types)
        for name in [node.input[1]] + ([node.input[0]] if ext.quantize else []):
            info = types.get(name)
            if info is not None and info.elem_type != TensorProto.FLOAT:
                raise ValueError(
                    f"{ext.label}: only a float32 scale (and x) can be rewritten as standard ops, "
                    f"{name!r} is {type_name(info.elem_type)}"
                )
        if code == _INT32.onnx:
            if ext.has_zero_point:
                zp = constant_value(node.input[2], [ext.graph, out.graph])
                if zp is None or np.any(zp != 0):
                    raise ValueError(
                        f"{ext.label}: int32 with a zero point that is not a constant zero: "
                        "onnxruntime computes x - zero_point in 32 bits (wrapping), which has "
                        "no exact standard-ops form here"
                    )
        elif code is not None and code not in MS_EXACT_TYPES:
            raise ValueError(
                f"{ext.label}: type {type_name(code)} has no standard-ops fallback in extql "
                "(int8, uint8, int16, uint16, and int32 dequantize are supported)"
            )
        node.domain = DOMAIN
        node.op_type = OP_NAMES[DOMAIN][0 if ext.quantize else 1]
    if model_opset(out, DOMAIN) is None:
        out.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    drop_unused_imports(out, (MS_DOMAIN,))
    return out


def _quantized_type(ext, types) -> int | None:
    """ONNX type code of the quantized side (zero point, else x for
    dequantize; uint8 for quantize without zero point); None if unknown."""
    node = ext.node
    if ext.has_zero_point and node.input[2] in types:
        return types[node.input[2]].elem_type
    if not ext.quantize:
        info = types.get(node.input[0])
        return None if info is None else info.elem_type
    return DEFAULT_QTYPE.onnx if not ext.has_zero_point else None


@functools.cache
def _onnxruntime_ops() -> frozenset[tuple[str, str]] | None:
    """(domain, op_type) of every operator onnxruntime's installed build has a
    kernel for, or None when that cannot be asked."""
    try:
        from onnxruntime.capi import _pybind_state as state

        defs = state.get_all_opkernel_def()
    except Exception:  # noqa: BLE001 - no onnxruntime, or a build without the listing
        return None
    return frozenset((d.domain or "", d.op_name) for d in defs)


def _known(domain: str, op_type: str, functions: set[tuple[str, str]]) -> bool:
    if domain in _STANDARD_DOMAINS:
        return True
    if (domain, op_type) in functions:
        return True
    if (domain, op_type) in EXTENDED_OPS or (domain, op_type) in BLOCK_OPS or (
            domain, op_type) in DPU_OPS:
        return True
    if domain == MS_DOMAIN and op_type in MS_QDQ:
        return True
    ops = _onnxruntime_ops()
    if ops is not None:
        return (domain, op_type) in ops
    # Without onnxruntime's listing: a schema onnx knows of is a known op.
    try:
        onnx.defs.get_schema(op_type, domain=domain)
    except onnx.defs.SchemaError:
        return False
    return True


def unsupported_nodes(model: onnx.ModelProto) -> list[str]:
    """One line per operator (domain, op_type) of a custom domain that neither
    extql nor onnxruntime implements, naming it and how many nodes use it.

    Standard ONNX domains, the Extended / Vitis operators, the block formats
    (BFPQuantizeDequantize / MXQuantizeDequantize, BFPFixNeuron /
    MXFixNeuron), the DPU-emulation operators (ExtendedInstanceNormalization /
    ExtendedLSTM, VitisInstanceNormalization / VitisLSTM), com.microsoft Q/DQ,
    the model's own functions and every operator the installed onnxruntime
    has a kernel for are supported: every operator of Quark's library is.
    """
    functions = {(f.domain, f.name) for f in model.functions}
    count: dict[tuple[str, str], list[str]] = {}
    for graph in graphs(model.graph):
        for node in graph.node:
            key = (node.domain, node.op_type)
            if not _known(node.domain, node.op_type, functions):
                count.setdefault(key, []).append(node.name or node.output[0])
    lines = []
    for (domain, op_type), names in sorted(count.items()):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        lines.append(
            f"{op_type} ({domain}): {len(names)} node(s) ({shown}): an operator that neither "
            "extql nor this onnxruntime implements"
        )
    return lines


def int32_difference(x: np.ndarray, zero_point: np.ndarray, axis: int) -> np.ndarray:
    """``x - zero_point`` of int32 values, exact (int64), the zero point
    (flattened) lined up with ``axis``: onnxruntime's com.microsoft
    DequantizeLinear computes it in 32 bits, which wraps where this leaves
    int32's range."""
    x = np.asarray(x)
    zp = np.asarray(zero_point).astype(np.int64).reshape(-1)
    if zp.size <= 1 or x.ndim == 0:
        zp = zp.reshape(()) if zp.size else np.int64(0)
    else:
        shape = [1] * x.ndim
        shape[axis % x.ndim] = zp.size
        zp = zp.reshape(shape)
    return x.astype(np.int64) - zp


def int32_wraps(x: np.ndarray, zero_point: np.ndarray, axis: int) -> bool:
    """Whether onnxruntime's 32-bit ``x - zero_point`` wraps for some element
    (then its com.microsoft int32 dequantize differs from the Extended one)."""
    diff = int32_difference(x, zero_point, axis)
    return bool(diff.size) and bool(diff.min() < _INT32.lo or diff.max() > _INT32.hi)


def reference_dequantize_int32(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int
) -> np.ndarray:
    """com.microsoft DequantizeLinear of int32, as onnxruntime computes it:
    ``float32(int32(x - zero_point)) * scale`` with the difference wrapping in
    32 bits (the Extended operator computes it exactly instead); the float
    part is the kernels' (:func:`extql.dequantize_linear` of the wrapped
    difference)."""
    x = np.asarray(x, np.int32)
    if zero_point is None:
        return dequantize_linear(x, scale, None, axis=axis)
    diff = int32_difference(x, zero_point, axis).astype(np.int32)  # wraps like int32 math
    return dequantize_linear(diff, scale, None, axis=axis)
