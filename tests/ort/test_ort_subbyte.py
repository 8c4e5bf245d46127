"""int4 / uint4 through extql's onnxruntime library: packed ONNX tensors in
and out of the Extended operators, against the contract and against
onnxruntime's own DequantizeLinear reading what extql wrote, bit for bit:
every optimisation level, one and two threads, float32 / float16 x and scale,
per tensor, per axis (NCHW) and blocked (the LLM weight case), tensors large
enough to be split.  onnxruntime's Python API binds no sub-byte tensor, so
the quantized tensors stay inside the graph (a quantize feeds dequantizes) or
are initializers.  Run once per kernel variant (conftest.py).

onnxruntime takes int4 in a custom operator from 1.21 (extql registers the
types there); int2 / uint2 in none (the session fails, naming the type).
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import SUBBYTE_TYPES, assert_same_bits, dequantize, expand_blocks, quantize
from onnx import TensorProto, helper
from ortutil import DOMAIN, DQ, LEVELS, Q, run_node, session
from packaging.version import Version

import extql

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

RUNS_INT4 = Version(ort.__version__) >= Version("1.21")
CODE = {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4}
F_CODE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, -2.5, 7.5, -8.5, 1e30, np.inf, -np.inf, np.nan],
                   np.float32)
# (x shape, axis, block size, granularity)
LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 8, 5, 7), 1, 0, "axis"),
           ((16, 256), 1, 32, "blocked"), ((8, 300), 1, 128, "blocked"),
           ((600, 512), 1, 32, "blocked-large")]


def _session(model, level, threads: int) -> ort.InferenceSession:
    return session(model, threads=threads, level=level)


def _tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype.name in CODE:
        return helper.make_tensor(name, CODE[value.dtype.name], value.shape,
                                  value.astype(np.int64).reshape(-1))
    return onnx.numpy_helper.from_array(value, name)


def _params(rng, name, shape, axis, block, f_dtype):
    """Scale and zero point: per tensor (axis None), per axis or blocked."""
    if axis is None:
        pshape: tuple[int, ...] = ()
    else:
        a = axis % len(shape)
        pshape = (shape[a],) if not block else shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]
    s = ((rng.random(pshape) + 0.05) * 0.7).astype(np.float32).astype(f_dtype)
    dt, lo, hi = SUBBYTE_TYPES[name]
    return np.asarray(s), np.asarray(rng.integers(lo, hi, pshape, endpoint=True).astype(dt))


def _full(v, shape, axis, block):
    return expand_blocks(v, axis % len(shape), block, shape[axis % len(shape)]) if block else v


def _chain_model(name, shape, f_dtype, s, z, axis, block, opset=21):
    """x -> Extended quantize -> q; q -> Extended dequantize -> y and
    q -> the official DequantizeLinear -> y_official (which reads extql's
    packed bytes)."""
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    nodes = [helper.make_node(Q, ["x", "s", "z"], ["q"], domain=DOMAIN, **attrs),
             helper.make_node(DQ, ["q", "s", "z"], ["y"], domain=DOMAIN, **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y_official"], **attrs)]
    code = F_CODE[np.dtype(f_dtype)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", code, shape)],
        [helper.make_tensor_value_info("y", code, shape),
         helper.make_tensor_value_info("y_official", code, shape)],
        [_tensor("s", s), _tensor("z", z)])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)])


def _dq_model(name, xq, s, z, axis, block):
    """An Extended dequantize of a packed int4 initializer (written by onnx)."""
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    node = helper.make_node(DQ, ["xq", "s", "z"], ["y"], domain=DOMAIN, **attrs)
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", F_CODE[s.dtype], xq.shape)],
        [_tensor("xq", xq), _tensor("s", s), _tensor("z", z)])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])


#: The tests that run int4 (the last one checks the releases before 1.21).
needs_int4 = pytest.mark.skipif(not RUNS_INT4, reason="onnxruntime < 1.21: no int4 custom ops; "
                                "test_int4_from_onnxruntime_1_21 checks the failure")


@needs_int4
@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("f_type", ["float32", "float16"])
@pytest.mark.parametrize("name", list(CODE))
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_quantize_dequantize_in_onnxruntime(level, threads, f_type, name, shape, axis, block,
                                            kind):
    rng = np.random.default_rng(zlib.crc32(repr((name, shape, f_type)).encode()))
    f_dtype = np.dtype(f_type)
    s, z = _params(rng, name, shape, axis if kind != "tensor" else None, block, f_dtype)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    with np.errstate(over="ignore"):
        x = x.astype(f_dtype)
    a = axis % len(shape)
    sess = _session(_chain_model(name, shape, f_dtype, s, z, axis, block), level, threads)
    y, y_official = sess.run(None, {"x": x})
    se, ze = _full(s, shape, axis, block), _full(z, shape, axis, block)
    q = quantize(x, se, ze, axis=a)
    want = dequantize(q, se, ze, axis=a)
    assert_same_bits(y, want, f"{name} {kind} {f_type} level {level} t={threads}")
    assert_same_bits(y_official, want, f"official DQ of extql's {name} {kind}")


@needs_int4
@pytest.mark.parametrize("name", list(CODE))
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_dequantize_of_onnx_packed_initializers(name, shape, axis, block, kind):
    """A packed initializer as onnx writes it (odd element counts too)."""
    rng = np.random.default_rng(7)
    shape = shape[:-1] + (shape[-1] + 1,) if not block else shape
    s, z = _params(rng, name, shape, axis if kind != "tensor" else None, block,
                   np.dtype(np.float32))
    dt, lo, hi = SUBBYTE_TYPES[name]
    xq = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    y = _session(_dq_model(name, xq, s, z, axis, block), LEVELS[0], 2).run(None, {})[0]
    a = axis % len(shape)
    want = dequantize(xq, _full(s, shape, axis, block), _full(z, shape, axis, block), axis=a)
    assert_same_bits(y, want, f"DQ {name} {kind} initializer")
    assert_same_bits(y, extql.dequantize_linear(xq, s, z, axis=axis, block_size=block),
                     "the NumPy API")


@pytest.mark.skipif(Version(ort.__version__) < Version("1.19"),
                    reason="onnxruntime < 1.19 has no int4 QuantizeLinear")
def test_lowered_int4_runs_as_the_official_operators():
    """lower_to_standard turns int4 Extended nodes at opset 21 into the
    official operators, which give the same bits."""
    rng = np.random.default_rng(3)
    shape, axis, block = (16, 256), 1, 32
    s, z = _params(rng, "int4", shape, axis, block, np.dtype(np.float32))
    model = _chain_model("int4", shape, np.float32, s, z, axis, block)
    lowered = extql.lower_to_standard(model)
    assert [n.op_type for n in lowered.graph.node] == ["QuantizeLinear", "DequantizeLinear",
                                                       "DequantizeLinear"]
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    y, y_official = ort.InferenceSession(lowered.SerializeToString(),
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x})
    se, ze = _full(s, shape, axis, block), _full(z, shape, axis, block)
    want = dequantize(quantize(x, se, ze, axis=axis), se, ze, axis=axis)
    assert_same_bits(y, want, "lowered")
    assert_same_bits(y_official, want, "lowered")


def test_int2_is_not_taken_by_onnxruntime_custom_operators():
    """onnxruntime's custom operators take no int2 tensor: the session fails
    and names the type (extql's NumPy API and reference ops run int2)."""
    rng = np.random.default_rng(5)
    s, z = _params(rng, "int2", (4, 8), None, 0, np.dtype(np.float32))
    model = _chain_model("int2", (4, 8), np.float32, s, z, 1, 0, opset=25)
    model.ir_version = 11
    for init in model.graph.initializer:
        if init.name == "z":
            init.CopyFrom(helper.make_tensor("z", TensorProto.INT2, [], [int(z)]))
    # (Releases before 1.20 cannot load the IR version int2 needs at all.)
    with pytest.raises(Exception, match=r"tensor\(int2\)|Unsupported model IR version"):
        _session(model, LEVELS[0], 1)


def test_int4_from_onnxruntime_1_21():
    """From 1.21 onnxruntime's custom operators take int4 (extql registers it
    there); before, the session fails naming the type."""
    s, z = np.float32(0.5), np.asarray(1).astype(SUBBYTE_TYPES["int4"][0])
    model = _chain_model("int4", (4, 8), np.float32, s, z, 1, 0)
    if RUNS_INT4:
        y, _ = _session(model, LEVELS[0], 1).run(None, {"x": np.ones((4, 8), np.float32)})
        assert y.tolist() == [[1.0] * 8] * 4
    else:
        with pytest.raises(Exception, match=r"int4"):
            _session(model, LEVELS[0], 1)


@needs_int4
@pytest.mark.parametrize("name", list(CODE))
@pytest.mark.parametrize("params", ["const", "input"])
def test_subbyte_graph_inputs_and_outputs(name, params):
    """int4 tensors bound from Python (packed by extql.ort_io): a quantize's
    output and a dequantize's x and zero point as graph inputs."""
    rng = np.random.default_rng(11)
    shape = (3, 8, 5)
    s, z = _params(rng, name, shape, 1, 0, np.dtype(np.float32))
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    y = run_node(Q, x, s, z, axis=1, params=params, threads=2)
    assert y.dtype == z.dtype
    assert_same_bits(y, quantize(x, s, z, axis=1), f"Q {name} graph output")
    d = run_node(DQ, y, s, z, axis=1, params=params, threads=2)
    assert_same_bits(d, dequantize(y, s, z, axis=1), f"DQ {name} graph input")
