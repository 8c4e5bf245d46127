"""``extql bench``: how fast extql is, measured against the yardsticks that matter.

Three tables, each a list of MEDIAN time ratios ``extql / anchor`` (below 1:
extql is faster), measured side by side in one process on the same tensors,
interleaved (every repeat runs each contender once, in a rotating order), so
that noise from other work on the machine hits all of them alike:

``ort``
    The native op in an onnxruntime ``InferenceSession`` (the library
    registered, IOBinding into a preallocated output) against

    * onnxruntime's own ``QuantizeLinear`` / ``DequantizeLinear`` (opset 21)
      for int8, uint8, int16, uint16 and (dequantize only) int32;
    * onnxruntime's ``Cast`` for float16 / bfloat16 (quantize: Cast
      float -> float16/bfloat16; dequantize: Cast float16/bfloat16 -> float);
    * the *copy kernel* (every row): the same node run as ``QuantizeCopy`` /
      ``DequantizeCopy`` of the library's ``com.amd.quark.bench`` domain.
      Those ops take the same inputs, check them and split the work on the
      session's thread pool exactly as extql's ops do, but run
      ``extql_bench_copy_range`` instead of the math: a C loop compiled with
      the kernels (same flags, same instruction-set variant, same kind of
      stores -- non-temporal for outputs of 16 MiB or more) that reads the
      input buffer and writes the output buffer element by element with no
      arithmetic (the low bytes of each float32 for quantize, each element
      zero-extended to 32 bits for dequantize).  It moves exactly the bytes
      the op moves, so it is the op's memory-bandwidth limit; ``copy%`` is
      the share of that bandwidth extql reaches (copy time / extql time).

    The anchor, copy and extql sessions run with the same
    ``intra_op_num_threads`` (1, and all cores), read the same input and
    write the same output buffer.  Thread-pool spinning is off in all of them
    (``--spin`` keeps onnxruntime's default): with it, the idle workers of
    one session spin for tens of milliseconds after each run on the cores the
    next, interleaved session needs.  Before timing, every row checks extql's
    output bit for bit: against onnxruntime's own op where the two share the
    formula (QuantizeLinear / DequantizeLinear types), else against extql's
    NumPy API.

``numpy``
    ``extql.quantize_linear`` / ``dequantize_linear`` against the NumPy
    expression of the same formula, with ``extql.set_num_threads``.

``fallback``
    The native op against the same model run through the fallback functions
    (``extql.attach_fallbacks``, session without the library); outputs
    compared bit for bit.

Granularities: ``tensor`` (scalar scale), ``axis0`` (shape (256, n/256),
axis 0: the channel changes every n/256 elements) and ``axis1`` (shape
(n/256, 256), axis 1: the channel changes every element).  Sizes: 64K, 1M and
16M elements by default.  The NumPy and fallback tables (slow anchors) run
per tensor with 5 samples unless ``--granularity`` / ``--repeat`` say
otherwise.  ``--quick`` is a smoke run for CI.  Nothing here is asserted:
the tables are for people (and ``--json`` for scripts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .cli_args import thread_count
from .cli_errors import writable_output
from .types import QTYPES, QType

__all__ = [
    "BenchConfig",
    "Result",
    "parse_size",
    "register",
    "run",
    "format_table",
    "machine_info",
    "main",
]

Q, DQ = "Q", "DQ"
GRANULARITIES = ("tensor", "axis0", "axis1")
CHANNELS = 256  # the length of the quantized axis for axis0 / axis1
DEFAULT_SIZES = (1 << 16, 1 << 20, 1 << 24)
TABLES = ("ort", "numpy", "fallback")
#: onnxruntime's own QuantizeLinear / DequantizeLinear (opset 21) types.
ORT_Q_TYPES = ("int8", "uint8", "int16", "uint16")
ORT_DQ_TYPES = ("int8", "uint8", "int16", "uint16", "int32")

# Scale, zero point and input spread per type: most values inside the range,
# some saturating, so that every branch-free select is exercised.
_ZERO_POINT = {
    "int8": 3, "uint8": 128, "int16": -7, "uint16": 32768,
    "int32": 11, "uint32": 2**31, "float16": 0.5, "bfloat16": 0.5,
}


def parse_size(text: str) -> int:
    """``65536``, ``64K``, ``1M``, ``16M`` -> elements."""
    t = text.strip().upper()
    mult = 1
    if t.endswith("K"):
        mult, t = 1 << 10, t[:-1]
    elif t.endswith("M"):
        mult, t = 1 << 20, t[:-1]
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 65536, 64K, 16M)") from None
    if value < CHANNELS or value % CHANNELS:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a multiple of {CHANNELS}")
    return value


def size_label(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % (1 << 10) == 0:
        return f"{n >> 10}K"
    return str(n)


@dataclasses.dataclass
class BenchConfig:
    """What to measure (the command line's options)."""

    sizes: Sequence[int] = DEFAULT_SIZES
    threads: Sequence[int] = (1, 0)  # 0: all cores
    repeat: int = 15
    ops: Sequence[str] = (Q, DQ)
    types: Sequence[str] = tuple(QTYPES)
    granularities: Sequence[str] = GRANULARITIES
    tables: Sequence[str] = TABLES
    # The NumPy and fallback tables (slow anchors): fewer samples, per tensor.
    side_repeat: int = 5
    side_granularities: Sequence[str] = ("tensor",)
    min_sample: float = 2e-3  # seconds: small cases are timed in batches
    check: bool = True
    spin: bool = False  # onnxruntime's default thread-pool spinning
    progress: Callable[[str], None] | None = None


@dataclasses.dataclass
class Result:
    """One row of a table: medians in seconds per call."""

    table: str
    op: str
    type: str
    granularity: str
    size: int
    threads: int
    extql: float
    anchor_name: str | None = None
    anchor: float | None = None
    copy: float | None = None
    exact: str | None = None
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        return None if not self.anchor else self.extql / self.anchor

    @property
    def copy_share(self) -> float | None:
        """Share of the copy kernel's bandwidth (copy time / extql time)."""
        return None if not self.copy else self.copy / self.extql

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ratio"] = self.ratio
        d["copy_share"] = self.copy_share
        return d


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def time_interleaved(
    funcs: Sequence[Callable[[], Any]], repeat: int, min_sample: float = 2e-3
) -> list[float]:
    """Median seconds per call of each function, measured interleaved.

    Each function is first run twice (warm-up) and calibrated: a sample is
    ``k`` back-to-back calls, ``k`` chosen so that a sample lasts about
    ``min_sample`` (1 for large tensors).  Then ``repeat`` rounds take one
    sample of every function, the order rotating from round to round.
    """
    ks = []
    for f in funcs:
        f()
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        ks.append(max(1, min(10_000, int(min_sample / max(dt, 1e-9)))))
    samples: list[list[float]] = [[] for _ in funcs]
    n = len(funcs)
    for r in range(repeat):
        for j in range(n):
            i = (r + j) % n
            f, k = funcs[i], ks[i]
            t0 = time.perf_counter()
            for _ in range(k):
                f()
            samples[i].append((time.perf_counter() - t0) / k)
    return [statistics.median(s) for s in samples]


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def _shape(n: int, granularity: str) -> tuple[int, ...]:
    if granularity == "tensor":
        return (n,)
    if granularity == "axis0":
        return (CHANNELS, n // CHANNELS)
    return (n // CHANNELS, CHANNELS)


def _axis(granularity: str) -> int:
    return 0 if granularity == "axis0" else 1


class _Data:
    """Inputs, scales and zero points, made once per size and type."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self._x: dict[int, np.ndarray] = {}
        self._q: dict[tuple[int, str, str], np.ndarray] = {}

    def x(self, n: int) -> np.ndarray:
        """float32 standard normal values (scaled per type by the scale)."""
        if n not in self._x:
            self._x[n] = self.rng.standard_normal(n, dtype=np.float32)
        return self._x[n]

    @staticmethod
    def scale(qt: QType, granularity: str) -> np.ndarray:
        """Scales that put a standard normal input across about a third of
        the integer range (so some values saturate at 3 sigma; 32-bit types:
        a small part of it)."""
        if qt.is_float:
            base = np.float32(0.37)  # not a power of two: a real division
        elif qt.name in ("int32", "uint32"):
            # Inside +-2^24: onnxruntime's DequantizeLinear computes x - zp in
            # int32, which wraps near the ends of the range (extql does not).
            base = np.float32(6.0 / (1 << 25))
        else:
            base = np.float32(6.0 / (qt.hi - qt.lo))
        if granularity == "tensor":
            return np.array(base, dtype=np.float32)
        ramp = np.linspace(0.5, 2.0, CHANNELS, dtype=np.float32)
        return (base * ramp).astype(np.float32)

    @staticmethod
    def zero_point(qt: QType, granularity: str) -> np.ndarray:
        zp = np.array(_ZERO_POINT[qt.name]).astype(qt.dtype)
        if granularity == "tensor":
            return zp
        return np.full(CHANNELS, zp, dtype=qt.dtype)

    def input(self, op: str, n: int, qt: QType, granularity: str) -> np.ndarray:
        """The input of op (x for quantize, q for dequantize) in the
        granularity's shape."""
        if op == Q:
            return self.x(n).reshape(_shape(n, granularity))
        return self.q(n, qt, granularity)

    @staticmethod
    def output(op: str, qt: QType, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialised output buffer of op."""
        return np.empty(shape, qt.dtype if op == Q else np.float32)

    def q(self, n: int, qt: QType, granularity: str) -> np.ndarray:
        """The quantized input of a dequantize: extql's quantize of x."""
        key = (n, qt.name, granularity)
        if key not in self._q:
            from .numpy_api import quantize_linear

            x = self.x(n).reshape(_shape(n, granularity))
            self._q[key] = quantize_linear(
                x,
                self.scale(qt, granularity),
                self.zero_point(qt, granularity),
                axis=_axis(granularity),
            )
        return self._q[key]


# ---------------------------------------------------------------------------
# onnxruntime models and sessions
# ---------------------------------------------------------------------------


class _Ort:
    """Builds one-node models and runs them with IOBinding."""

    def __init__(self) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        self.onnx, self.ort, self.TensorProto, self.helper = onnx, ort, TensorProto, helper
        self.bf16 = QTYPES["bfloat16"].dtype
        # onnxruntime's Python API binds a bfloat16 buffer only through this
        # (absent from older releases, 1.18 for one).
        self.can_bind_bf16 = hasattr(ort.OrtValue, "ortvalue_from_numpy_with_onnx_type")

    def unmeasurable(self, qt: QType) -> str | None:
        """Why a type cannot be measured with this onnxruntime, or None."""
        if qt.name == "bfloat16" and not self.can_bind_bf16:
            return ("not measured: this onnxruntime cannot bind bfloat16 buffers "
                    "(no OrtValue.ortvalue_from_numpy_with_onnx_type)")
        return None

    def _tensor(self, name: str, value: np.ndarray) -> Any:
        value = np.asarray(value)
        if value.dtype == self.bf16:
            return self.helper.make_tensor(
                name, self.TensorProto.BFLOAT16, value.shape,
                value.view(np.uint16).tobytes(), raw=True,
            )
        return self.onnx.numpy_helper.from_array(np.array(value, order="C"), name)

    def _onnx_type(self, dtype: np.dtype) -> int:
        if dtype == self.bf16:
            return self.TensorProto.BFLOAT16
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def model(
        self,
        kind: str,
        op: str,
        qt: QType,
        granularity: str,
        scale: np.ndarray,
        zp: np.ndarray,
    ) -> bytes:
        """A one-node model over an input of symbolic shape.

        kind: ``extql`` (ExtendedQuantizeLinear / ExtendedDequantizeLinear),
        ``copy`` (the same node as extql's, but QuantizeCopy / DequantizeCopy
        of the library's com.amd.quark.bench domain: the copy kernel), ``ort``
        (QuantizeLinear / DequantizeLinear, opset 21) or ``cast`` (Cast to or
        from the 16-bit float type).
        """
        h, TP = self.helper, self.TensorProto
        rank = 1 if granularity == "tensor" else 2
        dims = ["n"] if rank == 1 else (["c", "n"] if granularity == "axis0" else ["n", "c"])
        qtype = self._onnx_type(qt.dtype)
        in_type, out_type = (TP.FLOAT, qtype) if op == Q else (qtype, TP.FLOAT)
        inits = []
        if kind == "cast":
            node = h.make_node("Cast", ["x"], ["y"], to=out_type)
            domains = []
        else:
            inits = [self._tensor("s", scale), self._tensor("z", zp)]
            attrs = {} if granularity == "tensor" else {"axis": _axis(granularity)}
            if kind == "extql":
                name = "ExtendedQuantizeLinear" if op == Q else "ExtendedDequantizeLinear"
                domain, domains = "com.amd.quark", ["com.amd.quark"]
            elif kind == "copy":
                name = "QuantizeCopy" if op == Q else "DequantizeCopy"
                domain, domains = "com.amd.quark.bench", ["com.amd.quark.bench"]
            else:
                name = "QuantizeLinear" if op == Q else "DequantizeLinear"
                domain, domains = "", []
            node = h.make_node(name, ["x", "s", "z"], ["y"], domain=domain, **attrs)
        graph = h.make_graph(
            [node],
            f"bench_{kind}",
            [h.make_tensor_value_info("x", in_type, dims)],
            [h.make_tensor_value_info("y", out_type, dims)],
            initializer=inits,
        )
        opsets = [h.make_opsetid("", 21)] + [h.make_opsetid(d, 1) for d in domains]
        model = h.make_model(graph, opset_imports=opsets)
        model.ir_version = 10
        return model

    def session(self, model: Any, threads: int, register: bool, spin: bool = False) -> Any:
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4  # an anchor failing on purpose is a note, not a log
        if not spin:
            # Idle pool threads of one session would otherwise spin (tens of
            # ms after each run) on the cores the next session needs.
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if register:
            from .ort import register as register_library

            register_library(so)
        data = model if isinstance(model, bytes) else model.SerializeToString()
        return self.ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    def ortvalue(self, arr: np.ndarray) -> Any:
        if arr.dtype == self.bf16:
            return self.ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                arr.view(np.uint16), self.TensorProto.BFLOAT16
            )
        return self.ort.OrtValue.ortvalue_from_numpy(arr)

    def runner(self, sess: Any, x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
        """A no-argument function that runs the session from x into y (both
        bound once, so a call is the session's work and nothing else)."""
        binding = sess.io_binding()
        # The OrtValues wrap the arrays' memory; keep them alive with the closure.
        vx, vy = self.ortvalue(x), self.ortvalue(y)
        binding.bind_ortvalue_input("x", vx)
        binding.bind_ortvalue_output("y", vy)
        run = sess.run_with_iobinding

        def call() -> None:
            run(binding)

        call.keep = (vx, vy, binding)  # type: ignore[attr-defined]
        return call


def _anchor_kind(op: str, qt: QType) -> str | None:
    if qt.is_float:
        return "cast"
    if (op == Q and qt.name in ORT_Q_TYPES) or (op == DQ and qt.name in ORT_DQ_TYPES):
        return "ort"
    return None


_ANCHOR_NAME = {"ort": "onnxruntime {}", "cast": "Cast"}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    va = a.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}"))
    vb = b.reshape(-1).view(np.dtype(f"u{b.dtype.itemsize}"))
    return bool(np.array_equal(va, vb))


def _all_threads(threads: int) -> int:
    return threads if threads > 0 else (os.cpu_count() or 1)


def _run_ort_table(cfg: BenchConfig, data: _Data, out: list[Result]) -> None:
    from .numpy_api import dequantize_linear, quantize_linear

    o = _Ort()
    for op in cfg.ops:
        for tname in cfg.types:
            qt = QTYPES[tname]
            kind = _anchor_kind(op, qt)
            for gran in cfg.granularities:
                scale, zp = data.scale(qt, gran), data.zero_point(qt, gran)
                for threads in dict.fromkeys(_all_threads(t) for t in cfg.threads):
                    why = o.unmeasurable(qt)
                    if why:
                        out += [Result("ort", op, tname, gran, n, threads, float("nan"), note=why)
                                for n in cfg.sizes]
                        continue
                    model = o.model("extql", op, qt, gran, scale, zp)
                    ext_sess = o.session(model, threads, True, cfg.spin)
                    copy_sess = o.session(o.model("copy", op, qt, gran, scale, zp), threads,
                                          True, cfg.spin)
                    anc_sess, note = None, None
                    if kind is not None:
                        try:
                            anc_sess = o.session(o.model(kind, op, qt, gran, scale, zp),
                                                 threads, False, cfg.spin)
                        except Exception as exc:  # the anchor may not support a form
                            note = f"anchor failed: {str(exc).splitlines()[0][:80]}"
                    for n in cfg.sizes:
                        axis = _axis(gran)
                        x = data.input(op, n, qt, gran)
                        y = data.output(op, qt, x.shape)
                        ext = o.runner(ext_sess, x, y)
                        funcs = [ext]
                        anc = None
                        if anc_sess is not None:
                            anc = o.runner(anc_sess, x, y)
                            try:
                                anc()  # an older onnxruntime may refuse a form at run time
                            except Exception as exc:
                                note = f"anchor failed: {str(exc).splitlines()[0][:160]}"
                                anc = None
                        if anc is not None:
                            funcs.append(anc)
                        funcs.append(o.runner(copy_sess, x, y))
                        exact = None
                        if cfg.check:
                            exact = _check(ext, anc, kind, y, x, qt, op, scale, zp, axis,
                                           quantize_linear, dequantize_linear)
                        times = time_interleaved(funcs, cfg.repeat, cfg.min_sample)
                        anchor_name = None
                        if kind is not None:
                            what = "QuantizeLinear" if op == Q else "DequantizeLinear"
                            anchor_name = _ANCHOR_NAME[kind].format(what)
                        r = Result(
                            "ort", op, tname, gran, n, threads, times[0],
                            anchor_name=anchor_name,
                            anchor=times[1] if anc is not None else None,
                            copy=times[-1], exact=exact, note=note,
                        )
                        out.append(r)
                        if cfg.progress:
                            cfg.progress(_progress_line(r))
                        del ext, anc, funcs
                    del ext_sess, anc_sess, copy_sess


def _check(ext, anc, kind, y, x, qt, op, scale, zp, axis, quantize_linear, dequantize_linear):
    """Run extql (and the anchor where it shares the formula) and compare
    the output bits; returns "=ort", "=api" or "MISMATCH ..."."""
    y.fill(0)
    ext()
    got = y.copy()
    if anc is not None and kind == "ort":
        y.fill(0)
        anc()
        ok = _same_bits(got, y)
        return "=ort" if ok else "MISMATCH vs onnxruntime"
    if op == Q:
        want = quantize_linear(x, scale, zp, axis=axis)
    else:
        want = dequantize_linear(x, scale, zp, axis=axis)
    return "=api" if _same_bits(got, want) else "MISMATCH vs the NumPy API"


# ---------------------------------------------------------------------------
# NumPy API against the NumPy expression
# ---------------------------------------------------------------------------


def _numpy_quantize(x, s, zp, qt: QType, axis: int):
    if x.ndim > 1 and np.ndim(s) == 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    if qt.is_float:
        v = x / s + zp.astype(np.float32)
        return np.where(np.isnan(v), v, np.clip(v, qt.lo, qt.hi)).astype(qt.dtype)
    if qt.name in ("int32", "uint32"):
        return np.clip(np.rint(x / s).astype(np.float64) + zp, qt.lo, qt.hi).astype(qt.dtype)
    return np.clip(np.rint(x / s) + zp, qt.lo, qt.hi).astype(qt.dtype)


def _numpy_dequantize(q, s, zp, qt: QType, axis: int):
    if q.ndim > 1 and np.ndim(s) == 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    if qt.is_float:
        return (q.astype(np.float32) - zp.astype(np.float32)) * s
    return (q.astype(np.int64) - zp.astype(np.int64)).astype(np.float32) * s


def _run_numpy_table(cfg: BenchConfig, data: _Data, out: list[Result]) -> None:
    from . import numpy_api

    try:
        for threads in dict.fromkeys(_all_threads(t) for t in cfg.threads):
            numpy_api.set_num_threads(threads)
            for op in cfg.ops:
                for tname in cfg.types:
                    qt = QTYPES[tname]
                    for gran in cfg.side_granularities:
                        scale, zp = data.scale(qt, gran), data.zero_point(qt, gran)
                        axis = _axis(gran)
                        for n in cfg.sizes:
                            x = data.input(op, n, qt, gran)
                            if op == Q:

                                def ext(x=x, s=scale, z=zp, a=axis):
                                    numpy_api.quantize_linear(x, s, z, axis=a)

                                def ref(x=x, s=scale, z=zp, q=qt, a=axis):
                                    _numpy_quantize(x, s, z, q, a)
                            else:

                                def ext(x=x, s=scale, z=zp, a=axis):
                                    numpy_api.dequantize_linear(x, s, z, axis=a)

                                def ref(x=x, s=scale, z=zp, q=qt, a=axis):
                                    _numpy_dequantize(x, s, z, q, a)
                            te, tr = time_interleaved([ext, ref], cfg.side_repeat,
                                                      cfg.min_sample)
                            r = Result("numpy", op, tname, gran, n, threads, te,
                                       anchor_name="NumPy expression", anchor=tr)
                            out.append(r)
                            if cfg.progress:
                                cfg.progress(_progress_line(r))
    finally:
        numpy_api.set_num_threads(0)  # back to the default


# ---------------------------------------------------------------------------
# Native op against the fallback model
# ---------------------------------------------------------------------------


def _attach_fallbacks() -> Callable[[Any], Any] | None:
    try:
        import extql

        return extql.attach_fallbacks  # type: ignore[attr-defined]
    except (AttributeError, ImportError):
        return None


def _run_fallback_table(cfg: BenchConfig, data: _Data, out: list[Result]) -> None:
    attach = _attach_fallbacks()
    o = _Ort()
    for op in cfg.ops:
        for tname in cfg.types:
            qt = QTYPES[tname]
            for gran in cfg.side_granularities:
                scale, zp = data.scale(qt, gran), data.zero_point(qt, gran)
                for threads in dict.fromkeys(_all_threads(t) for t in cfg.threads):
                    model = o.model("extql", op, qt, gran, scale, zp)
                    why = o.unmeasurable(qt)
                    if why:
                        out += [Result("fallback", op, tname, gran, n, threads, float("nan"),
                                       note=why) for n in cfg.sizes]
                        continue
                    if attach is None:
                        for n in cfg.sizes:
                            out.append(Result(
                                "fallback", op, tname, gran, n, threads, float("nan"),
                                note="not measured: extql.attach_fallbacks is not available "
                                     "in this build",
                            ))
                        continue
                    nat_sess = o.session(model, threads, True, cfg.spin)
                    fb_sess = o.session(attach(model), threads, False, cfg.spin)
                    for n in cfg.sizes:
                        x = data.input(op, n, qt, gran)
                        y = data.output(op, qt, x.shape)
                        nat, fb = o.runner(nat_sess, x, y), o.runner(fb_sess, x, y)
                        exact = None
                        if cfg.check:
                            nat()
                            got = y.copy()
                            y.fill(0)
                            fb()
                            exact = "=fallback" if _same_bits(got, y) else "MISMATCH vs fallback"
                        tn, tf = time_interleaved([nat, fb], cfg.side_repeat, cfg.min_sample)
                        r = Result("fallback", op, tname, gran, n, threads, tn,
                                   anchor_name="fallback model", anchor=tf, exact=exact)
                        out.append(r)
                        if cfg.progress:
                            cfg.progress(_progress_line(r))
                    del nat_sess, fb_sess


# ---------------------------------------------------------------------------
# Driver and output
# ---------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """What the figures depend on: CPU, cores, kernel variant, versions."""
    from . import __version__, _kernels

    cpu = platform.processor() or platform.machine()
    try:
        fields: dict[str, str] = {}
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip():
                    break  # the first processor is enough
        if "model name" in fields:
            cpu = fields["model name"]
            if "cpu family" in fields and "model" in fields:
                cpu += f" (family {fields['cpu family']}, model {fields['model']})"
    except OSError:
        pass
    flags: list[str] = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = [x for x in ("sse4_1", "avx2", "fma", "f16c", "avx512f", "avx512_bf16")
                             if x in have]
                    break
    except OSError:
        pass
    memory = cache = None
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        memory = f"{kib / (1 << 20):.1f} GiB"
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            cache = f.read().strip()
    except (OSError, ValueError, IndexError):
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": memory,
        "L3 cache": cache,
        "cpu flags": " ".join(flags) or None,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "extql": __version__,
        "kernels": _kernels.isa(),
        "openmp": bool(_kernels.have_openmp()),
    }
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        info["onnxruntime"] = None
    return info


def run(cfg: BenchConfig) -> list[Result]:
    """Measure the tables cfg asks for; returns one Result per row."""
    data = _Data()
    out: list[Result] = []
    if "ort" in cfg.tables:
        _run_ort_table(cfg, data, out)
    if "numpy" in cfg.tables:
        _run_numpy_table(cfg, data, out)
    if "fallback" in cfg.tables:
        _run_fallback_table(cfg, data, out)
    return out


def _ms(t: float | None) -> str:
    if t is None or t != t:
        return "-"
    return f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}"


def _progress_line(r: Result) -> str:
    ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
    return (f"  {r.table:8} {r.op:2} {r.type:8} {r.granularity:6} {size_label(r.size):>4} "
            f"t={r.threads} extql {_ms(r.extql)} ms ratio {ratio}")


_TITLES = {
    "ort": "onnxruntime sessions (IOBinding): extql's native op / anchor; "
           "copy% = copy kernel time / extql time",
    "numpy": "NumPy API: extql.quantize_linear / dequantize_linear over the NumPy expression",
    "fallback": "native op / the same model through the fallback functions (no library)",
}


def format_table(results: Sequence[Result], table: str) -> str:
    """A Markdown table of one table's rows, one line per measurement (ms)."""
    rows = [r for r in results if r.table == table]
    if not rows:
        return ""
    head = ["op", "type", "gran.", "size", "thr", "extql ms", "anchor", "anchor ms", "ratio"]
    if table == "ort":
        head += ["copy ms", "copy%"]
    head += ["exact"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.op, r.type, r.granularity, size_label(r.size), str(r.threads), _ms(r.extql),
            r.anchor_name or "-", _ms(r.anchor), "-" if r.ratio is None else f"{r.ratio:.2f}",
        ]
        if table == "ort":
            share = r.copy_share
            cells += [_ms(r.copy), "-" if share is None else f"{share * 100:.0f}%"]
        cells.append(r.exact or (r.note or "-"))
        if r.note and r.exact:
            cells[-1] += f" ({r.note})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_summary(results: Sequence[Result], table: str) -> str:
    """A compact Markdown table: one line per op, type, granularity and
    thread count, one column per size holding the ratio (and, for the
    onnxruntime table, the share of the copy kernel's bandwidth)."""
    rows = [r for r in results if r.table == table]
    if not rows:
        return ""
    sizes = list(dict.fromkeys(r.size for r in rows))
    keys: dict[tuple, dict[int, Result]] = {}
    for r in rows:
        keys.setdefault((r.op, r.type, r.anchor_name or "-", r.granularity, r.threads), {})[
            r.size] = r
    cell_name = "ratio / copy%" if table == "ort" else "ratio"
    head = ["op", "type", "anchor", "gran.", "thr"] + [f"{size_label(n)} {cell_name}"
                                                       for n in sizes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = sorted({r.note for r in rows if r.note and r.extql != r.extql})
    for (op, tname, anchor, gran, thr), by_size in keys.items():
        cells = [op, tname, anchor, gran, str(thr)]
        for n in sizes:
            r = by_size.get(n)
            if r is None or r.extql != r.extql:  # not measured (NaN)
                cells.append("n/a")
                continue
            text = "-" if r.ratio is None else f"{r.ratio:.2f}"
            if table == "ort" and r.copy_share is not None:
                text += f" / {r.copy_share * 100:.0f}%"
            if r.exact and r.exact.startswith("MISMATCH"):
                text += " MISMATCH"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"\nn/a: {note}" for note in notes]
    return "\n".join(lines)


#: The issue's targets, checked on the measured rows.
TARGETS = (
    ("ratio <= 1.0 at 1 thread (16M)", "ort", lambda r: r.size == 1 << 24 and r.threads == 1,
     lambda r: r.ratio is None or r.ratio <= 1.0),
    ("ratio <= 0.8 at all cores (16M)", "ort",
     lambda r: r.size == 1 << 24 and r.threads > 1, lambda r: r.ratio is None or r.ratio <= 0.8),
    (">= 70% of the copy kernel's bandwidth (16M)", "ort", lambda r: r.size == 1 << 24,
     lambda r: r.copy_share is None or r.copy_share >= 0.7),
    ("no slower than the anchor at 64K", "ort", lambda r: r.size == 1 << 16,
     lambda r: r.ratio is None or r.ratio <= 1.0),
    ("native op >= 3x faster than the fallback model (16M)", "fallback",
     lambda r: r.size == 1 << 24, lambda r: r.ratio is None or r.ratio <= 1 / 3),
)


def format_targets(results: Sequence[Result]) -> str:
    """Each target with the number of rows that meet it and the worst row."""
    lines = ["| target | rows met | worst row |", "|---|---|---|"]
    for name, table, applies, ok in TARGETS:
        rows = [r for r in results if r.table == table and applies(r) and r.extql == r.extql]
        if not rows:
            continue
        met = sum(1 for r in rows if ok(r))

        def badness(r: Result, name: str = name) -> float:
            if "copy" in name:
                return -(r.copy_share or 1.0)
            return r.ratio or 0.0

        worst = max(rows, key=badness)
        value = (f"{(worst.copy_share or 0) * 100:.0f}% of copy" if "copy" in name
                 else f"ratio {worst.ratio:.2f}" if worst.ratio is not None else "-")
        lines.append(f"| {name} | {met} of {len(rows)} | {worst.op} {worst.type} "
                     f"{worst.granularity} {size_label(worst.size)} t={worst.threads}: "
                     f"{value} |")
    return "\n".join(lines)


def format_report(results: Sequence[Result], cfg: BenchConfig, info: dict[str, Any],
                  details: bool = False) -> str:
    parts = [
        "machine: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"median of {cfg.repeat} interleaved runs ({cfg.side_repeat} for the NumPy and "
        "fallback tables); ratio = extql / anchor (below 1: extql is faster)",
    ]
    for table in TABLES:
        text = format_summary(results, table)
        if text:
            parts += ["", f"## {_TITLES[table]}", "", text]
    targets = format_targets(results)
    if targets.count("\n") > 1:
        parts += ["", "## Targets", "", targets]
    if details:
        for table in TABLES:
            text = format_table(results, table)
            if text:
                parts += ["", f"## Times: {table}", "", text]
    return "\n".join(parts)


_METHOD = """\
How it was measured (`extql bench`, extql/bench.py):

* Every row runs its contenders side by side in one process on the same input
  and output buffers, interleaved: each of `repeat` rounds takes one sample of
  each contender, in an order that rotates from round to round; the table shows
  medians.  Small tensors are timed in batches of calls (a sample lasts about
  2 ms).
* extql: the native op in an onnxruntime `InferenceSession` (library
  registered), run with IOBinding into a preallocated output (bfloat16 through
  `OrtValue.ortvalue_from_numpy_with_onnx_type`).  The anchors run in the same
  way in sessions of their own with the same `intra_op_num_threads`:
  onnxruntime's QuantizeLinear / DequantizeLinear (opset 21) for int8, uint8,
  int16, uint16 (and DequantizeLinear of int32); `Cast` for float16 / bfloat16
  (quantize: Cast float -> float16/bfloat16; dequantize: Cast back to float).
  Thread-pool spinning is off in every session (`session.intra_op.allow_spinning
  = 0`): otherwise the idle workers of one session spin for tens of
  milliseconds after each run on the cores the next, interleaved session needs.
* copy% is the copy kernel's time over extql's time: the share of the memory
  bandwidth limit extql reaches.  The copy kernel is the same node run as
  `QuantizeCopy` / `DequantizeCopy` (domain `com.amd.quark.bench`, registered
  by extql's library for this purpose): the same inputs, the same checks, the
  same split of the work on the session's thread pool, but instead of the math
  a C loop (`extql_bench_copy_range`, compiled with the kernels: same flags,
  same instruction-set variant, same stores -- non-temporal for outputs of
  16 MiB or more) that reads the op's input buffer and writes its output
  buffer element by element with no arithmetic (the low bytes of each float32
  for quantize; each element zero-extended to 32 bits for dequantize).  So it
  moves exactly the op's bytes, in the same session, on the same threads.
* Data: standard normal float32 values; scales that spread them over about a
  third of the integer range (32-bit types: +-2^24; float16 / bfloat16:
  scale 0.37) so that some values saturate; non-zero zero points; per-axis
  scales vary by channel.  Granularities: `tensor` (scalar scale), `axis0`
  (shape (256, n/256), axis 0: the channel changes every n/256 elements) and
  `axis1` (shape (n/256, 256), axis 1: the channel changes every element).
* Before timing, every row checks extql's output bit for bit: `=ort` against
  onnxruntime's own op, `=api` against extql's NumPy API, `=fallback` against
  the fallback model.
"""


def format_markdown(results: Sequence[Result], cfg: BenchConfig, info: dict[str, Any],
                    command: str) -> str:
    """A standalone Markdown document: command, machine, method, targets and
    the tables (for docs/benchmarks-results.md)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = [
        "# extql benchmark results",
        "",
        f"Made by `{command}` on {stamp}.",
        "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + ".",
        "",
        _METHOD,
        "Ratios are extql / anchor: below 1.0, extql is faster.",
    ]
    targets = format_targets(results)
    if targets.count("\n") > 1:
        parts += ["", "## Targets", "", targets]
    for table in TABLES:
        text = format_summary(results, table)
        if text:
            parts += ["", f"## {_TITLES[table]}", "", text]
    for table in TABLES:
        text = format_table(results, table)
        if text:
            parts += ["", f"## Times (medians): {table}", "", text]
    return "\n".join(parts) + "\n"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", type=parse_size, metavar="N",
                   help="tensor sizes in elements (64K, 1M, 16M, or numbers; "
                        "default: 64K 1M 16M)")
    p.add_argument("--threads", nargs="+", type=thread_count, metavar="T",
                   help="session / kernel thread counts; 0 = all cores (default: 1 0)")
    p.add_argument("--repeat", type=int, metavar="R",
                   help="interleaved samples per contender; the median is reported (default 15)")
    p.add_argument("--ops", nargs="+", choices=[Q, DQ, "q", "dq"], metavar="OP",
                   help="Q and/or DQ (default both)")
    p.add_argument("--types", nargs="+", choices=list(QTYPES), metavar="TYPE",
                   help=f"quantized types (default all: {', '.join(QTYPES)})")
    p.add_argument("--granularity", nargs="+", choices=GRANULARITIES, dest="granularities",
                   metavar="G", help="tensor, axis0, axis1 (default all)")
    p.add_argument("--tables", nargs="+", choices=TABLES, metavar="TABLE",
                   help="ort, numpy, fallback (default all)")
    p.add_argument("--isa", help="force a kernel variant (baseline, avx2); default: automatic")
    p.add_argument("--no-check", action="store_true", help="skip the exactness check")
    p.add_argument("--spin", action="store_true",
                   help="keep onnxruntime's thread-pool spinning (default: off, because the "
                        "idle workers of one session would spin on the cores the next "
                        "interleaved session needs)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 64K elements, 1 thread, 3 repeats, per tensor")
    p.add_argument("--json", metavar="FILE",
                   help="also write the results as JSON to FILE ('-': standard output, "
                        "instead of the table)")
    p.add_argument("--markdown", metavar="FILE",
                   help="also write a standalone Markdown report (command, machine, method, "
                        "targets, tables) to FILE")
    p.add_argument("--details", action="store_true",
                   help="also print the times of every measurement (ms)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = BenchConfig()
    if args.quick:
        cfg.sizes, cfg.threads, cfg.repeat, cfg.side_repeat = (1 << 16,), (1,), 3, 3
        cfg.granularities, cfg.min_sample = ("tensor",), 5e-4
    if args.sizes:
        cfg.sizes = tuple(args.sizes)
    if args.threads:
        cfg.threads = tuple(args.threads)
    if args.repeat:
        cfg.repeat = cfg.side_repeat = max(1, args.repeat)
    if args.ops:
        cfg.ops = tuple(dict.fromkeys(o.upper() for o in args.ops))
    if args.types:
        cfg.types = tuple(args.types)
    if args.granularities:
        cfg.granularities = cfg.side_granularities = tuple(args.granularities)
    if args.tables:
        cfg.tables = tuple(args.tables)
    cfg.check = not args.no_check
    cfg.spin = args.spin
    if not args.quiet:
        cfg.progress = lambda line: print(line, file=sys.stderr, flush=True)
    return cfg


def argv_of(args: argparse.Namespace) -> list[str]:
    """The options a run was given, as a command line (for the reports)."""
    out: list[str] = []
    for name, flag in (("sizes", "--sizes"), ("threads", "--threads"), ("repeat", "--repeat"),
                       ("ops", "--ops"), ("types", "--types"),
                       ("granularities", "--granularity"), ("tables", "--tables"),
                       ("isa", "--isa")):
        value = getattr(args, name, None)
        if value is None or value == []:
            continue
        if isinstance(value, (list, tuple)):
            out += [flag] + [size_label(v) if name == "sizes" else str(v) for v in value]
        else:
            out += [flag, str(value)]
    for name, flag in (("quick", "--quick"), ("spin", "--spin"), ("no_check", "--no-check")):
        if getattr(args, name, False):
            out.append(flag)
    return out


def _loadavg() -> str:
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _command(args: argparse.Namespace) -> int:
    from . import _kernels

    cfg = config_from_args(args)
    for report in (args.json, args.markdown):  # before the work, not after it
        if report and report != "-":
            writable_output(report, "report")
    load_start = _loadavg()
    if args.isa:
        try:
            _kernels.set_isa(args.isa)
        except ValueError as exc:
            print(f"extql bench: {exc}", file=sys.stderr)
            return 2
    try:
        results = run(cfg)
    finally:
        if args.isa:
            _kernels.set_isa(None)
    info = machine_info()
    # Other work on the machine shows in the figures (a 2-thread run needs
    # both cores): say how busy it was.
    info["load average (1/5/15 min)"] = f"{load_start} at the start, {_loadavg()} at the end"
    if args.isa:
        info["kernels"] = args.isa
    command = "extql bench" + "".join(" " + a for a in (argv_of(args)))
    if args.json:
        doc = {
            "machine": info,
            "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "progress"},
            "command": command,
            "results": [r.as_dict() for r in results],
        }
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
            return _status(results)
        with open(args.json, "w") as f:
            f.write(text + "\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(format_markdown(results, cfg, info, command))
    print(format_report(results, cfg, info, details=args.details))
    return _status(results)


def _status(results: Sequence[Result]) -> int:
    """1 when an output was not exact (a bug, whatever the speed)."""
    bad = [r for r in results if r.exact and r.exact.startswith("MISMATCH")]
    for r in bad:
        print(f"extql bench: {r.op} {r.type} {r.granularity} {size_label(r.size)}: {r.exact}",
              file=sys.stderr)
    return 1 if bad else 0


def register(subparsers: Any) -> None:
    """Add ``extql bench`` to the command line."""
    p = subparsers.add_parser(
        "bench",
        help="median time ratios against onnxruntime's ops, Cast, a copy kernel, NumPy "
             "and the fallback model",
        description=(
            "Median time ratios extql / anchor, measured side by side and interleaved on the "
            "same tensors: the native op in onnxruntime against onnxruntime's "
            "QuantizeLinear/DequantizeLinear, its Cast (float16/bfloat16) and a copy kernel "
            "moving the same bytes (ort table); the NumPy API against the NumPy expression "
            "(numpy); the native op against the fallback model (fallback).  Below 1, extql "
            "is faster.  The method is described in extql/bench.py and benchmarks/README.md."
        ),
    )
    _add_arguments(p)
    p.set_defaults(func=_command)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m extql.bench`` (the same as ``extql bench``)."""
    p = argparse.ArgumentParser(prog="extql bench", description=__doc__)
    _add_arguments(p)
    args = p.parse_args(argv)
    return _command(args)


if __name__ == "__main__":
    sys.exit(main())
