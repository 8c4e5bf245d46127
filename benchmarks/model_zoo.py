"""Deterministic whole models for benchmarks/whole_models.py (no downloads).

* :func:`resnet_float` -- a ResNet-18-like CNN, input ``[1, 3, 224, 224]``:
  a 7x7/2 stem, max pool, four stages of two basic blocks (64, 128, 256, 512
  channels; a 1x1/2 projection where the shape changes), global average pool
  and a 1000-way Gemm.  Batch norm is already folded (Conv with a bias).
* :func:`bert_float` -- a BERT-base-like encoder of ``layers`` layers on
  ``[1, seq, 768]`` hidden states: 12-head self-attention (MatMul + Add
  projections, Softmax), LayerNormalization, a 3072-wide GELU feed-forward
  block (the Erf form), residual adds.
* :func:`quantize_qdq` -- onnxruntime's ``quantize_static`` to QDQ with
  per-channel int8 weights and int8 / uint16 / int16 activations (the
  "official" model).
* :func:`to_extended` -- the same model with every QuantizeLinear /
  DequantizeLinear renamed to the Extended operator.
* :func:`float_qdq` -- float16 / bfloat16 "quantization": weights stored in
  the type behind a dequantize, a Q/DQ pair (scale 1, zero point 0) on every
  activation; either Extended nodes or the standard Cast pair.
* :func:`quark_form` -- a model as AMD Quark writes it: 8/16-bit Q/DQ as
  ``com.microsoft`` nodes, ai.onnx opset 17, IR 8, ``axis`` written on the
  per-channel weights only.
* :func:`block_form` -- a model in one of Quark's block formats (BFP16, MX9,
  MXFP4 ...): float32 weights, each behind a block node that quantizes it
  again on every run, and a block node on every input of a Conv / Gemm /
  MatMul.

All weights come from fixed NumPy seeds.
"""

from __future__ import annotations

import math
import os
import tempfile

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
EXT_DOMAIN = "com.amd.quark"
MS_DOMAIN = "com.microsoft"
BF16 = np.dtype(ml_dtypes.bfloat16)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out


def _model(b: _Builder, inputs, outputs, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(b.nodes, name, inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return model


def resnet_float(seed: int = 0, width: int = 64, size: int = 224) -> onnx.ModelProto:
    """A ResNet-18-like float CNN (see the module docstring)."""
    b = _Builder(seed)

    def conv(x: str, cin: int, cout: int, k: int, stride: int) -> str:
        std = math.sqrt(2.0 / (cin * k * k))
        w = b.const("w", (b.rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32))
        bias = b.const("b", (b.rng.standard_normal(cout) * 0.05).astype(np.float32))
        pad = k // 2
        return b.op("Conv", [x, w, bias], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[pad] * 4)

    x = conv("input", 3, width, 7, 2)
    x = b.op("Relu", [x])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        cout = width * mult
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.op("Relu", [conv(x, cin, cout, 3, stride)])
            y = conv(y, cout, cout, 3, 1)
            short = conv(x, cin, cout, 1, stride) if (stride != 1 or cin != cout) else x
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    w = b.const("fc_w", (b.rng.standard_normal((cin, 1000)) / math.sqrt(cin)).astype(np.float32))
    bias = b.const("fc_b", np.zeros(1000, np.float32))
    out = b.op("Gemm", [x, w, bias])
    b.nodes[-1].output[0] = "logits"
    del out
    return _model(
        b,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        "resnet18_like",
    )


def bert_float(seed: int = 0, layers: int = 2, seq: int = 128, hidden: int = 768,
               heads: int = 12, ffn: int = 3072) -> onnx.ModelProto:
    """A BERT-base-like float encoder (see the module docstring)."""
    b = _Builder(seed)
    head = hidden // heads

    def dense(x: str, cin: int, cout: int) -> str:
        w = b.const("w", (b.rng.standard_normal((cin, cout)) * 0.02).astype(np.float32))
        bias = b.const("b", (b.rng.standard_normal(cout) * 0.02).astype(np.float32))
        return b.op("Add", [b.op("MatMul", [x, w]), bias])

    def layer_norm(x: str) -> str:
        gamma = b.const("gamma", np.ones(hidden, np.float32))
        beta = b.const("beta", np.zeros(hidden, np.float32))
        return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

    split_shape = b.const("split_shape", np.array([1, seq, heads, head], np.int64))
    merge_shape = b.const("merge_shape", np.array([1, seq, hidden], np.int64))
    inv_sqrt = b.const("inv_sqrt", np.array(1.0 / math.sqrt(head), np.float32))
    half = b.const("half", np.array(0.5, np.float32))
    one = b.const("one", np.array(1.0, np.float32))
    rsqrt2 = b.const("rsqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    x = "hidden_states"
    for _ in range(layers):
        heads_of = []
        for perm in ((0, 2, 1, 3), (0, 2, 3, 1), (0, 2, 1, 3)):
            t = b.op("Reshape", [dense(x, hidden, hidden), split_shape])
            heads_of.append(b.op("Transpose", [t], perm=list(perm)))
        q, k, v = heads_of
        scores = b.op("Mul", [b.op("MatMul", [q, k]), inv_sqrt])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merge_shape])
        x = layer_norm(b.op("Add", [dense(ctx, hidden, hidden), x]))
        h = dense(x, hidden, ffn)
        gelu = b.op("Mul", [b.op("Mul", [h, half]),
                            b.op("Add", [b.op("Erf", [b.op("Mul", [h, rsqrt2])]), one])])
        x = layer_norm(b.op("Add", [dense(gelu, ffn, hidden), x]))
    b.nodes[-1].output[0] = "last_hidden_state"
    return _model(
        b,
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [1, seq, hidden])],
        "bert_like",
    )


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Normal float32 inputs for every graph input (fixed seed)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def quantize_qdq(model: onnx.ModelProto, activation: str, seed: int = 1,
                 samples: int = 2) -> onnx.ModelProto:
    """onnxruntime's quantize_static to QDQ: per-channel int8 weights,
    ``activation`` (int8, uint16 or int16) activations, MinMax calibration on
    ``samples`` random inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    act = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8,
           "uint16": QuantType.QUInt16, "int16": QuantType.QInt16}[activation]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([random_inputs(model, seed + i) for i in range(samples)])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save_model(model, src)
        quantize_static(
            src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=act, weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
        )
        return onnx.load(dst)


def to_extended(model: onnx.ModelProto, domain: str = "") -> onnx.ModelProto:
    """Rename every QuantizeLinear / DequantizeLinear of ``domain`` ("" for
    ai.onnx, or com.microsoft) to ExtendedQuantizeLinear /
    ExtendedDequantizeLinear."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.domain in ((domain,) if domain else ("", "ai.onnx")) and node.op_type in (
            "QuantizeLinear", "DequantizeLinear"
        ):
            node.op_type = "Extended" + node.op_type
            node.domain = EXT_DOMAIN
    if not any(o.domain == EXT_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(EXT_DOMAIN, 1))
    return out


def _typed_tensor(name: str, value: np.ndarray, elem: int) -> onnx.TensorProto:
    if elem == TensorProto.BFLOAT16:
        bits = value.astype(BF16).view(np.uint16)
        return helper.make_tensor(name, elem, value.shape, bits.tobytes(), raw=True)
    return numpy_helper.from_array(value.astype(np.float16), name)


_WEIGHT_INPUTS = {"Conv": (1, 2), "Gemm": (1, 2), "MatMul": (1,)}


def float_qdq(model: onnx.ModelProto, dtype: str, form: str) -> onnx.ModelProto:
    """float16 / bfloat16 versions of a float model.

    Weights and biases of Conv / Gemm / MatMul are stored in ``dtype`` and
    dequantized; every other float activation a node reads gets a
    quantize/dequantize pair.  ``form`` "extended": ExtendedQuantizeLinear /
    ExtendedDequantizeLinear with scale 1 and zero point 0; "cast": the
    standard Cast pair (Cast to the type, Cast back to float)."""
    elem = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[dtype]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {i.name: i for i in g.initializer}
    float_values = {i.name for i in g.input
                    if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    float_ops = {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm",
                 "MatMul", "Mul", "Softmax", "Transpose", "Reshape", "LayerNormalization",
                 "Erf"}
    for node in g.node:
        if node.op_type in float_ops:
            float_values.update(node.output)
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    scale = f"qdq_scale_{dtype}"
    zero = f"qdq_zero_{dtype}"
    if form == "extended":
        new_inits.append(numpy_helper.from_array(np.array(1.0, np.float32), scale))
        new_inits.append(_typed_tensor(zero, np.zeros((), np.float32), elem))
    done: dict[str, str] = {}
    counter = [0]

    def pair(value: str, weight: bool) -> str:
        if value in done:
            return done[value]
        counter[0] += 1
        q_name, dq_name = f"{value}_q{counter[0]}", f"{value}_dq{counter[0]}"
        if weight:
            arr = numpy_helper.to_array(inits[value])
            new_inits.append(_typed_tensor(q_name, arr, elem))
        elif form == "extended":
            new_nodes.append(helper.make_node("ExtendedQuantizeLinear", [value, scale, zero],
                                              [q_name], domain=EXT_DOMAIN))
        else:
            new_nodes.append(helper.make_node("Cast", [value], [q_name], to=elem))
        if form == "extended":
            new_nodes.append(helper.make_node("ExtendedDequantizeLinear", [q_name, scale, zero],
                                              [dq_name], domain=EXT_DOMAIN))
        else:
            new_nodes.append(helper.make_node("Cast", [q_name], [dq_name],
                                              to=TensorProto.FLOAT))
        done[value] = dq_name
        return dq_name

    for node in g.node:
        weights = _WEIGHT_INPUTS.get(node.op_type, ())
        for i, name in enumerate(node.input):
            if i in weights and name in inits:
                node.input[i] = pair(name, True)
            elif name in float_values and name not in inits and node.op_type in float_ops:
                if node.op_type == "Reshape" or node.op_type == "Transpose" or (
                    node.op_type == "Flatten"
                ):
                    continue  # data movement: the producer's pair already covers it
                node.input[i] = pair(name, False)
        new_nodes.append(node)
    used = {n for node in new_nodes for n in node.input}
    kept = [i for i in g.initializer if i.name in used]
    del g.node[:]
    g.node.extend(new_nodes)
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    if form == "extended":
        out.opset_import.append(helper.make_opsetid(EXT_DOMAIN, 1))
    return out


def _block_axis(node: onnx.NodeProto, i: int) -> int:
    """The axis Quark's blocks run along in a weight: a bias along its only
    axis, a Conv weight along its input channels (1), a Gemm / MatMul
    weight along the dot product (0, or 1 for Gemm's transposed weight)."""
    if i == 2:
        return 0
    if node.op_type == "Conv":
        return 1
    trans = any(a.name == "transB" and a.i for a in node.attribute)
    return 1 if node.op_type == "Gemm" and trans else 0


def block_form(model: onnx.ModelProto, op_type: str, attrs: dict) -> onnx.ModelProto:
    """The float model in a block format as Quark writes it (``op_type``
    BFPQuantizeDequantize / MXQuantizeDequantize with ``attrs``, domain
    com.amd.quark): each weight and bias of a Conv / Gemm / MatMul stays a
    float32 initializer read through a block node (along :func:`_block_axis`),
    which onnxruntime runs again on every run, and every float activation
    such a node reads goes through one along axis 1, Quark's default.
    :func:`extql.fold_constants` folds the weights' nodes offline."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {i.name for i in g.initializer}
    new_nodes: list[onnx.NodeProto] = []
    done: dict[str, str] = {}
    for node in g.node:
        weights = _WEIGHT_INPUTS.get(node.op_type, ())
        for i, name in enumerate(node.input if weights else ()):
            if not name:
                continue
            if name not in done:
                done[name] = f"{name}_{op_type}_out"
                axis = _block_axis(node, i) if i in weights and name in inits else 1
                new_nodes.append(helper.make_node(op_type, [name], [done[name]],
                                                  name=f"{name}_{op_type}", domain=EXT_DOMAIN,
                                                  **attrs, axis=axis))
            node.input[i] = done[name]
        new_nodes.append(node)
    del g.node[:]
    g.node.extend(new_nodes)
    out.opset_import.append(helper.make_opsetid(EXT_DOMAIN, 1))
    return out


def quark_form(qdq: onnx.ModelProto) -> onnx.ModelProto:
    """A quantize_static QDQ model rewritten as Quark 0.13 writes it: every
    Q/DQ as com.microsoft (Quark's final rewrite of 8/16-bit Extended
    nodes), ``axis`` only on per-channel nodes, zero points always present,
    ai.onnx opset 17, IR 8, Quark's extra opset imports."""
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    inits = {i.name: i for i in out.graph.initializer}
    for node in out.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in ("QuantizeLinear",
                                                                "DequantizeLinear"):
            node.domain = MS_DOMAIN
            scale = inits.get(node.input[1])
            per_channel = scale is not None and len(scale.dims) == 1 and scale.dims[0] > 1
            kept = [a for a in node.attribute if a.name == "axis" and per_channel]
            del node.attribute[:]
            node.attribute.extend(kept)
    del out.opset_import[:]
    out.opset_import.extend([
        helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1),
        helper.make_opsetid("com.amd.quark", 1), helper.make_opsetid("ai.onnx.ml", 3),
        helper.make_opsetid("com.ms.internal.nhwc", 1), helper.make_opsetid("ai.onnx.training", 1),
        helper.make_opsetid("ai.onnx.preview.training", 1),
        helper.make_opsetid("com.microsoft.experimental", 1),
        helper.make_opsetid("com.microsoft.nchwc", 1),
        helper.make_opsetid("org.pytorch.aten", 1),
    ])
    out.ir_version = 8
    return out
