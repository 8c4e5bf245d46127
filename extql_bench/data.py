"""The tensors of a benchmark row: shapes per granularity, inputs, scales and
zero points (made once per size and type)."""

from __future__ import annotations

import math

import numpy as np

from extql.rules.types import QuantizedType

from .config import Q

F32 = np.dtype(np.float32)

#: The length of the quantized axis of axis0 / axis1, and the channels of nchw.
CHANNELS = 256
NCHW_CHANNELS = 64
#: The fixed (C, H, W) of the short-run NCHW granularities (axis 1, N varies):
#: nchw7 as a late ResNet stage (runs of 49 elements share a scale), nchw32
#: as a middle one of a larger input (runs of 1024: many runs, each a few
#: tiles, where a per-run cost of the per-channel driver shows), nchw56 as an
#: early one (runs of 3136).
NCHW_FIXED = {"nchw7": (256, 7, 7), "nchw32": (256, 32, 32), "nchw56": (64, 56, 56)}
#: Blocked quantization (block_size) of a weight of shape (n/4096, 4096)
#: along its last axis, in blocks of 32 or 128 elements (the LLM case).
BLOCKED = {"block32": 32, "block128": 128}
BLOCKED_COLUMNS = 4096

# Zero points per type: non-zero, so that the zero-point arithmetic runs.
_ZERO_POINT = {
    "int8": 3, "uint8": 128, "int16": -7, "uint16": 32768,
    "int32": 11, "uint32": 2**31, "float16": 0.0, "bfloat16": 0.0,
    "int4": 1, "uint4": 8, "int2": -1, "uint2": 2,
    # float8 takes no zero point (and the official dequantize refuses one
    # other than 0); float4e2m1 adds it.
    "float8e4m3fn": 0.0, "float8e4m3fnuz": 0.0, "float8e5m2": 0.0, "float8e5m2fnuz": 0.0,
    "float4e2m1": 0.5,
}


def shape(n: int, granularity: str) -> tuple[int, ...]:
    """The shape of an n-element tensor of the granularity: (n,) per tensor,
    (256, n/256) / (n/256, 256) along axis 0 / 1, and for nchw
    (1, 64, H, W) with H * W = n/64, H the largest divisor <= sqrt(n/64)
    (16M: (1, 64, 512, 512); 1M: (1, 64, 128, 128); 64K: (1, 64, 32, 32)).

    nchw7 / nchw32 / nchw56: (N, C, H, W) with (C, H, W) fixed (NCHW_FIXED) and N the
    batch whose size is nearest n (at least 1), so the tensor has about, not
    exactly, n elements (16M: (1337, 256, 7, 7), 16,771,328 elements;
    (84, 64, 56, 56), 16,859,136 elements): see ``elements``."""
    if granularity in NCHW_FIXED:
        c, h, w = NCHW_FIXED[granularity]
        return (max(1, round(n / (c * h * w))), c, h, w)
    if granularity in BLOCKED:
        return (max(1, n // BLOCKED_COLUMNS), BLOCKED_COLUMNS)
    if granularity == "tensor":
        return (n,)
    if granularity == "axis0":
        return (CHANNELS, n // CHANNELS)
    if granularity == "axis1":
        return (n // CHANNELS, CHANNELS)
    hw = n // NCHW_CHANNELS
    h = next(d for d in range(math.isqrt(hw), 0, -1) if hw % d == 0)
    return (1, NCHW_CHANNELS, h, hw // h)


def elements(n: int, granularity: str) -> int:
    """The element count of the row of size n (n, except for the fixed
    NCHW shapes, whose batch only comes close to it)."""
    return math.prod(shape(n, granularity))


def axis(granularity: str) -> int:
    """The quantized axis (per tensor: the attribute's default, unused)."""
    return 0 if granularity == "axis0" else 1


def _blocked_shape(n: int, granularity: str) -> tuple[int, int]:
    """The blocked scale's shape of the n-element row: one per block."""
    rows, cols = shape(n, granularity)
    return rows, -(-cols // BLOCKED[granularity])


def block_size(granularity: str) -> int:
    """The attribute block_size of the granularity (0: not blocked)."""
    return BLOCKED.get(granularity, 0)


def channels(granularity: str) -> int:
    """The length of the quantized axis (1 per tensor)."""
    if granularity in NCHW_FIXED:
        return NCHW_FIXED[granularity][0]
    return {"tensor": 1, "nchw": NCHW_CHANNELS}.get(granularity, CHANNELS)


class Data:
    """Inputs, scales and zero points, made once per size and type."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self._x: dict[int, np.ndarray] = {}
        self._xf: dict[tuple[int, str], np.ndarray] = {}
        self._q: dict[tuple[int, str, str, str], np.ndarray] = {}

    def x(self, n: int, fdt: np.dtype = F32) -> np.ndarray:
        """Standard normal values (scaled per type by the scale), float32 or
        rounded to the float type fdt."""
        if n not in self._x:
            self._x[n] = self.rng.standard_normal(n, dtype=np.float32)
        if np.dtype(fdt) == F32:
            return self._x[n]
        key = (n, np.dtype(fdt).name)
        if key not in self._xf:
            self._xf[key] = self._x[n].astype(fdt)
        return self._xf[key]

    @classmethod
    def scale(cls, qt: QuantizedType, granularity: str, n: int = 0,
              fdt: np.dtype = F32) -> np.ndarray:
        """The scale of :meth:`scale32` in the float type fdt."""
        return cls.scale32(qt, granularity, n).astype(fdt)

    @staticmethod
    def scale32(qt: QuantizedType, granularity: str, n: int = 0) -> np.ndarray:
        """Scales that put a standard normal input across about a third of
        the integer range (so some values saturate at 3 sigma; 32-bit types:
        a small part of it); per channel, a ramp from 0.5 to 2 times that.
        float16 / bfloat16: 1 everywhere."""
        if qt.is_float:
            # float16 / bfloat16 as Quark writes them: scale 1 (and zero
            # point 0), a conversion, like the Cast they are measured against.
            base = np.float32(1.0)
        elif qt.name in ("int32", "uint32"):
            # Inside +-2^24: onnxruntime's DequantizeLinear computes x - zp in
            # int32, which wraps near the ends of the range (extql does not).
            base = np.float32(6.0 / (1 << 25))
        else:
            base = np.float32(6.0 / (qt.hi - qt.lo))
        if granularity == "tensor":
            return np.array(base, dtype=np.float32)
        if granularity in BLOCKED:  # one scale per block, a ramp over the blocks
            blocks = _blocked_shape(n, granularity)
            ramp = np.linspace(0.5, 2.0, math.prod(blocks), dtype=np.float32).reshape(blocks)
            return (base * (ramp if not qt.is_float else np.ones_like(ramp))).astype(np.float32)
        ramp = np.linspace(0.5, 2.0, channels(granularity), dtype=np.float32)
        return (base * (ramp if not qt.is_float else np.ones_like(ramp))).astype(np.float32)

    @staticmethod
    def zero_point(qt: QuantizedType, granularity: str, n: int = 0) -> np.ndarray:
        zp = np.array(_ZERO_POINT[qt.name]).astype(qt.dtype)
        if granularity == "tensor":
            return zp
        if granularity in BLOCKED:
            return np.full(_blocked_shape(n, granularity), zp, dtype=qt.dtype)
        return np.full(channels(granularity), zp, dtype=qt.dtype)

    def input(self, op: str, n: int, qt: QuantizedType, granularity: str,
              fdt: np.dtype = F32) -> np.ndarray:
        """The input of op (x for quantize, q for dequantize) in the
        granularity's shape."""
        if op == Q:
            return self.x(elements(n, granularity), fdt).reshape(shape(n, granularity))
        return self.q(n, qt, granularity, fdt)

    @staticmethod
    def output(op: str, qt: QuantizedType, out_shape: tuple[int, ...],
               fdt: np.dtype = F32) -> np.ndarray:
        """An uninitialised output buffer of op."""
        return np.empty(out_shape, qt.dtype if op == Q else fdt)

    def q(self, n: int, qt: QuantizedType, granularity: str,
          fdt: np.dtype = F32) -> np.ndarray:
        """The quantized input of a dequantize: extql's quantize of x."""
        key = (n, qt.name, granularity, np.dtype(fdt).name)
        if key not in self._q:
            from extql.api.linear import quantize_linear

            x = self.x(elements(n, granularity), fdt).reshape(shape(n, granularity))
            self._q[key] = quantize_linear(
                x,
                self.scale(qt, granularity, n, fdt),
                self.zero_point(qt, granularity, n),
                axis=axis(granularity),
                block_size=block_size(granularity),
            )
        return self._q[key]
