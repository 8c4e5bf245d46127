"""ExtendedInstanceNormalization / VitisInstanceNormalization in extql's
onnxruntime library: Quark 0.13's stored bits under both names, the NumPy
API's bits, the session's threads (one session run from 4 threads gives the
serial bits), whole models at every optimisation level, shape inference,
and every refusal as a clean session error naming the node, in a child
process that exits normally."""

from __future__ import annotations

import json
import textwrap
from concurrent.futures import ThreadPoolExecutor

import in_cases
import numpy as np
import onnxruntime as ort
import pytest
from childproc import run_python
from contract import assert_same_bits, case_rng
from in_data import CASES, inputs, quark_y
from onnx import TensorProto, helper

import extql

OPS = {"ExtendedInstanceNormalization": "com.amd.quark",
       "VitisInstanceNormalization": "com.vai.quantize"}
F = TensorProto.FLOAT

# Every instruction-set variant of the kernels (the instance norm has one copy, the
# baseline, which every variant runs).
pytestmark = pytest.mark.usefixtures("kernel_isa")


def _model(op="ExtendedInstanceNormalization", eps=None, x_shape=None, types=(F, F, F),
           c_shape=None, around=False):
    attrs = {} if eps is None else {"epsilon": float(eps)}
    node = helper.make_node(op, ["xin" if around else "x", "scale", "B"],
                            ["yin" if around else "y"], name="in_node", domain=OPS[op], **attrs)
    nodes = [node]
    if around:  # float ops on both sides: the optimiser sees a graph around it
        nodes = [helper.make_node("Mul", ["x", "two"], ["xin"]), node,
                 helper.make_node("Add", ["yin", "two"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", types[0], x_shape),
              helper.make_tensor_value_info("scale", types[1], c_shape),
              helper.make_tensor_value_info("B", types[2], c_shape)]
    inits = [helper.make_tensor("two", F, [], [2.0])] if around else []
    graph = helper.make_graph(nodes, "in", inputs,
                              [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(OPS[op], 1)])


def _session(model, threads=0, level=None):
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    if level is not None:
        so.graph_optimization_level = level
    extql.register(so)
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_library_gives_quarks_bits(case):
    f = inputs(case)
    sess = _session(_model(case["op_type"], case["epsilon"], list(case["shape"])), threads=2)
    y = sess.run(None, f)[0]
    assert_same_bits(y, quark_y(case), case["id"])


def _feeds(shape, seed="ort"):
    rng = case_rng("dpu-in-ort", seed, shape)
    x = in_cases.values(rng, shape, "offset")
    g, b = in_cases.params(rng, shape[1])
    return {"x": x, "scale": g, "B": b}


def test_four_threads_on_one_session_give_the_serial_bits():
    sess = _session(_model(x_shape=None), threads=2)
    feeds = [_feeds((2, 16, 9, 13), k) for k in range(8)]
    serial = [sess.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda f: sess.run(None, f)[0], feeds * 2))
            for k, y in enumerate(got):
                assert_same_bits(y, serial[k % len(feeds)], f"run {k}")
    for f, y in zip(feeds, serial, strict=True):
        assert_same_bits(y, extql.extended_instance_normalization(f["x"], f["scale"], f["B"]))


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
@pytest.mark.parametrize("threads", [1, 2])
def test_whole_model_at_every_level(level, threads):
    f = _feeds((1, 8, 5, 7), "levels")
    y = _session(_model(eps=1e-3, x_shape=[1, 8, 5, 7], c_shape=[8], around=True),
                 threads=threads, level=level).run(None, f)[0]
    want = extql.extended_instance_normalization(f["x"] * np.float32(2), f["scale"], f["B"],
                                                 epsilon=1e-3) + np.float32(2)
    assert_same_bits(y, want)


def test_shape_inference_gives_y_xs_type_and_shape():
    # a float op after the node needs y's type; its output shows y's shape
    node = helper.make_node("ExtendedInstanceNormalization", ["x", "scale", "B"], ["t"],
                            domain="com.amd.quark")
    relu = helper.make_node("Relu", ["t"], ["y"])
    graph = helper.make_graph(
        [node, relu], "g",
        [helper.make_tensor_value_info("x", F, [2, 3, 4]),
         helper.make_tensor_value_info("scale", F, [3]),
         helper.make_tensor_value_info("B", F, [3])],
        [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])
    sess = _session(model)
    assert sess.get_outputs()[0].type == "tensor(float)"
    f = _feeds((2, 3, 4), "infer")
    want = np.maximum(extql.extended_instance_normalization(f["x"], f["scale"], f["B"]), 0)
    assert_same_bits(sess.run(None, f)[0], want)


def test_empty_and_rank_two():
    sess = _session(_model())
    y = sess.run(None, {"x": np.zeros((0, 3, 4), np.float32),
                        "scale": np.ones(3, np.float32), "B": np.zeros(3, np.float32)})[0]
    assert y.shape == (0, 3, 4)
    f = _feeds((5, 3), "rank2")
    assert_same_bits(sess.run(None, f)[0],
                     extql.extended_instance_normalization(f["x"], f["scale"], f["B"]))


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxruntime as ort
    from onnx import TensorProto, helper
    import extql
    out = []
    def model(types, x_shape=None, c_shape=None):
        node = helper.make_node("ExtendedInstanceNormalization", ["x", "scale", "B"], ["y"],
                                name="bad_node", domain="com.amd.quark")
        ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in
               zip(["x", "scale", "B"], types, [x_shape, c_shape, c_shape])]
        g = helper.make_graph([node], "g", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(g, ir_version=8, opset_imports=[
            helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])
    F, D = TensorProto.FLOAT, TensorProto.DOUBLE
    cases = [
        ((D, F, F), {"x": np.zeros((1, 2, 3)), "scale": np.ones(2, np.float32),
                     "B": np.ones(2, np.float32)}),
        ((F, F, F), {"x": np.zeros(4, np.float32), "scale": np.ones(4, np.float32),
                     "B": np.ones(4, np.float32)}),
        ((F, F, F), {"x": np.zeros((1, 2, 3), np.float32), "scale": np.ones(3, np.float32),
                     "B": np.ones(2, np.float32)}),
        ((F, F, F), {"x": np.zeros((1, 2, 3), np.float32), "scale": np.ones(2, np.float32),
                     "B": np.ones((1, 2), np.float32)}),
    ]
    for types, feeds in cases:
        try:
            so = ort.SessionOptions(); extql.register(so)
            s = ort.InferenceSession(model(types).SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
            s.run(None, feeds)
            out.append("ran")
        except Exception as e:
            out.append(str(e))
    print(json.dumps(out))
""")


def test_refusals_are_clean_session_errors_naming_the_node():
    got = json.loads(run_python("-c", _CHILD).stdout.strip().splitlines()[-1])
    words = ["x must be float32, got float64", "x must have rank >= 2",
             "scale must be 1-D of length C = 2", "B must be 1-D of length C = 2"]
    for message, want in zip(got, words, strict=True):
        assert "bad_node" in message and "ExtendedInstanceNormalization" in message, message
        assert want in message, message

