"""The block formats' fallbacks as functions a user's onnxscript code calls.

:data:`extql.fallbacks.BFP` / :data:`~extql.fallbacks.MX` hold, per variant
(:data:`extql.fallbacks.BLOCK_VARIANTS`), a :class:`BlockFallbackFunction`:
an onnxscript ``OnnxFunction`` with the operator's signature ``(x, *,
<its attributes>)``::

    import onnxscript
    from onnxscript import FLOAT, opset21 as op
    import extql, extql.fallbacks

    bfp16 = extql.fallbacks.BFP["to_bfp"]

    @onnxscript.script(default_opset=op)
    def f(x: FLOAT["N", 64]) -> FLOAT["N", 64]:
        return bfp16(x, axis=1, block_size=8)

    model = extql.to_model_proto(f)   # runs in any runtime
    y = bfp16(x, axis=1)              # eagerly: the decomposition's ops one by one

Converted (:func:`extql.to_model_proto`), a call is a node of
:data:`~extql.onnx.fallback_protos.FALLBACK_DOMAIN` named
``BFPQuantizeDequantize_<variant>`` / ``MXQuantizeDequantize_<variant>``,
with every numeric attribute spelled out, and the model carries the flat
definition (the body :func:`extql.attach_fallbacks` adds).  The variant
fixes the string attribute (``bfp_method``, ``element_dtype``; a call may
pass it, but it must name the variant's).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import onnx
import onnx_ir as ir
import onnxscript.evaluator
from onnxscript.values import OnnxFunction, Opset

from ..rules.blocks import check_bfp, check_mx
from .eager import Evaluator
from .fallback_blocks import block_variant
from .fallback_protos import (
    BLOCK_VARIANTS,
    FALLBACK_DOMAIN,
    MODEL_OPSET,
    block_fallback_proto,
    block_script,
)

__all__ = ["BlockFallbackFunction", "ByBlockVariant"]


class BlockFallbackFunction(OnnxFunction):
    """One block format's fallback as an onnxscript function: its definition
    is the flat FunctionProto (:func:`extql.fallbacks.block_function_proto`)
    named per variant in :data:`FALLBACK_DOMAIN`; its eager body is the
    onnxscript source of the decomposition."""

    def __init__(self, family: str, variant: str) -> None:
        body = block_script(family, variant)
        proto = block_fallback_proto(family, variant, MODEL_OPSET)
        self._proto = proto
        self.family = family
        self.variant = variant
        check = check_bfp if family == "bfp" else check_mx
        inner = body.function
        # The string attribute's default is the variant's.
        string = "bfp_method" if family == "bfp" else "element_dtype"
        default = variant if family == "mx" or variant != "to_bfp_compiler" else "to_bfp"

        @functools.wraps(inner)
        def call(x, **attrs):
            # The variant's own string attribute (and compiler kernel):
            # another one is another function.
            attrs.setdefault(string, default)
            if variant == "to_bfp_compiler":
                attrs.setdefault("use_compiler_version_cpu_kernel", 1)
            got = block_variant(family, check(attrs))
            if got != variant:
                raise ValueError(f"extql fallback {proto.name}: these attributes select the "
                                 f"variant {got!r}: call extql.fallbacks."
                                 f"{family.upper()}[{got!r}]")
            return inner(x, **attrs)

        signature = inspect.signature(inner)
        call.__signature__ = signature.replace(parameters=[  # type: ignore[attr-defined]
            p.replace(default=default) if p.name == string else p
            for p in signature.parameters.values()])
        super().__init__(Opset(FALLBACK_DOMAIN, 1), call, ir.serde.deserialize_function(proto),
                         body.source, {})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eager evaluation: the decomposition's standard ops one by one
        (:class:`~extql.onnx.eager.Evaluator` around onnxscript's default)."""
        with onnxscript.evaluator.default_as(Evaluator()):
            return super().__call__(*args, **kwargs)

    def to_function_proto(self) -> onnx.FunctionProto:
        """The function definition (standard ops only, ai.onnx opset 21)."""
        out = onnx.FunctionProto()
        out.CopyFrom(self._proto)
        return out

    def __repr__(self) -> str:
        return (f"<extql fallback {self.family.upper()}[{self.variant!r}]: "
                f"{FALLBACK_DOMAIN}::{self.name}>")


class ByBlockVariant(dict):
    """variant -> BlockFallbackFunction of one family, made on first use."""

    def __init__(self, family: str) -> None:
        super().__init__()
        self._family = family

    def __missing__(self, key: str) -> BlockFallbackFunction:
        if key not in BLOCK_VARIANTS[self._family]:
            raise KeyError(f"{key!r}: expected one of {', '.join(BLOCK_VARIANTS[self._family])}")
        value = self[key] = BlockFallbackFunction(self._family, key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in BLOCK_VARIANTS[self._family]

    def __iter__(self):
        return iter(BLOCK_VARIANTS[self._family])

    def __len__(self) -> int:
        return len(BLOCK_VARIANTS[self._family])

    def keys(self):  # type: ignore[override]
        return list(BLOCK_VARIANTS[self._family])

    def items(self):  # type: ignore[override]
        return [(k, self[k]) for k in self.keys()]

    def values(self):  # type: ignore[override]
        return [self[k] for k in self.keys()]
