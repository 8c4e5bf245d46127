"""The tables: every row's contenders run side by side, checked for
exactness, then timed interleaved."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any

import numpy as np

from extql.rules.types import FLOAT_CODES, QTYPES, QUANTIZED

from . import anchors
from .config import BenchConfig, Q, size_label
from .data import Data, axis, block_size
from .models import Ort
from .timing import time_interleaved


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
    float: str = "float32"  # quantize's x and scale, dequantize's scale and output
    copy_note: str | None = None  # why the copy column is empty, where it is

    @property
    def ratio(self) -> float | None:
        return None if not self.anchor else self.extql / self.anchor

    @property
    def copy_share(self) -> float | None:
        """Share of the copy kernel's bandwidth (copy time / extql time)."""
        return None if not self.copy else self.copy / self.extql

    @property
    def measured(self) -> bool:
        return self.extql == self.extql  # not NaN

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ratio"] = self.ratio
        d["copy_share"] = self.copy_share
        return d


def same_bits(a: np.ndarray, b: np.ndarray, any_nan: bool = False) -> bool:
    """Equal bit for bit (NaN payloads and signed zeros included; with
    ``any_nan``, a NaN equals any NaN: a fallback's standard ops need not
    keep the payload the kernel writes)."""
    va = a.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}"))
    vb = b.reshape(-1).view(np.dtype(f"u{b.dtype.itemsize}"))
    if not any_nan or a.dtype.kind != "f" or va.shape != vb.shape:
        return bool(np.array_equal(va, vb))
    nan_a, nan_b = np.isnan(a.reshape(-1)), np.isnan(b.reshape(-1))
    return bool(np.array_equal(nan_a, nan_b) and np.array_equal(va[~nan_a], vb[~nan_b]))


#: The anchor of the rows measured against the fallbacks.
FALLBACK_ANCHOR = "fallback model"


def fallback_session(o: Ort, model: Any, transform: str, threads: int,
                     spin: bool) -> tuple[Any, str | None]:
    """(session, None): the model through extql's fallbacks in a session
    without the library (transform: ``attach_fallbacks`` or
    ``inline_fallbacks``); (None, why) when it cannot be measured."""
    make = anchors.fallback_transform(transform)
    if make is None:
        return None, f"not measured: extql.{transform} is not available in this build"
    try:
        return o.session(make(model), threads, None, spin), None
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own types
        # (no Cast to the type in this onnxruntime: float4e2m1, int4 /
        # uint4 before 1.23)
        return None, ("not measured: the fallback model does not load: "
                      f"{str(exc).splitlines()[0][:120]}")


def fallback_exact(got: np.ndarray, fb: Any, y: np.ndarray, any_nan: bool = False) -> str:
    """Run the fallback model into y (zeroed first) and compare its output
    with the native op's (got): "=fallback" or "MISMATCH vs fallback"."""
    y.fill(0)
    fb()
    return "=fallback" if same_bits(got, fb.output(), any_nan) else "MISMATCH vs fallback"


def _thread_counts(cfg: BenchConfig) -> list[int]:
    """The configured thread counts, 0 (all cores) resolved, without repeats."""
    return list(dict.fromkeys(t if t > 0 else (os.cpu_count() or 1) for t in cfg.threads))


def ratio_text(ratio: float | None) -> str:
    """A ratio as the tables show it: two decimals, two significant digits
    below 0.1 (a native op hundreds of times faster than its fallback model
    is not 0.00)."""
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def progress_line(r: Result) -> str:
    ratio = ratio_text(r.ratio)
    ms = "-" if not r.measured else f"{r.extql * 1e3:.3f}"
    return (f"  {r.table:8} {r.op:2} {type_label(r):8} {r.granularity:6} {size_label(r.size):>4} "
            f"t={r.threads} extql {ms} ms ratio {ratio}")


#: The float side's dtypes by name.
REAL_DTYPES = {dt.name: dt for dt in FLOAT_CODES}


def type_label(r: Result) -> str:
    """The row's quantized type, and its float side when that is not float32."""
    return r.type if r.float == "float32" else f"{r.type} ({r.float})"


def _emit(cfg: BenchConfig, out: list[Result], r: Result) -> None:
    out.append(r)
    if cfg.progress:
        cfg.progress(progress_line(r))


def _check(ext, anc, kind, y, x, qt, op, scale, zp, ax, block=0) -> str:
    """Run extql (and the anchor where it shares the formula) and compare
    the output bits; returns "=ort", "=api" or "MISMATCH ..."."""
    from extql.api.linear import dequantize_linear, quantize_linear

    y.fill(0)
    ext()
    got = ext.output().copy()
    # onnxruntime's QuantizeLinear divides float16 by float16 in float32 for
    # some types: with a float16 / bfloat16 side the NumPy API judges.
    if anc is not None and kind == "ort" and scale.dtype == np.float32:
        y.fill(0)
        anc()
        return "=ort" if same_bits(got, anc.output()) else "MISMATCH vs onnxruntime"
    if op == Q:
        want = quantize_linear(x, scale, zp, axis=ax, block_size=block)
    else:
        want = dequantize_linear(x, scale, zp, axis=ax, block_size=block)
    return "=api" if same_bits(got, want) else "MISMATCH vs the NumPy API"


def _size_groups(cfg: BenchConfig, side: bool = False) -> list[tuple[str, list[int]]]:
    """(granularity, sizes) whose rows share one model: a blocked scale's
    shape depends on the size, so each blocked size has its own.  ``side``:
    the side tables' granularities."""
    groups: list[tuple[str, list[int]]] = []
    for gran in cfg.side_granularities if side else cfg.granularities:
        if block_size(gran):
            groups += [(gran, [n]) for n in cfg.sizes]
        else:
            groups.append((gran, list(cfg.sizes)))
    return groups


def _copy_anchor() -> str | None:
    """Make the copy kernel run the variant the kernels run; None, or why
    it cannot be measured (an installed extql without a source checkout)."""
    from extql import _kernels

    from .copy_library import Unavailable, set_isa

    try:
        set_isa(_kernels.isa())
        return None
    except Unavailable as exc:
        return str(exc)


def run_ort_table(cfg: BenchConfig, data: Data, out: list[Result]) -> None:
    """extql's native op against onnxruntime's op or Cast and the copy kernel."""
    o = Ort()
    copy_note = _copy_anchor()
    for op, fname, tname in itertools.product(cfg.ops, cfg.floats, cfg.types):
        qt, fdt = QUANTIZED[tname], REAL_DTYPES[fname]
        for gran, sizes in _size_groups(cfg):
            scale = data.scale(qt, gran, sizes[0], fdt)
            zp = data.zero_point(qt, gran, sizes[0])
            kind = anchors.anchor_kind(op, qt)
            if (block_size(gran) or fname != "float32") and kind == "cast":
                # A Cast has no scale to block or to divide by, and
                # onnxruntime's blocked op has no float16 / bfloat16
                # output: no anchor.
                kind = None
            for threads in _thread_counts(cfg):
                why = o.unmeasurable(qt) or (o.unmeasurable(QTYPES["bfloat16"])
                                             if fname == "bfloat16" else None)
                if why:
                    out += [Result("ort", op, tname, gran, n, threads, float("nan"), note=why,
                                   float=fname) for n in sizes]
                    continue
                ext_sess = o.session(o.model("extql", op, qt, gran, scale, zp), threads,
                                     "extql", cfg.spin)
                # The copy library takes the eight types (whole bytes, zero
                # points as they are): no copy anchor for the others.
                copy_sess = None if tname not in QTYPES or copy_note else o.session(
                    o.model("copy", op, qt, gran, scale, zp), threads, "copy", cfg.spin)
                anc_sess, note = None, None
                # The int16 proxy of a 32-bit quantize: its own type, scale
                # and a zero point of 0.
                aqt = QTYPES["int16"] if kind == "ort16" else qt
                azp = np.zeros(np.shape(zp), aqt.dtype) if kind == "ort16" else zp
                if kind is not None:
                    try:
                        anc_sess = o.session(o.model("ort" if kind == "ort16" else kind, op,
                                                     aqt, gran, scale, azp),
                                             threads, None, cfg.spin)
                    except Exception as exc:  # the anchor may not support a form
                        note = f"anchor failed: {str(exc).splitlines()[0][:80]}"
                for n in sizes:
                    x = data.input(op, n, qt, gran, fdt)
                    y = data.output(op, qt, x.shape, fdt)
                    ext = o.runner(ext_sess, x, y)
                    funcs = [ext]
                    anc = None
                    if anc_sess is not None:
                        anc = o.runner(anc_sess, x, y if kind != "ort16" else
                                       data.output(op, aqt, x.shape, fdt))
                        try:
                            anc()  # an older onnxruntime may refuse a form at run time
                        except Exception as exc:
                            note = f"anchor failed: {str(exc).splitlines()[0][:160]}"
                            anc = None
                    if anc is not None:
                        funcs.append(anc)
                    if copy_sess is not None:
                        funcs.append(o.runner(copy_sess, x, y))
                    exact = None
                    if cfg.check:
                        exact = _check(ext, anc, kind, y, x, qt, op, scale, zp, axis(gran),
                                       block_size(gran))
                    times = time_interleaved(funcs, cfg.repeat, cfg.min_sample)
                    _emit(cfg, out, Result(
                        "ort", op, tname, gran, n, threads, times[0],
                        anchor_name=anchors.anchor_name(op, kind),
                        anchor=times[1] if anc is not None else None,
                        copy=times[-1] if copy_sess is not None else None, exact=exact,
                        note=note, float=fname,
                        copy_note=copy_note if tname in QTYPES else None,
                    ))
                    del ext, anc, funcs
                del ext_sess, anc_sess, copy_sess


def run_numpy_table(cfg: BenchConfig, data: Data, out: list[Result]) -> None:
    """The NumPy API against the NumPy expression."""
    from extql.api import linear as numpy_api

    try:
        for threads in _thread_counts(cfg):
            numpy_api.set_num_threads(threads)
            for op in cfg.ops:
                for tname in cfg.types:
                    qt = QUANTIZED[tname]
                    for gran in cfg.side_granularities:
                        scale, zp = data.scale(qt, gran), data.zero_point(qt, gran)
                        ax = axis(gran)
                        for n in cfg.sizes:
                            if block_size(gran):
                                out.append(Result(
                                    "numpy", op, tname, gran, n, threads, float("nan"),
                                    note="not measured: the NumPy expression is per tensor / "
                                         "per axis"))
                                continue
                            x = data.input(op, n, qt, gran)
                            api = numpy_api.quantize_linear if op == Q else (
                                numpy_api.dequantize_linear)
                            expr = anchors.numpy_quantize if op == Q else (
                                anchors.numpy_dequantize)

                            def ext(x=x, s=scale, z=zp, a=ax, f=api):
                                f(x, s, z, axis=a)

                            def ref(x=x, s=scale, z=zp, q=qt, a=ax, f=expr):
                                f(x, s, z, q, a)

                            te, tr = time_interleaved([ext, ref], cfg.side_repeat,
                                                      cfg.min_sample)
                            _emit(cfg, out, Result("numpy", op, tname, gran, n, threads, te,
                                                   anchor_name="NumPy expression", anchor=tr))
    finally:
        numpy_api.set_num_threads(0)  # back to the default


def run_fallback_table(cfg: BenchConfig, data: Data, out: list[Result]) -> None:
    """The native op against the same model through the fallback functions."""
    o = Ort()
    for op in cfg.ops:
        for tname in cfg.types:
            qt = QUANTIZED[tname]
            for gran, sizes in _size_groups(cfg, side=True):
                scale = data.scale(qt, gran, sizes[0])
                zp = data.zero_point(qt, gran, sizes[0])
                for threads in _thread_counts(cfg):
                    model = o.model("extql", op, qt, gran, scale, zp)
                    why, fb_sess = o.unmeasurable(qt), None
                    if why is None:
                        fb_sess, why = fallback_session(o, model, "attach_fallbacks", threads,
                                                        cfg.spin)
                    if why:
                        out += [Result("fallback", op, tname, gran, n, threads, float("nan"),
                                       note=why) for n in sizes]
                        continue
                    nat_sess = o.session(model, threads, "extql", cfg.spin)
                    for n in sizes:
                        x = data.input(op, n, qt, gran)
                        y = data.output(op, qt, x.shape)
                        nat, fb = o.runner(nat_sess, x, y), o.runner(fb_sess, x, y)
                        exact = None
                        if cfg.check:
                            nat()
                            exact = fallback_exact(nat.output().copy(), fb, y)
                        tn, tf = time_interleaved([nat, fb], cfg.side_repeat, cfg.min_sample)
                        _emit(cfg, out, Result("fallback", op, tname, gran, n, threads, tn,
                                               anchor_name=FALLBACK_ANCHOR, anchor=tf,
                                               exact=exact))
                    del nat_sess, fb_sess


def run(cfg: BenchConfig) -> list[Result]:
    """Measure the tables cfg asks for; returns one Result per row."""
    data = Data()
    out: list[Result] = []
    if "ort" in cfg.tables:
        run_ort_table(cfg, data, out)
    if "numpy" in cfg.tables:
        run_numpy_table(cfg, data, out)
    if "fallback" in cfg.tables:
        run_fallback_table(cfg, data, out)
    if "blocks" in cfg.tables:
        from .blocks import run_blocks_table

        run_blocks_table(cfg, data, _thread_counts(cfg), _copy_anchor(),
                         lambda r: _emit(cfg, out, r))
    if "dpu" in cfg.tables:
        from .dpu import resolve, run_dpu_table

        run_dpu_table(resolve(cfg.dpu), _thread_counts(cfg), cfg.repeat, cfg.min_sample,
                      cfg.check, cfg.spin, lambda r: _emit(cfg, out, r))
    return out
