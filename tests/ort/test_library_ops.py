"""What extql's custom-op library registers: the operators and nothing else.

The benchmarks' copy ops (com.amd.quark.bench QuantizeCopy / DequantizeCopy)
live in a library of their own (benchmarks/copy_ops); a model using them must
not load with only extql's library registered."""

from __future__ import annotations

import ctypes

import benchutil  # noqa: F401  (EXTQL_BENCHMARKS: this checkout's copy kernel)
import numpy as np
import onnxruntime as ort
import pytest
from ortutil import run, session

import extql
from extql.rules.types import QTYPES
from extql_bench import copy_library, data
from extql_bench.models import Ort

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

OPERATORS = [
    ("com.amd.quark", "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"),
    ("com.vai.quantize", "VitisQuantizeLinear", "VitisDequantizeLinear"),
]


def _model(kind: str, op: str):
    qt = QTYPES["int8"]
    return Ort().model(kind, op, qt, "tensor", data.Data.scale(qt, "tensor"),
                       data.Data.zero_point(qt, "tensor"))


@pytest.mark.parametrize("op", ["Q", "DQ"])
def test_copy_ops_do_not_load_with_extql_library(op):
    model = _model("copy", op)
    name = "QuantizeCopy" if op == "Q" else "DequantizeCopy"
    with pytest.raises(Exception, match=f"com.amd.quark.bench:{name}.* is not a registered"):
        session(model, threads=1)


@pytest.mark.parametrize("op", ["Q", "DQ"])
def test_copy_ops_load_with_the_copy_library(op):
    """The control of the test above: the same model is valid and runs once
    the benchmarks' copy library is registered."""
    so = ort.SessionOptions()
    so.register_custom_ops_library(copy_library.library_path())
    sess = ort.InferenceSession(_model("copy", op).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    x = np.arange(64, dtype=np.float32) if op == "Q" else np.arange(64, dtype=np.int8)
    (y,) = run(sess, {"x": x}, [np.int8 if op == "Q" else np.float32], [x.shape])
    assert y.shape == x.shape


@pytest.mark.parametrize("domain,q_name,dq_name", OPERATORS)
def test_extql_library_registers_the_operators(domain, q_name, dq_name):
    from onnx import TensorProto, helper

    for name, in_type, out_type in ((q_name, TensorProto.FLOAT, TensorProto.INT8),
                                    (dq_name, TensorProto.INT8, TensorProto.FLOAT)):
        node = helper.make_node(name, ["x", "s"], ["y"], domain=domain)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", in_type, [4])],
            [helper.make_tensor_value_info("y", out_type, [4])],
            initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])])
        # A quantize without zero point gives uint8; declare that for it.
        if name == q_name:
            graph.output[0].type.tensor_type.elem_type = TensorProto.UINT8
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid(domain, 1)])
        model.ir_version = 10
        session(model, threads=1)


def test_library_exports_no_bench_symbols():
    lib = ctypes.CDLL(extql.get_library_path())
    assert hasattr(lib, "RegisterCustomOps")
    for name in ("extql_bench_copy_range", "extql_bench_copy_set_isa"):
        assert not hasattr(lib, name), name
