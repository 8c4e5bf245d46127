"""Blocked quantization (ONNX's ``block_size``) through the NumPy API, against
the contract, ONNX's reference implementation of QuantizeLinear-21 /
DequantizeLinear-21 and onnxruntime's own operators, bit for bit, on both
kernel variants (conftest.py runs this module once per variant).

A blocked scale has x's shape except ``ceil(D / block_size)`` along the axis;
element ``d`` of the axis uses block ``d // block_size``.  The kernels walk
rows of ``inner`` elements (the dimensions after the axis): one scale per
block when ``inner`` is 1, else the block's row of scales, converted once per
block (or in windows when the row is longer than a window).  So the cases
here are: last axis and middle axes, rows shorter and longer than a window,
tail blocks (D not a multiple of the block), blocks longer than the axis,
ranges split across threads anywhere in a row, outputs large enough to be
streamed, and every special value.
"""

from __future__ import annotations

import functools

import capi
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import (
    FLOAT_TYPES,
    TYPES,
    assert_same_bits,
    case_rng,
    dequantize,
    expand_blocks,
    normal_with_specials,
    quantize,
)
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import ONNX_OF
from packaging.version import Version

import extql
from extql import _kernels

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32 = np.float32
ALL_TYPES = list(TYPES)
FLOAT32 = TensorProto.FLOAT
SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 127.5, -128.5, 65535.5, 1e30, -1e30,
                    np.inf, -np.inf, np.nan, 2.0**31, -(2.0**31), 3e-8], F32)

# (x shape, axis, block size)
SHAPES = [
    ((4, 37), 1, 4),          # last axis, a tail block of 1
    ((4, 37), -1, 32),        # last axis, a tail block of 5
    ((4, 37), 1, 64),         # one block longer than the axis
    ((6, 10, 7), 1, 3),       # middle axis, short rows
    ((2, 9, 3, 5), 1, 2),     # middle axis of a rank-4 (NCHW) tensor
    ((10, 12), 0, 4),         # first axis: rows of 12 share a block row
    ((5, 3, 1500), 1, 2),     # rows longer than a window (1024)
    ((33,), 0, 8),            # rank 1
    ((3, 4), 1, 1),           # block size 1: a scale per element
]


def _blocked_params(name: str, rng: np.random.Generator, shape: tuple[int, ...], axis: int,
                    block: int, uniform_zero: bool = False):
    """A blocked scale (both signs, various magnitudes) and zero point."""
    a = axis % len(shape)
    pshape = shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]
    dt, lo, hi = TYPES[name]
    s = (rng.choice(np.array([0.37, 1 / 3, 2.0, -0.5, 3e-3], F32), pshape)
         * (1 + rng.random(pshape))).astype(F32)
    if name in FLOAT_TYPES:
        z = (rng.standard_normal(pshape) * 4).astype(F32).astype(dt)
    else:
        z = rng.integers(lo, hi, pshape, endpoint=True, dtype=np.int64).astype(dt)
    if uniform_zero:
        z = np.full(pshape, z.reshape(-1)[0], dt)
    return s, z


def _x(rng: np.random.Generator, shape: tuple[int, ...], spread: float) -> np.ndarray:
    return normal_with_specials(rng, shape, spread, SPECIAL)


def _expected_q(x, s, z, axis, block):
    a = axis % x.ndim
    return quantize(x, expand_blocks(s, a, block, x.shape[a]),
                    expand_blocks(z, a, block, x.shape[a]), axis=a)


def _expected_dq(q, s, z, axis, block):
    a = axis % q.ndim
    return dequantize(q, expand_blocks(s, a, block, q.shape[a]),
                      expand_blocks(z, a, block, q.shape[a]), axis=a)


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize(("shape", "axis", "block"), SHAPES)
@pytest.mark.parametrize("uniform_zero", [False, True])
def test_blocked_against_contract(name, shape, axis, block, uniform_zero):
    rng = case_rng(name, shape, axis, block)
    s, z = _blocked_params(name, rng, shape, axis, block, uniform_zero)
    spread = 1e10 if name in ("int32", "uint32") else 300.0
    x = _x(rng, shape, spread)
    y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
    assert_same_bits(y, _expected_q(x, s, z, axis, block), f"Q {name} {shape} {axis} {block}")
    back = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
    assert_same_bits(back, _expected_dq(y, s, z, axis, block),
                     f"DQ {name} {shape} {axis} {block}")


@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "float16", "bfloat16"])
def test_blocked_without_zero_point(name):
    rng = np.random.default_rng(7)
    s, z = _blocked_params(name, rng, (6, 20), 1, 8)
    x = _x(rng, (6, 20), 100.0)
    y = extql.quantize_linear(x, s, axis=1, block_size=8)  # uint8 output, zero point 0
    assert y.dtype == np.uint8
    assert_same_bits(y, _expected_q(x, s, np.zeros(s.shape, np.uint8), 1, 8))
    q = extql.quantize_linear(x, s, z, axis=1, block_size=8)
    assert_same_bits(extql.dequantize_linear(q, s, axis=1, block_size=8),
                     _expected_dq(q, s, np.zeros(s.shape, q.dtype), 1, 8))


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint32", "float16", "bfloat16"])
@pytest.mark.parametrize(("shape", "axis", "block"), [
    ((64, 4096), 1, 32),        # LLM weight blocks along the last axis
    ((4096, 96), 0, 128),       # blocks along the first axis: rows of 96
    ((16, 300, 40), 1, 7),      # middle axis, ragged blocks
])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_split_across_threads(name, shape, axis, block, threads):
    """Tensors large enough to be split into ranges that start anywhere in a
    row and a block."""
    rng = np.random.default_rng(11)
    s, z = _blocked_params(name, rng, shape, axis, block)
    x = _x(rng, shape, 300.0)
    old = extql.get_num_threads()
    extql.set_num_threads(threads)
    try:
        y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
        back = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
    finally:
        extql.set_num_threads(old)
    assert_same_bits(y, _expected_q(x, s, z, axis, block))
    assert_same_bits(back, _expected_dq(y, s, z, axis, block))


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("block", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("uniform_zero", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_aligned_power_of_two_blocks(name, block, uniform_zero, threads):
    """Blocks of 8 to 128 along a last axis they divide (the LLM weight
    layout): whole tiles read the block scales in place, ranges split
    across threads start anywhere, the ends of a range go the general way."""
    rng = np.random.default_rng(block)
    shape = (48, 2048)
    s, z = _blocked_params(name, rng, shape, 1, block, uniform_zero)
    x = _x(rng, shape, 1e10 if name in ("int32", "uint32") else 300.0)
    old = extql.get_num_threads()
    extql.set_num_threads(threads)
    try:
        y = extql.quantize_linear(x, s, z, axis=1, block_size=block)
        back = extql.dequantize_linear(y, s, z, axis=1, block_size=block)
    finally:
        extql.set_num_threads(old)
    assert_same_bits(y, _expected_q(x, s, z, 1, block))
    assert_same_bits(back, _expected_dq(y, s, z, 1, block))
    # Ranges that start and end anywhere (inside a block, off the tiles),
    # through the C entry points: together they are the whole tensor.
    code = extql.rules.types.QTYPES[name].onnx
    n = x.size
    cuts = [0, 3, 131, 517, 4099, 40001, n - 77, n]
    yq = np.zeros(n, y.dtype)
    yd = np.zeros(n, np.float32)
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        for fn, types, src, dst in (
                (capi.LIB.extql_quantize_range, (FLOAT32, FLOAT32), x, yq),
                (capi.LIB.extql_dequantize_range, (FLOAT32,), y, yd)):
            assert fn(code, *types, src.ctypes.data, s.ctypes.data, z.ctypes.data,
                      dst.ctypes.data, shape[1], 1, block, lo, hi, 0) == 0
    assert_same_bits(yq.reshape(shape), y)
    assert_same_bits(yd.reshape(shape), back)


def test_blocked_streamed_output():
    """An output of 16 MiB or more is written with streaming stores."""
    shape, block = (1024, 4160), 64
    assert shape[0] * shape[1] * 4 >= _kernels.stream_min_bytes()
    rng = np.random.default_rng(5)
    s, z = _blocked_params("int16", rng, shape, 1, block)
    x = _x(rng, shape, 3000.0)
    y = extql.quantize_linear(x, s, z, axis=1, block_size=block)
    assert_same_bits(y, _expected_q(x, s, z, 1, block))
    assert_same_bits(extql.dequantize_linear(y, s, z, axis=1, block_size=block),
                     _expected_dq(y, s, z, 1, block))


def _official_model(op: str, x_type: int, zp_type: int, out_type: int, axis: int,
                    block: int, opset: int) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", "s", "z"], ["y"], axis=axis, block_size=block)
    graph = helper.make_graph(
        [node], "blocked",
        [helper.make_tensor_value_info("x", x_type, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", zp_type, None)],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset <= 21 else 11  # what the opset's onnx release wrote
    return model


OFFICIAL_TYPES = {n: ONNX_OF[n] for n in ("int8", "uint8", "int16", "uint16")}


@functools.cache
def _ort_runs_blocked() -> bool:
    """Whether the installed onnxruntime implements blocked QuantizeLinear on
    the CPU (1.18 loads the model but refuses a scale that is not 1-D)."""
    model = _official_model("QuantizeLinear", TensorProto.FLOAT, TensorProto.INT8,
                            TensorProto.INT8, 1, 2, 21)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((1, 4), F32), "s": np.ones((1, 2), F32), "z": np.zeros((1, 2), np.int8)}
    try:
        session.run(None, feeds)
    except Exception as exc:
        if "scale must be 1D" in str(exc):
            return False
        raise
    return True


def test_recent_onnxruntime_runs_blocked_quantization():
    """So that the comparisons below are not silently left out where they can run."""
    if Version(ort.__version__) >= Version("1.21"):
        assert _ort_runs_blocked()


@pytest.mark.parametrize("name", list(OFFICIAL_TYPES))
@pytest.mark.parametrize(("shape", "axis", "block"), SHAPES[:7])
@pytest.mark.parametrize("opset", [v for v in (21, 23) if v <= onnx.defs.onnx_opset_version()])
def test_blocked_against_the_official_operators(name, shape, axis, block, opset):
    """ONNX's reference implementation and onnxruntime's QuantizeLinear /
    DequantizeLinear with block_size: the same bits as extql's."""
    rng = np.random.default_rng(3)
    s, z = _blocked_params(name, rng, shape, axis, block)
    x = _x(rng, shape, 300.0)
    code = OFFICIAL_TYPES[name]
    qm = _official_model("QuantizeLinear", TensorProto.FLOAT, code, code, axis, block, opset)
    dm = _official_model("DequantizeLinear", code, code, TensorProto.FLOAT, axis, block, opset)
    y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
    back = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
    feeds = {"x": x, "s": s, "z": z}
    # onnx.reference converts round(x / s) to int32 before it saturates, so
    # NaN, +-inf and quotients beyond int32 come out wrapped: it is judged on
    # the other elements (onnxruntime, below, on all of them).
    a = axis % x.ndim
    with np.errstate(all="ignore"):
        v = x / expand_blocks(s, a, block, x.shape[a])
    defined = np.isfinite(v) & (np.abs(v) < 2.0**31 - 2**8)
    assert defined.sum() > x.size // 2
    ref_q = ReferenceEvaluator(qm).run(None, feeds)[0]
    assert_same_bits(ref_q[defined], y[defined], "onnx.reference Q")
    assert_same_bits(ReferenceEvaluator(dm).run(None, {"x": y, "s": s, "z": z})[0], back,
                     "onnx.reference DQ")
    if not _ort_runs_blocked():
        return  # onnxruntime 1.18-1.20: the reference implementation has judged
    try:
        qs = ort.InferenceSession(qm.SerializeToString(), providers=["CPUExecutionProvider"])
        ds = ort.InferenceSession(dm.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        # An onnxruntime older than the opset (1.18 reads IR 10, opset 21):
        # the reference implementation has judged.
        if opset > 21 and "IR version" in str(exc):
            return
        raise
    assert_same_bits(qs.run(None, feeds)[0], y, "onnxruntime Q")
    assert_same_bits(ds.run(None, {"x": y, "s": s, "z": z})[0], back, "onnxruntime DQ")


def test_reference_ops_run_blocked_extended_nodes():
    """extql.reference.OPS: an Extended node with block_size (an official
    model renamed) runs in onnx.reference with the kernels' bits."""
    rng = np.random.default_rng(2)
    s, z = _blocked_params("int8", rng, (4, 37), 1, 8)
    x = _x(rng, (4, 37), 300.0)
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"], domain=extql.DOMAIN,
                         axis=1, block_size=8),
        helper.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"],
                         domain=extql.DOMAIN, axis=1, block_size=8),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.INT8, None)],
        [helper.make_tensor_value_info("q", TensorProto.INT8, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(extql.DOMAIN, 1)])
    q, y = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, {"x": x, "s": s,
                                                                            "z": z})
    assert_same_bits(q, _expected_q(x, s, z, 1, 8))
    assert_same_bits(y, _expected_dq(q, s, z, 1, 8))


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"block_size": -1}, ValueError, ["block_size must be >= 0"]),
    ({"block_size": 2.5}, TypeError, ["block_size must be an integer"]),
    ({"block_size": 4, "scale_shape": (4, 9)}, ValueError,
     ["block_size 4", "must have shape (4, 10)", "got (4, 9)"]),
    ({"block_size": 4, "scale_shape": (10,)}, ValueError, ["must have shape (4, 10)"]),
    ({"block_size": 4, "zp_shape": (4, 9)}, ValueError, ["zero point", "shape of the scale"]),
    ({"block_size": 4, "axis": 2}, ValueError, ["axis 2 is out of range"]),
    ({"block_size": 0, "scale_shape": (4, 10)}, ValueError, ["needs block_size > 0"]),
])
@pytest.mark.parametrize("quantize_op", [True, False])
def test_bad_blocked_input_is_a_clear_error(kwargs, error, words, quantize_op):
    kwargs = dict(kwargs)
    x = np.ones((4, 37), F32)
    s = np.ones(kwargs.pop("scale_shape", (4, 10)), F32)
    z = np.zeros(kwargs.pop("zp_shape", s.shape), np.int8)
    op = "ExtendedQuantizeLinear" if quantize_op else "ExtendedDequantizeLinear"
    with pytest.raises(error) as info:
        if quantize_op:
            extql.quantize_linear(x, s, z, **kwargs)
        else:
            extql.dequantize_linear(x.astype(np.int8), s, z, **kwargs)
    message = str(info.value)
    assert message.startswith(op), message
    for w in words:
        assert w in message, message


def test_blocked_empty_and_block_larger_than_axis():
    s = np.ones((0, 1), F32)
    y = extql.quantize_linear(np.ones((0, 5), F32), s, np.zeros((0, 1), np.int8), axis=1,
                              block_size=8)
    assert y.shape == (0, 5) and y.dtype == np.int8


def _extended_model(op: str, x_type: int, zp_type: int, out_type: int, axis: int,
                    block: int, with_zero_point: bool = True) -> onnx.ModelProto:
    """An Extended node in the form Quark writes models (opset 17, IR 8)."""
    inputs = ["x", "s", "z"] if with_zero_point else ["x", "s"]
    node = helper.make_node(op, inputs, ["y"], domain=extql.DOMAIN, name="n",
                            axis=axis, block_size=block)
    graph = helper.make_graph(
        [node], "blocked",
        [helper.make_tensor_value_info("x", x_type, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None)]
        + ([helper.make_tensor_value_info("z", zp_type, None)] if with_zero_point else []),
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(extql.DOMAIN, 1)])
    model.ir_version = 8
    return model


def _library_session(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    options = extql.register(ort.SessionOptions())
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


ORT_CODES = {n: ONNX_OF[n] for n in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                     "float16")}


@pytest.mark.parametrize("name", list(ORT_CODES))
@pytest.mark.parametrize(("shape", "axis", "block"), SHAPES + [((512, 1024), 1, 32)])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_in_the_onnxruntime_library(name, shape, axis, block, threads):
    """Extended nodes with block_size run in onnxruntime with extql's library:
    the same bits as the NumPy API and the contract, split across the
    session's threads.  (bfloat16 needs the Cast-widened form of
    tests/ort; its kernels are those of every other path.)"""
    rng = np.random.default_rng(13)
    s, z = _blocked_params(name, rng, shape, axis, block)
    x = _x(rng, shape, 1e10 if name in ("int32", "uint32") else 300.0)
    code = ORT_CODES[name]
    y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
    back = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
    qs = _library_session(_extended_model("ExtendedQuantizeLinear", TensorProto.FLOAT, code, code,
                                          axis, block), threads)
    ds = _library_session(_extended_model("ExtendedDequantizeLinear", code, code,
                                          TensorProto.FLOAT, axis, block), threads)
    got_q = qs.run(None, {"x": x, "s": s, "z": z})[0]
    assert_same_bits(got_q, y, "library Q")
    assert_same_bits(got_q, _expected_q(x, s, z, axis, block), "library Q vs contract")
    assert_same_bits(ds.run(None, {"x": y, "s": s, "z": z})[0], back, "library DQ")


@pytest.mark.parametrize(("x_shape", "s_shape", "z_shape", "axis", "block", "words"), [
    ((4, 37), (4, 9), (4, 9), 1, 4, ["block_size 4", "ceil(37 / 4) = 10", "got (4, 9)"]),
    ((4, 37), (10,), (10,), 1, 4, ["block_size 4", "got (10,)"]),
    ((4, 37), (4, 10), (4, 9), 1, 4, ["zero point", "shape of the scale"]),
    ((4, 37), (4, 10), (4, 10), 2, 4, ["axis 2 is out of range"]),
    ((4, 37), (4, 10), (4, 10), 1, 0, ["needs the attribute block_size"]),
])
def test_blocked_errors_in_the_onnxruntime_library(x_shape, s_shape, z_shape, axis, block,
                                                   words):
    model = _extended_model("ExtendedQuantizeLinear", TensorProto.FLOAT, TensorProto.INT8,
                            TensorProto.INT8, axis, block)
    with pytest.raises(Exception) as info:
        _library_session(model).run(None, {"x": np.ones(x_shape, F32),
                                           "s": np.ones(s_shape, F32),
                                           "z": np.zeros(z_shape, np.int8)})
    message = str(info.value)
    assert "ExtendedQuantizeLinear (node 'n')" in message, message
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("value", [-1, 2.5, "8", [8]])
def test_bad_block_size_attribute_fails_the_session(value):
    model = _extended_model("ExtendedQuantizeLinear", TensorProto.FLOAT, TensorProto.INT8,
                            TensorProto.INT8, 1, 4)
    model.graph.node[0].attribute[1].CopyFrom(helper.make_attribute("block_size", value))
    with pytest.raises(Exception) as info:
        _library_session(model)
    message = str(info.value)
    assert "ExtendedQuantizeLinear (node 'n')" in message and "block_size" in message, message


def _blocked_model_with_weights(opset: int, s_shape=(4, 2), block: int = 32) -> onnx.ModelProto:
    """A blocked weight dequantizer and an activation quantizer, scales and
    zero points as initializers (static shapes), at the given ai.onnx opset."""
    from onnx import numpy_helper

    rng = np.random.default_rng(17)
    w = rng.integers(-128, 127, (4, 64), endpoint=True).astype(np.int8)
    s = rng.uniform(0.01, 0.1, s_shape).astype(F32)
    z = rng.integers(-3, 3, s_shape).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s"),
             numpy_helper.from_array(z, "z")]
    nodes = [
        helper.make_node("ExtendedDequantizeLinear", ["w", "s", "z"], ["wf"], name="dq_w",
                         domain=extql.DOMAIN, axis=1, block_size=block),
        helper.make_node("Add", ["x", "wf"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(extql.DOMAIN, 1)])
    model.ir_version = 8 if opset < 21 else 10
    return model


def test_check_accepts_a_blocked_node_and_names_a_wrong_blocked_scale():
    from extql.cli.check import check_model

    count, problems = check_model(_blocked_model_with_weights(17))
    assert count == 1 and problems == []
    count, problems = check_model(_blocked_model_with_weights(17, s_shape=(4, 3)))
    assert len(problems) == 1
    assert "dq_w" in problems[0] and "block_size 32" in problems[0], problems


def test_lower_keeps_blocked_nodes_below_opset_21_and_lowers_them_from_it():
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(F32)
    expected = _library_session(_blocked_model_with_weights(17)).run(None, {"x": x})[0]
    report: list[str] = []
    with pytest.warns(UserWarning, match="opset >= 21"):
        kept = extql.lower_to_standard(_blocked_model_with_weights(17), report=report)
    assert [n.op_type for n in kept.graph.node][0] == "ExtendedDequantizeLinear"
    assert "blocked (block_size 32)" in report[0], report
    lowered = extql.lower_to_standard(_blocked_model_with_weights(21))
    first = lowered.graph.node[0]
    assert (first.domain, first.op_type) == ("", "DequantizeLinear")
    assert {a.name: a.i for a in first.attribute} == {"axis": 1, "block_size": 32}
    got = ReferenceEvaluator(lowered).run(None, {"x": x})[0]
    assert_same_bits(got, expected, "lowered, onnx.reference")
    if _ort_runs_blocked():
        session = ort.InferenceSession(lowered.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        assert_same_bits(session.run(None, {"x": x})[0], expected, "lowered, onnxruntime")


@pytest.mark.parametrize("tool", ["attach_fallbacks", "inline_fallbacks"])
def test_fallbacks_run_blocked_nodes_at_any_opset(tool):
    """The fallback functions take block_size at the model's own opset (17
    here, below the official blocked operator's 21), in onnxruntime at every
    optimisation level and in onnx.reference, with the library's bits."""
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(F32)
    expected = _library_session(_blocked_model_with_weights(17)).run(None, {"x": x})[0]
    model = getattr(extql, tool)(_blocked_model_with_weights(17))
    assert_same_bits(ReferenceEvaluator(model).run(None, {"x": x})[0], expected, "reference")
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        session = ort.InferenceSession(model.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"])
        assert_same_bits(session.run(None, {"x": x})[0], expected, f"onnxruntime {level}")
    with pytest.raises(ValueError, match=r"dq_w.*block_size 32"):
        getattr(extql, tool)(_blocked_model_with_weights(17, s_shape=(4, 3)))
