"""The fallback function of Quark's DPU LSTM in standard ONNX ops:
``ExtendedLSTM`` (legacy ``VitisLSTM``) of docs/operators/extended_lstm.rst.

Unlike the other fallbacks (one onnxscript function per operator and type),
an LSTM node gets a function of its own, built here with ``onnx.helper``:
its fixed-point parameters (``qx``, ``xwq``, ``ohs``, ... of the page's
"Parameters") depend on its ten quantization attributes and its input size
through ``ceil(log2 ...)``, a rounding of doubles and shifts, and they are
computed once, when the function is made, by the kernels' own
``lstm_params`` (so they are the library's bits and its refusals); the
function body holds them as constants.  Nodes with the same parameters
share a function (``overload`` ``"lstm_<digest>"``).

Each step of the page, with standard ops:

* the quantize of X, W, R and B -- float32 ``Div`` by the scale, ``Round``
  (half to even, as ExtendedQuantizeLinear), then float64: ``+ zp``,
  ``Max`` / ``Min`` to [0, 65535], ``- 32768``; a NaN gives -32768 (``Where``);
* every integer of the page as a float64 holding it exactly: the dot
  products ``Σ x·w`` and ``Σ h·r`` are float64 ``MatMul`` of int16 values:
  a product is at most 2^15 · 2^15 = 2^30 in magnitude, and the input size
  and H are below 2^22 (``lstm_params`` refuses more), so every partial sum
  is an integer below 2^52, exact in whatever order a runtime adds; the
  row sums ``Σw_i``, ``Σr_i`` and the element sums ``Σ x_t``, ``Σ h``
  (``ReduceSum``) are below 2^37;
* ``srs(v, k)`` -- ``Floor((|v| + 2^(k-1)) · 2^-k)`` with v's sign put back
  (``Where``, not ``Sign``: Quark's ``2^31`` for k = 32 is ``-2^31``, which
  gives a nonzero result for 0), then ``Max`` / ``Min`` to int32.  Every
  operand stays below 2^53: ``srs(Σ, xw) · qx`` is below 2^31 · 2^15,
  ``Σ x_t · qa`` below 2^37 · 2^15, ``hi · ohs + (ohz << oh)`` below
  2^24 · 2^16 + 2^15 · 2^32;
* the int32 wrap of the gate sum and the int16 wrap of ``srs16`` /
  ``round16`` -- ``v - 2^n · Floor((v + 2^(n-1)) · 2^-n)``;
* ``round32(d)`` -- ``Floor(|d| + 0.5)`` with d's sign, clamped;
* the gate constants ``qc`` -- the page's float64 expression left to right
  as written (constants folded here in Python's float64, the same IEEE
  operations as the kernels', which are built without contraction);
* the gates -- float32 ``Tanh`` where the page calls the C library's
  ``tanhf``, the sigmoid's ``· 0.5 + 0.5`` in float64 and the cell update
  in float32 (``Mul``, ``Mul``, ``Add``: no fused multiply-add);
* the recurrence -- one ``Scan`` per direction over the sequence (the
  reverse direction's input and output reversed by a ``Slice`` of step -1,
  so its outputs come out in forward time order: onnx.reference's Scan
  runs forward only) and one unused step past its end (no Scan over an
  empty sequence, which onnxruntime and onnx.reference refuse), the state
  h (the int16 values, float64) and c (float32), every batch element a row of its own
  (the rows never mix: each is the batch-1 case).  The x part of the gates
  (``srs(srs(Σ x·w, xw) · qx, xwq) - sx + qc``) is computed for the whole
  sequence before the Scan.

The one difference from the kernels is the ``Tanh``: a runtime's float32
tanh is not the C library's ``tanhf`` (docs/differences.rst gives what it
changes in the outputs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import _kernels
from ..rules.lstm import LSTMAttrs, shift_refusal

__all__ = ["LSTM_MIN_OPSET", "lstm_parameters", "lstm_overload", "lstm_function_proto"]

#: The oldest ai.onnx opset the function can be stamped with (Unsqueeze /
#: ReduceSum with their axes as an input, IsNaN of float64: 13).
LSTM_MIN_OPSET = 13
_F32 = TensorProto.FLOAT
_F64 = TensorProto.DOUBLE
_SG = 2.0**24  # s_g, the gates' scale
_I32 = (-2.0**31, 2.0**31 - 1)


def _half(k: int) -> float:
    """2^(k-1) as Quark's C int ``1 << (k - 1)``: 0 for k = 0, -2^31 for 32."""
    if k == 0:
        return 0.0
    return -2.0**31 if k == 32 else 2.0 ** (k - 1)


def lstm_parameters(a: LSTMAttrs, n_in: int, node: str | None = None) -> dict:
    """The node's fixed-point parameters (the kernels' ``lstm_params``), or
    the kernels' refusal as a ValueError naming the node."""
    code, p = _kernels.lstm_params(a.scales, a.zero_points, n_in, a.hidden_size, a.dirs,
                                   a.reverse)
    if code != 0:
        raise ValueError(shift_refusal(code, p, node=node))
    return p


def lstm_overload(a: LSTMAttrs, n_in: int, has_b: bool, n_out: int) -> str:
    """The ``overload`` of a node's function: the digest of what its body
    depends on (nodes that share it share the function)."""
    key = repr((a.hidden_size, a.scales, a.zero_points, a.direction, a.layout, n_in, has_b,
                n_out))
    return "lstm_" + hashlib.sha256(key.encode()).hexdigest()[:12]


class _Builder:
    """Nodes of one graph (the function body or the Scan body), with fresh
    value names."""

    def __init__(self, prefix: str):
        self.nodes: list[onnx.NodeProto] = []
        self.prefix = prefix
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs) -> str:
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value, dtype=np.float64, hint: str = "c") -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node(
            "Constant", [], [out], value=numpy_helper.from_array(np.asarray(value, dtype))))
        return out

    def d(self, v: float) -> str:
        return self.const(v, np.float64)

    def ints(self, v: Sequence[int]) -> str:
        return self.const(list(v), np.int64, "i")

    # -- fixed-point helpers on float64 integers ---------------------------

    def clamp(self, v: str, lo: float, hi: float) -> str:
        return self.op("Min", self.op("Max", v, self.d(lo)), self.d(hi))

    def srs_mag(self, v: str, k: int) -> str:
        """sign(v) · Floor((|v| + 2^(k-1)) · 2^-k), the sign by v < 0."""
        if k == 0:
            return v
        mag = self.op("Floor", self.op("Mul", self.op("Add", self.op("Abs", v), self.d(_half(k))),
                                       self.d(2.0 ** -k)))
        return self.op("Where", self.op("Less", v, self.d(0.0)), self.op("Neg", mag), mag)

    def srs(self, v: str, k: int) -> str:
        return self.clamp(self.srs_mag(v, k), *_I32)

    def wrap(self, v: str, bits: int) -> str:
        """v wrapped to a signed ``bits``-bit integer."""
        n = 2.0**bits
        turns = self.op("Floor", self.op("Mul", self.op("Add", v, self.d(n / 2)), self.d(1 / n)))
        return self.op("Sub", v, self.op("Mul", turns, self.d(n)))

    def srs16(self, v: str, k: int) -> str:
        return self.wrap(self.clamp(self.srs_mag(v, k), -65536.0, 65535.0), 16)

    def round32(self, v: str) -> str:
        mag = self.op("Floor", self.op("Add", self.op("Abs", v), self.d(0.5)))
        signed = self.op("Where", self.op("Less", v, self.d(0.0)), self.op("Neg", mag), mag)
        return self.clamp(signed, *_I32)

    def quantize(self, v: str, scale: float, zp: int) -> str:
        """float32 v -> its int16 value (float64): clamp(Round(v / s) + zp,
        0, 65535) - 32768, NaN -> -32768."""
        r = self.op("Round", self.op("Div", v, self.const(scale, np.float32)))
        t = self.op("Add", self.op("Cast", r, to=_F64), self.d(float(zp)))
        q = self.op("Sub", self.clamp(t, 0.0, 65535.0), self.d(32768.0))
        return self.op("Where", self.op("IsNaN", r), self.d(-32768.0), q)

    def tanh(self, v: str) -> str:
        """The page's tanhf of a float32 v: float32 ``Tanh`` (a float64 Tanh
        rounded to float32 is nearer tanhf, but changes the outputs about
        as often: docs/differences.rst)."""
        return self.op("Tanh", v)

    def split(self, v: str, sizes: Sequence[int], axis: int) -> list[str]:
        """v cut into consecutive parts of ``sizes`` along axis: one ``Split``
        (Slices that cover an axis are what onnxruntime 1.18's
        GatherSliceToSplitFusion rewrites, and it names every Split it makes
        alike, so two in one graph make an invalid model)."""
        outs = [self.name("part") for _ in sizes]
        self.nodes.append(helper.make_node("Split", [v, self.ints(sizes)], outs, axis=axis))
        return outs

    def reverse(self, v: str) -> str:
        """v in reverse order along axis 0 (a Slice of step -1)."""
        return self.op("Slice", v, self.ints([-1]), self.ints([-2**62]), self.ints([0]),
                       self.ints([-1]))


def _step_body(p: dict, hidden: int, d: int) -> onnx.GraphProto:
    """The Scan body of direction d: (h, c, rt, pre_t) -> (h', c', rt, h, c),
    with ``pre_t`` the x part of the gate sums [batch, 4H] and ``rt`` R's
    int16 values transposed, [H, 4H].  rt is a state passed on unchanged
    rather than read from the outer scope: OpenVINO's Scan takes no outer
    value (it counts one as a missing input).  The scan outputs are the
    states *before* the step (see :func:`lstm_function_proto`)."""
    H = hidden
    b = _Builder(f"s{d}_")
    h_in, c_in, rt, pre = f"s{d}_h_in", f"s{d}_c_in", f"s{d}_rt_in", f"s{d}_pre"
    gh = b.srs(b.op("Mul", b.srs(b.op("MatMul", h_in, rt), p["hr"]), b.d(float(p["qh"]))),
               p["hrq"])
    g = b.op("Add", pre, gh)
    if p["qb"] != 0:
        sum_h = b.op("ReduceSum", h_in, b.ints([1]), keepdims=1)
        g = b.op("Sub", g, b.srs(b.op("Mul", sum_h, b.d(float(p["qb"]))), p["hs"]))
    g = b.wrap(g, 32)
    # i, o, f: float32(double(tanh(float32(g / (2 s_g)))) · 0.5 + 0.5)
    g_iof, g_c = b.split(g, [3 * H, H], 1)
    t = b.tanh(b.op("Cast", b.op("Mul", g_iof, b.d(0.5 / _SG)), to=_F32))
    sig = b.op("Cast", b.op("Add", b.op("Mul", b.op("Cast", t, to=_F64), b.d(0.5)), b.d(0.5)),
               to=_F32)
    vi, vo, vf = b.split(sig, [H, H, H], 1)
    vc = b.tanh(b.op("Cast", b.op("Mul", g_c, b.d(1.0 / _SG)), to=_F32))
    c_out = b.op("Add", b.op("Mul", vi, vc), b.op("Mul", vf, c_in), hint="c_out")
    hf = b.op("Mul", vo, b.tanh(c_out))
    hi = b.round32(b.op("Mul", b.op("Cast", hf, to=_F64), b.d(_SG)))
    oh = p["oh"]
    shifted = b.op("Add", b.op("Mul", hi, b.d(float(p["ohs"]))),
                   b.d(float(p["ohz"]) * 2.0**oh))
    h_out = b.srs16(shifted, oh)
    b.nodes.append(helper.make_node("Identity", [h_in], [f"s{d}_h_before"]))
    b.nodes.append(helper.make_node("Identity", [c_in], [f"s{d}_c_before"]))
    b.nodes.append(helper.make_node("Identity", [c_out], [f"s{d}_c_next"]))
    b.nodes.append(helper.make_node("Identity", [rt], [f"s{d}_rt_out"]))
    # (onnxruntime's Scan wants its body's output shapes; the batch is left
    # unnamed: tract unifies a named one with the outer size and fails)
    return helper.make_graph(
        b.nodes, f"lstm_step_{d}",
        [helper.make_tensor_value_info(h_in, _F64, [None, H]),
         helper.make_tensor_value_info(c_in, _F32, [None, H]),
         helper.make_tensor_value_info(rt, _F64, [H, 4 * H]),
         helper.make_tensor_value_info(pre, _F64, [None, 4 * H])],
        [helper.make_tensor_value_info(h_out, _F64, [None, H]),
         helper.make_tensor_value_info(f"s{d}_c_next", _F32, [None, H]),
         helper.make_tensor_value_info(f"s{d}_rt_out", _F64, [H, 4 * H]),
         helper.make_tensor_value_info(f"s{d}_h_before", _F64, [None, H]),
         helper.make_tensor_value_info(f"s{d}_c_before", _F32, [None, H])])


def lstm_function_proto(a: LSTMAttrs, n_in: int, has_b: bool, n_out: int, *, name: str,
                        domain: str, opset: int, node: str | None = None) -> onnx.FunctionProto:
    """The FunctionProto of one parameter set of ``name`` in ``domain``:
    inputs X, W, R (and B when ``has_b``), outputs the first ``n_out`` of
    Y, Y_h, Y_c (the node's count: onnxruntime wants a call's outputs to be
    the function's); ``overload``
    :func:`lstm_overload`; importing ai.onnx ``opset`` (>= 13).  Raises the
    kernels' refusal (naming ``node``) for parameters they refuse."""
    if opset < LSTM_MIN_OPSET:
        raise ValueError(f"the DPU LSTM's fallback function needs ai.onnx opset >= "
                         f"{LSTM_MIN_OPSET}, got {opset}")
    p = lstm_parameters(a, n_in, node)
    H, dirs = a.hidden_size, a.dirs
    xs_, ws, rs, bs, ys = a.scales
    xzp, wzp, rzp, bzp, yzp = a.zero_points
    xz, yz, bz = float(xzp - 32768), float(yzp - 32768), float(bzp - 32768)
    b = _Builder("")
    x = "X" if a.layout == 0 else b.op("Transpose", "X", perm=[1, 0, 2])  # [seq, batch, in]
    xq = b.quantize(x, xs_, xzp)
    sx = None
    if p["qa"] != 0:
        sum_x = b.op("ReduceSum", xq, b.ints([2]), keepdims=1)
        sx = b.srs(b.op("Mul", sum_x, b.d(float(p["qa"]))), p["xs"])
    shape = b.op("Shape", x)
    batch = b.op("Gather", shape, b.ints([1]), axis=0)
    state = b.op("Concat", batch, b.ints([H]), axis=0)
    h0 = b.op("Expand", b.d(float(p["ohz"])), state)
    c0 = b.op("Expand", b.const(0.0, np.float32), state)
    # One step past the sequence (its result unused), so that no Scan runs
    # over an empty one (onnxruntime's and onnx.reference's refuse it) and
    # the states before each step, [seq + 1, batch, H], hold h0 / c0 first
    # and the last step's h / c last, also for seq = 0.
    extra = b.op("Expand", b.d(0.0), b.op("Concat", b.ints([1]), batch, b.ints([4 * H]), axis=0))
    # qc's float64 constants, as the page's expression starts them
    t0 = (float(n_in) * p["qaf"]) * xz + (float(H) * p["qbf"]) * yz
    cw, cr, bsg = p["qxf"] * xz, p["qhf"] * yz, float(bs) * _SG
    ys_by_dir, yh, yc = [], [], []
    for d in range(dirs):
        rev = bool(a.reverse) or d == 1
        # W / R of direction d transposed, then quantized: [in, 4H] / [H, 4H].
        # (A Transpose straight into a MatMul is what onnxruntime 1.18 fuses
        # into a FusedMatMul it has no float64 kernel for.)
        wt, rt = (b.quantize(b.op("Transpose", b.op("Squeeze", b.op("Gather", v, b.ints([d]),
                                                                         axis=0), b.ints([0])),
                                  perm=[1, 0]), s, z)
                  for v, s, z in (("W", ws, wzp), ("R", rs, rzp)))
        t = b.op("Sub", b.d(t0), b.op("Mul", b.d(cw), b.op("ReduceSum", wt, b.ints([0]),
                                                             keepdims=0)))
        t = b.op("Sub", t, b.op("Mul", b.d(cr), b.op("ReduceSum", rt, b.ints([0]), keepdims=0)))
        if has_b:
            bd = b.op("Squeeze", b.op("Gather", "B", b.ints([d]), axis=0), b.ints([0]))
            bq = b.quantize(bd, bs, bzp)
            both = b.op("Add", *b.split(bq, [4 * H, 4 * H], 0))
            t = b.op("Add", t, b.op("Mul", b.d(bsg), b.op("Sub", both, b.d(2.0 * bz))))
        else:  # B absent: zeros, quantized to bz each: (bz + bz) - 2 bz = 0
            q0 = float(min(max(bzp, 0), 65535) - 32768)
            t = b.op("Add", t, b.d(bsg * ((q0 + q0) - 2.0 * bz)))
        qc = b.round32(t)  # [4H]
        gx = b.srs(b.op("Mul", b.srs(b.op("MatMul", xq, wt), p["xw"]), b.d(float(p["qx"]))),
                   p["xwq"])
        pre = b.op("Add", gx, qc) if sx is None else b.op("Add", b.op("Sub", gx, sx), qc)
        if rev:
            pre = b.reverse(pre)
        pre = b.op("Concat", pre, extra, axis=0)
        ends = [b.name(n) for n in ("h_end", "c_end", "rt_end", "h_before", "c_before")]
        b.nodes.append(helper.make_node("Scan", [h0, c0, rt, pre], ends, num_scan_inputs=1,
                                        body=_step_body(p, H, d)))
        h_before, c_before = ends[3:]
        hs = b.op("Slice", h_before, b.ints([1]), b.ints([2**62]), b.ints([0]))  # [seq, ...]
        if rev:
            hs = b.reverse(hs)
        h_last = b.op("Slice", h_before, b.ints([-1]), b.ints([2**62]), b.ints([0]))
        c_last = b.op("Slice", c_before, b.ints([-1]), b.ints([2**62]), b.ints([0]))

        def deq(v: str) -> str:
            return b.op("Mul", b.op("Cast", b.op("Add", v, b.d(32768.0 - yzp)), to=_F32),
                        b.const(ys, np.float32))

        ys_by_dir.append(b.op("Unsqueeze", deq(hs), b.ints([1])))  # [seq, 1, batch, H]
        yh.append(deq(h_last))  # [1, batch, H]
        yc.append(c_last)
    outs = []
    for parts, axis, perm in ((ys_by_dir, 1, [2, 0, 1, 3]), (yh, 0, [1, 0, 2]),
                              (yc, 0, [1, 0, 2])):
        v = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=axis)
        outs.append(v if a.layout == 0 else b.op("Transpose", v, perm=perm))
    finals = ["Y", "Y_h", "Y_c"][:n_out]
    for out, final in zip(outs, finals, strict=False):
        b.nodes.append(helper.make_node("Identity", [out], [final]))
    fn = helper.make_function(
        domain, name, ["X", "W", "R"] + (["B"] if has_b else []), finals,
        b.nodes, [helper.make_opsetid("", opset)])
    fn.overload = lstm_overload(a, n_in, has_b, n_out)
    fn.doc_string = (f"extql fallback for {domain}::{name} ({fn.overload}): standard ONNX ops "
                     "only, the extql kernels' bits but for Tanh (docs/differences.rst).")
    return fn
