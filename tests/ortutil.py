"""Helpers for the onnxruntime tests: build one-node (or small) models with
onnx.helper and run them in onnxruntime with extql's custom-op library.

Inputs and outputs go through IOBinding with extql.ort_io, bfloat16
included.  Where onnxruntime cannot bind bfloat16 (no typed OrtValues before
1.20), a bfloat16 graph input becomes a constant initializer and a bfloat16
output is widened in the graph by an exact Cast to float32 and narrowed back
bit for bit (ort_io.without_bfloat16_io / ort_io.narrow_bfloat16).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from contract import ALL_TYPES, SMALLFLOAT_TYPES, SUBBYTE_TYPES
from onnx import TensorProto, helper
from onnx_helpers import ONNX_OF_DTYPE
from packaging.version import Version

import extql
from extql import ort_io
from extql.ort import INFERENCE_ONNXRUNTIME

BF16 = np.dtype(ml_dtypes.bfloat16)
DOMAIN = "com.amd.quark"
LEGACY_DOMAIN = "com.vai.quantize"
Q = "ExtendedQuantizeLinear"
DQ = "ExtendedDequantizeLinear"
LEGACY = {Q: "VitisQuantizeLinear", DQ: "VitisDequantizeLinear"}

#: ONNX's codes by NumPy dtype (tests/onnx_helpers.py's table).
ONNX_OF = ONNX_OF_DTYPE
#: The packed types (int4, uint4, int2, uint2, float4e2m1) and the float8
#: types, by ml_dtypes' name, with their codes (the ones this onnx has).
SUBBYTE = {dtype.name: code for dtype, code in ONNX_OF.items()
           if dtype in [ALL_TYPES[n][0] for n in (*SUBBYTE_TYPES, "float4e2m1")]}
FLOAT8 = {dtype.name: code for dtype, code in ONNX_OF.items()
          if dtype in [ALL_TYPES[n][0] for n in SMALLFLOAT_TYPES if n.startswith("float8")]}
DTYPE_OF = {v: k for k, v in ONNX_OF.items()}
ORT_TYPE = {
    TensorProto.FLOAT: "tensor(float)",
    TensorProto.INT8: "tensor(int8)",
    TensorProto.UINT8: "tensor(uint8)",
    TensorProto.INT16: "tensor(int16)",
    TensorProto.UINT16: "tensor(uint16)",
    TensorProto.INT32: "tensor(int32)",
    TensorProto.UINT32: "tensor(uint32)",
    TensorProto.FLOAT16: "tensor(float16)",
    TensorProto.BFLOAT16: "tensor(bfloat16)",
}

#: onnxruntime's graph optimisation levels, lowest first.
LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]

#: Set by tests/run_sanitized.py: tensors then come from malloc, not from
#: onnxruntime's arena, so AddressSanitizer guards each one.
NO_ARENA = bool(os.environ.get("EXTQL_TEST_NO_ARENA"))
OPSET = 17 if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 20) else 21
#: Whether this onnxruntime types a node's output by output_dtype (where x's
#: rank is known when the session is made): extql.ort.INFERENCE_ONNXRUNTIME.
INFERS = Version(ort.__version__) >= Version(INFERENCE_ONNXRUNTIME)


def tensor(name: str, value: np.ndarray) -> TensorProto:
    """A TensorProto of any of the types (bfloat16 included) from an array."""
    value = np.asarray(value)
    if value.dtype == BF16:
        return helper.make_tensor(
            name, TensorProto.BFLOAT16, value.shape, value.view(np.uint16).tobytes(), raw=True
        )
    if value.dtype.name in SUBBYTE:  # packed, as ONNX stores them
        return helper.make_tensor(name, SUBBYTE[value.dtype.name], value.shape,
                                  ort_io.pack(value).tobytes(), raw=True)
    if value.dtype.name in FLOAT8:
        return helper.make_tensor(name, FLOAT8[value.dtype.name], value.shape,
                                  np.ascontiguousarray(value).view(np.uint8).tobytes(), raw=True)
    return onnx.numpy_helper.from_array(np.array(value, order="C"), name)  # keeps 0-d


def value_info(name: str, elem_type: int | None, shape: Sequence[int] | None = None):
    """A graph input/output; elem_type None declares no type at all (so the
    type onnxruntime reports is the one it inferred)."""
    if elem_type is None:
        return helper.make_value_info(name, onnx.TypeProto())
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[TensorProto] = (),
    domains: Sequence[str] = (DOMAIN,),
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "extql_test", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def session(
    model: onnx.ModelProto | bytes, *, threads: int = 0, register: bool = True,
    level: ort.GraphOptimizationLevel | None = None,
) -> ort.InferenceSession:
    """A CPU session with extql's library (register), ``threads`` intra-op
    threads (0: onnxruntime's default) and the optimisation ``level`` (None:
    onnxruntime's default)."""
    so = ort.SessionOptions()
    if NO_ARENA:
        so.enable_cpu_mem_arena = False
    if threads:
        so.intra_op_num_threads = threads
    if level is not None:
        so.graph_optimization_level = level
    if register:
        extql.register(so)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def run(
    sess: ort.InferenceSession,
    feeds: dict[str, np.ndarray],
    out_dtypes: Sequence[np.dtype],
    out_shapes: Sequence[tuple[int, ...]],
) -> list[np.ndarray]:
    """Run with IOBinding into preallocated outputs (bfloat16 included).

    A bfloat16 output that the model widened to float32 (see
    bfloat16_io_fallback) is fetched as float32 and narrowed back bit for bit.
    """
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, feeds)  # kept until the run is over
    bufs, narrow, packed = {}, [], {}
    for out, dtype, shape in zip(sess.get_outputs(), out_dtypes, out_shapes, strict=True):
        dtype = np.dtype(dtype)
        if ort_io.is_packed(dtype):
            packed[out.name] = ort_io.subbyte_output(shape, dtype)
            binding.bind_ortvalue_output(out.name, packed[out.name])
            continue
        widened = dtype == BF16 and out.type == "tensor(float)"
        bufs[out.name] = np.empty(shape, dtype=np.float32 if widened else dtype)
        narrow.append(widened)
    alive += ort_io.bind_outputs(binding, bufs)
    sess.run_with_iobinding(binding)
    # The bound buffers were written in place; packed ones are unpacked.
    plain = iter([ort_io.narrow_bfloat16(b) if w else b
                  for b, w in zip(bufs.values(), narrow, strict=True)])
    return [ort_io.to_numpy(packed[o.name]) if o.name in packed else next(plain)
            for o in sess.get_outputs()]


def bfloat16_io_fallback(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Where bfloat16 cannot be bound (no typed OrtValues): the model and
    feeds of ort_io.without_bfloat16_io, whose widened outputs run() narrows
    back.  Elsewhere both are returned unchanged."""
    feeds = dict(feeds or {})
    if ort_io.has_typed_ortvalues():
        return model, feeds
    model, feeds, _ = ort_io.without_bfloat16_io(model, feeds)
    return model, feeds


def node_model(
    op: str,
    x: np.ndarray,
    scale: np.ndarray,
    zp: np.ndarray | None = None,
    *,
    zp_form: str = "given",
    axis: int | None = None,
    legacy: bool = False,
    params: str = "const",
    declare_output: bool = True,
    out_dtype: np.dtype | None = None,
    widen_bf16: bool = True,
    block_size: int | None = None,
    attrs: dict[str, Any] | None = None,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.dtype]:
    """One Extended (or legacy) node.

    zp_form: "given" (zp is an input), "absent" (two inputs), "empty" (an
    empty third name).  params: "const" (scale and zero point are
    initializers) or "input" (graph inputs).  Returns the model, the feeds
    and the output dtype it must produce.  widen_bf16=False keeps a
    bfloat16 output as it is even where it cannot be fetched (to look at its
    inferred type).
    """
    name = LEGACY[op] if legacy else op
    domain = LEGACY_DOMAIN if legacy else DOMAIN
    x = np.asarray(x)
    typed_by = (attrs or {}).get("output_dtype") if INFERS and x.ndim > 0 else None
    if out_dtype is None and typed_by:  # (onnxruntime types y by the attribute)
        out_dtype = helper.tensor_dtype_to_np_dtype(typed_by)
    elif out_dtype is None:
        if op == DQ:  # the scale's type (float32, float16, bfloat16)
            s_dtype = np.asarray(scale).dtype
            out_dtype = s_dtype if s_dtype in (np.float16, BF16) else np.dtype(np.float32)
        else:
            out_dtype = np.dtype(np.uint8) if zp is None or zp_form != "given" else zp.dtype
    names = ["x", "s"]
    values = {"x": x, "s": np.asarray(scale)}
    if zp_form == "given":
        names.append("z")
        values["z"] = np.asarray(zp)
    elif zp_form == "empty":
        names.append("")
    inputs, inits, feeds = [], [], {}
    for n, v in values.items():
        if n != "x" and params == "const":
            inits.append(tensor(n, v))
        else:
            inputs.append(value_info(n, ONNX_OF[v.dtype], v.shape))
            feeds[n] = v
    kw = {} if axis is None else {"axis": axis}
    if block_size is not None:
        kw["block_size"] = block_size
    kw.update(attrs or {})
    nodes = [helper.make_node(name, names, ["y"], domain=domain, name="node0", **kw)]
    out_type = ONNX_OF[np.dtype(out_dtype)] if declare_output else None
    typed = ort_io.has_typed_ortvalues()
    bf16_out = np.dtype(out_dtype) == BF16 and not typed and widen_bf16
    if bf16_out:  # declared, so that it is widened
        outputs = [value_info("y", TensorProto.BFLOAT16, x.shape)]
    else:
        outputs = [value_info("y", out_type, x.shape if declare_output else None)]
    model = make_model(nodes, inputs, outputs, inits, domains=(domain,))
    new = [v.dtype.name for v in values.values() if v.dtype.name in {**SUBBYTE, **FLOAT8}]
    if new:  # float8 needs IR 9, int4 IR 10, float4 IR 11 (and opset 23), int2 IR 11 (25)
        model.ir_version = 11 if any(n.endswith(("2", "e2m1fn")) for n in new) else 10
    if not typed:
        model, feeds = ort_io.bfloat16_inputs_as_initializers(model, feeds)
        if bf16_out:
            model, _ = ort_io.widen_bfloat16_outputs(model)
    return model, feeds, np.dtype(out_dtype)


def run_node(op: str, x, scale, zp=None, *, threads: int = 0, **kw) -> np.ndarray:
    """Build, run and return the output of one node (see node_model)."""
    model, feeds, dtype = node_model(op, x, scale, zp, **kw)
    sess = session(model, threads=threads)
    (y,) = run(sess, feeds, [dtype], [np.asarray(x).shape])  # (run narrows a widened output)
    return y


def unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of a at an odd address (np.frombuffer one byte into a buffer):
    not aligned to its element size when that is more than one byte."""
    raw = bytearray(a.nbytes + 1)
    out = np.frombuffer(memoryview(raw)[1:], dtype=a.dtype).reshape(a.shape)
    out[...] = a
    return out


def run_unaligned(sess: ort.InferenceSession, feeds: dict[str, np.ndarray],
                  out_dtype: np.dtype, out_shape: tuple[int, ...]) -> np.ndarray:
    """Run with every input and the one output bound at odd addresses
    (unaligned copies; elements of more than one byte are then misaligned)
    and return the output."""
    binding = sess.io_binding()
    # An OrtValue made from NumPy does not own the memory: every array and
    # OrtValue bound must outlive the run (onnxruntime < 1.20 keeps no
    # reference of its own).
    alive = []
    for key, value in feeds.items():
        u = unaligned(value)
        assert value.itemsize == 1 or not u.flags.aligned
        ov = ort_io.ortvalue(u)
        alive.append((u, ov))
        binding.bind_ortvalue_input(key, ov)
    out = unaligned(np.zeros(out_shape, out_dtype))
    assert np.dtype(out_dtype).itemsize == 1 or not out.flags.aligned
    ov = ort_io.ortvalue(out)
    alive.append((out, ov))
    binding.bind_ortvalue_output(sess.get_outputs()[0].name, ov)
    sess.run_with_iobinding(binding)
    return out


_CASTS: dict[tuple[int, int], bool] = {}


def ort_casts_to(code: int, opset: int) -> bool:
    """Whether this onnxruntime has a Cast from float32 to the type (the op
    the fallback functions need for it)."""
    if (code, opset) not in _CASTS:
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Cast", ["x"], ["q"], to=code),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)], "cast",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
            ir_version=11 if opset >= 23 else 10, opset_imports=[helper.make_opsetid("", opset)])
        try:
            session(model, register=False)
            _CASTS[code, opset] = True
        except Exception:  # noqa: BLE001 - onnxruntime's own exception types
            _CASTS[code, opset] = False
    return _CASTS[code, opset]
