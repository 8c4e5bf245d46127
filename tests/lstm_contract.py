"""An independent implementation of ExtendedLSTM's contract
(docs/operators/extended_lstm.rst), in plain Python and NumPy, written from
its text and sharing no code with extql.

The DPU's 16-bit fixed-point LSTM: X, W, R, B quantized to uint16 per tensor,
moved to int16, fixed-point parameters derived once per node, then per
direction a loop over the sequence whose integer gate sums go through the
``srs`` shifts and whose gates go through the C library's ``tanhf``.
Clarity first: scalars are Python integers (exact) and Python floats
(doubles), float32 steps are ``np.float32`` operations, the dot products are
NumPy int64 sums (exact: every product is below 2^31 in magnitude).

:func:`expected` computes a whole node (batch, direction, layout, the outputs
Y, Y_h and Y_c) as the operator page defines it; :func:`problems` lists the
refusals the page names for a node's attributes and shapes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

F32 = np.float32
S_G = float(2**24)
INT32 = (-(2**31), 2**31 - 1)
#: Quark's "16-bit" clamp bound of srs16 / round16: [-2^16, 2^16 - 1].
BOUND16 = (-(2**16), 2**16 - 1)

#: op_type -> domain; the legacy name computes the same.
OPS = {"ExtendedLSTM": "com.amd.quark", "VitisLSTM": "com.vai.quantize"}
#: The quantization attributes, all required.
QPARAMS = ("x", "w", "r", "b", "y")
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.tanhf.restype = ctypes.c_float
_LIBM.tanhf.argtypes = [ctypes.c_float]
_LIBM.log2.restype = ctypes.c_double
_LIBM.log2.argtypes = [ctypes.c_double]


def tanhf(v) -> np.float32:
    """The C library's tanhf (the contract's)."""
    return F32(_LIBM.tanhf(float(F32(v))))


def log2(v: float) -> float:
    """The C library's log2 of a double."""
    return _LIBM.log2(v)


class Refused(ValueError):
    """A node the operator page refuses (its message words in ``args[0]``)."""


# ------------------------------------------------------------------ helpers

def _clamp(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else v


def _wrap16(v: int) -> int:
    return ((v + 32768) & 0xFFFF) - 32768


def half_bias(k: int) -> int:
    """2^(k-1) as Quark's int shift ``1 << (k - 1)`` gives it: for k = 32 the
    int32 value 2^31 wraps to -2^31 (the page: Quark's bits)."""
    if k == 0:
        return 0
    return -(2**31) if k == 32 else 2 ** (k - 1)


def srs(v: int, k: int) -> int:
    """sign(v) * ((|v| + 2^(k-1)) >> k), clamped to int32."""
    mag = (abs(v) + half_bias(k)) >> k
    return _clamp(-mag if v < 0 else mag, *INT32)


def srs16(v: int, k: int, lanes: Counter | None = None) -> int:
    """srs into [-2^16, 2^16 - 1], then wrapped to int16."""
    mag = (abs(v) + half_bias(k)) >> k
    r = _clamp(-mag if v < 0 else mag, *BOUND16)
    if lanes is not None:
        lanes["h clamped"] += r != (-mag if v < 0 else mag)
        lanes["h wrapped"] += not -32768 <= r <= 32767
    return _wrap16(r)


def _round(d: float, lo: int, hi: int) -> int:
    x = abs(d) + 0.5  # a double addition
    x = -x if d < 0 else x
    if x < lo:
        return lo
    if x > hi:
        return hi
    return math.trunc(x)


def round32(d: float) -> int:
    return _round(d, *INT32)


def round16(d: float) -> int:
    return _wrap16(_round(d, *BOUND16))


def pow2_int(a: int) -> float:
    """2^a as Quark's int ``1 << a``: for a = 31, -2^31."""
    return -float(2**31) if a == 31 else float(2**a)


def fix(d: float) -> tuple[int, int]:
    """(q, a): a = 15 - ceil(log2|d|), q = round16(2^a * d); (0, 0) for d = 0."""
    if d == 0:
        return 0, 0
    a = 15 - math.ceil(log2(abs(d)))
    return round16(pow2_int(a) * d), a


def ceil_log2_int(n: int) -> int:
    return math.ceil(log2(float(n)))


def quantize_u16_i16(v: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """clamp(nearbyint(v / s) + zp, 0, 65535) - 32768 (NaN -> 0, +inf -> 65535
    before the shift), as int64."""
    v = np.asarray(v, F32)
    with np.errstate(all="ignore"):
        r = np.rint(v / F32(scale)).astype(np.float64) + zero_point
    r = np.where(np.isnan(r), 0.0, np.clip(r, 0, 65535))
    return r.astype(np.int64) - 32768


def dequantize_u16(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (np.asarray(q, np.int64) - zero_point).astype(F32) * F32(scale)


# ------------------------------------------------------------------ parameters

@dataclass
class Params:
    """The node's fixed-point parameters (the page's names)."""

    qx: int
    qh: int
    qa: int
    qb: int
    xw: int
    xwq: int
    hr: int
    hrq: int
    xs: int
    hs: int
    ohs: int
    ohz: int
    oh: int
    qxf: float
    qhf: float
    qaf: float
    qbf: float


def params(attrs: Mapping, input_size: int, hidden: int) -> Params:
    """The parameters of the page, refusing the ranges it refuses."""
    z = {p: int(attrs[f"{p}_zero_point"]) - 32768 for p in QPARAMS}
    s = {p: float(F32(attrs[f"{p}_scale"])) for p in QPARAMS}
    qxf = float(F32(s["x"]) * F32(s["w"])) * S_G
    qhf = float(F32(s["y"]) * F32(s["r"])) * S_G
    qaf, qbf = qxf * z["w"], qhf * z["r"]
    xw, hr = ceil_log2_int(input_size), ceil_log2_int(hidden)
    qx, ax = fix(qxf)
    qh, ah = fix(qhf)
    qa, xs = fix(qaf)
    qb, hs = fix(qbf)
    xwq, hrq = ax - xw, ah - hr
    qo = 1.0 / s["y"]
    a = 16 - math.ceil(log2(qo))
    for name, shift, lo, hi in (("ax", ax, 0, 31), ("ah", ah, 0, 31),
                                ("xwq", xwq, 0, 31), ("hrq", hrq, 0, 31), ("xs", xs, 0, 31),
                                ("hs", hs, 0, 31), ("oh", 24 + a, 0, 32)):
        if not lo <= shift <= hi:
            raise Refused(f"shift {name} {shift} outside [{lo}, {hi}]")
    ohs = round16((2.0**a) * qo) & 0xFFFF
    ohz = _wrap16(math.trunc(float(F32(z["y"])) + 1e-9))
    return Params(qx, qh, qa, qb, xw, xwq, hr, hrq, xs, hs, ohs, ohz, 24 + a,
                  qxf, qhf, qaf, qbf)


def gate_constants(p: Params, attrs: Mapping, w: np.ndarray, r: np.ndarray,
                   bw: np.ndarray, br: np.ndarray, input_size: int, hidden: int) -> list[int]:
    """qc_i of one direction (w [4H, input], r [4H, H], bw / br [4H]: int16 values)."""
    xz = int(attrs["x_zero_point"]) - 32768
    yz = int(attrs["y_zero_point"]) - 32768
    bz = int(attrs["b_zero_point"]) - 32768
    b_scale = float(F32(attrs["b_scale"]))
    out = []
    for i in range(4 * hidden):
        t = (input_size * p.qaf) * xz
        t = t + (hidden * p.qbf) * yz
        sw = 0.0
        for j in range(input_size):
            sw += float(w[i, j])
        sr = 0.0
        for j in range(hidden):
            sr += float(r[i, j])
        t = t - (p.qxf * xz) * sw
        t = t - (p.qhf * yz) * sr
        t = t + (b_scale * S_G) * ((float(bw[i]) + float(br[i])) - 2.0 * bz)
        out.append(round32(t))
    return out


# ------------------------------------------------------------------ one run

def _gate(v: int, half: bool) -> np.float32:
    if half:
        t = tanhf(F32(v / (2.0 * S_G)))
        return F32(float(t) * 0.5 + 0.5)
    return tanhf(F32(v / S_G))


def run_direction(p: Params, qc: list[int], x: np.ndarray, w: np.ndarray,
                  r: np.ndarray, hidden: int, reverse: bool, lanes: Counter | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One batch element, one direction: x [seq, input] int16 values, w, r
    int16 values [4H, *].  Returns (h per time step [seq, H] int16 values, in
    forward time order; the last step's c, float32 [H]).  ``lanes`` counts
    the rarer lanes of the math this run reaches (tests of coverage)."""
    seq = x.shape[0]
    H = hidden
    h = [p.ohz] * H
    c = [F32(0.0)] * H
    hs_out = np.zeros((seq, H), np.int64)
    order = range(seq - 1, -1, -1) if reverse else range(seq)
    wq = np.asarray(w, np.int64)
    rq = np.asarray(r, np.int64)
    for t in order:
        xt = np.asarray(x[t], np.int64)
        dx = (wq @ xt).tolist()  # exact int64 sums
        dh = (rq @ np.asarray(h, np.int64)).tolist()
        sx = srs(int(xt.sum()) * p.qa, p.xs)
        sh = srs(sum(h) * p.qb, p.hs)
        g = []
        for i in range(4 * H):
            gx = srs(srs(dx[i], p.xw) * p.qx, p.xwq)
            gh = srs(srs(dh[i], p.hr) * p.qh, p.hrq)
            v = gx + gh - sx - sh + qc[i]
            g.append(((v + 2**31) & 0xFFFFFFFF) - 2**31)
            if lanes is not None:
                lanes["gate sum wrapped"] += g[-1] != v
                lanes["srs tie"] += p.xw > 0 and abs(dx[i]) % 2**p.xw == 2 ** (p.xw - 1)
        new_h = []
        for k in range(H):
            vi, vo, vf = _gate(g[k], True), _gate(g[H + k], True), _gate(g[2 * H + k], True)
            vc = _gate(g[3 * H + k], False)
            ck = F32(F32(vi * vc) + F32(vf * c[k]))
            c[k] = ck
            hf = F32(vo * tanhf(ck))
            hi = round32(float(hf) * S_G)
            new_h.append(srs16(hi * p.ohs + p.ohz * 2**p.oh, p.oh, lanes))
        h = new_h
        hs_out[t] = h
    return hs_out, np.array(c, F32)


# ------------------------------------------------------------------ the node

def problems(attrs: Mapping, x_shape, w_shape, r_shape, b_shape=None) -> list[str]:
    """The page's refusals for these attributes and input shapes (empty: the
    node is computed).  Words are the oracle's own; tests match keys."""
    out = []
    for name in ("hidden_size",) + tuple(f"{p}_{k}" for p in QPARAMS
                                          for k in ("scale", "zero_point")):
        if name not in attrs:
            out.append(f"missing {name}")
    if out:
        return out
    H = int(attrs["hidden_size"])
    if H <= 0:
        return ["hidden_size"]
    for p in QPARAMS:
        s = float(attrs[f"{p}_scale"])
        if not (math.isfinite(s) and F32(s) > 0):
            out.append(f"{p}_scale")
        if not 0 <= int(attrs[f"{p}_zero_point"]) <= 65535:
            out.append(f"{p}_zero_point")
    direction = attrs.get("direction", "bidirectional")
    if direction not in DIRECTIONS:
        out.append("direction")
    if int(attrs.get("layout", 0)) not in (0, 1):
        out.append("layout")
    if int(attrs.get("input_forget", 0)) != 0:
        out.append("input_forget")
    if out:
        return out
    dirs = DIRECTIONS[direction]
    if len(x_shape) != 3:
        return ["X rank"]
    n_in = x_shape[2]
    if n_in < 1:
        return ["input_size"]
    if tuple(w_shape) != (dirs, 4 * H, n_in):
        out.append("W shape")
    if tuple(r_shape) != (dirs, 4 * H, H):
        out.append("R shape")
    if b_shape is not None and tuple(b_shape) != (dirs, 8 * H):
        out.append("B shape")
    if out:
        return out
    try:
        params(attrs, n_in, H)
    except Refused as exc:
        out.append(str(exc))
    return out


def expected(attrs: Mapping, x: np.ndarray, w: np.ndarray, r: np.ndarray,
             b: np.ndarray | None = None, lanes: Counter | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y, Y_h, Y_c) of a node: Y [seq, dirs, batch, H] (layout 0) or
    [batch, seq, dirs, H] (layout 1); Y_h (the h after each direction's last
    step, dequantized) and Y_c (its c) [dirs, batch, H] (layout 1:
    [batch, dirs, H]).  Refused nodes raise :class:`Refused`.  ``lanes``: as
    :func:`run_direction`'s, with the parameters' lanes."""
    x, w, r = (np.asarray(v, F32) for v in (x, w, r))
    bad = problems(attrs, x.shape, w.shape, r.shape, None if b is None else np.shape(b))
    if bad:
        raise Refused("; ".join(bad))
    H = int(attrs["hidden_size"])
    direction = attrs.get("direction", "bidirectional")
    layout = int(attrs.get("layout", 0))
    dirs = DIRECTIONS[direction]
    if layout == 1:
        x = x.transpose(1, 0, 2)
    seq, batch, n_in = x.shape
    if b is None:
        b = np.zeros((dirs, 8 * H), F32)
    sc = {p: float(F32(attrs[f"{p}_scale"])) for p in QPARAMS}
    zp = {p: int(attrs[f"{p}_zero_point"]) for p in QPARAMS}
    xq = quantize_u16_i16(x, sc["x"], zp["x"])
    wq = quantize_u16_i16(w, sc["w"], zp["w"])
    rq = quantize_u16_i16(r, sc["r"], zp["r"])
    bq = quantize_u16_i16(b, sc["b"], zp["b"])
    p = params(attrs, n_in, H)
    if lanes is not None:
        lanes[f"oh {p.oh}"] += 1
        lanes["factor exponent 31"] += 31 in (p.xwq + p.xw, p.hrq + p.hr, p.xs, p.hs)
        lanes["factor wrapped"] += -32768 in (p.qx, p.qh) and (p.qxf > 0 and p.qhf > 0)
        lanes["ohs clamped"] += p.ohs == 65535
        lanes["ohz below zero"] += p.ohz < 0
        lanes["zero factor"] += p.qa == 0 or p.qb == 0
        finite = x[np.isfinite(x)]
        xs_ = finite / F32(sc["x"])
        lanes["x NaN"] += bool(np.isnan(x).any())
        lanes["x -inf"] += bool(np.isneginf(x).any())
        lanes["x saturates"] += bool(((xs_ + zp["x"] > 65535) | (xs_ + zp["x"] < 0)).any())
        lanes["x tie"] += bool((np.abs(xs_ - np.trunc(xs_)) == 0.5).any())
    hq = np.zeros((seq, dirs, batch, H), np.int64)
    hlast = np.zeros((dirs, batch, H), np.int64)
    clast = np.zeros((dirs, batch, H), F32)
    for d in range(dirs):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        qc = gate_constants(p, attrs, wq[d], rq[d], bq[d, :4 * H], bq[d, 4 * H:], n_in, H)
        if lanes is not None:
            lanes["gate constant clamped"] += any(abs(v) >= 2**31 - 1 for v in qc)
        for n in range(batch):
            hseq, c = run_direction(p, qc, xq[:, n, :], wq[d], rq[d], H, reverse, lanes)
            hq[:, d, n, :] = hseq
            if seq:
                hlast[d, n] = hseq[0 if reverse else seq - 1]
            else:
                hlast[d, n] = p.ohz
            clast[d, n] = c
    y = dequantize_u16(hq + 32768, sc["y"], zp["y"])
    y_h = dequantize_u16(hlast + 32768, sc["y"], zp["y"])
    if layout == 1:
        return y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), clast.transpose(1, 0, 2)
    return y, y_h, clast
