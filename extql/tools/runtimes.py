"""The fallbacks in runtimes other than onnxruntime: what each keeps, and
running an inlined model in it.

:data:`LIMITS` is the one statement of where a runtime does not give the
NumPy API's bits with today's fallbacks (:func:`extql.inline_fallbacks`),
with the releases measured (:data:`TESTED`).  ``docs/guide/runtimes.rst``
shows it as a table, ``extql inline --target`` and ``extql run --runtime``
warn by it (:func:`model_limits`), and ``tests/runtimes`` holds every cell
to it: a case it lists is a strict xfail, so one that starts to hold fails
until the table says so.

:func:`run` runs a model in OpenVINO (CPU plugin, float32 inference
precision: its default on CPUs with bfloat16 units is bfloat16, which no
quantization emulation survives) or tract; :func:`available` tells which
are installed.  Neither runtime is a dependency of extql.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import tempfile
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # onnx is imported where it is used: the CLI reads RUNTIMES at start-up
    import onnx

__all__ = ["RUNTIMES", "TESTED", "Limit", "LIMITS", "limit_of", "NodeLimit", "node_limits",
           "model_limits", "available", "run", "RuntimeFailure"]

#: The runtimes extql's fallbacks are tested in (``onnxruntime`` and
#: ``onnx.reference`` are exact on every path).
RUNTIMES = ("onnxruntime", "openvino", "tract")
#: The releases :data:`LIMITS` was measured with.
TESTED = {"openvino": "2026.4", "tract": "0.23"}

Verdict = Literal["close", "wrong", "unsupported"]
_ANY = None

_DIVISION = ("Div is a * (1 / b) there, not correctly rounded: the 32-bit quotient differs, "
             "by one unit of the float32 quotient")
_BF16_CAST = "its Cast to bfloat16 truncates, and bfloat16 inputs are not taken as such"
_NO_BF16 = "tract has no bfloat16 type"
_REWRITE = "(x - zp) * s is rewritten as x * s - zp * s, two roundings"
_WRAP = ("x - zp wraps beyond the int32 range (int64 runs as int32): signs flip, "
         "e.g. 7.9e8 for -7.9e8")
_UINT32 = "uint32 values of 2**31 or more are narrowed (int64 runs as int32)"
_TRACT_UINT32 = ("its Cast from uint32 to int64 sign-extends: values of 2**31 or more come out "
                 "negative")
_BLOCKS = ("values below 2**-100 come out as 0 or other tiny values (subnormal block "
           "scales flushed), zeros lose their sign, and a tie may round a step of the grid "
           "the other way (its Cast to bfloat16 truncates)")
_BLOCKS_TRACT = ("values below 2**-100 come out as 0 (subnormal block scales flushed), zeros "
                 "lose their sign")
_BFP_BUILD = "tract has no bfloat16 type: the bfloat16 pre-rounding Cast does not build"
_IN_CAST = ("every bfloat16 rounding of the instance norm is a Cast pair, which truncates "
            "there: the output a few bfloat16 steps off")
_IN_BUILD = "tract has no bfloat16 type: the instance norm's bfloat16 Casts do not build"
_LSTM_TANH = ("the gates' tanhf is the runtime's float32 Tanh, as in onnxruntime "
              "(docs/differences.rst): once a gate's step moves, the outputs are a few steps "
              "off for the rest of the sequence")


@dataclasses.dataclass(frozen=True)
class Limit:
    """Where a runtime does not give the NumPy API's bits.

    ``op`` is "Q" / "DQ" (Extended, legacy Vitis and com.microsoft nodes),
    "BFP" / "MX" (the block formats), "IN" (the DPU instance norm) or "LSTM"
    (the DPU LSTM, whose fallback is close in onnxruntime too: its Tanh,
    docs/differences.rst);
    ``types`` the quantized types it concerns (None: every type);
    ``zero_point`` whether it needs a zero point of 0 ("zero"), another
    ("nonzero") or either (None); ``granularity`` "tensor" when it is per
    tensor only (None: either).
    """

    runtime: str
    op: str
    types: tuple[str, ...] | None
    zero_point: str | None
    granularity: str | None
    verdict: Verdict
    cause: str

    def matches(self, runtime: str, op: str, qtype: str | None, zero: bool | None,
                granularity: str | None) -> bool:
        """Whether the limit concerns such a node (None: not known, which matches)."""
        if (runtime, op) != (self.runtime, self.op):
            return False
        if self.types is not None and qtype is not None and qtype not in self.types:
            return False
        if self.zero_point is not None and zero is not None and \
                zero != (self.zero_point == "zero"):
            return False
        return self.granularity is None or granularity is None or granularity == self.granularity


_INT = ("int8", "uint8", "int16", "uint16")
#: Every known limit (docs/guide/runtimes.rst; tests/runtimes holds them).
LIMITS: tuple[Limit, ...] = (
    Limit("openvino", "Q", ("int32", "uint32"), _ANY, _ANY, "close", _DIVISION),
    Limit("tract", "Q", ("int32", "uint32"), _ANY, _ANY, "close", _DIVISION),
    Limit("openvino", "DQ", _INT, "nonzero", _ANY, "close", _REWRITE),
    Limit("openvino", "DQ", ("int32",), "nonzero", _ANY, "wrong", f"{_WRAP}; {_REWRITE}"),
    Limit("openvino", "DQ", ("uint32",), _ANY, _ANY, "wrong", _UINT32),
    Limit("tract", "DQ", ("uint32",), _ANY, _ANY, "wrong", _TRACT_UINT32),
    Limit("openvino", "Q", ("bfloat16",), _ANY, _ANY, "close", _BF16_CAST),
    Limit("openvino", "DQ", ("bfloat16",), "nonzero", _ANY, "close", _BF16_CAST),
    Limit("tract", "Q", ("bfloat16",), _ANY, _ANY, "unsupported", _NO_BF16),
    Limit("tract", "DQ", ("bfloat16",), _ANY, _ANY, "unsupported", _NO_BF16),
    Limit("openvino", "BFP", _ANY, _ANY, _ANY, "close", _BLOCKS),
    Limit("openvino", "MX", _ANY, _ANY, _ANY, "close", _BLOCKS),
    Limit("tract", "BFP", _ANY, _ANY, _ANY, "unsupported", _BFP_BUILD),
    Limit("tract", "MX", _ANY, _ANY, _ANY, "close", _BLOCKS_TRACT),
    Limit("openvino", "IN", _ANY, _ANY, _ANY, "close", _IN_CAST),
    Limit("tract", "IN", _ANY, _ANY, _ANY, "unsupported", _IN_BUILD),
    Limit("openvino", "LSTM", _ANY, _ANY, _ANY, "close", _LSTM_TANH),
    Limit("tract", "LSTM", _ANY, _ANY, _ANY, "close", _LSTM_TANH),
)


def limit_of(runtime: str, op: str, qtype: str | None = None, zero: bool | None = None,
             granularity: str | None = None) -> Limit | None:
    """The first limit of :data:`LIMITS` that concerns such a node, if any."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    return next((lim for lim in LIMITS if lim.matches(runtime, op, qtype, zero, granularity)),
                None)


def _initializer(graph: onnx.GraphProto, name: str) -> onnx.TensorProto | None:
    return next((init for init in graph.initializer if init.name == name), None)


def _quantized_type(node: onnx.NodeProto, graph: onnx.GraphProto) -> str | None:
    """The node's quantized type, from its zero point's (uint8 without one)
    or an ``output_dtype`` attribute; None when neither tells."""
    from ..rules.types import QUANTIZED_BY_ONNX

    def name(code: int) -> str | None:
        t = QUANTIZED_BY_ONNX.get(code)
        return None if t is None else t.name

    for attr in node.attribute:
        if attr.name == "output_dtype" and attr.i:
            return name(int(attr.i))
    if len(node.input) < 3 or not node.input[2]:
        return "uint8"
    zp = _initializer(graph, node.input[2])
    return None if zp is None else name(zp.data_type)


def _all_zero(t: onnx.TensorProto) -> bool:
    """Whether every value is zero (-0 included)."""
    import onnx
    from onnx import numpy_helper

    a = numpy_helper.to_array(t)
    if a.dtype.kind in "fV" or a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    elif t.data_type == onnx.TensorProto.BFLOAT16:  # raw bits
        a = a.view(np.uint16) & 0x7FFF
    return not bool(np.any(a != 0))


@dataclasses.dataclass(frozen=True)
class NodeLimit:
    """A node of a model that a limit concerns: its label (as the tools name
    nodes), what it computes, and the limit."""

    label: str
    what: str
    limit: Limit

    def line(self) -> str:
        return (f"{self.label}: {self.what}: {self.limit.verdict} in {self.limit.runtime}: "
                f"{self.limit.cause}")


def node_limits(model: onnx.ModelProto, runtime: str) -> list[NodeLimit]:
    """Every node of ``model`` that :data:`LIMITS` says ``runtime`` does not
    keep exact.  A node whose type, zero point or granularity is not a
    constant is listed when a limit could concern it."""
    from ..onnx.blocks import block_nodes
    from ..onnx.dpu import dpu_nodes
    from ..onnx.graph import extended_nodes, node_label

    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    found = []
    for ext in extended_nodes(model, microsoft=True):
        node = ext.node
        qtype = _quantized_type(node, ext.graph)
        zp = _initializer(ext.graph, node.input[2]) if ext.has_zero_point else None
        zero = True if not ext.has_zero_point else None if zp is None else _all_zero(zp)
        scale = _initializer(ext.graph, node.input[1])
        granularity = None if scale is None else (
            "tensor" if int(np.prod(scale.dims, dtype=np.int64)) == 1 else "axis")
        lim = limit_of(runtime, "Q" if ext.quantize else "DQ", qtype, zero, granularity)
        if lim is not None:
            what = f"{qtype or 'a type not known'} {'quantize' if ext.quantize else 'dequantize'}"
            found.append(NodeLimit(ext.label, what, lim))
    for b in block_nodes(model):
        lim = limit_of(runtime, b.family.upper())
        if lim is not None:
            found.append(NodeLimit(node_label(b.node), f"{b.family.upper()} block format", lim))
    for d in dpu_nodes(model):
        lim = limit_of(runtime, "IN" if d.family == "in" else "LSTM")
        if lim is not None:
            found.append(NodeLimit(d.label, "instance norm" if d.family == "in" else "LSTM",
                                   lim))
    return found


def model_limits(model: onnx.ModelProto, runtime: str) -> list[str]:
    """:func:`node_limits` as one line each: the node, what it computes, the
    verdict and the cause."""
    return [n.line() for n in node_limits(model, runtime)]


def available(runtime: str) -> bool:
    """Whether the runtime's Python package is installed."""
    return runtime == "onnxruntime" and importlib.util.find_spec("onnxruntime") is not None \
        or runtime in ("openvino", "tract") and importlib.util.find_spec(runtime) is not None


class RuntimeFailure(RuntimeError):
    """The runtime refused or failed the model; the message is its own, in one line."""


_TRACT_TYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int8": "i8",
                "uint8": "u8", "int16": "i16", "uint16": "u16", "int32": "i32",
                "uint32": "u32", "int64": "i64", "uint64": "u64", "bool": "bool"}


def _one_line(exc: BaseException) -> str:
    """The runtime's message in one line (tract's without its stack backtrace)."""
    return " ".join(str(exc).split("Stack backtrace:")[0].split())


def _run_openvino(path: str, model: onnx.ModelProto,
                  feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled(feeds)
    # (in the model's order: OpenVINO may rename an output it rewrote)
    return {o.name: np.asarray(result[port])
            for o, port in zip(model.graph.output, compiled.outputs, strict=True)}


def _run_tract(path: str, model: onnx.ModelProto,
               feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tract

    inferred = tract.onnx().load(path)
    names = [inferred.input_name(i) for i in range(inferred.input_count())]
    for i, name in enumerate(names):
        value = feeds[name]
        kind = _TRACT_TYPES.get(value.dtype.name)
        if kind is None:
            raise RuntimeFailure(f"tract has no {value.dtype.name} type (input {name!r})")
        inferred.set_input_fact(i, ",".join([*map(str, value.shape), kind]))
    runnable = inferred.into_model().into_runnable()
    values = runnable.run([feeds[name] for name in names])
    return {o.name: np.asarray(v.to_numpy()) for o, v in zip(model.graph.output, values,
                                                               strict=True)}


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
        runtime: str) -> dict[str, np.ndarray]:
    """Run ``model`` (standard operators only: inline the fallbacks first) in
    ``runtime`` ("openvino" or "tract") and return its outputs by name.
    Raises :class:`RuntimeFailure` with the runtime's message when it cannot
    build or run the model, ``ModuleNotFoundError`` naming the package to
    install when the runtime is missing."""
    runners = {"openvino": _run_openvino, "tract": _run_tract}
    if runtime not in runners:
        raise ValueError(f"runtime {runtime!r}: one of {', '.join(runners)}")
    if not available(runtime):
        raise ModuleNotFoundError(f"{runtime} is not installed (pip install {runtime})",
                                  name=runtime)
    import onnx

    with tempfile.TemporaryDirectory(prefix="extql-runtime-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        try:
            return runners[runtime](path, model, feeds)
        except RuntimeFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the runtimes' own exception types
            raise RuntimeFailure(f"{runtime}: {_one_line(exc)}") from None
