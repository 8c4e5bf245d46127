"""``extql check | attach | inline | lower | run``: model tools on the command line.

Registered in :mod:`extql.cli` through :func:`register`.  Every command reads
ONNX models with their external data (the ``.data`` files next to the model),
writes large results with external data, reports progress on stderr for big
models, and exits non-zero with a message that says what to do when
something is wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import cli_json
from .cli_errors import CliError, readable_file, require_modules, writable_output
from .cli_files import load_npz, save_npz

__all__ = ["register", "check_model", "load_model", "save_model", "run_model"]

# Above this many bytes a model is written with its tensors in a side file
# (protobuf cannot serialise 2 GiB; onnxruntime needs a path then as well).
_EXTERNAL_THRESHOLD = 1_500_000_000
# Random inputs larger than this many elements are refused (a mistaken --dim
# or a damaged shape would otherwise exhaust the memory).
_MAX_RANDOM_ELEMENTS = 1 << 31
# Models with more Extended nodes than this get per-node progress lines.
_PROGRESS_NODES = 200


def _log(args: argparse.Namespace, message: str) -> None:
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr, flush=True)


class _Progress:
    """Prints "label: i/n" lines on stderr about every 10% for long loops."""

    def __init__(self, args: argparse.Namespace, label: str, total: int) -> None:
        self.args, self.label, self.total = args, label, total
        self.enabled = total >= _PROGRESS_NODES and not getattr(args, "quiet", False)
        self.step = max(1, total // 10)
        self.start = time.monotonic()

    def update(self, i: int) -> None:
        if self.enabled and (i % self.step == 0 or i == self.total):
            elapsed = time.monotonic() - self.start
            print(f"  {self.label}: {i}/{self.total} ({elapsed:.1f} s)", file=sys.stderr,
                  flush=True)


# --------------------------------------------------------------------------
# Loading and saving


def load_model(path: str | os.PathLike, *, with_data: bool = True):
    """Load an ONNX model; external data from the model's directory when
    ``with_data``.  Returns (model, had_external_data)."""
    import onnx

    p = readable_file(path, "an .onnx model")
    if p.stat().st_size == 0:
        raise CliError(f"{p}: is an empty file, not an ONNX model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several kinds
        raise CliError(f"{p}: not a readable ONNX model ({exc})") from None
    if not model.HasField("graph"):
        raise CliError(f"{p}: not an ONNX model (the file holds no graph)")
    external = any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in _all_initializers(model)
    )
    if external and with_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(p.parent))
        except Exception as exc:  # noqa: BLE001 - OSError, ValueError, ValidationError ...
            raise CliError(
                f"{p}: cannot read its external data ({exc}); keep the data file(s) next to the "
                "model, under the names the model refers to"
            ) from None
    return model, external


def _all_initializers(model):
    from .tools.graph import graphs as _graphs

    for graph in _graphs(model.graph):
        yield from graph.initializer


def save_model(model, path: str | os.PathLike, *, external: bool | None = None) -> str | None:
    """Save ``model``; with external data (one ``<name>.data`` file next to it)
    when ``external`` is true, or when None and the model is too big for one
    file.  Returns the data file name, or None."""
    import onnx

    p = writable_output(path, "model")
    if external is None:
        external = model.ByteSize() > _EXTERNAL_THRESHOLD
    try:
        if not external:
            onnx.save_model(model, str(p))
            return None
        location = p.name + ".data"
        data = writable_output(p.parent / location, "model's external data")
        if data.exists():
            data.unlink()  # onnx appends to an existing data file
        onnx.save_model(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024)
    except OSError as exc:
        raise CliError(f"{p}: cannot write the model ({exc.strerror or exc})") from None
    except ValueError as exc:  # e.g. protobuf's 2 GiB limit
        raise CliError(f"{p}: cannot write the model ({exc})") from None
    return location if data.exists() else None  # (tensors under 1 KiB stay inline)


# --------------------------------------------------------------------------
# check


def check_model(
    model, progress: _Progress | None = None, notes: list[str] | None = None
) -> tuple[int, list[str]]:
    """(number of quantization nodes, problems) of a model, each problem one
    line naming its node.  Checked: every Extended (and legacy Vitis) node and
    every com.microsoft QuantizeLinear / DequantizeLinear (which AMD Quark
    writes for its 8/16-bit nodes), each against its operator's rules; every
    operator of a custom domain that neither extql nor onnxruntime implements
    (Quark's BFPQuantizeDequantize, for example) is a problem too.  What
    cannot be checked (unknown types) goes to ``notes``, not to the problems."""
    from . import tools as passes
    from .tools.microsoft import unsupported_nodes

    problems: list[str] = [f"unsupported operator {line}" for line in unsupported_nodes(model)]
    notes = [] if notes is None else notes
    nodes = passes.extended_nodes(model, microsoft=True)
    if not nodes:
        return 0, problems
    types = passes.infer_types(model)
    imported = {o.domain for o in model.opset_import}
    for domain in sorted({e.node.domain for e in nodes}):
        if domain not in imported:
            problems.append(
                f"the model has {domain} nodes but no opset import for {domain!r}; add "
                f"onnx.helper.make_opsetid({domain!r}, 1) to model.opset_import"
            )
    for i, ext in enumerate(nodes, 1):
        if progress is not None:
            progress.update(i)
        for problem in passes.check_node(ext, types):
            problems.append(f"{ext.label}: {problem}")
        unknown = [n for n in ext.node.input[:2] if n and n not in types]
        if ext.has_zero_point and ext.node.input[2] not in types:
            unknown.append(ext.node.input[2])
        if unknown:
            notes.append(
                f"{ext.label}: the type of {', '.join(map(repr, unknown))} is unknown, so it "
                "cannot be checked; give the model value_info for it"
            )
    return len(nodes), problems


def _require_integrity(path, model) -> None:
    """A CliError with exit status 1 when the model has whole-graph problems
    (:mod:`extql.model_lint`): the passes and onnxruntime cannot work on it."""
    from .tools.lint import integrity_problems

    problems = integrity_problems(model)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise CliError(f"{path}: {problems[0]}{more}; 'extql check {path}' lists them",
                       status=1)


def _name_unsupported(path, model, name: str) -> None:
    """Name every operator that neither extql nor onnxruntime implements
    (Quark's BFPQuantizeDequantize, ...): a warning for the passes that leave
    such nodes as they are, a problem (exit 1) for ``inline``, whose output
    must run without any custom operator."""
    from .tools.microsoft import unsupported_nodes

    unsupported = unsupported_nodes(model)
    if unsupported and name == "inline":
        more = f" (and {len(unsupported) - 1} more)" if len(unsupported) > 1 else ""
        raise CliError(f"{path}: unsupported operator {unsupported[0]}{more}: it cannot be "
                       "replaced by standard ops", status=1)
    for line in unsupported:
        print(f"warning: {path}: unsupported operator {line}; left as it is", file=sys.stderr)


def _integrity_failure(args: argparse.Namespace, model) -> int | None:
    """Print the model's whole-graph problems (invalid element types, inputs
    that nothing produces, see :mod:`extql.model_lint`) and return 1 when it
    has any: the node checks assume a well-formed graph."""
    from .tools.lint import integrity_problems

    problems = integrity_problems(model)
    if not problems:
        return None
    for line in problems:
        print(line)
    print(f"{args.model}: {len(problems)} problem(s) in the graph itself; the Extended nodes "
          "were not checked")
    cli_json.record(args, model=str(args.model), quantization_nodes=None, problems=problems,
                    notes=[])
    return 1


def _session_check(path: str) -> tuple[list[str], list[str]]:
    """(warnings, problems) of loading the model in onnxruntime with the extql
    library: a warning when it loads only below the default optimisation
    level (and why), a problem when it loads at no level.  Both empty when it
    loads at the default level, or when onnxruntime or the library is not
    available to try."""
    try:
        import onnxruntime  # noqa: F401

        make = _library_options
        make()
    except (ImportError, CliError):
        return [], []
    from .ort_levels import SessionError, open_session

    found: list[str] = []
    try:
        open_session(path, make, warn=found.append)
    except SessionError as exc:
        message = " ".join(str(exc).split())
        return found, [f"onnxruntime (with the extql library) cannot load the model at any "
                       f"optimisation level: {message}"]
    return found, []


def _cmd_check(args: argparse.Namespace) -> int:
    require_modules("onnx", "onnxscript")
    model, _ = load_model(args.model, with_data=False)
    failed = _integrity_failure(args, model)
    if failed is not None:
        return failed
    from .tools.graph import extended_nodes
    from .tools.lint import onnx_checker_problems

    total = len(extended_nodes(model, microsoft=True))
    _log(args, f"checking {args.model}: {total} quantization node(s), inferring types ...")
    notes: list[str] = []
    count, problems = check_model(model, _Progress(args, "checked", total), notes)
    if not problems:  # what the node checks do not look at
        problems += onnx_checker_problems(model)
    for line in problems:
        print(line)
    # With problems to fix, the notes (what could not be checked) are a
    # summary, not a list: the problems are what the reader needs.
    shown = notes if not problems or len(notes) <= 2 else notes[:1]
    for line in shown:
        print(f"note: {line}")
    if len(shown) < len(notes):
        print(f"note: {len(notes) - len(shown)} more node(s) could not be checked (unknown "
              "types); fix the problems above first")
    warned: list[str] = []
    if not problems:
        _log(args, "loading the model in onnxruntime at its default optimisation level ...")
        warned, refused = _session_check(str(args.model))
        for line in warned:
            print(f"warning: {line}")
        for line in refused:
            print(line)
        problems += refused
    cli_json.record(args, model=str(args.model), quantization_nodes=count, problems=problems,
                    notes=notes, warnings=warned)
    if count == 0 and not problems:
        print(f"{args.model}: no ExtendedQuantizeLinear/ExtendedDequantizeLinear node "
              "(nor the legacy Vitis names, nor com.microsoft QuantizeLinear/DequantizeLinear)")
        return 0
    status = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"{args.model}: {count} quantization node(s) checked: {status}")
    return 1 if problems else 0


# --------------------------------------------------------------------------
# attach / inline / lower


def _transform(args: argparse.Namespace, name: str, fn: Callable[[Any], Any]) -> int:
    require_modules("onnx", "onnxscript")
    src, dst = Path(args.input), Path(args.output)
    readable_file(src, "an .onnx model")
    if src.resolve() == dst.resolve():
        raise CliError("the output must be a different file from the input")
    writable_output(dst, "model")  # before the work, not after it
    _log(args, f"loading {src} ...")
    model, external = load_model(src)
    _require_integrity(src, model)
    _name_unsupported(src, model, name)
    start = time.monotonic()
    _log(args, f"{name}: {len(model.graph.node)} nodes ...")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(model)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if name != "lower":  # lower prints its full report instead
        for w in caught:
            if issubclass(w.category, UserWarning):
                print(f"warning: {w.message}", file=sys.stderr)
    _log(args, f"{name}: done in {time.monotonic() - start:.1f} s; writing {dst} ...")
    want_external = True if args.external_data else (False if args.no_external_data else
                                                      (True if external else None))
    location = save_model(out, dst, external=want_external)
    note = f" (tensors in {location})" if location else ""
    print(f"wrote {dst}{note}")
    return 0


def _cmd_attach(args: argparse.Namespace) -> int:
    from .tools.attach import attach_fallbacks

    return _transform(args, "attach", attach_fallbacks)


def _cmd_inline(args: argparse.Namespace) -> int:
    from .tools.inline import inline_fallbacks

    return _transform(args, "inline", inline_fallbacks)


def _cmd_lower(args: argparse.Namespace) -> int:
    from .tools.lower import lower_to_standard

    report: list[str] = []

    def lower(model):
        return lower_to_standard(model, report=report)

    code = _transform(args, "lower", lower)
    for line in report:
        print(line)
    return code


# --------------------------------------------------------------------------
# run


def _np_dtype(elem: int) -> np.dtype:
    import onnx

    from .types import QTYPES

    if elem == onnx.TensorProto.BFLOAT16:
        return QTYPES["bfloat16"].dtype
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))


def _np_dtype_or_error(vi) -> np.dtype:
    """The NumPy dtype of a graph input, or a CliError naming the input."""
    try:
        return _np_dtype(vi.type.tensor_type.elem_type)
    except (KeyError, ValueError, TypeError):
        raise CliError(f"input {vi.name!r} has element type {vi.type.tensor_type.elem_type}, "
                       "which has no NumPy type; give it in --inputs") from None


def _check_feed_types(source, graph_inputs, feeds: dict[str, np.ndarray]) -> None:
    """A CliError naming the file and the input when an array of --inputs
    does not have the element type the model declares for it."""
    for vi in graph_inputs:
        value = feeds.get(vi.name)
        if value is None or not vi.type.HasField("tensor_type"):
            continue
        if vi.type.tensor_type.elem_type == 0:  # not declared: onnxruntime decides
            continue
        want = _np_dtype_or_error(vi)
        if value.dtype != want:
            raise CliError(f"{source}: the array {vi.name!r} is {value.dtype}, but the model's "
                           f"input {vi.name!r} is {want}; convert it with .astype()")


def _random_input_or_error(vi, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    """:func:`_random_input`, with impossible shapes and types as CliErrors."""
    if vi.type.HasField("tensor_type"):
        _np_dtype_or_error(vi)
        bad = [d.dim_value for d in vi.type.tensor_type.shape.dim
               if d.HasField("dim_value") and d.dim_value < 0]
        if bad:
            raise CliError(f"input {vi.name!r} has a negative dimension {bad[0]}")
        sizes = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
                 for d in vi.type.tensor_type.shape.dim]
        if int(np.prod(sizes, dtype=object)) > _MAX_RANDOM_ELEMENTS:
            raise CliError(f"input {vi.name!r} of shape {sizes} is too big for a random value; "
                           "give it in --inputs or choose smaller --dim sizes")
    try:
        return _random_input(vi, rng, dims)
    except (ValueError, MemoryError) as exc:
        raise CliError(f"cannot make a random value for input {vi.name!r} ({exc}); "
                       "give it in --inputs or set its size with --dim") from None


def _random_input(vi, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise CliError(f"input {vi.name!r} is not a tensor; give it in --inputs")
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.dim_param in dims:
            shape.append(dims[d.dim_param])
        else:
            shape.append(1)
    dtype = _np_dtype(tt.elem_type)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return (rng.standard_normal(shape) * 4).astype(np.float32).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -(2**31)), min(int(info.max), 2**31 - 1)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise CliError(f"input {vi.name!r} has type {dtype}: give it in --inputs")


def _session(model_or_path, options):
    import onnxruntime as ort

    if not isinstance(model_or_path, str):
        model_or_path = model_or_path.SerializeToString()
    if options is None:
        options = ort.SessionOptions()
    # Errors come back as exceptions and are reported once, in one line; the
    # log would repeat them (and the retry banner onnxruntime prints on stdout
    # when a session fails to load is no use with the CPU provider only).
    options.log_severity_level = 3
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return ort.InferenceSession(model_or_path, sess_options=options,
                                        providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
        message = " ".join(str(exc).split())
        raise CliError(f"onnxruntime cannot load the model: {message}") from None


def run_model(model_or_path, feeds: dict[str, np.ndarray], options=None) -> dict[str, np.ndarray]:
    """Run on the CPU provider and return every output as NumPy (bfloat16 as
    ml_dtypes.bfloat16, which onnxruntime's Python API cannot hand over itself)."""
    import onnxruntime as ort
    from onnx import TensorProto

    typed = hasattr(ort.OrtValue, "ortvalue_from_numpy_with_onnx_type")
    if not typed and any(np.asarray(v).dtype.name == "bfloat16" for v in feeds.values()):
        model_or_path, feeds = _bfloat16_inputs_as_initializers(model_or_path, feeds)
    sess = _session(model_or_path, options)
    binding = sess.io_binding()
    keep = []
    for name, value in feeds.items():
        value = np.asarray(value, order="C")
        if value.dtype.name == "bfloat16":
            ov = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                value.view(np.uint16), TensorProto.BFLOAT16)
        else:
            ov = ort.OrtValue.ortvalue_from_numpy(value)
        keep.append(ov)
        binding.bind_ortvalue_input(name, ov)
    names = [o.name for o in sess.get_outputs()]
    for name in names:
        binding.bind_output(name, "cpu")
    try:
        sess.run_with_iobinding(binding)
    except Exception as exc:  # noqa: BLE001
        message = " ".join(str(exc).split())
        raise CliError(f"onnxruntime failed to run the model: {message}") from None
    results = {}
    for name, ov in zip(names, binding.get_outputs(), strict=True):
        results[name] = _ortvalue_to_numpy(ov)
    return results


def _bfloat16_inputs_as_initializers(model_or_path, feeds):
    """onnxruntime < 1.19 cannot take a bfloat16 input from Python: make such
    inputs initializers holding the given values (same result)."""
    import onnx
    from onnx import TensorProto, helper

    if isinstance(model_or_path, str):
        model = onnx.load(model_or_path)
    else:
        model = onnx.ModelProto()
        model.CopyFrom(model_or_path)
    feeds = dict(feeds)
    for vi in list(model.graph.input):
        value = feeds.get(vi.name)
        if value is not None and np.asarray(value).dtype.name == "bfloat16":
            value = np.asarray(value)
            model.graph.input.remove(vi)
            model.graph.initializer.append(helper.make_tensor(
                vi.name, TensorProto.BFLOAT16, value.shape, value.view(np.uint16).tobytes(),
                raw=True))
            del feeds[vi.name]
    return model, feeds


_ELEM_OF_ORT = {
    "tensor(bfloat16)": "bfloat16",
}


def _ortvalue_to_numpy(ov) -> np.ndarray:
    if ov.data_type() not in _ELEM_OF_ORT:
        return ov.numpy()
    from .types import QTYPES

    shape = tuple(ov.shape())
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n, np.uint16)
    if n:
        ctypes.memmove(buf.ctypes.data, ov.data_ptr(), n * 2)
    return buf.view(QTYPES["bfloat16"].dtype).reshape(shape)


def _library_options():
    import onnxruntime as ort

    try:
        from . import ort as extql_ort
    except ImportError:
        raise CliError(
            "this extql build has no onnxruntime library (extql.ort is missing); run with "
            "--no-library to use the fallback functions only"
        ) from None
    return extql_ort.register(ort.SessionOptions())


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype.kind in "fV" or a.dtype.name == "bfloat16":
        return a.view(f"u{a.dtype.itemsize}")
    return a


def _compare(native: dict, fallback: dict) -> list[str]:
    """One line per output of ``native`` that differs in ``fallback`` (any NaN
    matches any NaN)."""
    from .tools.compare import compare_arrays

    lines = []
    for name, a in native.items():
        diff = compare_arrays(a, fallback[name])
        if diff is not None:
            lines.append(f"{name}: {diff}")
    return lines


def _stepped_options(target, make_options: Callable[[], Any] | None, args: argparse.Namespace):
    """SessionOptions (from ``make_options``, or plain ones) at the highest
    optimisation level at which onnxruntime loads ``target`` (a ModelProto or
    a path), with a warning on stderr when that is below the default."""
    import onnxruntime as ort

    from .ort_levels import SessionError, open_session

    make = make_options or ort.SessionOptions
    options = make()
    model = target.SerializeToString() if not isinstance(target, str) else target
    warned = args.__dict__.setdefault("_warned", [])

    def warn(line: str) -> None:
        if not warned:  # once: the model and its variants (--compare-fallback) say the same
            warned.append(line)
            print(f"warning: {line}", file=sys.stderr)

    try:
        _, level = open_session(model, lambda: options, warn=warn)
    except SessionError as exc:
        raise CliError(f"onnxruntime cannot load the model: {exc}") from None
    _log(args, f"optimisation level: {level}")
    return options


def _compare_fallback(args: argparse.Namespace, model, feeds: dict, native: dict,
                      tmp: str) -> int:
    """--compare-fallback: every quantization node's output, native kernels vs
    fallback functions on the same inputs (the promise; a difference is exit 1),
    then the whole model's outputs (information only)."""
    from . import tools as passes
    from .tools import compare as node_compare

    nodes = node_compare.quantization_nodes(model)
    types = passes.infer_types(model)
    exposed, kept = node_compare.expose(model, nodes, types)
    node_lines: list[str] = []
    if kept:
        _log(args, f"running with the library, {len(kept)} quantization node(s) exposed ...")
        target = _serialisable(exposed, tmp, "exposed.onnx")
        values = dict(feeds)
        values.update(run_model(target, feeds, _stepped_options(target, _library_options, args)))
        iso, feed_of, out_of = node_compare.isolated_nodes(model, kept, types)
        _log(args, "running the same nodes through the fallback functions (no library) ...")
        target = _serialisable(passes.attach_fallbacks(iso), tmp, "nodes.onnx")
        got = run_model(target, {alias: values[name] for alias, name in feed_of.items()},
                        _stepped_options(target, None, args))
        for q, (alias, name) in zip(kept, out_of.items(), strict=True):
            diff = node_compare.compare_arrays(values[name], got[alias])
            if diff is not None:
                node_lines.append(f"{q.ext.label} (output {name!r}): {diff}")
    skipped = len(nodes) - len(kept)
    _log(args, "running the whole model with the fallback functions (no library) ...")
    target = _serialisable(passes.attach_fallbacks(model), tmp, "fallback.onnx")
    fallback = run_model(target, feeds, _stepped_options(target, None, args))
    whole = _compare(native, fallback)
    if node_lines:
        print("quantization nodes: native and fallback DIFFER on the same inputs:")
        for line in node_lines:
            print(f"  {line}")
    elif kept:
        print(f"quantization nodes: all {len(kept)} output(s) identical, native kernels vs "
              "fallback functions on the same inputs")
    else:
        print("quantization nodes: none to compare")
    if skipped:
        print(f"note: {skipped} quantization node(s) not compared (inside a subgraph, or a "
              "value of unknown type)")
    if whole:
        print("whole model (information, not a failure: onnxruntime optimises the graph "
              "around custom nodes and around their decompositions differently):")
        for line in whole:
            print(f"  {line}")
    else:
        print(f"whole model: all {len(native)} output(s) agree bit for bit")
    cli_json.record(args, fallback_agrees=not node_lines, differences=node_lines,
                    nodes_compared=len(kept), nodes_not_compared=skipped,
                    whole_model_differences=whole)
    return 1 if node_lines else 0


def _serialisable(model, tmp: str, name: str):
    """The model itself, or a path to it saved with external data when too big."""
    if model.ByteSize() <= _EXTERNAL_THRESHOLD:
        return model
    path = os.path.join(tmp, name)
    save_model(model, path, external=True)
    return path


def _cmd_run(args: argparse.Namespace) -> int:
    require_modules("onnx", "onnxruntime", "onnxscript")
    from .tools.attach import attach_fallbacks

    readable_file(args.model, "an .onnx model")
    if args.save_outputs:
        writable_output(args.save_outputs, "outputs (.npz)")  # before the model runs
    feeds: dict[str, np.ndarray] = load_npz(args.inputs) if args.inputs else {}
    _log(args, f"loading {args.model} ...")
    model, _ = load_model(args.model)
    _require_integrity(args.model, model)
    from .tools.microsoft import unsupported_nodes

    unsupported = unsupported_nodes(model)
    if unsupported:
        for line in unsupported:
            print(f"{args.model}: unsupported operator {line}")
        print(f"{args.model}: cannot run: {len(unsupported)} unsupported operator(s)")
        cli_json.record(args, model=str(args.model), unsupported=unsupported)
        return 1
    initializer_names = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializer_names]
    unknown = sorted(set(feeds) - {i.name for i in graph_inputs})
    if unknown:
        raise CliError(f"{args.inputs}: has arrays for {unknown}, which are not inputs of the "
                       f"model (inputs: {[i.name for i in graph_inputs]})")
    dims = dict(args.dim or [])
    rng = np.random.default_rng(args.seed)
    for vi in graph_inputs:
        if vi.name not in feeds:
            value = feeds[vi.name] = _random_input_or_error(vi, rng, dims)
            _log(args, f"input {vi.name}: random {value.dtype}{list(value.shape)}")
    # bfloat16 arrays saved by NumPy come back as void: take them as bfloat16.
    for vi in graph_inputs:
        value = feeds[vi.name]
        if value.dtype.kind == "V" and value.dtype.itemsize == 2:
            feeds[vi.name] = value.view(_np_dtype_or_error(vi))
    _check_feed_types(args.inputs, graph_inputs, feeds)
    with tempfile.TemporaryDirectory(prefix="extql-run-") as tmp:
        start = time.monotonic()
        if args.no_library:
            _log(args, "running with the fallback functions (no library) ...")
            native = None
            target = _serialisable(attach_fallbacks(model), tmp, "fallback.onnx")
            outputs = run_model(target, feeds, _stepped_options(target, None, args))
        else:
            _log(args, "running with the extql library ...")
            target = _serialisable(model, tmp, "model.onnx")
            outputs = native = run_model(target, feeds,
                                         _stepped_options(target, _library_options, args))
        _log(args, f"ran in {time.monotonic() - start:.2f} s")
        summary = {}
        for name, value in outputs.items():
            finite = ""
            summary[name] = {"dtype": str(value.dtype), "shape": list(value.shape)}
            if value.dtype.kind == "f" or value.dtype.name == "bfloat16":
                v = value.astype(np.float32)
                summary[name]["nan"] = int(np.isnan(v).sum())
                finite = f", {summary[name]['nan']} NaN"
            print(f"output {name}: {value.dtype}{list(value.shape)}{finite}")
        cli_json.record(args, model=str(args.model), library=not args.no_library,
                        outputs=summary)
        if args.save_outputs:
            save_npz(args.save_outputs, outputs)
            print(f"wrote {args.save_outputs}")
            cli_json.record(args, saved=str(args.save_outputs))
        if not args.compare_fallback:
            return 0
        if native is None:
            raise CliError("--compare-fallback compares with the library: drop --no-library")
        return _compare_fallback(args, model, feeds, native, tmp)


# --------------------------------------------------------------------------
# argparse


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (e.g. batch=4), got {text!r}")
    return name, int(value)


def _add_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="IN", help="the model to read (.onnx)")
    p.add_argument("output", metavar="OUT", help="where to write the result (.onnx)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--external-data", action="store_true",
                   help="write the tensors to OUT.data next to OUT (default: only when IN had "
                        "external data or the model is too big for one file)")
    g.add_argument("--no-external-data", action="store_true",
                   help="write everything into OUT")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add check, attach, inline, lower and run to the ``extql`` command."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "check", formatter_class=fmt,
        help="validate every Extended Q/DQ node of a model",
        description=(
            "Check every ExtendedQuantizeLinear / ExtendedDequantizeLinear node (and the legacy\n"
            "VitisQuantizeLinear / VitisDequantizeLinear, and com.microsoft QuantizeLinear /\n"
            "DequantizeLinear) of MODEL: input count, the types of x,\n"
            "scale and zero point, the scale's rank, zero point shape, axis range and scale\n"
            "length against the input's shape. Types and shapes come from the model's\n"
            "initializers, inputs, value_info and ONNX shape inference.\n\n"
            "Every operator of a custom domain that neither extql nor onnxruntime implements\n"
            "(e.g. Quark's BFPQuantizeDequantize) is a problem too. A model that onnxruntime\n"
            "loads only below its default optimisation level gets a warning.\n\n"
            "Prints one line per problem, naming the node, and exits with 1 if there is any."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="the .onnx model to check")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    cli_json.add_json_flag(p)
    p.set_defaults(func=_cmd_check)

    p = subparsers.add_parser(
        "attach", formatter_class=fmt,
        help="add fallback functions so the model runs without the extql library",
        description=(
            "Copy IN to OUT with a standard-ops definition (an ONNX function) of every Extended\n"
            "operator and type it uses. OUT runs in onnxruntime without the extql library and\n"
            "in onnx.reference, with the same bits; where the library is registered its native\n"
            "kernels still run. Nothing else in the model changes."
        ),
    )
    _add_io(p)
    p.set_defaults(func=_cmd_attach)

    p = subparsers.add_parser(
        "inline", formatter_class=fmt,
        help="replace every Extended node by standard ONNX ops",
        description=(
            "Copy IN to OUT with every Extended (and legacy Vitis) node, and every com.microsoft\n"
            "QuantizeLinear / DequantizeLinear, replaced by the standard ops that compute it bit\n"
            "for bit. OUT has no custom or Microsoft operator left, so any ONNX runtime can run\n"
            "it."
        ),
    )
    _add_io(p)
    p.set_defaults(func=_cmd_inline)

    p = subparsers.add_parser(
        "lower", formatter_class=fmt,
        help="use the official QuantizeLinear/DequantizeLinear where exact",
        description=(
            "Copy IN to OUT with Extended nodes rewritten as the official ONNX QuantizeLinear /\n"
            "DequantizeLinear where these give the same bits (int8, uint8, int16, uint16; int32\n"
            "dequantize without a zero point), so onnxruntime can fuse them into quantized\n"
            "kernels again; com.microsoft QuantizeLinear / DequantizeLinear by the same rules.\n"
            "The other nodes stay; the model's opset is never changed, so a node that needs a\n"
            "newer opset is left and reported."
        ),
    )
    _add_io(p)
    p.set_defaults(func=_cmd_lower)

    p = subparsers.add_parser(
        "run", formatter_class=fmt,
        help="run a model with the extql library (optionally compare with the fallback)",
        description=(
            "Run MODEL in onnxruntime (CPU) with the extql library registered, on the arrays of\n"
            "--inputs or on random inputs, and print each output's type and shape. With\n"
            "--compare-fallback it also compares every quantization node (Extended and\n"
            "com.microsoft Q/DQ) between the native kernels and the fallback functions on the\n"
            "same inputs (exit 1 if any output differs), and reports the whole model's\n"
            "difference as information. If onnxruntime rejects the model at its default\n"
            "optimisation level, run steps it down (all, extended, basic, disabled) with a\n"
            "warning. A custom operator that neither extql nor onnxruntime implements is named\n"
            "and run exits 1.\n\n"
            "example: extql run model.onnx --inputs in.npz --compare-fallback"
        ),
    )
    p.add_argument("model", metavar="MODEL", help="the .onnx model to run")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="input arrays by input name (np.savez); missing inputs are random")
    p.add_argument("--compare-fallback", action="store_true",
                   help="also compare each quantization node's output with the fallback's, "
                        "bit for bit on the same inputs (the whole model: information)")
    p.add_argument("--no-library", action="store_true",
                   help="run with the fallback functions only (no native library)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--dim", type=_dim, action="append", metavar="NAME=SIZE",
                   help="size of a symbolic dimension of the random inputs (default 1); "
                        "repeatable")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="write the outputs to FILE.npz")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    cli_json.add_json_flag(p)
    p.set_defaults(func=_cmd_run)
