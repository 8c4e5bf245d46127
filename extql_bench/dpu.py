"""The DPU-emulation ops' table (``dpu``): Quark's ExtendedInstanceNormalization
and ExtendedLSTM, as extql's nodes in onnxruntime (the library) and through
the NumPy API, against onnxruntime's own float ``InstanceNormalization`` /
``LSTM`` on the same shapes and the same float32 inputs.

The anchor computes in float32 what the DPU computes in bfloat16 / 16-bit
fixed point, so its output is not the same; it is the cost of the float op
a model without the DPU emulation runs, which is what the ratio says extql
costs on top of it.  The library's output is checked bit for bit against
the NumPy API's (``=api``); the NumPy API itself is checked against Quark's
stored outputs by the tests (tests/dpu), and against Quark's own library,
with its timings, by ``benchmarks/dpu_ops.py`` (which needs PyTorch and
amd-quark).

The models are what Quark writes: γ / β (instance norm) and W / R / B (LSTM)
are initializers, X the one graph input; the LSTM is bidirectional with
Quark's uint16 quantization attributes (scales from each tensor's range,
W / R / B on their quantization grid as a Q -> DQ pair gives them).  The
contenders of a row are timed interleaved (timing.py): the library session,
the NumPy API (``extql.set_num_threads`` = the row's threads) and
onnxruntime's float op, all at the same thread count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extql.rules.dpu import DEFAULT_EPSILON, IN_OP
from extql.rules.lstm import OP as LSTM_OP
from extql.rules.types import DOMAIN

from .models import Ort
from .runner import Result, same_bits
from .timing import time_interleaved

F32 = np.float32
#: The contenders, as the rows' type column names them.
LIBRARY, NUMPY = "library", "numpy"
#: The anchors by op.
ANCHORS = {"IN": "onnxruntime InstanceNormalization (float)",
           "LSTM": "onnxruntime LSTM (float)"}


@dataclasses.dataclass(frozen=True)
class DpuShape:
    """One row's shape: ``IN`` with dims (N, C, H, W) (any rank >= 2), or
    ``LSTM`` with dims (seq, batch, input, hidden), bidirectional, layout 0."""

    op: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.op not in ANCHORS:
            raise ValueError(f"dpu table: op must be IN or LSTM, got {self.op!r}")
        if (self.op == "IN" and len(self.dims) < 2) or (self.op == "LSTM" and len(self.dims) != 4):
            want = "(N, C, ...)" if self.op == "IN" else "(seq, batch, input, hidden)"
            raise ValueError(f"dpu table: {self.op} takes dims {want}, got {self.dims}")
        if any(d < 1 for d in self.dims):
            raise ValueError(f"dpu table: every dimension must be >= 1, got {self.dims}")

    @property
    def label(self) -> str:
        """The row's shape column: x's shape (LSTM: X [seq, batch, input] and H)."""
        if self.op == "IN":
            return "x".join(map(str, self.dims))
        seq, batch, n_in, hidden = self.dims
        return f"{seq}x{batch}x{n_in} H{hidden}"

    @property
    def elements(self) -> int:
        """X's element count (the row's size)."""
        return math.prod(self.dims if self.op == "IN" else self.dims[:3])


#: The table's shapes by name: the CNN instance norms of Quark's DPU models
#: (1x64x56x56, 1x256x14x14) and a batch of 8, and the LSTM at Quark's own
#: size (sequence 80, input 64, hidden 128, bidirectional) at batch 1 and 8.
DPU_SHAPES: dict[str, DpuShape] = {
    "in-1x64x56x56": DpuShape("IN", (1, 64, 56, 56)),
    "in-1x256x14x14": DpuShape("IN", (1, 256, 14, 14)),
    "in-8x64x56x56": DpuShape("IN", (8, 64, 56, 56)),
    "lstm-80x1": DpuShape("LSTM", (80, 1, 64, 128)),
    "lstm-80x8": DpuShape("LSTM", (80, 8, 64, 128)),
}
#: The instance norm shape the onnxruntime target is about.
IN_TARGET_SHAPE = DPU_SHAPES["in-1x64x56x56"].label
#: Quark's LSTM size (the ">= 3x faster than Quark's library" target).
LSTM_QUARK_SIZE = DPU_SHAPES["lstm-80x1"].label


def resolve(rows: Sequence[str | DpuShape]) -> list[DpuShape]:
    """The configured rows as shapes: names of DPU_SHAPES, or DpuShape rows."""
    out = []
    for row in rows:
        if isinstance(row, DpuShape):
            out.append(row)
        elif row in DPU_SHAPES:
            out.append(DPU_SHAPES[row])
        else:
            raise ValueError(f"dpu table: no shape named {row!r} (known: "
                             f"{', '.join(DPU_SHAPES)})")
    return out


def _symmetric(v: np.ndarray) -> tuple[float, int]:
    """A uint16 quantizer symmetric about 32768 over v's range."""
    return float(F32(max(float(np.max(np.abs(v))), 1e-3) / 32767.0)), 32768


def _on_grid(v: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    q = np.clip(np.rint(v / F32(scale)) + zero_point, 0, 65535)
    return ((q - zero_point).astype(F32) * F32(scale)).astype(F32)


def in_inputs(dims: Sequence[int], seed: int = 0) -> dict[str, np.ndarray]:
    """x (normal values about a per-channel offset), scale (γ) and B (β)."""
    rng = np.random.default_rng(seed)
    c = dims[1]
    x = rng.standard_normal(tuple(dims), dtype=F32)
    x += rng.normal(0, 2, (1, c) + (1,) * (len(dims) - 2)).astype(F32)
    return {"x": x, "scale": rng.normal(1, 0.2, c).astype(F32),
            "B": rng.normal(0, 0.2, c).astype(F32)}


def lstm_inputs(dims: Sequence[int], seed: int = 0) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(the ten quantization attributes and hidden_size, {X, W, R, B}) as
    Quark's quantizer writes them: uint16, symmetric scales from each
    tensor's range, W / R / B on their grid, Y's scale spanning [-1, 1]."""
    seq, batch, n_in, hidden = dims
    rng = np.random.default_rng(seed)
    feeds = {"X": rng.normal(0, 1, (seq, batch, n_in)).astype(F32),
             "W": rng.normal(0, 0.3, (2, 4 * hidden, n_in)).astype(F32),
             "R": rng.normal(0, 0.3, (2, 4 * hidden, hidden)).astype(F32),
             "B": rng.normal(0, 0.1, (2, 8 * hidden)).astype(F32)}
    attrs: dict[str, Any] = {"hidden_size": hidden}
    for name, v in feeds.items():
        s, z = _symmetric(v)
        attrs[f"{name.lower()}_scale"], attrs[f"{name.lower()}_zero_point"] = s, z
        if name != "X":
            feeds[name] = _on_grid(v, s, z)
    attrs["y_scale"], attrs["y_zero_point"] = float(F32(2.0 / 65535)), 32768
    return attrs, feeds


def _model(o: Ort, nodes: list[Any], x: np.ndarray, y_shape: Sequence[int],
           inits: dict[str, np.ndarray], domains: Sequence[str]) -> Any:
    h = o.helper
    graph = h.make_graph(nodes, "bench_dpu",
                         [h.make_tensor_value_info("x", o.TensorProto.FLOAT, list(x.shape))],
                         [h.make_tensor_value_info("y", o.TensorProto.FLOAT, list(y_shape))],
                         initializer=[o.onnx.numpy_helper.from_array(v, k)
                                      for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)]
                         + [h.make_opsetid(d, 1) for d in domains])
    model.ir_version = 10
    return model


def in_model(o: Ort, feeds: dict[str, np.ndarray], extended: bool,
             epsilon: float = DEFAULT_EPSILON) -> Any:
    """x -> ExtendedInstanceNormalization (extended) or InstanceNormalization
    -> y, γ / β initializers."""
    op, domain = (IN_OP, DOMAIN) if extended else ("InstanceNormalization", "")
    node = o.helper.make_node(op, ["x", "scale", "B"], ["y"], domain=domain, epsilon=epsilon)
    return _model(o, [node], feeds["x"], feeds["x"].shape,
                  {"scale": feeds["scale"], "B": feeds["B"]}, [domain] if domain else [])


def lstm_model(o: Ort, attrs: dict[str, Any], feeds: dict[str, np.ndarray],
               extended: bool) -> Any:
    """x -> ExtendedLSTM (with attrs) or ONNX's float LSTM (hidden_size only)
    -> y = Y, bidirectional; W / R / B initializers."""
    if extended:
        node = o.helper.make_node(LSTM_OP, ["x", "W", "R", "B"], ["y"], domain=DOMAIN,
                                  direction="bidirectional", **attrs)
    else:
        node = o.helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], direction="bidirectional",
                                  hidden_size=attrs["hidden_size"])
    seq, batch, _ = feeds["X"].shape
    return _model(o, [node], feeds["X"], (seq, 2, batch, attrs["hidden_size"]),
                  {k: feeds[k] for k in "WRB"},
                  [DOMAIN] if extended else [])


def _numpy_call(shape: DpuShape, attrs: dict[str, Any],
                feeds: dict[str, np.ndarray]) -> Callable[[], np.ndarray]:
    import extql

    if shape.op == "IN":
        return lambda: extql.extended_instance_normalization(
            feeds["x"], feeds["scale"], feeds["B"], epsilon=DEFAULT_EPSILON)
    return lambda: extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"],
                                       direction="bidirectional", **attrs)


def row_contenders(o: Ort, shape: DpuShape, threads: int, spin: bool = False) -> dict[str, Any]:
    """The row's three contenders at the thread count, ready to call: the
    library's runner, the NumPy API call (to run with
    ``extql.set_num_threads(threads)``) and onnxruntime's float op's runner,
    with the row's input x and the output buffers they write."""
    if shape.op == "IN":
        feeds, attrs = in_inputs(shape.dims), {}
        ext_model, anc_model = in_model(o, feeds, True), in_model(o, feeds, False)
        x = feeds["x"]
        y_shape = x.shape
    else:
        attrs, feeds = lstm_inputs(shape.dims)
        ext_model = lstm_model(o, attrs, feeds, True)
        anc_model = lstm_model(o, attrs, feeds, False)
        x = feeds["X"]
        seq, batch, _, hidden = shape.dims
        y_shape = (seq, 2, batch, hidden)
    y_ext, y_anc = np.empty(y_shape, F32), np.empty(y_shape, F32)
    ext_sess = o.session(ext_model, threads, "extql", spin)
    anc_sess = o.session(anc_model, threads, None, spin)
    return {"library": o.runner(ext_sess, x, y_ext), "numpy": _numpy_call(shape, attrs, feeds),
            "anchor": o.runner(anc_sess, x, y_anc), "x": x, "y": y_ext,
            "sessions": (ext_sess, anc_sess)}


def run_dpu_table(shapes: Sequence[DpuShape], threads: Sequence[int], repeat: int,
                  min_sample: float, check: bool, spin: bool,
                  emit: Callable[[Result], None]) -> None:
    """The dpu table's rows, handed to emit: for every shape and thread
    count (resolved), the library and the NumPy API rows, both against
    onnxruntime's float op (the three timed interleaved, one anchor time)."""
    from extql.api import linear as numpy_threads

    o = Ort()
    try:
        for shape in shapes:
            for t in threads:
                c = row_contenders(o, shape, t, spin)
                numpy_threads.set_num_threads(t)
                exact = None
                if check:
                    c["y"].fill(0)
                    c["library"]()
                    exact = "=api" if same_bits(c["y"], c["numpy"]()) else (
                        "MISMATCH vs the NumPy API")
                te, tn, ta = time_interleaved([c["library"], c["numpy"], c["anchor"]], repeat,
                                              min_sample)
                for kind, tx in ((LIBRARY, te), (NUMPY, tn)):
                    emit(Result("dpu", shape.op, kind, shape.label, shape.elements, t, tx,
                                anchor_name=ANCHORS[shape.op], anchor=ta, exact=exact))
                del c
    finally:
        numpy_threads.set_num_threads(0)
