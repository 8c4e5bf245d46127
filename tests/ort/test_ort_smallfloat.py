"""float8 (four types) and float4e2m1 through extql's onnxruntime library,
against the contract and against onnxruntime's own DequantizeLinear reading
what extql wrote, bit for bit: every optimisation level, one and two
threads, the attribute saturate, per tensor, per axis (NCHW) and blocked,
tensors large enough to be split.  Run once per kernel variant
(conftest.py).

onnxruntime's custom operators take float8 in every supported release and
float4e2m1 from 1.24 (extql registers it there); float8 tensors cross the
Python API from 1.20 (typed OrtValues), so before that the quantized tensors
stay inside the graph.
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import SMALLFLOAT_TYPES, assert_same_bits, dequantize, expand_blocks, quantize
from onnx import TensorProto, helper
from ortutil import DOMAIN, DQ, LEVELS, Q, run_node, session
from packaging.version import Version

import extql
from extql import ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

ORT_VERSION = Version(ort.__version__)
#: The types this onnxruntime's custom operators take.
NAMES = [n for n in SMALLFLOAT_TYPES if n != "float4e2m1" or ORT_VERSION >= Version("1.24")]
FLOAT8 = [n for n in NAMES if n.startswith("float8")]
CODE = {name: getattr(TensorProto, name.upper()) for name in SMALLFLOAT_TYPES}
SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, -2.5, 300.0, 470.0, 1e5, -1e5, 1e30, np.inf, -np.inf,
                    np.nan, 1e-9], np.float32)
LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 8, 5, 7), 1, 0, "axis"),
           ((16, 256), 1, 32, "blocked"), ((600, 512), 1, 32, "blocked-large")]


def _session(model, level, threads: int) -> ort.InferenceSession:
    return session(model, threads=threads, level=level)


def _chain_model(name, shape, s, z, axis, block, saturate):
    """x -> Extended quantize -> q; q -> Extended dequantize -> y, and (for
    float8) q -> the official DequantizeLinear -> y_official."""
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    nodes = [helper.make_node(Q, ["x", "s", "z"], ["q"], domain=DOMAIN, saturate=int(saturate),
                              **attrs),
             helper.make_node(DQ, ["q", "s", "z"], ["y"], domain=DOMAIN, **attrs)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    opset = 21 if name.startswith("float8") else 23  # (float4e2m1: opset 23)
    if name.startswith("float8") and (not block or ORT_VERSION >= Version("1.20")):
        # (onnxruntime's own blocked DequantizeLinear arrives in 1.20.)
        nodes.append(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y_official"],
                                      **attrs))
        outputs.append(helper.make_tensor_value_info("y_official", TensorProto.FLOAT, shape))
    z_t = helper.make_tensor("z", CODE[name], z.shape, ort_io.pack(z).tobytes()
                             if name == "float4e2m1" else z.view(np.uint8).tobytes(), raw=True)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          shape)],
                              outputs, [onnx.numpy_helper.from_array(s, "s"), z_t])
    return helper.make_model(graph, ir_version=10 if opset < 23 else 11, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)])


def _params(rng, name, shape, axis, block, kind):
    a = axis % len(shape)
    if kind == "tensor":
        pshape: tuple[int, ...] = ()
    elif kind == "axis":
        pshape = (shape[a],)
    else:
        pshape = shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]
    s = np.asarray(((rng.random(pshape) + 0.05) * 0.7).astype(np.float32))
    z = np.asarray(np.zeros(pshape, np.float32) if name != "float4e2m1"
                   else rng.choice([0.0, 0.5, -1.0], pshape)).astype(SMALLFLOAT_TYPES[name][0])
    return s, z


def _full(v, shape, axis, block):
    return expand_blocks(v, axis % len(shape), block, shape[axis % len(shape)]) if block else v


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_quantize_dequantize_in_onnxruntime(level, threads, saturate, name, shape, axis, block,
                                            kind):
    rng = np.random.default_rng(zlib.crc32(repr((name, shape, saturate)).encode()))
    s, z = _params(rng, name, shape, axis, block, kind)
    x = (rng.standard_normal(shape) * 60).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    outs = _session(_chain_model(name, shape, s, z, axis, block, saturate), level,
                    threads).run(None, {"x": x})
    a = axis % len(shape)
    se, ze = _full(s, shape, axis, block), _full(z, shape, axis, block)
    want = dequantize(quantize(x, se, ze, axis=a, saturate=saturate), se, ze, axis=a)
    assert_same_bits(outs[0], want, f"{name} {kind} saturate={saturate} level {level}")
    if len(outs) > 1:
        assert_same_bits(outs[1], want, f"official DQ of extql's {name} {kind}")


@pytest.mark.skipif(not ort_io.has_typed_ortvalues(),
                    reason="float8 tensors cross the Python API from onnxruntime 1.20; "
                           "test_quantize_dequantize_in_onnxruntime keeps them in the graph")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("params", ["const", "input"])
def test_graph_inputs_and_outputs(name, params):
    rng = np.random.default_rng(11)
    shape = (3, 8, 5)
    s, z = _params(rng, name, shape, 1, 0, "axis")
    x = (rng.standard_normal(shape) * 60).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    y = run_node(Q, x, s, z, axis=1, params=params, threads=2, attrs={"saturate": 0})
    assert y.dtype == z.dtype
    assert_same_bits(y, quantize(x, s, z, axis=1, saturate=False), f"Q {name} graph output")
    d = run_node(DQ, y, s, z, axis=1, params=params, threads=2)
    assert_same_bits(d, dequantize(y, s, z, axis=1), f"DQ {name} graph input")


@pytest.mark.parametrize("name", FLOAT8)
def test_float8_dequantize_refuses_a_nonzero_zero_point(name):
    """As the official DequantizeLinear: a failed status naming the rule."""
    dt = SMALLFLOAT_TYPES[name][0]
    xq = np.array([1, 2, 3], np.float32).astype(dt)
    node = helper.make_node(DQ, ["xq", "s", "z"], ["y"], domain=DOMAIN)
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [helper.make_tensor("xq", CODE[name], [3], xq.view(np.uint8).tobytes(), raw=True),
         helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]),
         helper.make_tensor("z", CODE[name], [], np.asarray(1.0).astype(dt).view(np.uint8)
                            .tobytes(), raw=True)])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    with pytest.raises(Exception, match=f"x_zero_point of {name} must be 0"):
        _session(model, LEVELS[0], 1).run(None, {})


def test_saturate_must_be_0_or_1():
    s, z = np.float32(1), np.zeros((), ml_dtypes.float8_e4m3fn)
    model = _chain_model("float8e4m3fn", (4,), np.asarray(s), np.asarray(z), 0, 0, True)
    for attr in model.graph.node[0].attribute:
        if attr.name == "saturate":
            attr.i = 2
    with pytest.raises(Exception, match="saturate must be 0 or 1, got 2"):
        _session(model, LEVELS[0], 1)


@pytest.mark.parametrize("name", FLOAT8)
def test_lowered_float8_runs_as_the_official_operators(name):
    """lower_to_standard turns float8 Extended nodes with saturate = 1 into
    the official operators (the same bits in onnxruntime) and leaves those
    with saturate = 0, saying why."""
    rng = np.random.default_rng(3)
    shape, axis = (16, 256), 1
    # (Blocked: from onnxruntime 1.20; per axis runs on every release.)
    block, kind = (32, "blocked") if ORT_VERSION >= Version("1.20") else (0, "axis")
    s, z = _params(rng, name, shape, axis, block, kind)
    x = (rng.standard_normal(shape) * 60).astype(np.float32)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    model = _chain_model(name, shape, s, z, axis, block, True)
    lowered = extql.lower_to_standard(model)
    assert [n.op_type for n in lowered.graph.node] == ["QuantizeLinear", "DequantizeLinear",
                                                       "DequantizeLinear"]
    y, y_official = ort.InferenceSession(lowered.SerializeToString(),
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x})
    se, ze = _full(s, shape, axis, block), _full(z, shape, axis, block)
    want = dequantize(quantize(x, se, ze, axis=axis), se, ze, axis=axis)
    assert_same_bits(y, want, "lowered")
    assert_same_bits(y_official, want, "lowered")
    report: list[str] = []
    kept = extql.lower_to_standard(_chain_model(name, shape, s, z, axis, block, False),
                                   report=report)
    assert kept.graph.node[0].op_type == Q
    assert any("saturate = 0" in line for line in report)


@pytest.mark.parametrize("name", ["float8e4m3fn", "float4e2m1"])
def test_fallbacks_give_the_library_bits(name):
    """The chain model with the fallback functions attached, in
    onnx.reference (onnxruntime runs them in tests/fallbacks), gives the
    NumPy API's bits (tests/fallbacks/test_fallback_types.py covers every
    type and form)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(1)
    s, z = _params(rng, name, (4, 8), 1, 0, "tensor")
    x = (rng.standard_normal((4, 8)) * 100).astype(np.float32)
    got = ReferenceEvaluator(extql.attach_fallbacks(
        _chain_model(name, (4, 8), s, z, 1, 0, True))).run(None, {"x": x})
    want = extql.dequantize_linear(extql.quantize_linear(x, s, z), s, z)
    assert_same_bits(np.asarray(got[0]), want, f"fallback {name}")
