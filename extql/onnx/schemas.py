"""The ONNX operator schemas of extql's operators, registered with onnx.

:func:`register_schemas` registers ``com.amd.quark::ExtendedQuantizeLinear``
/ ``ExtendedDequantizeLinear`` (version 1), the legacy
``com.vai.quantize::VitisQuantizeLinear`` / ``VitisDequantizeLinear`` and,
unless something else did, onnxruntime's ``com.microsoft`` QuantizeLinear /
DequantizeLinear in onnx's schema registry (once per process).  With them:

* onnxscript type-checks calls: ``quark.ExtendedQuantizeLinear(x, s, zp)``
  inside an ``@onnxscript.script`` function has a known signature (the inputs
  and attributes of :mod:`extql.rules`), and the model it builds passes
  ``onnx.checker.check_model`` with the type constraints of the operator
  documents (the types of :mod:`extql.rules`; the zero point and output one
  of the quantized types the installed onnx has);
* onnx shape inference knows the output type and shape of every Extended node
  (the zero point's type, or ``output_dtype``, or uint8, for quantize; the
  scale's type or ``output_dtype`` for dequantize; the shape of x), which
  ``extql check`` and the graph passes use.

The block formats ``com.amd.quark::BFPQuantizeDequantize`` /
``MXQuantizeDequantize`` and the legacy ``com.vai.quantize::BFPFixNeuron`` /
``MXFixNeuron`` (version 1) are registered too: one input x of float32 or
float16, y of x's type and shape, the attributes of :mod:`extql.rules.blocks`
with Quark's defaults.  ``onnx.checker`` then accepts their nodes (and names
an attribute they do not have), and shape inference carries types and shapes
through them.

Quark's DPU-emulation operators ``com.amd.quark::ExtendedInstanceNormalization``
/ ``ExtendedLSTM`` and the legacy ``com.vai.quantize::VitisInstanceNormalization``
/ ``VitisLSTM`` (version 1) are registered too (:func:`_dpu_schemas`): the
instance norm's x, scale, B (float32) -> y of x's shape with ``epsilon``; the
LSTM's inputs and outputs as ONNX's LSTM numbers them (X, W, R, optional B;
the optional inputs the operator refuses are declared so that ``extql check``
names them in its own words), its ten quantization attributes required, and
an inference of Y / Y_h / Y_c's shapes from hidden_size, direction (default
"bidirectional") and layout.

The registered schemas carry the type/shape inference of the official
QuantizeLinear/DequantizeLinear-21 (output type from the zero point, or the
scale; shape of x), which is what the Extended operators specify too.  (onnx
< 1.18 cannot attach an inference function to a Python schema: there the
types are checked but not inferred through the Extended nodes.)

An inference function set from Python is held by onnx's C++ schema registry
as a wrapper around a Python object.  The registry is a C++ static, destroyed
after the interpreter has finalised; destroying a wrapper then touches a dead
interpreter (onnx 1.20-1.22 crash with SIGSEGV at exit, 1.19 waits forever
for the GIL).  So the schemas registered here are deregistered again by an
``atexit`` handler, while the interpreter is still alive (see
:func:`_deregister_schemas`).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable

import onnx
import onnx.defs

from .. import rules
from ..rules import lstm as lstm_rules
from ..rules.blocks import (
    BFP_ATTRIBUTES,
    BFP_LEGACY_OP,
    BFP_OP,
    MX_ATTRIBUTES,
    MX_LEGACY_OP,
    MX_OP,
    X_TYPES,
)
from ..rules.dpu import DEFAULT_EPSILON, IN_OPS
from ..rules.types import (
    DOMAIN,
    LEGACY_DOMAIN,
    MS_DEQUANTIZE_NAMES,
    MS_DOMAIN,
    MS_FLOAT_NAMES,
    MS_QUANTIZE_NAMES,
    OP_NAMES,
    QUANTIZED,
    code_of,
)

__all__ = ["register_schemas", "tensor_types", "QUANTIZE_TYPES"]


def _onnx_name(name: str) -> str | None:
    """onnx's name of a type (``float`` for float32), or None when the
    installed onnx does not have it."""
    try:
        text = onnx.helper.tensor_dtype_to_string(code_of(name))
    except (KeyError, ValueError):
        return None
    return text.replace("TensorProto.", "").lower()


def tensor_types(names: Iterable[str]) -> list[str]:
    """The type strings (``tensor(float)``, ...) of the named types that the
    installed onnx has (int2 / uint2 from onnx 1.20)."""
    return [f"tensor({n})" for n in map(_onnx_name, names) if n is not None]


#: Type strings of the zero point / quantized tensor: every quantized type
#: the installed onnx has.
QUANTIZE_TYPES = tensor_types(QUANTIZED)

def _attributes(names: Iterable[str]) -> list[onnx.defs.OpSchema.Attribute]:
    """The named attributes of :data:`extql.rules.linear.ATTRIBUTES`, with their
    defaults and meanings."""
    return [onnx.defs.OpSchema.Attribute(name, onnx.helper.make_attribute(name, default), what)
            for name, default, _, what in rules.ATTRIBUTES if name in names]


_lock = threading.Lock()
_done = False
#: (name, version, domain) of each schema this module registered itself.
_registered: list[tuple[str, int, str]] = []


def _schema(name: str, domain: str, quantize: bool) -> onnx.defs.OpSchema:
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    direction = rules.QUANTIZE if quantize else rules.DEQUANTIZE
    x, scale, zero_point = rules.INPUTS[direction]
    if quantize:
        inputs = [
            FP(x, "T1", "N-D full precision input tensor to be quantized."),
            FP(scale, "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP(zero_point, "T3", "Zero point, shape of the scale; default uint8 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Quantized tensor, shape of x.")]
        constraints = [
            ("T1", tensor_types(rules.QUANTIZE_X_TYPES), "The type of x."),
            ("T2", tensor_types(rules.QUANTIZE_SCALE_TYPES), "The type of the scale."),
            ("T3", QUANTIZE_TYPES, "The type of the zero point and y."),
        ]
        infer_from = "QuantizeLinear"
        doc = "y = saturate(round_half_even(x / y_scale) + y_zero_point) (AMD Quark)."
    else:
        inputs = [
            FP(x, "T1", "N-D quantized input tensor."),
            FP(scale, "T2", "Scale: a scalar (per tensor) or 1-D (per axis)."),
            FP(zero_point, "T1", "Zero point, shape of the scale; default 0.",
               param_option=optional),
        ]
        outputs = [FP("y", "T3", "Tensor of x's shape, of output_dtype or the scale's type.")]
        constraints = [
            ("T1", QUANTIZE_TYPES, "The type of x and the zero point."),
            ("T2", tensor_types(rules.SCALE_TYPES), "The type of the scale."),
            ("T3", tensor_types(rules.OUTPUT_TYPES), "The type of y."),
        ]
        infer_from = "DequantizeLinear"
        doc = "y = (x - x_zero_point) * x_scale (AMD Quark)."
    schema = onnx.defs.OpSchema(
        name,
        domain,
        1,
        doc,
        inputs=inputs,
        outputs=outputs,
        type_constraints=constraints,
        attributes=_attributes(rules.attribute_names(direction)),
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        # The official operator's inference, of the newest opset this onnx
        # has (output_dtype from opset 23).
        official = onnx.defs.get_schema(infer_from, onnx.defs.onnx_opset_version(), "")
        schema.set_type_and_shape_inference_function(
            official.get_type_and_shape_inference_function()
        )
    return schema


#: Types of onnxruntime's com.microsoft QuantizeLinear / DequantizeLinear
#: (float side; quantized side), for type inference through Quark's models.
_MS_FLOAT_TYPES = tensor_types(MS_FLOAT_NAMES.values())


def _microsoft_schema(quantize: bool) -> onnx.defs.OpSchema:
    """com.microsoft QuantizeLinear / DequantizeLinear (version 1), as
    onnxruntime defines them, so that onnx shape inference (which has no
    onnxruntime contrib schemas) infers types through the nodes AMD Quark
    writes."""
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    if quantize:
        name, infer_from = "QuantizeLinear", "QuantizeLinear"
        inputs = [FP("x", "T1", "Input."), FP("y_scale", "T1", "Scale."),
                  FP("y_zero_point", "T2", "Zero point.", param_option=optional)]
        outputs = [FP("y", "T2", "Quantized tensor.")]
        constraints = [("T1", _MS_FLOAT_TYPES, "x and scale."),
                       ("T2", tensor_types(MS_QUANTIZE_NAMES), "Zero point and y.")]
    else:
        name, infer_from = "DequantizeLinear", "DequantizeLinear"
        inputs = [FP("x", "T1", "Quantized input."), FP("x_scale", "T2", "Scale."),
                  FP("x_zero_point", "T1", "Zero point.", param_option=optional)]
        outputs = [FP("y", "T2", "Dequantized tensor.")]
        constraints = [("T1", tensor_types(MS_DEQUANTIZE_NAMES), "x and zero point."),
                       ("T2", _MS_FLOAT_TYPES, "Scale and y.")]
    schema = onnx.defs.OpSchema(
        name, MS_DOMAIN, 1, f"onnxruntime contrib {name} (registered by extql).",
        inputs=inputs, outputs=outputs, type_constraints=constraints,
        attributes=_attributes(rules.MICROSOFT_ATTRIBUTES),
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        official = onnx.defs.get_schema(infer_from, 21, "")
        schema.set_type_and_shape_inference_function(
            official.get_type_and_shape_inference_function()
        )
    return schema


#: What each block-format attribute means (docs/operators).
_BLOCK_ATTRIBUTE_DOCS: dict[str, str] = {
    "bfp_method": "'to_bfp' (one shared exponent per block) or 'to_bfp_prime' (MX4 / MX6 / "
                  "MX9: a shift per sub-block; old name 'to_bfp_prime_shared').",
    "axis": "The axis the blocks run along (negative: from the back; ignored for rank 1).",
    "bit_width": "Bits of an element: a sign, 8 exponent bits and bit_width - 9 mantissa bits.",
    "block_size": "Elements per block (the last block of a line may be shorter).",
    "rounding_mode": "0 half away from zero, 1 half toward +inf, 2 half to even.",
    "sub_block_size": "to_bfp_prime: elements per sub-block (divides block_size).",
    "sub_block_shift_bits": "to_bfp_prime: a sub-block's shift is at most "
                            "2^sub_block_shift_bits - 1.",
    "convert_to_bfloat_before_bfp": "1: round x to bfloat16 precision first.",
    "use_compiler_version_cpu_kernel": "1: Quark's compiler-version kernel (two's-complement "
                                       "elements).",
    "element_dtype": "The element type: 'int8', 'fp8_e5m2', 'fp8_e4m3', 'fp6_e3m2', "
                     "'fp6_e2m3' or 'fp4_e2m1'.",
}


def _block_schema(name: str, domain: str) -> onnx.defs.OpSchema:
    """A block-format operator: x (float32 / float16) -> y of x's type and
    shape, with the attributes and defaults of :mod:`extql.rules.blocks`."""
    FP = onnx.defs.OpSchema.FormalParameter
    table = BFP_ATTRIBUTES if name in (BFP_OP, BFP_LEGACY_OP) else MX_ATTRIBUTES
    what = ("block floating point" if table is BFP_ATTRIBUTES else "OCP microscaling")
    schema = onnx.defs.OpSchema(
        name, domain, 1,
        f"Fake quantization to a {what} format: quantize, then dequantize (AMD Quark).",
        inputs=[FP("x", "T", "Input tensor.")],
        outputs=[FP("y", "T", "The quantized and dequantized values, of x's type and shape.")],
        type_constraints=[("T", tensor_types(n for n, _ in X_TYPES), "x and y.")],
        attributes=[
            onnx.defs.OpSchema.Attribute(attr, onnx.helper.make_attribute(attr, default),
                                         _BLOCK_ATTRIBUTE_DOCS[attr])
            for attr, _, default in table
        ],
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        # y has x's type and shape: the inference of an elementwise unary op.
        unary = onnx.defs.get_schema("Abs", 13, "")
        schema.set_type_and_shape_inference_function(
            unary.get_type_and_shape_inference_function()
        )
    return schema


def _in_schema(name: str, domain: str) -> onnx.defs.OpSchema:
    """The DPU instance norm: x [N, C, ...], scale [C], B [C] (float32) -> y
    of x's type and shape; epsilon (default 1e-5)."""
    FP = onnx.defs.OpSchema.FormalParameter
    schema = onnx.defs.OpSchema(
        name, domain, 1,
        "Instance normalization in the DPU's bfloat16 arithmetic (AMD Quark).",
        inputs=[FP("x", "T", "Input [N, C, ...], rank >= 2."),
                FP("scale", "T", "gamma [C]."), FP("B", "T", "beta [C].")],
        outputs=[FP("y", "T", "x's shape: bfloat16 values as float32.")],
        type_constraints=[("T", ["tensor(float)"], "float32 only.")],
        attributes=[onnx.defs.OpSchema.Attribute(
            "epsilon", onnx.helper.make_attribute("epsilon", DEFAULT_EPSILON),
            "Added to the variance.")],
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        official = onnx.defs.get_schema("InstanceNormalization", 6, "")
        schema.set_type_and_shape_inference_function(
            official.get_type_and_shape_inference_function())
    return schema


def _lstm_inference(ctx) -> None:  # type: ignore[no-untyped-def]
    """Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]), Y_h and
    Y_c [dirs, batch, H] (layout 1: [batch, dirs, H]), float32, from X's
    shape and the attributes; dimensions not known are left unknown."""
    def attr(name: str, default):
        a = ctx.get_attribute(name)
        if a is None:
            return default
        return onnx.helper.get_attribute_value(a)

    hidden = attr("hidden_size", None)
    direction = attr("direction", b"bidirectional")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = lstm_rules.DIRECTIONS.get(direction)
    layout = attr("layout", 0)
    seq = batch = None
    x = ctx.get_input_type(0) if ctx.get_num_inputs() else None
    if x is not None and x.tensor_type.HasField("shape") and len(x.tensor_type.shape.dim) == 3:
        dims = x.tensor_type.shape.dim
        seq, batch = (dims[0], dims[1]) if layout == 0 else (dims[1], dims[0])
    shapes = ((seq, dirs, batch, hidden), (dirs, batch, hidden), (dirs, batch, hidden))
    if layout == 1:
        shapes = ((batch, seq, dirs, hidden), (batch, dirs, hidden), (batch, dirs, hidden))
    for i, dims in enumerate(shapes[:ctx.get_num_outputs()]):
        if not ctx.has_output(i):
            continue
        out = onnx.TypeProto()
        out.tensor_type.elem_type = onnx.TensorProto.FLOAT
        shape = out.tensor_type.shape
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif d is not None and d.HasField("dim_value"):
                dim.dim_value = d.dim_value
            elif d is not None and d.dim_param:
                dim.dim_param = d.dim_param
        ctx.set_output_type(i, out)


def _lstm_schema(name: str, domain: str) -> onnx.defs.OpSchema:
    """The DPU LSTM: ONNX LSTM's inputs and outputs, the attributes of
    :mod:`extql.rules.lstm` (the ten quantization ones and hidden_size
    required)."""
    FP = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    Attr = onnx.defs.OpSchema.Attribute
    kinds = {"int": onnx.defs.OpSchema.AttrType.INT,
             "float": onnx.defs.OpSchema.AttrType.FLOAT}
    attributes = []
    for attr, (kind, default) in lstm_rules.ATTRIBUTES.items():
        if default is None:
            attributes.append(Attr(attr, kinds[kind], f"{attr} (required)", required=True))
        else:
            attributes.append(Attr(attr, onnx.helper.make_attribute(attr, default), attr))
    inputs = [FP("X", "T", "[seq, batch, input] (layout 1: [batch, seq, input])."),
              FP("W", "T", "[dirs, 4H, input], gates i, o, f, c."),
              FP("R", "T", "[dirs, 4H, H]."),
              FP("B", "T", "[dirs, 8H].", param_option=optional)]
    inputs += [FP(n, "T1" if n == "sequence_lens" else "T", f"Refused: {why}.",
                  param_option=optional)
               for n, why in lstm_rules.REFUSED_INPUTS.values()]
    schema = onnx.defs.OpSchema(
        name, domain, 1, "An LSTM in the DPU's 16-bit fixed point (AMD Quark).",
        inputs=inputs,
        outputs=[FP(n, "T", f"{n}.", param_option=optional) for n in lstm_rules.OUTPUTS],
        type_constraints=[("T", ["tensor(float)"], "float32 only."),
                          ("T1", ["tensor(int32)"], "sequence_lens (refused).")],
        attributes=attributes,
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.18
        schema.set_type_and_shape_inference_function(_lstm_inference)
    return schema


def _dpu_schemas() -> list[tuple[str, str, Callable[[str, str], onnx.defs.OpSchema]]]:
    """(name, domain, maker) of the DPU-emulation operators' schemas."""
    return [(n, d, _in_schema) for n, d in IN_OPS.items()] + [
        (lstm_rules.OP, DOMAIN, _lstm_schema), (lstm_rules.LEGACY_OP, LEGACY_DOMAIN, _lstm_schema)]


#: (name, domain) of the block-format operators.
_BLOCK_SCHEMAS: tuple[tuple[str, str], ...] = (
    (BFP_OP, DOMAIN), (MX_OP, DOMAIN), (BFP_LEGACY_OP, LEGACY_DOMAIN),
    (MX_LEGACY_OP, LEGACY_DOMAIN),
)


def register_schemas() -> None:
    """Register the operator schemas with onnx (idempotent, thread-safe): the
    four Extended / Vitis ones, the four block-format ones, the four DPU ones, and com.microsoft
    QuantizeLinear / DequantizeLinear unless something else registered those
    already."""
    global _done
    with _lock:
        if _done:
            return
        for domain in (DOMAIN, LEGACY_DOMAIN):
            for name, quantize in zip(OP_NAMES[domain], (True, False), strict=True):
                try:
                    onnx.defs.get_schema(name, 1, domain)
                except onnx.defs.SchemaError:
                    onnx.defs.register_schema(_schema(name, domain, quantize))
                    _registered.append((name, 1, domain))
        for name, domain in _BLOCK_SCHEMAS:
            try:
                onnx.defs.get_schema(name, 1, domain)
            except onnx.defs.SchemaError:
                onnx.defs.register_schema(_block_schema(name, domain))
                _registered.append((name, 1, domain))
        for name, domain, make in _dpu_schemas():
            try:
                onnx.defs.get_schema(name, 1, domain)
            except onnx.defs.SchemaError:
                onnx.defs.register_schema(make(name, domain))
                _registered.append((name, 1, domain))
        # onnx.reference builds its table of operators by name, across domains,
        # when first imported, and refuses a name two domains have: it must
        # see the registry before com.microsoft's QuantizeLinear joins it.
        from onnx.reference import op_run  # noqa: F401

        for name, quantize in (("QuantizeLinear", True), ("DequantizeLinear", False)):
            try:
                onnx.defs.get_schema(name, 1, MS_DOMAIN)
            except onnx.defs.SchemaError:
                onnx.defs.register_schema(_microsoft_schema(quantize))
                _registered.append((name, 1, MS_DOMAIN))
        if _registered:
            atexit.register(_deregister_schemas)
        _done = True


def _deregister_schemas() -> None:
    """Remove the schemas registered by :func:`register_schemas` (run at exit).

    Their inference functions wrap Python objects; onnx's registry would
    otherwise destroy them after the interpreter is gone, which crashes or
    hangs the process at exit with onnx < 1.23.
    """
    global _done
    deregister = getattr(onnx.defs, "deregister_schema", None)
    with _lock:
        while _registered:
            name, version, domain = _registered.pop()
            if deregister is not None:
                try:
                    deregister(name, version, domain)
                except onnx.defs.SchemaError:
                    pass
        _done = False
