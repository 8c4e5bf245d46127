"""An independent implementation of ExtendedInstanceNormalization's contract
(docs/operators/extended_instance_normalization.rst), in plain Python and
NumPy, written from its text and sharing no code with extql.

The DPU's instance norm: bfloat16-precision rounding (``bf``) of every
operand, statistics summed sequentially in float32 (the squares added in
double and rounded to float32 once per step), the DPU's ``msc32`` variance
``c - a*b`` from three bfloat16 parts of each factor, the C library's
``powf`` for the inverse deviation.  Clarity first: the sums run element by
element (vectorised across the instances only), ``msc32`` runs on NumPy
float32 scalars with the exponent arithmetic in Python integers.

:func:`expected` computes a whole node; :func:`problems` lists the
refusals the page names for an input's dtype and shapes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections import Counter

import numpy as np

F32 = np.float32

#: op_type -> domain; the legacy name computes the same.
OPS = {"ExtendedInstanceNormalization": "com.amd.quark",
       "VitisInstanceNormalization": "com.vai.quantize"}

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.powf.restype = ctypes.c_float
_LIBM.powf.argtypes = [ctypes.c_float, ctypes.c_float]


def powf(v, p) -> np.float32:
    """The C library's powf (the contract's)."""
    return F32(_LIBM.powf(float(F32(v)), float(F32(p))))


def bf(v) -> np.ndarray:
    """float32 -> bfloat16 precision, from the bits: add 0x10000 when the low
    16 bits are above 0x8000, or equal to it with bit 16 set; clear the low
    16 bits.  No NaN case (a NaN whose low half is above 0x8000 carries into
    the sign and exponent, as the bits say)."""
    b = np.asarray(v, dtype=F32).view(np.uint32).astype(np.uint64)
    low = b & 0xFFFF
    up = (low > 0x8000) | ((low == 0x8000) & ((b & 0x10000) != 0))
    out = ((b + up.astype(np.uint64) * 0x10000) & 0xFFFF0000).astype(np.uint32)
    return out.view(F32).reshape(np.shape(v))


def _bf1(v) -> np.float32:
    return F32(bf(np.array([v], dtype=F32))[0])


def _bits(v) -> int:
    return int(np.array([v], dtype=F32).view(np.uint32)[0])


def _float(u: int) -> np.float32:
    return np.array([u & 0xFFFFFFFF], dtype=np.uint32).view(F32)[0]


def exponent(v) -> int:
    """E(v): the biased exponent field (bits 23-30)."""
    return (_bits(v) >> 23) & 0xFF


def rnd(v, m: int) -> np.float32:
    """v rounded onto the grid of exponent m: X has v's sign and exponent
    plus (m - E(v)) in the exponent field (32-bit wrapping); (v + X) - X."""
    sh = m - exponent(v)
    x = _float((_bits(v) & 0xFF800000) + (sh << 23))
    return F32(F32(F32(v) + x) - x)


def mac32(a, b, c) -> np.float32:
    d = F32(F32(a) * F32(b))
    m = max(exponent(a) + exponent(b) - 127, exponent(c))
    return F32(rnd(c, m) + rnd(d, m))


def addmac32(a, b, c, d) -> np.float32:
    e = F32(F32(a) * F32(b))
    m = max(exponent(a) + exponent(b) - 127, exponent(c), exponent(d))
    return F32(F32(rnd(c, m) + rnd(d, m)) + rnd(e, m))


def _parts(v) -> tuple[np.float32, np.float32, np.float32]:
    v = F32(v)
    p0 = _bf1(v)
    p1 = _bf1(F32(v - p0))
    p2 = _bf1(F32(F32(v - p0) - p1))
    return p0, p1, p2


def msc32(a, b, c) -> np.float32:
    """The DPU's c - a*b: a in three bfloat16 parts, b likewise from -b."""
    with np.errstate(all="ignore"):
        a0, a1, a2 = _parts(a)
        b0, b1, b2 = _parts(F32(-F32(b)))
        terms = F32(a2 * b2)
        for p, q in ((a2, b1), (a1, b2), (a0, b2), (a1, b1), (a2, b0), (a1, b0), (a0, b1)):
            terms = mac32(p, q, terms)
        return addmac32(a0, b0, terms, c)


def problems(x_dtype, x_shape, scale_shape, bias_shape, scale_dtype=np.float32,
             bias_dtype=np.float32) -> list[str]:
    """The refusals the page names (empty when the node runs)."""
    out = []
    for name, dt in (("x", x_dtype), ("scale", scale_dtype), ("B", bias_dtype)):
        if np.dtype(dt) != np.float32:
            out.append(f"{name} is not float32")
    if len(x_shape) < 2:
        out.append("x has rank below 2")
        return out
    c = x_shape[1]
    for name, shape in (("scale", scale_shape), ("B", bias_shape)):
        if tuple(shape) != (c,):
            out.append(f"{name} is not of length C")
    return out


def statistics(v: np.ndarray, epsilon: float, lanes: Counter | None = None):
    """mean_b and r of each instance: v is bf(x) as (instances, S)."""
    n_inst, s = v.shape
    acc = np.zeros(n_inst, dtype=F32)
    sq = np.zeros(n_inst, dtype=F32)
    v64 = v.astype(np.float64)
    with np.errstate(all="ignore"):
        for j in range(s):
            acc = (acc + v[:, j]).astype(F32)
            sq = (sq.astype(np.float64) + v64[:, j] ** 2).astype(F32)
        inv = F32(1.0 / s) if s else F32(np.inf)
        mean = (acc * inv).astype(F32)
        msq = (sq * inv).astype(F32)
    mean_b = np.empty(n_inst, dtype=F32)
    r = np.empty(n_inst, dtype=F32)
    eps = F32(epsilon)
    for i in range(n_inst):
        var = msc32(mean[i], mean[i], msq[i])
        with np.errstate(all="ignore"):
            d = F32(var + eps)
        mean_b[i] = _bf1(mean[i])
        r[i] = _bf1(powf(d, -0.5))
        if lanes is not None:
            lanes["var negative" if var < 0 else "var non-finite" if not np.isfinite(var)
                  else "var"] += 1
            if not np.isfinite(mean[i]):
                lanes["mean non-finite"] += 1
            if np.isfinite(var) and float(var) != float(msq[i]) - float(mean[i]) ** 2:
                lanes["msc32 differs from float c - a*a"] += 1
    return mean_b, r


def expected(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float = 1e-5,
             lanes: Counter | None = None) -> np.ndarray:
    """The node's output for float32 x of rank >= 2 and γ / β of length C."""
    x = np.asarray(x, dtype=F32)
    assert not problems(x.dtype, x.shape, np.shape(scale), np.shape(bias),
                        np.asarray(scale).dtype, np.asarray(bias).dtype)
    n, c = x.shape[:2]
    s = int(np.prod(x.shape[2:], dtype=np.int64))
    v = bf(x).reshape(n * c, s)
    g = np.tile(bf(scale), n)[:, None]
    b = np.tile(bf(bias), n)[:, None]
    mean_b, r = statistics(v, epsilon, lanes)
    r = r[:, None]
    with np.errstate(all="ignore"):
        t = bf(bf(v * r) - bf(mean_b[:, None] * r))
        y = bf((g * t).astype(F32) + b)
    return y.reshape(x.shape)
