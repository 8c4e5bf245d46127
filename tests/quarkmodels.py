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
* Quark's ``BFPQuantizeDequantize`` in a model of its own (extql does not
  implement it: tools must name it).

The values are made with tests/contract.py (independent of extql).
"""

from __future__ import annotations

import numpy as np
import onnx
from contract import TYPES, quantize
from onnx import TensorProto, helper

from extql.types import DOMAIN

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
    (com.amd.quark), which extql does not implement."""
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
