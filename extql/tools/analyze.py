"""Where a quantized model loses its accuracy: :func:`analyze`.

Given a float model FLOAT and its quantized form QUANT, every quantization
point of QUANT (:mod:`extql.tools.analyze_points`) gets two errors, pooled
over the given inputs (:mod:`extql.tools.analyze_metrics`):

* **local** -- the point's output against its own input inside QUANT (a
  weight stored quantized: against FLOAT's weight), which is what quantizing
  this tensor alone costs, with the largest absolute error and the share of
  quantized values at the type's bounds;
* **accumulated** -- QUANT's tensor of the point's name against FLOAT's,
  the error that reached this point (None when FLOAT has no such tensor).

The graph outputs get SQNR, cosine similarity and the largest absolute
error.  For the ``what_if`` worst points, QUANT runs again with that point
bypassed and with it widened (:mod:`extql.tools.analyze_whatif`), and the
report says how much the outputs' SQNR recovers.

Cost: one run of each model per input sample, with every tensor the figures
need exposed as a graph output (weights' tensors fetched on the first run
only: they do not change), plus one run of QUANT per sample for each
what-if variant.  Both models run in onnxruntime on the CPU with extql's
library registered and **graph optimisations disabled**: at its higher
levels onnxruntime fuses dequantize -> op -> quantize groups into QLinear
kernels, which compute in integers with their own requantization, and moves
Q/DQ nodes across Reshape / Transpose, so the tensors between the nodes
would no longer be the fake-quantized tensors the report is about (or would
not exist); with them disabled every node runs as written, and the float
operators of both models are the same kernels, so the differences measured
are the quantization's alone.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from ..onnx.graph import constant_value, infer_types, type_name
from .analyze_dpu import dpu_clipped_count, float_reference
from .analyze_metrics import CosineSums, ErrorSums, block_clipped_count, clipped_count
from .analyze_points import Point, constant_names, find_points, value_names
from .analyze_report import AnalysisReport, OutputResult, PointResult, WhatIfResult
from .analyze_whatif import Skipped, bypass, widen

__all__ = ["analyze", "AnalysisError", "DEFAULT_RANDOM_SAMPLES", "Progress"]

#: Samples of random standard-normal inputs when none are given.
DEFAULT_RANDOM_SAMPLES = 4
#: Above this many bytes a model goes to onnxruntime as a file with external data.
_EXTERNAL_BYTES = 1_500_000_000

#: ``progress(stage, done, total)``: told after each run.
Progress = Callable[[str, int, int], None]


class AnalysisError(ValueError):
    """The models cannot be analysed together; the message is one line that
    names the model (FLOAT or QUANT, or its file) and the problem."""


# --------------------------------------------------------------------------
# Models


def _load(model: Any, role: str) -> tuple[onnx.ModelProto, str]:
    """A ModelProto from a ModelProto or a path, and how to name it."""
    if isinstance(model, onnx.ModelProto):
        return model, role
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            loaded = onnx.load(path)
        except Exception as exc:  # noqa: BLE001 - OSError, protobuf's DecodeError, ...
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise AnalysisError(f"{path}: cannot be read as an ONNX model ({reason})") from None
        if not loaded.HasField("graph"):
            raise AnalysisError(f"{path}: not an ONNX model (the file holds no graph)")
        return loaded, f"{role.split(' (')[0]} ({path})"
    raise TypeError(f"extql.analyze: {role} must be an onnx.ModelProto or a path, "
                    f"not {type(model).__name__}")


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _check_fit(fm: onnx.ModelProto, qm: onnx.ModelProto, fname: str, qname: str) -> None:
    """AnalysisError when the graph inputs or outputs differ."""
    f_in = {i.name: i for i in _graph_inputs(fm)}
    q_in = {i.name: i for i in _graph_inputs(qm)}
    if set(f_in) != set(q_in):
        raise AnalysisError(f"the models do not fit together: {fname} has inputs "
                            f"{sorted(f_in)}, {qname} has {sorted(q_in)}")
    for name, vi in f_in.items():
        a, b = vi.type.tensor_type.elem_type, q_in[name].type.tensor_type.elem_type
        if a and b and a != b:
            raise AnalysisError(f"the models do not fit together: input {name!r} is "
                                f"{type_name(a)} in {fname} and {type_name(b)} in {qname}")
        sa, sb = _declared(vi)[1], _declared(q_in[name])[1]
        if sa is not None and sb is not None and not (
                len(sa) == len(sb) and all(x is None or y is None or x == y
                                           for x, y in zip(sa, sb, strict=True))):
            show = [[d if d is not None else "?" for d in s] for s in (sa, sb)]
            raise AnalysisError(f"the models do not fit together: input {name!r} has shape "
                                f"{show[0]} in {fname} and {show[1]} in {qname}")
    f_out = [o.name for o in fm.graph.output]
    q_out = [o.name for o in qm.graph.output]
    if set(f_out) != set(q_out):
        raise AnalysisError(f"the models do not fit together: {fname} has outputs "
                            f"{sorted(f_out)}, {qname} has {sorted(q_out)}")


def _check_runnable(model: onnx.ModelProto, name: str) -> None:
    from ..onnx.microsoft import unsupported_nodes

    unsupported = unsupported_nodes(model)
    if unsupported:
        more = f" (and {len(unsupported) - 1} more)" if len(unsupported) > 1 else ""
        raise AnalysisError(f"{name}: cannot run it: unsupported operator "
                            f"{unsupported[0]}{more}")


# --------------------------------------------------------------------------
# Inputs


def _declared(vi: onnx.ValueInfoProto) -> tuple[np.dtype | None, list[int | None] | None]:
    """The NumPy dtype and shape (None for a symbolic dimension) of a graph input."""
    from ..rules.types import QUANTIZED_BY_ONNX

    tt = vi.type.tensor_type
    dtype = None
    if tt.elem_type:
        known = QUANTIZED_BY_ONNX.get(tt.elem_type)
        try:
            dtype = known.dtype if known is not None else np.dtype(
                onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            dtype = None
    shape = None
    if tt.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return dtype, shape


def _fits(shape: tuple[int, ...], declared: list[int | None]) -> bool:
    return len(shape) == len(declared) and all(
        d is None or d == s for s, d in zip(shape, declared, strict=True))


def _as_samples(name: str, value: Any, dtype: np.dtype | None,
                shape: list[int | None] | None) -> list[np.ndarray]:
    """One input's samples: ``value`` is a batch along a new first axis when
    its rank is the input's plus one, else one sample."""
    a = np.asarray(value)
    if dtype is not None and a.dtype != dtype:
        if a.dtype.kind == "V" and a.dtype.itemsize == dtype.itemsize:
            a = a.view(dtype)
        elif a.dtype.kind in "fc" or a.dtype.name == "bfloat16":
            if dtype.kind != "f" and dtype.name != "bfloat16":
                raise AnalysisError(f"input {name!r}: the array is {a.dtype}, the model's "
                                    f"input is {dtype}")
            a = a.astype(dtype)
        elif a.dtype.kind != dtype.kind or dtype.kind not in "iub":
            raise AnalysisError(f"input {name!r}: the array is {a.dtype}, the model's "
                                f"input is {dtype}")
        else:
            a = a.astype(dtype)
    if shape is None:
        return [a]
    if a.ndim == len(shape) + 1 and _fits(a.shape[1:], shape):
        if a.shape[0] == 0:
            raise AnalysisError(f"input {name!r}: the batch holds no sample")
        return [a[i] for i in range(a.shape[0])]
    if _fits(a.shape, shape):
        return [a]
    want = [d if d is not None else "?" for d in shape]
    raise AnalysisError(f"input {name!r} has shape {list(a.shape)}, the model's input is "
                        f"{want}: give one sample of that shape or a batch of them along a "
                        "new first axis")


def _samples(model: onnx.ModelProto, inputs: Mapping[str, Any] | None, count: int,
             seed: int) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """The feeds of every sample and the names of the inputs made random."""
    declared = {vi.name: _declared(vi) for vi in _graph_inputs(model)}
    given = dict(inputs or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise AnalysisError(f"arrays given for {unknown}, which are not inputs of the models "
                            f"(inputs: {sorted(declared)})")
    per_input = {n: _as_samples(n, v, *declared[n]) for n, v in given.items()}
    counts = {len(s) for s in per_input.values()}
    if len(counts) > 1:
        sizes = {n: len(s) for n, s in per_input.items()}
        raise AnalysisError(f"the inputs hold different numbers of samples: {sizes}")
    n = counts.pop() if counts else count
    rng = np.random.default_rng(seed)
    random_names = [name for name in declared if name not in per_input]
    for name in random_names:
        dtype, shape = declared[name]
        if dtype is None or (dtype.kind != "f" and dtype.name != "bfloat16"):
            raise AnalysisError(f"input {name!r} is {dtype}: random standard-normal data is "
                                "made for float inputs only; give it in the inputs")
        dims = [d if d is not None else 1 for d in (shape or [])]
        per_input[name] = [rng.standard_normal(dims).astype(np.float32).astype(dtype)
                           for _ in range(n)]
    return [{name: per_input[name][i] for name in declared} for i in range(n)], random_names


# --------------------------------------------------------------------------
# Running


class _Runner:
    """One onnxruntime session of a model with extra outputs exposed."""

    def __init__(self, model: onnx.ModelProto, expose: list[str], name: str) -> None:
        import onnxruntime as ort

        from .. import ort as extql_ort
        from ..onnx.graph import copy_model

        self.name = name
        m = copy_model(model)
        present = {o.name for o in m.graph.output}
        for t in expose:
            if t not in present:
                m.graph.output.append(onnx.ValueInfoProto(name=t))
                present.add(t)
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.model = m
        options = extql_ort.register(ort.SessionOptions())
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        self.options = options
        self.session = None

    def _source(self) -> Any:
        if self.model.ByteSize() <= _EXTERNAL_BYTES:
            return self.model.SerializeToString()
        self._tmp = tempfile.TemporaryDirectory(prefix="extql-analyze-")
        path = os.path.join(self._tmp.name, "model.onnx")
        onnx.save_model(self.model, path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data")
        return path

    def _open(self, source: Any) -> Any:
        import onnxruntime as ort

        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return ort.InferenceSession(source, sess_options=self.options,
                                            providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            raise AnalysisError(f"onnxruntime cannot load {self.name}: "
                                f"{' '.join(str(exc).split())}") from None

    def run(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        from .. import ort_io

        session = self.session
        if not ort_io.has_typed_ortvalues() and any(
                v.dtype.name == "bfloat16" for v in feeds.values()):
            model, feeds = ort_io.bfloat16_inputs_as_initializers(self.model, feeds)
            session = self._open(model.SerializeToString())
        elif session is None:
            session = self.session = self._open(self._source())
        binding = session.io_binding()
        alive = ort_io.bind_inputs(binding, feeds)
        for n in names:
            binding.bind_output(n, "cpu")
        try:
            session.run_with_iobinding(binding)
        except Exception as exc:  # noqa: BLE001
            raise AnalysisError(f"onnxruntime failed to run {self.name}: "
                                f"{' '.join(str(exc).split())}") from None
        del alive
        return {n: ort_io.to_numpy(v) for n, v in zip(names, binding.get_outputs(), strict=True)}


class _Values:
    """A model's values by name for one sample: feeds, constants, fetched."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.constants = constant_names(model.graph)
        self.inputs = {i.name for i in _graph_inputs(model)}
        self._cache: dict[str, np.ndarray | None] = {}

    def constant(self, name: str) -> np.ndarray | None:
        if name not in self._cache:
            self._cache[name] = constant_value(name, [self.graph])
        return self._cache[name]

    def needs_run(self, name: str) -> bool:
        return name not in self.constants and name not in self.inputs

    def get(self, name: str, feeds: dict[str, np.ndarray],
            fetched: dict[str, np.ndarray]) -> np.ndarray | None:
        if name in feeds:
            return feeds[name]
        if name in self.constants:
            return self.constant(name)
        return fetched.get(name)


# --------------------------------------------------------------------------
# The analysis


class _PointSums:
    def __init__(self) -> None:
        self.local = ErrorSums()
        self.accumulated = ErrorSums()
        self.clipped = 0
        self.quantized = 0
        self.compared = True  # False when the accumulated shapes differ


def _needed(points: list[Point]) -> tuple[set[str], set[str], set[str], set[str]]:
    """(QUANT's names for every sample, QUANT's for the first only, FLOAT's
    for every sample, FLOAT's for the first only)."""
    q_all: set[str] = set()
    q_first: set[str] = set()
    f_all: set[str] = set()
    f_first: set[str] = set()
    for p in points:
        q = q_first if p.kind == "weight" else q_all
        f = f_first if p.kind == "weight" else f_all
        q.update(n for n in (p.input, p.quantized, p.output, p.quant_name, *p.node_inputs)
                 if n)
        if p.float_name:
            f.add(p.float_name)
    return q_all, q_first - q_all, f_all, f_first - f_all


def _point_sample(p: Point, sums: _PointSums, qv: _Values, fv: _Values,
                  feeds: dict[str, np.ndarray], qf: dict[str, np.ndarray],
                  ff: dict[str, np.ndarray], notes: list[str]) -> None:
    """Add one sample's tensors of point ``p`` to its sums."""
    out = qv.get(p.output, feeds, qf)
    if p.form == "dpu":
        ref = float_reference(p.dq_node, [qv.get(n, feeds, qf) if n else None
                                          for n in p.node_inputs])
    elif p.input is not None:
        ref = qv.get(p.input, feeds, qf)
    else:
        ref = fv.get(p.float_name, feeds, ff) if p.float_name else None
    if ref is None or out is None:
        raise AnalysisError(f"QUANT: the values of point {p.tensor!r} could not be read")
    try:
        sums.local.add(ref, out)
    except ValueError as exc:
        raise AnalysisError(f"point {p.tensor!r} ({p.node}): its input and output {exc}") from None
    if p.form == "dpu":
        sums.clipped += dpu_clipped_count(p.dq_node, out)
        sums.quantized += int(np.asarray(out).size)
    elif p.form == "block":
        sums.clipped += block_clipped_count(ref, out, p.block_op or "bfp", p.attrs)
        sums.quantized += int(np.asarray(out).size)
    elif p.quantized is not None and p.bounds is not None:
        q = qv.get(p.quantized, feeds, qf)
        if q is not None:
            sums.clipped += clipped_count(q, *p.bounds)
            sums.quantized += int(np.asarray(q).size)
    if p.float_name and p.quant_name and sums.compared:
        f = fv.get(p.float_name, feeds, ff)
        t = qv.get(p.quant_name, feeds, qf)
        if f is None or t is None or np.shape(f) != np.shape(t):
            sums.compared = False
            notes.append(f"tensor {p.tensor!r}: FLOAT's shape {list(np.shape(f))} differs "
                         f"from QUANT's {list(np.shape(t))}: no accumulated error")
        else:
            sums.accumulated.add(f, t)


def _rank_key(r: PointResult) -> tuple[int, float, int]:
    v = r.local_sqnr_db
    return (0 if math.isnan(v) else 1, 0.0 if math.isnan(v) else v, r.graph_order)


def analyze(float_model: onnx.ModelProto | str | os.PathLike,
            quantized_model: onnx.ModelProto | str | os.PathLike,
            inputs: Mapping[str, np.ndarray] | None = None, *,
            what_if: int = 0, samples: int = DEFAULT_RANDOM_SAMPLES, seed: int = 0,
            progress: Progress | None = None,
            names: tuple[str, str] = ("FLOAT", "QUANT")) -> AnalysisReport:
    """Find where ``quantized_model`` loses its accuracy against ``float_model``.

    Both are ``onnx.ModelProto`` or paths.  ``inputs`` maps input names to
    arrays: each a batch of samples along a new first axis (its rank is the
    input's plus one) or a single sample; inputs not given are random
    standard-normal data (``samples`` samples, seeded by ``seed``) and a
    warning says that calibration-like data gives meaningful figures.
    ``what_if`` is the number of worst points to re-run bypassed and widened.
    ``progress(stage, done, total)`` is told after each run.  ``names``
    are how messages call the two models when they are given as ModelProtos
    (a path names itself).

    Returns an :class:`~extql.tools.analyze_report.AnalysisReport`.  Raises
    :class:`AnalysisError` (a ValueError with a one-line message) when a file
    cannot be read, the models' graph inputs or outputs differ, QUANT has no
    quantization point or none matches a tensor of FLOAT, an input does not
    fit, or onnxruntime cannot run a model.
    """
    fm, fname = _load(float_model, names[0])
    qm, qname = _load(quantized_model, names[1])
    if what_if < 0 or samples < 1:
        raise ValueError("extql.analyze: what_if must be >= 0 and samples >= 1")
    _check_fit(fm, qm, fname, qname)
    _check_runnable(fm, fname)
    _check_runnable(qm, qname)
    types = infer_types(qm)
    points, notes = find_points(qm, value_names(fm.graph), types)
    if not points:
        raise AnalysisError(f"{qname} has no quantization point (no quantize -> dequantize "
                            "pair, dequantized weight, BFP / MX or DPU node): give the float "
                            "model first, the quantized one second")
    if not any(p.matched for p in points):
        raise AnalysisError(f"no quantization point of {qname} matches a tensor of {fname} "
                            f"(QUANT quantizes {sorted({p.tensor for p in points})[:5]}...): "
                            "are they the float and quantized forms of one model?")
    unmatched = sorted({p.tensor for p in points if not p.matched})
    points = [p for p in points if p.input is not None or p.matched or p.form == "dpu"]
    feeds_list, random_names = _samples(fm, inputs, samples, seed)
    if random_names:
        warnings.warn(f"random standard-normal data for input(s) {random_names}: the figures "
                      "mean something on calibration-like data (give it as inputs)",
                      stacklevel=2)
    fv, qv = _Values(fm), _Values(qm)
    q_all, q_first, f_all, f_first = _needed(points)
    outputs = [o.name for o in fm.graph.output]
    q_all = sorted(n for n in q_all if qv.needs_run(n))
    q_first = sorted(n for n in q_first if qv.needs_run(n))
    f_all = sorted(n for n in f_all if fv.needs_run(n))
    f_first = sorted(n for n in f_first if fv.needs_run(n))
    f_run = _Runner(fm, f_all + f_first, fname)
    q_run = _Runner(qm, q_all + q_first, qname)
    sums = {id(p): _PointSums() for p in points}
    out_err = {o: ErrorSums() for o in outputs}
    out_cos = {o: CosineSums() for o in outputs}
    float_outputs: list[dict[str, np.ndarray]] = []
    n = len(feeds_list)
    for i, feeds in enumerate(feeds_list):
        first = i == 0
        ff = f_run.run(feeds, _unique(outputs + f_all + (f_first if first else [])))
        qf = q_run.run(feeds, _unique(outputs + q_all + (q_first if first else [])))
        for p in points:
            if p.kind == "activation" or first:
                _point_sample(p, sums[id(p)], qv, fv, feeds, qf, ff, notes)
        for o in outputs:
            out_err[o].add(ff[o], qf[o])
            out_cos[o].add(ff[o], qf[o])
        float_outputs.append({o: ff[o] for o in outputs})
        if progress is not None:
            progress("running FLOAT and QUANT", i + 1, n)
    model_sums = ErrorSums()
    for o in outputs:
        model_sums.merge(out_err[o])
    results = []
    for p in points:
        s = sums[id(p)]
        results.append(PointResult(
            tensor=p.tensor, node=p.node, kind=p.kind, type=p.type,
            local_sqnr_db=s.local.sqnr_db,
            accumulated_sqnr_db=s.accumulated.sqnr_db if p.matched and s.compared else None,
            max_abs_error=s.local.max_abs,
            clipped_fraction=(s.clipped / s.quantized) if s.quantized else
            (0.0 if p.form in ("block", "dpu") else math.nan),
            graph_order=p.order))
    order = sorted(range(len(results)), key=lambda k: _rank_key(results[k]))
    ranked = [results[k] for k in order]
    report = AnalysisReport(
        points=ranked,
        outputs=[OutputResult(o, out_err[o].sqnr_db, out_cos[o].cosine, out_err[o].max_abs)
                 for o in outputs],
        model_sqnr_db=model_sums.sqnr_db, what_if=[], unmatched=unmatched, samples=n,
        random_inputs=bool(random_names), notes=notes)
    if what_if:
        worst = [points[k] for k in order[:what_if]]
        _what_if(report, worst, qm, qname, types, fv, feeds_list, float_outputs, progress)
    return report


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _what_if(report: AnalysisReport, worst: list[Point], qm: onnx.ModelProto, qname: str,
             types: dict, fv: _Values, feeds_list: list[dict[str, np.ndarray]],
             float_outputs: list[dict[str, np.ndarray]], progress: Progress | None) -> None:
    """Run QUANT with each of the ``worst`` points bypassed, then widened."""
    outputs = list(float_outputs[0]) if float_outputs else []
    variants = [(p, v) for p in worst for v in ("bypass", "widen")]
    for j, (p, variant) in enumerate(variants, 1):
        float_value = None
        if p.form == "dequantize" and p.float_name:
            float_value = fv.constant(p.float_name)
        make = bypass if variant == "bypass" else widen
        try:
            if p.form == "dpu":
                raise Skipped("a DPU-emulation node computes an operator: no float form of it "
                              "to put in its place")
            model = make(qm, p, types, float_value)
        except Skipped as exc:
            report.what_if_skipped.append({"tensor": p.tensor, "node": p.node,
                                           "variant": variant, "reason": str(exc)})
            if progress is not None:
                progress("what-if", j, len(variants))
            continue
        done = "bypassed" if variant == "bypass" else "widened"
        runner = _Runner(model, [], f"{qname} with {p.tensor!r} {done}")
        total = ErrorSums()
        for feeds, reference in zip(feeds_list, float_outputs, strict=True):
            got = runner.run(feeds, outputs)
            for o in outputs:
                total.add(reference[o], got[o])
        value = total.sqnr_db
        gain = value - report.model_sqnr_db
        report.what_if.append(WhatIfResult(p.tensor, p.node, variant, value, gain))
        if progress is not None:
            progress("what-if", j, len(variants))

