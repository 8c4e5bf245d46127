"""``onnx.reference`` implementations of the Extended operators.

``ReferenceEvaluator(model, new_ops=extql.reference.OPS)`` runs any model with
ExtendedQuantizeLinear / ExtendedDequantizeLinear (``com.amd.quark``) or the
legacy VitisQuantizeLinear / VitisDequantizeLinear (``com.vai.quantize``)
nodes, computed by the extql kernels through the NumPy API, so the results are
the kernels' bits (bfloat16 as ``ml_dtypes.bfloat16``, which is what
onnx.reference uses).  Bad inputs raise the NumPy API's TypeError/ValueError,
whose messages name the operator.

``OPS`` also has onnxruntime's ``com.microsoft`` QuantizeLinear /
DequantizeLinear, which AMD Quark writes for its 8/16-bit nodes and which
``onnx.reference`` has no implementation of: int8/uint8/int16/uint16 through
the same kernels (the operators agree there; float16 x and scale divided in
float32, as onnxruntime does there), int32 dequantize with the
difference wrapping in 32 bits as onnxruntime computes it, and int4/uint4
with float32 x and scale.

``OPS`` also has Quark's block formats: ``BFPQuantizeDequantize`` /
``MXQuantizeDequantize`` (``com.amd.quark``) and the legacy ``BFPFixNeuron``
/ ``MXFixNeuron`` (``com.vai.quantize``), computed by
:func:`extql.bfp_quantize_dequantize` / :func:`extql.mx_quantize_dequantize`
(the kernels' bits, which are Quark's).  A node's attributes are checked
when the evaluator is made, x's type and the axis against x's rank when it
runs, by :mod:`extql.rules.blocks`: the refusals of the NumPy API, in the same
words, naming the node.

``OPS`` also has Quark's DPU-emulation operators:
``ExtendedInstanceNormalization`` / ``ExtendedLSTM`` (``com.amd.quark``) and
the legacy ``VitisInstanceNormalization`` / ``VitisLSTM``
(``com.vai.quantize``), computed by
:func:`extql.extended_instance_normalization` / :func:`extql.extended_lstm`
(the kernels' bits, which are Quark's), refused in the NumPy API's words.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

from .api.blocks import bfp_quantize_dequantize, mx_quantize_dequantize
from .api.dpu import extended_instance_normalization
from .api.linear import dequantize_linear, quantize_linear
from .api.lstm import extended_lstm
from .onnx.microsoft import reference_dequantize_int32
from .rules import DEFAULTS
from .rules import lstm as lstm_rules
from .rules.blocks import (
    BFP_OP,
    MX_OP,
    X_TYPES,
    check_axis,
    check_bfp,
    check_mx,
    check_x_type,
)
from .rules.dpu import DEFAULT_EPSILON, in_problems
from .rules.types import (
    DOMAIN,
    FLOAT_CODES,
    LEGACY_DOMAIN,
    MS_DOMAIN,
    MS_FLOAT_NAMES,
    SUBBYTE,
    SubByteType,
)

__all__ = [
    "OPS",
    "ExtendedQuantizeLinear",
    "ExtendedDequantizeLinear",
    "VitisQuantizeLinear",
    "VitisDequantizeLinear",
    "MicrosoftQuantizeLinear",
    "MicrosoftDequantizeLinear",
    "BFPQuantizeDequantize",
    "MXQuantizeDequantize",
    "BFPFixNeuron",
    "MXFixNeuron",
    "ExtendedInstanceNormalization",
    "VitisInstanceNormalization",
    "ExtendedLSTM",
    "VitisLSTM",
]


def _present(value: Any) -> bool:
    return value is not None


def _code(value: Any) -> int | None:
    """An ONNX type-code attribute: None for 0 / absent."""
    return int(value) or None if value is not None else None


_D = DEFAULTS


class _Quantize(OpRun):
    def _run(self, x, y_scale, y_zero_point=None, axis=_D["axis"],  # type: ignore[override]
             block_size=_D["block_size"], output_dtype=_D["output_dtype"],
             precision=_D["precision"], saturate=_D["saturate"]):
        zp = y_zero_point if _present(y_zero_point) else None
        return (quantize_linear(x, y_scale, zp, axis=int(axis), block_size=int(block_size),
                                output_dtype=_code(output_dtype), precision=_code(precision),
                                saturate=bool(saturate)),)


class _Dequantize(OpRun):
    def _run(self, x, x_scale, x_zero_point=None, axis=_D["axis"],  # type: ignore[override]
             block_size=_D["block_size"], output_dtype=_D["output_dtype"]):
        zp = x_zero_point if _present(x_zero_point) else None
        return (np.asarray(dequantize_linear(x, x_scale, zp, axis=int(axis),
                                             block_size=int(block_size),
                                             output_dtype=_code(output_dtype))),)


# onnx.reference finds a class by (op_domain, class name), so each operator
# name is its own class.


class ExtendedQuantizeLinear(_Quantize):
    """com.amd.quark ExtendedQuantizeLinear (version 1)."""

    op_domain = DOMAIN


class ExtendedDequantizeLinear(_Dequantize):
    """com.amd.quark ExtendedDequantizeLinear (version 1)."""

    op_domain = DOMAIN


class VitisQuantizeLinear(_Quantize):
    """com.vai.quantize VitisQuantizeLinear: the legacy name, same semantics."""

    op_domain = LEGACY_DOMAIN


class VitisDequantizeLinear(_Dequantize):
    """com.vai.quantize VitisDequantizeLinear: the legacy name, same semantics."""

    op_domain = LEGACY_DOMAIN


def _subbyte(a: np.ndarray) -> SubByteType | None:
    """The int4 / uint4 type of ``a`` (ml_dtypes), else None."""
    return SUBBYTE.get(a.dtype.name)


def quantize_subbyte(x, scale, zero_point: np.ndarray, axis: int):
    """com.microsoft QuantizeLinear to int4 / uint4: x and scale as float32."""
    return quantize_linear(np.asarray(x, np.float32), np.asarray(scale, np.float32),
                           zero_point, axis=axis)


def dequantize_subbyte(x: np.ndarray, scale, zero_point: np.ndarray | None, axis: int):
    """com.microsoft DequantizeLinear of int4 / uint4: a float32 scale."""
    return dequantize_linear(x, np.asarray(scale, np.float32), zero_point, axis=axis)


class _MicrosoftQuantize(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, y_scale, y_zero_point=None, axis=_D["axis"], **_):  # type: ignore[override]
        # (onnx.reference adds the ai.onnx schema's other attributes' defaults.)
        x = np.asarray(x)
        if FLOAT_CODES.get(x.dtype) not in MS_FLOAT_NAMES:
            # onnxruntime's contrib operator has kernels for these only.
            raise TypeError(f"com.microsoft QuantizeLinear: x must be "
                            f"{' or '.join(MS_FLOAT_NAMES.values())}, got {x.dtype}")
        zp = y_zero_point if _present(y_zero_point) else None
        sub = None if zp is None else _subbyte(np.asarray(zp))
        if sub is None:
            # onnxruntime's contrib operator divides float16 x and scale in
            # float32.
            return (quantize_linear(x, y_scale, zp, axis=int(axis), precision=np.float32),)
        return (quantize_subbyte(x, y_scale, np.asarray(zp), int(axis)),)


class _MicrosoftDequantize(OpRun):
    op_domain = MS_DOMAIN

    def _run(self, x, x_scale, x_zero_point=None, axis=_D["axis"], **_):  # type: ignore[override]
        zp = x_zero_point if _present(x_zero_point) else None
        x = np.asarray(x)
        if x.dtype == np.int32:
            return (np.asarray(reference_dequantize_int32(x, x_scale, zp, int(axis))),)
        if _subbyte(x) is not None:
            return (np.asarray(dequantize_subbyte(x, x_scale, zp, int(axis))),)
        return (np.asarray(dequantize_linear(x, x_scale, zp, axis=int(axis))),)


# The com.microsoft operators carry the official names: classes made with type()
# so that this module's namespace keeps its own QuantizeLinear-free names.
MicrosoftQuantizeLinear = type(
    "QuantizeLinear", (_MicrosoftQuantize,),
    {"__doc__": "com.microsoft QuantizeLinear (onnxruntime contrib op), as onnxruntime runs it.",
     "__module__": __name__, "__qualname__": "MicrosoftQuantizeLinear"},
)
MicrosoftDequantizeLinear = type(
    "DequantizeLinear", (_MicrosoftDequantize,),
    {"__doc__": "com.microsoft DequantizeLinear (onnxruntime contrib op), as onnxruntime runs "
                "it.",
     "__module__": __name__, "__qualname__": "MicrosoftDequantizeLinear"},
)

_X_CODES = {np.dtype(name): code for name, code in X_TYPES}


def _plain(value: Any) -> Any:
    """An attribute as onnx.reference gives it, as the NumPy API takes it
    (a float attribute: onnx.reference's np.float32 as a Python float)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Block(OpRun):
    """A block-format node: its attributes checked when the evaluator is
    made (unless they come from an enclosing function's), x's type and the
    axis when it runs, then the NumPy API."""

    _family_op: str  # the NumPy API's operator (the family of the node's name)

    def __init__(self, onnx_node, run_params, schema=None):  # type: ignore[no-untyped-def]
        super().__init__(onnx_node, run_params, schema)
        self._label = onnx_node.name or None
        if not self.has_linked_attribute:
            self._check(self._attributes({n: getattr(self, n) for n in self.attributes_names_}))

    def _attributes(self, given: dict[str, Any]) -> dict[str, Any]:
        return {k: _plain(v) for k, v in given.items()}

    def _check(self, attrs: dict[str, Any]) -> Any:
        check = check_bfp if self._family_op == BFP_OP else check_mx
        return check(attrs, self._label, op=self.onnx_node.op_type)

    def _run(self, x, **attributes):  # type: ignore[override]
        attrs = self._attributes(attributes)
        checked = self._check(attrs)
        op = self.onnx_node.op_type
        x = np.asarray(x)
        check_x_type(op, str(x.dtype), _X_CODES.get(x.dtype), self._label)
        check_axis(op, checked.axis, x.ndim, self._label)
        api = bfp_quantize_dequantize if self._family_op == BFP_OP else mx_quantize_dequantize
        return (api(x, **attrs),)


class BFPQuantizeDequantize(_Block):
    """com.amd.quark BFPQuantizeDequantize (version 1): block floating point."""

    op_domain = DOMAIN
    _family_op = BFP_OP


class MXQuantizeDequantize(_Block):
    """com.amd.quark MXQuantizeDequantize (version 1): OCP microscaling."""

    op_domain = DOMAIN
    _family_op = MX_OP


class BFPFixNeuron(_Block):
    """com.vai.quantize BFPFixNeuron: the legacy name of BFPQuantizeDequantize."""

    op_domain = LEGACY_DOMAIN
    _family_op = BFP_OP


class MXFixNeuron(_Block):
    """com.vai.quantize MXFixNeuron: the legacy name of MXQuantizeDequantize."""

    op_domain = LEGACY_DOMAIN
    _family_op = MX_OP


class _InstanceNorm(OpRun):
    """A DPU instance norm: :func:`extql.extended_instance_normalization`,
    its inputs refused first in the words of :mod:`extql.rules.dpu` naming
    the node's own operator."""

    def _run(self, x, scale, bias, epsilon=None):  # type: ignore[override]
        arrays = [np.asarray(v) for v in (x, scale, bias)]
        problems = in_problems(self.onnx_node.op_type, tuple(str(a.dtype) for a in arrays),
                               *(a.shape for a in arrays))
        if problems:
            kind = TypeError if "must be float32" in problems[0] else ValueError
            raise kind("; ".join(problems))
        eps = DEFAULT_EPSILON if epsilon is None else float(epsilon)
        return (extended_instance_normalization(x, scale, bias, epsilon=eps),)


class _LSTM(OpRun):
    """A DPU LSTM: :func:`extql.extended_lstm`, one result per output of the
    node (an empty array for an empty output name, which nothing reads:
    onnx.reference takes arrays only)."""

    def _run(self, x, w, r, b=None, *refused, **attributes):  # type: ignore[override]
        op = self.onnx_node.op_type
        for index, value in enumerate(refused, 4):
            if value is not None and index in lstm_rules.REFUSED_INPUTS:
                name, why = lstm_rules.REFUSED_INPUTS[index]
                raise ValueError(f"{op}: input {name} is not supported: {why}")
        attrs = {k: _plain(v) for k, v in attributes.items() if v is not None}
        lstm_rules.check_lstm(attrs, op, self.onnx_node.name or None)
        attrs.pop("input_forget", None)
        names = list(self.onnx_node.output)
        wanted = [n for n, o in zip(lstm_rules.OUTPUTS, names, strict=False) if o]
        got = extended_lstm(x, w, r, b, outputs=",".join(wanted), **attrs)
        values = iter([got] if isinstance(got, np.ndarray) else got)
        return tuple(next(values) if o else np.empty(0, np.float32) for o in names)


class ExtendedInstanceNormalization(_InstanceNorm):
    """com.amd.quark ExtendedInstanceNormalization (version 1): the DPU's instance norm."""

    op_domain = DOMAIN


class VitisInstanceNormalization(_InstanceNorm):
    """com.vai.quantize VitisInstanceNormalization: the legacy name."""

    op_domain = LEGACY_DOMAIN


class ExtendedLSTM(_LSTM):
    """com.amd.quark ExtendedLSTM (version 1): the DPU's 16-bit fixed-point LSTM."""

    op_domain = DOMAIN


class VitisLSTM(_LSTM):
    """com.vai.quantize VitisLSTM: the legacy name."""

    op_domain = LEGACY_DOMAIN


#: The classes to pass as ``new_ops`` to ``onnx.reference.ReferenceEvaluator``.
OPS: list[type[OpRun]] = [
    ExtendedQuantizeLinear,
    ExtendedDequantizeLinear,
    VitisQuantizeLinear,
    VitisDequantizeLinear,
    MicrosoftQuantizeLinear,
    MicrosoftDequantizeLinear,
    BFPQuantizeDequantize,
    MXQuantizeDequantize,
    BFPFixNeuron,
    MXFixNeuron,
    ExtendedInstanceNormalization,
    VitisInstanceNormalization,
    ExtendedLSTM,
    VitisLSTM,
]
