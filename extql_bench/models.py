"""One-node ONNX models of every contender, their sessions, and runners that
call a session through IOBinding (the session's work and nothing else)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from extql import ort_io
from extql.rules.types import DOMAIN, FLOAT_CODES, QTYPES, SMALLFLOAT, SUBBYTE, QuantizedType

from .config import Q
from .data import axis as axis_of
from .data import block_size
from .timing import time_interleaved

#: The copy anchor's domain (benchmarks/copy_ops/copy_ops.c).
COPY_DOMAIN = "com.amd.quark.bench"

# kind -> (quantize name, dequantize name, domain)
_NODES = {
    "extql": ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear", DOMAIN),
    "copy": ("QuantizeCopy", "DequantizeCopy", COPY_DOMAIN),
    "ort": ("QuantizeLinear", "DequantizeLinear", ""),
}
_DIMS = {"tensor": ["n"], "axis0": ["c", "n"], "axis1": ["n", "c"], "nchw": ["n", "c", "h", "w"],
         "nchw7": ["n", "c", "h", "w"], "nchw32": ["n", "c", "h", "w"],
         "nchw56": ["n", "c", "h", "w"],
         "block32": ["n", "c"], "block128": ["n", "c"]}


class Ort:
    """Builds one-node models and runs them with IOBinding."""

    def __init__(self) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        self.onnx, self.ort, self.TensorProto, self.helper = onnx, ort, TensorProto, helper
        self.bf16 = QTYPES["bfloat16"].dtype
        # Older onnxruntime releases (1.18 for one) cannot bind a bfloat16 buffer.
        self.can_bind_bf16 = ort_io.has_typed_ortvalues()
        self.version = tuple(int(p) for p in ort.__version__.split(".")[:2])

    def unmeasurable(self, qt: QuantizedType) -> str | None:
        """Why a type cannot be measured with this onnxruntime, or None."""
        if qt.name == "bfloat16" and not self.can_bind_bf16:
            return ("not measured: this onnxruntime cannot bind bfloat16 buffers "
                    "(no OrtValue.ortvalue_from_numpy_with_onnx_type)")
        if qt.name in ("int2", "uint2"):
            return "not measured: onnxruntime's custom operators take no int2 / uint2"
        if qt.name in SUBBYTE and self.version < (1, 21):
            return "not measured: onnxruntime's custom operators take int4 from 1.21"
        if qt.name == "float4e2m1" and self.version < (1, 24):
            return "not measured: onnxruntime's custom operators take float4e2m1 from 1.24"
        if qt.name in SMALLFLOAT and qt.name != "float4e2m1" and not self.can_bind_bf16:
            return ("not measured: this onnxruntime cannot bind float8 buffers "
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

    def model(
        self,
        kind: str,
        op: str,
        qt: QuantizedType,
        granularity: str,
        scale: np.ndarray,
        zp: np.ndarray,
    ) -> Any:
        """A one-node ModelProto over an input of symbolic shape.

        kind: ``extql`` (ExtendedQuantizeLinear / ExtendedDequantizeLinear),
        ``copy`` (the same node as QuantizeCopy / DequantizeCopy of the copy
        library: the copy kernel), ``ort`` (QuantizeLinear /
        DequantizeLinear, opset 21) or ``cast`` (Cast to or from the 16-bit
        float type).
        """
        h = self.helper
        dims = _DIMS[granularity]
        # The float side (x of quantize, y of dequantize) has the scale's type.
        side = FLOAT_CODES[np.asarray(scale).dtype]
        in_type, out_type = (side, qt.onnx) if op == Q else (qt.onnx, side)
        inits = []
        domains: list[str] = []
        if kind == "cast":
            node = h.make_node("Cast", ["x"], ["y"], to=out_type)
        else:
            inits = [self._tensor("s", scale), self._tensor("z", zp)]
            attrs = {} if granularity == "tensor" else {"axis": axis_of(granularity)}
            if block_size(granularity):
                attrs["block_size"] = block_size(granularity)
            q_name, dq_name, domain = _NODES[kind]
            domains = [domain] if domain else []
            node = h.make_node(q_name if op == Q else dq_name, ["x", "s", "z"], ["y"],
                               domain=domain, **attrs)
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

    def session(self, model: Any, threads: int, library: str | None, spin: bool = False) -> Any:
        """An InferenceSession of model with ``intra_op_num_threads`` threads;
        library: ``extql`` (extql's custom-op library), ``copy`` (the copy
        anchor's) or None."""
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4  # an anchor failing on purpose is a note, not a log
        if not spin:
            # Idle pool threads of one session would otherwise spin (tens of
            # ms after each run) on the cores the next session needs.
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if library == "extql":
            from extql.ort import register as register_library

            register_library(so)
        elif library == "copy":
            from .copy_library import library_path

            so.register_custom_ops_library(library_path())
        data = model if isinstance(model, bytes) else model.SerializeToString()
        return self.ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    def runner(self, sess: Any, x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
        """A no-argument function that runs the session from x into y (both
        bound once, so a call is the session's work and nothing else); its
        ``output()`` is the output as NumPy (y itself, or a sub-byte output
        unpacked from the OrtValue it is written to: packed, it cannot be
        y's memory)."""
        binding = sess.io_binding()
        # The OrtValues wrap the arrays' memory; keep them alive with the closure.
        alive = ort_io.bind_inputs(binding, {"x": x})
        if ort_io.is_packed(y.dtype):
            packed = ort_io.subbyte_output(y.shape, y.dtype)
            binding.bind_ortvalue_output("y", packed)
            alive.append(packed)

            def output() -> np.ndarray:
                return ort_io.to_numpy(packed)
        else:
            alive += ort_io.bind_outputs(binding, {"y": y})

            def output() -> np.ndarray:
                return y
        run = sess.run_with_iobinding

        def call() -> None:
            run(binding)

        call.keep = (alive, binding)  # type: ignore[attr-defined]
        call.output = output  # type: ignore[attr-defined]
        return call

    def race(self, sessions: list[Any], x: np.ndarray, dtype: np.dtype,
             repeat: int) -> tuple[list[float], bool]:
        """The sessions run from x into outputs of dtype, interleaved: their
        median seconds per run, and whether their outputs are bit-identical
        (from a first run)."""
        runs = [self.runner(sess, x, np.empty(x.shape, dtype)) for sess in sessions]
        for run in runs:
            run()
        outputs = [run.output() for run in runs]  # type: ignore[attr-defined]
        same = all(np.array_equal(outputs[0], out) for out in outputs[1:])
        return time_interleaved(runs, repeat), same
