"""Small models in the form AMD Quark 0.13's ONNX quantizer writes them.

docs/differences.rst ("Models as Quark writes them") lists that form; the builders here
follow it so that the tools are tested on what users have:

* ai.onnx opset 17, IR version 8, and many extra opset imports;
* ``com.microsoft`` QuantizeLinear / DequantizeLinear for int8, uint8, int16
  and uint16 (and for int32 dequantize with a zero point of 0); Extended
  nodes (``com.amd.quark``) for int32 quantize, uint32, float16 and bfloat16;
* weights and biases stored quantized, with a DequantizeLinear only; biases
  int32 with a scale of shape [1] and a scalar zero point;
* the zero point always present; ``axis=0`` written on per-channel weights
  and no other attribute; float16 / bfloat16 nodes with scale 1, zero point 0;
* Quark's ``BFPQuantizeDequantize`` in a model of its own;
* Quark's emulation ops (``ExtendedInstanceNormalization``, ``ExtendedLSTM``
  and their legacy ``Vitis`` names) in a model of their own.

The values are made with tests/contract.py (independent of extql).
"""

from __future__ import annotations

import numpy as np
import onnx
from contract import TYPES, quantize
from onnx import TensorProto, helper

from extql.rules.types import DOMAIN, LEGACY_DOMAIN

MS = "com.microsoft"
#: Activation types a model can be built for: the eight.
ACT_TYPES = list(TYPES)
#: The extra opset imports Quark's models carry beside ai.onnx 17.
EXTRA_IMPORTS = [
    ("ai.onnx.ml", 3), (MS, 1), ("ai.onnx.training", 1), ("ai.onnx.preview.training", 1),
    ("com.microsoft.experimental", 1), ("com.microsoft.nchwc", 1), ("org.pytorch.aten", 1),
    (DOMAIN, 1),
]

# Activation scale / zero point per type: values of the models' activations
# (|v| < ~20) fit the integer ranges without saturating everywhere.
_ACT = {
    "int8": (0.08, 3), "uint8": (0.08, 128), "int16": (0.0006, -7), "uint16": (0.0006, 32768),
    "int32": (1e-6, 0), "uint32": (1e-6, 2**31), "float16": (1.0, 0), "bfloat16": (1.0, 0),
}
# Weights: the activation's type, except uint types store int8-like ranges.
_W_SCALE = {"int8": 0.01, "uint8": 0.01, "int16": 1e-4, "uint16": 1e-4, "int32": 1e-7,
            "uint32": 1e-7, "float16": 1.0, "bfloat16": 1.0}


def _ms_type(qtype: str, quantize_op: bool, zp_zero: bool) -> bool:
    """Whether Quark writes this Q/DQ as com.microsoft (else Extended)."""
    if qtype in ("int8", "uint8", "int16", "uint16"):
        return True
    return qtype == "int32" and not quantize_op and zp_zero


def _tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype == TYPES["bfloat16"][0]:
        return helper.make_tensor(name, TensorProto.BFLOAT16, value.shape,
                                  value.view(np.uint16).tobytes(), raw=True)
    return onnx.numpy_helper.from_array(value, name)


class _Builder:
    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, base: str, value) -> str:
        name = self.fresh(base)
        self.inits.append(_tensor(name, np.asarray(value)))
        return name

    def node(self, op: str, inputs, n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        outs = [self.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.fresh(op),
                                           domain=domain, **attrs))
        return outs

    def qdq(self, x: str, qtype: str) -> str:
        """Activation x -> Q -> DQ (Quark's pair, per tensor)."""
        s, z = _ACT[qtype]
        dt = TYPES[qtype][0]
        scale = self.init("scale", np.array(s, np.float32))
        zp = self.init("zp", np.array(z, np.float32).astype(dt) if qtype in ("float16", "bfloat16")
                       else np.array(z, np.int64).astype(dt))
        q_dom = MS if _ms_type(qtype, True, z == 0) else DOMAIN
        dq_dom = MS if _ms_type(qtype, False, z == 0) else DOMAIN
        (q,) = self.node("QuantizeLinear" if q_dom == MS else "ExtendedQuantizeLinear",
                         [x, scale, zp], domain=q_dom)
        (y,) = self.node("DequantizeLinear" if dq_dom == MS else "ExtendedDequantizeLinear",
                         [q, scale, zp], domain=dq_dom)
        return y

    def weight(self, w: np.ndarray, qtype: str, per_channel: bool) -> str:
        """A float weight stored quantized, with a DequantizeLinear only
        (per channel: along axis 0, written explicitly)."""
        dt = TYPES[qtype][0]
        if qtype in ("float16", "bfloat16"):
            scale = np.array(1.0, np.float32)
            zp = np.zeros((), dt)
            per_channel = False
        elif per_channel:
            amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
            lo, hi = TYPES[qtype][1], TYPES[qtype][2]
            scale = (amax / (min(float(hi), 2**20) / 2)).astype(np.float32)
            scale = np.maximum(scale, np.float32(1e-8))
            zp = np.full(w.shape[0], 0 if lo < 0 else int(hi) // 2 + 1, np.int64).astype(dt)
        else:
            scale = np.array(_W_SCALE[qtype], np.float32)
            lo = TYPES[qtype][1]
            zp = np.array(0 if lo < 0 else int(TYPES[qtype][2]) // 2 + 1, np.int64).astype(dt)
        wq = quantize(w, scale, zp, axis=0)
        zero = bool(np.all(zp.astype(np.float64) == 0))
        dom = MS if _ms_type(qtype, False, zero) else DOMAIN
        attrs = {"axis": 0} if per_channel else {}
        (y,) = self.node("DequantizeLinear" if dom == MS else "ExtendedDequantizeLinear",
                         [self.init("w_q", wq), self.init("w_scale", scale),
                          self.init("w_zp", zp)], domain=dom, **attrs)
        return y

    def bias(self, b: np.ndarray, in_scale: float, w_scale: float) -> str:
        """An int32 bias with a scale of shape [1] and a scalar zero point 0
        (com.microsoft DequantizeLinear, as Quark writes it)."""
        s = np.array([in_scale * w_scale], np.float32)
        bq = quantize(b, s, np.zeros((), np.int32))
        (y,) = self.node("DequantizeLinear", [self.init("b_q", bq), self.init("b_scale", s),
                                              self.init("b_zp", np.zeros((), np.int32))],
                         domain=MS)
        return y

    def model(self, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v)
                                                    for d, v in EXTRA_IMPORTS]
        model = helper.make_model(graph, ir_version=8, opset_imports=imports,
                                  producer_name="quark-form test builder")
        return model


def cnn(act: str, per_channel: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x[1,3,8,8] -> Conv(4, 3x3) -> Relu -> MaxPool -> Flatten -> Gemm(5), every
    activation through Q/DQ of type ``act``; weights of the same type."""
    b = _Builder(f"cnn_{act}{'_pc' if per_channel else ''}", seed)
    rng = b.rng
    wtype = act
    x = b.qdq("x", act)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    bias = (rng.standard_normal(4) * 0.5).astype(np.float32)
    conv_in = [x, b.weight(w, wtype, per_channel)]
    if act not in ("float16", "bfloat16"):
        conv_in.append(b.bias(bias, _ACT[act][0], _W_SCALE[wtype]))
    (c,) = b.node("Conv", conv_in, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    c = b.qdq(c, act)
    (r,) = b.node("Relu", [c])
    r = b.qdq(r, act)
    (p,) = b.node("MaxPool", [r], kernel_shape=[2, 2], strides=[2, 2])
    p = b.qdq(p, act)
    (f,) = b.node("Flatten", [p], axis=1)
    wg = (rng.standard_normal((5, 64)) * 0.1).astype(np.float32)
    gemm_in = [f, b.weight(wg, wtype, per_channel)]
    if act not in ("float16", "bfloat16"):
        gemm_in.append(b.bias((rng.standard_normal(5) * 0.5).astype(np.float32),
                              _ACT[act][0], _W_SCALE[wtype]))
    (g,) = b.node("Gemm", gemm_in, transB=1)
    y = b.qdq(g, act)
    b.nodes[-1].output[0] = "y"
    del y
    return b.model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
    )


def transformer(act: str, per_channel: bool = False, seed: int = 1) -> onnx.ModelProto:
    """One attention block on x[1,4,8]: MatMul projections (+ bias Add),
    LayerNormalization, scores MatMul, Softmax, weighted sum MatMul; every
    activation through Q/DQ of type ``act``."""
    b = _Builder(f"transformer_{act}{'_pc' if per_channel else ''}", seed)
    rng = b.rng
    d = 8
    x = b.qdq("x", act)
    (ln,) = b.node("LayerNormalization",
                   [x, b.init("gamma", np.ones(d, np.float32)),
                    b.init("beta", np.zeros(d, np.float32))], axis=-1)
    ln = b.qdq(ln, act)
    heads = []
    for name in ("q", "k", "v"):
        w = (rng.standard_normal((d, d)) * 0.3).astype(np.float32)
        # MatMul weights [in, out]: per channel along the output axis, stored
        # transposed ([out, in], axis=0) and transposed back, as Quark's
        # per-channel weights carry axis=0.
        if per_channel and act not in ("float16", "bfloat16"):
            wt = b.weight(np.ascontiguousarray(w.T), act, True)
            (wdq,) = b.node("Transpose", [wt], perm=[1, 0])
        else:
            wdq = b.weight(w, act, False)
        (m,) = b.node("MatMul", [ln, wdq])
        m = b.qdq(m, act)
        bias = b.init(f"b{name}", (rng.standard_normal(d) * 0.1).astype(np.float32))
        (a,) = b.node("Add", [m, bias])
        heads.append(b.qdq(a, act))
    q, k, v = heads
    (kt,) = b.node("Transpose", [k], perm=[0, 2, 1])
    (scores,) = b.node("MatMul", [q, kt])
    scores = b.qdq(scores, act)
    (sm,) = b.node("Softmax", [scores], axis=-1)
    sm = b.qdq(sm, act)
    (out,) = b.node("MatMul", [sm, v])
    b.qdq(out, act)
    b.nodes[-1].output[0] = "y"
    return b.model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, d])],
    )


def bfp(seed: int = 2) -> onnx.ModelProto:
    """A CNN whose activations go through Quark's BFPQuantizeDequantize
    (com.amd.quark)."""
    b = _Builder("cnn_bfp", seed)
    rng = b.rng
    attrs = {"bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8,
             "rounding_mode": 0}
    (x,) = b.node("BFPQuantizeDequantize", ["x"], domain=DOMAIN, **attrs)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    (c,) = b.node("Conv", [x, b.init("w", w)], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    (c,) = b.node("BFPQuantizeDequantize", [c], domain=DOMAIN, **attrs)
    (r,) = b.node("Relu", [c])
    b.nodes[-1].output[0] = "y"
    return b.model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
    )


#: Quark's DPU-emulation ops: name -> domain.
EMULATION_OPS = {"ExtendedInstanceNormalization": DOMAIN, "ExtendedLSTM": DOMAIN,
                 "VitisInstanceNormalization": LEGACY_DOMAIN, "VitisLSTM": LEGACY_DOMAIN}


def emulation(op: str, seed: int = 3) -> onnx.ModelProto:
    """A model with one of Quark's emulation ops (:data:`EMULATION_OPS`) on
    the inputs of its ai.onnx counterpart: an instance normalization after a
    Conv (x[1,3,8,8], scale and bias of 4), or a bidirectional LSTM
    (x[4,1,8], hidden size 5, the quantization attributes Quark's LSTM
    conversion writes), with BFP16 nodes around it as Quark's BFP16
    configuration writes them."""
    b = _Builder(f"emulation_{op}", seed)
    rng = b.rng
    domain = EMULATION_OPS[op]
    attrs = {"bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8,
             "rounding_mode": 0}
    if "LSTM" in op:
        h = 5
        (x,) = b.node("BFPQuantizeDequantize", ["x"], domain=DOMAIN, **attrs)
        w = b.init("W", (rng.standard_normal((2, 4 * h, 8)) * 0.3).astype(np.float32))
        r = b.init("R", (rng.standard_normal((2, 4 * h, h)) * 0.3).astype(np.float32))
        bias = b.init("B", (rng.standard_normal((2, 8 * h)) * 0.1).astype(np.float32))
        q = {f"{p}_scale": s for p, s in (("x", 2.0**-12), ("w", 2.0**-14), ("r", 2.0**-14),
                                         ("b", 2.0**-14), ("y", 2.0**-15))}
        q.update({f"{p}_zero_point": 32768 for p in "xwrby"})
        (y,) = b.node(op, [x, w, r, bias], domain=domain, hidden_size=h, **q)
        b.nodes[-1].output[0] = "y"
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 8])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2, 1, h])]
    else:
        (x,) = b.node("BFPQuantizeDequantize", ["x"], domain=DOMAIN, **attrs)
        w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
        (c,) = b.node("Conv", [x, b.init("w", w)], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
        scale = b.init("scale", np.ones(4, np.float32))
        bias = b.init("bias", np.zeros(4, np.float32))
        (y,) = b.node(op, [c, scale, bias], domain=domain, epsilon=1e-5)
        b.nodes[-1].output[0] = "y"
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    model = b.model(inputs, outputs)
    if domain != DOMAIN:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


def all_models() -> dict[str, onnx.ModelProto]:
    """Every fixture by name: CNN and transformer for every type, per tensor
    and per channel."""
    out = {}
    for act in ACT_TYPES:
        for pc in (False, True):
            suffix = "_pc" if pc else ""
            out[f"cnn_{act}{suffix}"] = cnn(act, pc)
            out[f"transformer_{act}{suffix}"] = transformer(act, pc)
    return out


def sample_input(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 inputs for a fixture (values a few units wide)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = (rng.standard_normal(shape) * 2).astype(np.float32)
    return feeds


# --------------------------------------------------------------------------
# FLOAT / QUANT pairs: float models and their quantization in Quark's form,
# under Quark's names, for ``extql analyze``.


def float_cnn(seed: int = 3) -> onnx.ModelProto:
    """A float CNN: x[1,3,8,8] -> Conv(6) -> Relu -> Conv(4) -> Relu -> MaxPool
    -> Flatten -> Gemm(5) -> y."""
    rng = np.random.default_rng(seed)
    inits = [
        onnx.numpy_helper.from_array((rng.standard_normal((6, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w1"),
        onnx.numpy_helper.from_array((rng.standard_normal(6) * 0.3).astype(np.float32), "b1"),
        onnx.numpy_helper.from_array((rng.standard_normal((4, 6, 3, 3)) * 0.2)
                                     .astype(np.float32), "w2"),
        onnx.numpy_helper.from_array((rng.standard_normal(4) * 0.3).astype(np.float32), "b2"),
        onnx.numpy_helper.from_array((rng.standard_normal((5, 64)) * 0.15)
                                     .astype(np.float32), "wg"),
        onnx.numpy_helper.from_array((rng.standard_normal(5) * 0.3).astype(np.float32), "bg"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "float_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def float_transformer(seed: int = 4) -> onnx.ModelProto:
    """A float attention block on x[1,4,8]: LayerNormalization, MatMul + Add
    projections, scores MatMul, Softmax, weighted sum MatMul -> y."""
    rng = np.random.default_rng(seed)
    d = 8
    inits = [onnx.numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
             onnx.numpy_helper.from_array(np.zeros(d, np.float32), "beta")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1)]
    for name in ("q", "k", "v"):
        inits.append(onnx.numpy_helper.from_array(
            (rng.standard_normal((d, d)) * 0.3).astype(np.float32), f"w{name}"))
        inits.append(onnx.numpy_helper.from_array(
            (rng.standard_normal(d) * 0.1).astype(np.float32), f"b{name}"))
        nodes.append(helper.make_node("MatMul", ["ln", f"w{name}"], [f"m{name}"]))
        nodes.append(helper.make_node("Add", [f"m{name}", f"b{name}"], [name]))
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["sm"], axis=-1),
        helper.make_node("MatMul", ["sm", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "float_transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, d])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def calibration(float_model: onnx.ModelProto, count: int = 8,
                seed: int = 5) -> list[dict[str, np.ndarray]]:
    """Calibration-like inputs: ``count`` samples, standard normal times 2."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        feeds = {}
        for vi in float_model.graph.input:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = (rng.standard_normal(shape) * 2).astype(np.float32)
        out.append(feeds)
    return out


def _ranges(float_model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
            ) -> dict[str, tuple[float, float]]:
    """(min, max) of every activation (graph inputs and node outputs) over
    ``feeds``, computed by onnxruntime (no extql)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(float_model)
    names = [o for n in m.graph.node for o in n.output if o not in {x.name for x in m.graph.output}]
    for name in names:
        m.graph.output.append(onnx.ValueInfoProto(name=name))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for f in feeds:
        values = dict(zip(out_names, sess.run(None, f), strict=True))
        values.update(f)
        for k, v in values.items():
            lo[k] = min(lo.get(k, np.inf), float(v.min()))
            hi[k] = max(hi.get(k, -np.inf), float(v.max()))
    return {k: (lo[k], hi[k]) for k in lo}


def _act_params(qtype: str, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """Scale and zero point of an activation of range [lo, hi]: symmetric for
    signed types, asymmetric for unsigned ones, scale 1 / zero point 0 for
    float16 / bfloat16."""
    dt, tlo, thi = TYPES[qtype]
    if qtype in ("float16", "bfloat16"):
        return 1.0, np.zeros((), dt)
    if tlo < 0:
        amax = max(abs(lo), abs(hi), 1e-6)
        return amax / float(thi), np.zeros((), dt)
    lo, hi = min(lo, 0.0), max(hi, 1e-6)
    scale = (hi - lo) / (float(thi) - float(tlo))
    zp = int(np.clip(round(float(tlo) - lo / scale), tlo, thi))
    return scale, np.array(zp, np.int64).astype(dt)


def quark_quantize(float_model: onnx.ModelProto, act: str = "int8", weight: str | None = None,
                   per_channel: bool = False, feeds: list[dict[str, np.ndarray]] | None = None,
                   scale_factor: dict[str, float] | None = None) -> onnx.ModelProto:
    """``float_model`` quantized in the form and under the names AMD Quark
    writes (module docstring; DESIGN's "Models as Quark writes them"):

    * every activation -- graph input and node output -- through a Q -> DQ
      pair of type ``act``: ``<t>_QuantizeLinear`` (input ``t``, output
      ``<t>_QuantizeLinear_Output``) and ``<t>_DequantizeLinear`` (output
      ``<t>_DequantizeLinear_Output``, which the consumers read); a graph
      output's producer renamed ``<y>_QuantizeLinear_Input``, the DQ output
      named ``<y>``;
    * weights (float initializers) stored as ``<w>_quantized`` behind a lone
      DQ (``weight`` type, default ``act``; per channel along axis 0 written
      explicitly), biases of Conv / Gemm as int32 ``<b>_quantized`` with a
      scale of shape [1] (per channel: [C], axis 0) whose DQ output is ``<b>``;
      float16 / bfloat16 weights stay float behind a Q -> DQ pair;
    * com.microsoft Q/DQ for the 8/16-bit types, Extended nodes otherwise.

    Scales come from the activations' ranges over ``feeds`` (default
    :func:`calibration`); ``scale_factor`` multiplies the scale of the named
    tensors (0.01: a scale 100 times too small, a deliberately broken point).
    Values are computed by tests/contract.py.
    """
    weight = weight or act
    feeds = feeds if feeds is not None else calibration(float_model)
    ranges = _ranges(float_model, feeds)
    factor = scale_factor or {}
    src = float_model.graph
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in src.initializer}
    outputs = {o.name for o in src.output}
    new_inits: list[onnx.TensorProto] = []
    pre: list[onnx.NodeProto] = []
    body: list[onnx.NodeProto] = []
    renamed: dict[str, str] = {}  # value -> what its consumers read
    act_scale: dict[str, float] = {}

    def qdq(t: str, source: str, qtype: str, scale, zp, out: str, axis=None) -> list:
        s_name, z_name = f"{t}_scale", f"{t}_zero_point"
        new_inits.extend([_tensor(s_name, np.asarray(scale, np.float32)), _tensor(z_name, zp)])
        q_ms, dq_ms = _ms_type(qtype, True, False), _ms_type(qtype, False, False)
        attrs = {"axis": axis} if axis is not None else {}
        return [
            helper.make_node("QuantizeLinear" if q_ms else "ExtendedQuantizeLinear",
                             [source, s_name, z_name], [f"{t}_QuantizeLinear_Output"],
                             name=f"{t}_QuantizeLinear", domain=MS if q_ms else DOMAIN, **attrs),
            helper.make_node("DequantizeLinear" if dq_ms else "ExtendedDequantizeLinear",
                             [f"{t}_QuantizeLinear_Output", s_name, z_name], [out],
                             name=f"{t}_DequantizeLinear", domain=MS if dq_ms else DOMAIN,
                             **attrs)]

    def activation(t: str) -> list:
        scale, zp = _act_params(act, *ranges[t])
        scale *= factor.get(t, 1.0)
        act_scale[t] = scale
        if t in outputs:
            return qdq(t, f"{t}_QuantizeLinear_Input", act, scale, zp, t)
        renamed[t] = f"{t}_DequantizeLinear_Output"
        return qdq(t, t, act, scale, zp, renamed[t])

    def weight_dq(w: str, value: np.ndarray) -> str:
        dt, tlo, thi = TYPES[weight]
        if weight in ("float16", "bfloat16"):
            pre.extend(qdq(w, w, weight, 1.0, np.zeros((), dt), f"{w}_DequantizeLinear_Output"))
            new_inits.append(_tensor(w, value))
            return f"{w}_DequantizeLinear_Output"
        if per_channel and value.ndim >= 2:
            amax = np.abs(value.reshape(value.shape[0], -1)).max(axis=1)
            scale = np.maximum(amax / float(thi), 1e-8).astype(np.float32)
            zp = np.zeros(value.shape[0], dt)
            attrs = {"axis": 0}
        else:
            scale = np.array(max(float(np.abs(value).max()), 1e-8) / float(thi), np.float32)
            zp = np.zeros((), dt)
            attrs = {}
        if tlo == 0:  # unsigned weights: the middle of the range is zero
            zp = np.full(zp.shape, (int(thi) + 1) // 2, np.int64).astype(dt)
            scale = (scale * float(thi) / (float(thi) // 2)).astype(np.float32)
        new_inits.extend([_tensor(f"{w}_quantized", quantize(value, scale, zp, axis=0)),
                          _tensor(f"{w}_scale", scale), _tensor(f"{w}_zero_point", zp)])
        zero = bool(np.all(zp.astype(np.float64) == 0))
        ms = _ms_type(weight, False, zero)
        pre.append(helper.make_node(
            "DequantizeLinear" if ms else "ExtendedDequantizeLinear",
            [f"{w}_quantized", f"{w}_scale", f"{w}_zero_point"], [f"{w}_DequantizeLinear_Output"],
            name=f"{w}_DequantizeLinear", domain=MS if ms else DOMAIN, **attrs))
        self_scale[w] = scale
        return f"{w}_DequantizeLinear_Output"

    self_scale: dict[str, np.ndarray] = {}
    for vi in src.input:
        if vi.name not in inits:
            body.extend(activation(vi.name))
    for node in src.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        for i, name in enumerate(node.input):
            if name in renamed:
                new.input[i] = renamed[name]
            elif name in inits and inits[name].dtype == np.float32:
                is_bias = node.op_type in ("Conv", "Gemm") and i == 2
                if is_bias and weight not in ("float16", "bfloat16"):
                    new.input[i] = _bias(name, inits[name], act_scale[node.input[0]],
                                         self_scale[node.input[1]], per_channel, new_inits, pre)
                elif renamed.get(name) is None:
                    renamed[name] = weight_dq(name, inits[name])
                    new.input[i] = renamed[name]
            elif name in inits:
                new_inits.append(_tensor(name, inits[name]))
                renamed[name] = name
        for j, out in enumerate(node.output):
            if out in outputs:
                new.output[j] = f"{out}_QuantizeLinear_Input"
        body.append(new)
        for out in node.output:
            body.extend(activation(out))
    graph = helper.make_graph(pre + body, f"{src.name}_{act}", list(src.input),
                              list(src.output), new_inits)
    imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v)
                                                for d, v in EXTRA_IMPORTS]
    return helper.make_model(graph, ir_version=8, opset_imports=imports,
                             producer_name="quark-form test builder")


def _bias(name: str, value: np.ndarray, in_scale: float, w_scale: np.ndarray,
          per_channel: bool, inits: list, nodes: list) -> str:
    """An int32 bias ``<b>_quantized`` (scale in_scale * w_scale, shape [1] or
    [C] with axis 0; zero point 0) behind a com.microsoft DQ whose output is
    ``<b>``."""
    s = (np.float32(in_scale) * np.asarray(w_scale, np.float32)).astype(np.float32)
    s = s.reshape(-1) if s.size > 1 else s.reshape(1)
    zp = np.zeros(s.shape if s.size > 1 else (), np.int32)
    inits.extend([_tensor(f"{name}_quantized", quantize(value, s, zp, axis=0)),
                  _tensor(f"{name}_quantized_scale", s),
                  _tensor(f"{name}_quantized_zero_point", zp)])
    attrs = {"axis": 0} if per_channel and s.size > 1 else {}
    nodes.append(helper.make_node(
        "DequantizeLinear", [f"{name}_quantized", f"{name}_quantized_scale",
                             f"{name}_quantized_zero_point"], [name],
        name=f"{name}_DequantizeLinear", domain=MS, **attrs))
    return name


def quark_block(float_model: onnx.ModelProto, op: str = "BFPQuantizeDequantize",
                domain: str = DOMAIN, **attrs) -> onnx.ModelProto:
    """``float_model`` with a block-format node on every activation and
    weight, as Quark writes its BFP16 / MX models: nodes named
    ``<t>_DequantizeLinear`` with output ``<t>_DequantizeLinear_Output``
    (a graph output's producer renamed ``<y>_QuantizeLinear_Input``, the
    node's output ``<y>``), weights kept float before their node, no scale
    or zero point; ``attrs`` on every node (rank-1 weights get axis 0)."""
    src = float_model.graph
    inits = {i.name for i in src.initializer}
    outputs = {o.name for o in src.output}
    pre: list[onnx.NodeProto] = []
    body: list[onnx.NodeProto] = []
    renamed: dict[str, str] = {}

    def block(t: str, source: str, out: str, rank1: bool = False) -> onnx.NodeProto:
        a = dict(attrs)
        if rank1:
            a["axis"] = 0
        return helper.make_node(op, [source], [out], name=f"{t}_DequantizeLinear",
                                domain=domain, **a)

    for vi in src.input:
        if vi.name not in inits:
            renamed[vi.name] = f"{vi.name}_DequantizeLinear_Output"
            body.append(block(vi.name, vi.name, renamed[vi.name]))
    dims = {i.name: len(i.dims) for i in src.initializer}
    for node in src.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        for i, name in enumerate(node.input):
            if name in inits and name not in renamed and node.op_type in ("Conv", "Gemm",
                                                                          "MatMul"):
                renamed[name] = f"{name}_DequantizeLinear_Output"
                pre.append(block(name, name, renamed[name], rank1=dims[name] == 1))
            if name in renamed:
                new.input[i] = renamed[name]
        for j, out in enumerate(node.output):
            if out in outputs:
                new.output[j] = f"{out}_QuantizeLinear_Input"
                body.append(new)
                body.append(block(out, new.output[j], out))
                break
        else:
            body.append(new)
            for out in node.output:
                renamed[out] = f"{out}_DequantizeLinear_Output"
                body.append(block(out, out, renamed[out]))
    graph = helper.make_graph(pre + body, f"{src.name}_{op}", list(src.input),
                              list(src.output), list(src.initializer))
    imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v)
                                                for d, v in EXTRA_IMPORTS]
    if domain != DOMAIN:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, ir_version=8, opset_imports=imports,
                             producer_name="quark-form test builder")


def block_stand_in(model: onnx.ModelProto, grid: float = 16.0) -> onnx.ModelProto:
    """``model`` with a model-local function for each block-format operator
    it uses (``y = Round(x * grid) / grid``), so that onnxruntime runs it
    where no library implements the operator: the tensors change, the
    analysis of a one-node fake quantization does not."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    used = {(n.domain, n.op_type): sorted({a.name for a in n.attribute})
            for n in model.graph.node if "FixNeuron" in n.op_type
            or n.op_type in ("BFPQuantizeDequantize", "MXQuantizeDequantize")}
    for (domain, op), attr_names in used.items():
        g = helper.make_tensor("g", TensorProto.FLOAT, [], [grid])
        nodes = [helper.make_node("Constant", [], ["g"], value=g),
                 helper.make_node("Mul", ["x", "g"], ["xg"]),
                 helper.make_node("Round", ["xg"], ["r"]),
                 helper.make_node("Div", ["r", "g"], ["y"])]
        out.functions.append(helper.make_function(
            domain, op, ["x"], ["y"], nodes, [helper.make_opsetid("", 17)], attr_names))
    return out
