"""onnxscript fallbacks: both operators decomposed into standard ONNX ops.

Every function here computes exactly what the kernels compute (the numeric
contract of docs/operators: one float32 division, round half to even, exact
zero-point addition, saturation), bit for bit, with ops of the default ONNX domain only, so a
model that carries these definitions runs in any runtime that lacks the extql
library.  The decompositions never depend on what a platform does when it
casts NaN or an out-of-range float to an integer: NaN is replaced with
``Where(IsNaN(...))`` and values are clamped into range *before* any Cast.

Quantize to an integer type T with range [lo, hi]:

* 8/16-bit: ``t = Round(x / s) + float(zp)`` in float32, NaN -> lo,
  ``Cast(Clip(t, lo, hi))``.  The sum is exact while ``|r| < 2**24``; beyond
  that it is far out of range and saturates whatever its rounding.
* int32/uint32: ``t = Round(x / s) + zp`` in 32-bit arithmetic only (no
  float64 or int64, which OpenVINO narrows to 32 bits): NaN -> below the
  range, ``r = Round(x / s)`` clamped to +-2**33, and ``r + zp`` carried as
  two exact float32 parts, a multiple of 65536 and a small integer; each part
  is clamped so that their sum saturates to [lo, hi], and the int32 sum of the
  two parts (each cast in range) is the result (uint32: the int32 math on
  ``r + (zp - 2**31)``, 2**31 added back by int32's wrapping Add).

Quantize to float16/bfloat16: ``w = x / s + float(zp)`` in float32, clamped to
the largest finite value of the type (NaN kept), then one Cast (round to
nearest even).  NaN stays NaN; which NaN (its payload) is not part of the
contract.  The sum is made with ``AddSigned``: the zero point goes through
``OpaqueZero`` (unchanged, but no longer a constant), so a runtime cannot
remove ``Add(v, 0)`` as a no-op (onnxruntime does for a constant zero point
of 0, which is wrong for ``v = -0``: ``-0 + 0`` is ``+0``).  The float16 /
bfloat16 dequantize subtracts its zero point the same way.

The division: x and the scale are widened to float32 (exactly), rounded to
the precision P (the attribute ``precision``, which attach_fallbacks sets to
the scale's type where the node has none) with ``Cast(Cast(., P), float)``,
divided in float32 and the quotient rounded to P the same way (float32 has
more than twice float16's / bfloat16's precision plus two bits, so this is
the division in P; with P float32 every Cast is a no-op).  The routes above
then take that quotient in place of ``x / s``:

* int4 / uint4 / int2 / uint2: the 8/16-bit route with their ranges, cast
  to the packed type (ONNX's Cast takes them from opset 21 / 25).
* float8: the zero point is not added (see the operator page); the quotient
  is clamped to the type's largest value (``saturate`` 1) or, without
  saturation, what rounds beyond the range becomes ±inf (float8e5m2) or NaN
  *before* the Cast, so that the runtime's own overflow rule (onnxruntime's
  differs from ONNX's table) never applies; then one Cast (nearest even).
* float4e2m1: the float16 route with its largest value, 6; its Cast takes
  NaN to a zero as ONNX's table says.

Precision float64 (``precision`` 11, which attach_fallbacks sets on a
quantize with an int32 scale and no ``precision``, as onnx.reference divides
such a one with NumPy): functions of their own, ``overload``
``"<variant>-float64"`` (:data:`FLOAT64_VARIANTS`), so that the functions
of the float precisions above keep every op they have.  The scale is spread
as float64 (``Cast(scale, DOUBLE)``: exact for int32 and every float type,
where the float functions' Cast to float32 would round an int32 scale), x
is cast to float64 (exact, int32 included) and ``q = x / s`` is one float64
division.  Then one rounding to float32 of what each route takes, and the
route above from there:

* integer types and ``"default"``: ``v = float32(Round(q))`` (Round in
  float64, half to even; an integer stays one in float32), the quotient of
  the 8/16-bit, 32-bit or sub-byte route with its zero point as usual;
* float8: ``v = float32(q)`` (beyond float32's range +-inf), the float8
  route (no zero point; ``saturate`` as usual);
* float16 / bfloat16 / float4e2m1: ``v = float32(q + float64(zp))``, the sum
  made as ``AddSigned`` makes it (``-0 + +0`` is ``+0`` at every
  optimisation level), then the route's clamp and Cast with nothing more
  added (the contract's ``v + (-0)``, which is v).

With a float ``precision`` an int32 scale takes the functions above: their
Cast rounds it to nearest even into float32, then to the precision.

Dequantize: ``float32(x) - float32(zp)`` for the 8/16-bit, sub-byte and
float types (the conversion and difference are exact in float32 for the
integers, and float32 arithmetic for the float types; float4e2m1 with a
zero point of 0 leaves x as it is, -0 included),
``float32(int64(x) - int64(zp))`` for int32/uint32 (one rounding), then ``*
s``, then one Cast to ``output_dtype`` (the scale's type unless the node
says otherwise).  float8 takes no zero point but 0: another value makes a
Reshape fail.  Without a zero point: ``float32(x) * s``.

Granularity is decided at run time from the scale's shape and
``block_size``, as the kernels do: the scale and zero point are reshaped to
``[]`` (per tensor) or ``[D, 1, ..., 1]`` (per axis), or expanded block by
block to x's shape (blocked: reshaped to ``[.., nb, 1, ..]``, expanded to
``[.., nb, block_size, ..]``, merged and cut to ``D`` along the axis), so
that broadcasting lines them up with ``axis``.  They are spread as float32
(the scale, exactly) or their route's carrier (the zero point), which every
runtime's shape ops take.  An invalid combination (axis out of range, scale
length not ``D[axis]``, scale of rank >= 2 without ``block_size``, a blocked
scale whose shape is not x's with ``ceil(D / block_size)`` along the axis)
makes a Reshape fail, so it is an error, never a silently wrong answer.

Public objects:

* :data:`QUANTIZE` / :data:`DEQUANTIZE` -- dict: type name (``"int8"`` ...
  ``"float4e2m1"``) or ``"default"`` (no zero point) -> onnxscript function
  with the signature of the operator ``(x, scale, zero_point, axis=1,
  block_size=0, ...)``, to
  call from ``@onnxscript.script`` functions and eagerly
  (:mod:`extql.onnx.fallback_scripts`; ``to_function_proto()`` gives the flat
  definition).  The ``"default"`` functions ignore their third input.  A
  quantize call of precision float64 (an int32 scale, ``precision=11``)
  runs the variant's precision-float64 function, eagerly and converted
  (:func:`extql.to_model_proto`).
* :func:`function_proto` -- a flat ``FunctionProto`` (no nested calls) for one
  (operator, variant), named and versioned for a model: this is what
  :func:`extql.attach_fallbacks` adds to models.  Quantize's variants
  include the precision-float64 ones (:data:`FLOAT64_VARIANTS`,
  :func:`float64_overload`, :func:`split_overload`).
* :func:`variant` -- the variant of a node from its zero point's type.

Quark's DPU instance norm (``ExtendedInstanceNormalization`` /
``VitisInstanceNormalization``): :func:`dpu_function_proto` (one function
per operator name, ``overload`` :data:`DPU_VARIANT`), the onnxscript source
in :mod:`extql.onnx.fallback_dpu` (what it computes, and the two cases where
it cannot give the kernels' bits: docs/differences.rst).

The onnxscript source of the decompositions is in :mod:`extql.onnx`
(``fallback_plan``: granularity; ``fallback_arith``: the division and signed
zeros; ``fallback_cores``: each type's route; ``fallback_functions``: the
operator functions; ``fallback_dispatch``: the type-generic ones), which
:mod:`extql.onnx.fallback_protos` flattens and names.  The operator opset for
*authoring* graphs that call the Extended ops is :mod:`extql.opset`
(``extql.quark``).
"""

from __future__ import annotations

import functools

from .onnx.fallback_block_scripts import ByBlockVariant
from .onnx.fallback_protos import (
    BLOCK_MIN_OPSET,
    BLOCK_VARIANTS,
    CORE_DOMAIN,
    DISPATCH_MIN_OPSET,
    DPU_MIN_OPSET,
    DPU_VARIANT,
    FLOAT64,
    FLOAT64_VARIANTS,
    MIN_OPSET,
    VARIANTS,
    ByVariant,
    block_function_proto,
    core_proto,
    dispatcher_proto,
    dpu_function_proto,
    float64_overload,
    function_proto,
    split_overload,
    variant,
    variant_opset,
)
from .onnx.fallback_scripts import FallbackFunction
from .rules.types import OP_NAMES

__all__ = [
    "QUANTIZE",
    "DEQUANTIZE",
    "VARIANTS",
    "FLOAT64",
    "FLOAT64_VARIANTS",
    "float64_overload",
    "split_overload",
    "MIN_OPSET",
    "DISPATCH_MIN_OPSET",
    "OP_NAMES",
    "function_proto",
    "core_proto",
    "CORE_DOMAIN",
    "dispatcher_proto",
    "variant",
    "variant_opset",
    "BFP",
    "MX",
    "BLOCK_VARIANTS",
    "BLOCK_MIN_OPSET",
    "block_function_proto",
    "DPU_MIN_OPSET",
    "DPU_VARIANT",
    "dpu_function_proto",
]

#: variant -> onnxscript function for ExtendedQuantizeLinear, to call from a
#: user's script functions and eagerly (extql.onnx.fallback_scripts).
QUANTIZE: dict = ByVariant(functools.partial(FallbackFunction, True))
#: variant -> onnxscript function for ExtendedDequantizeLinear (the same).
DEQUANTIZE: dict = ByVariant(functools.partial(FallbackFunction, False))
#: variant -> onnxscript function of BFPQuantizeDequantize's fallback
#: ("to_bfp", "to_bfp_compiler", "to_bfp_prime";
#: extql.onnx.fallback_block_scripts).
BFP: dict = ByBlockVariant("bfp")
#: element type -> onnxscript function of MXQuantizeDequantize's fallback.
MX: dict = ByBlockVariant("mx")
