"""Builders of the constant-folding and optimisation tests: session options
(every optimisation level, with or without the library), values of a type,
and a model whose If branches dequantize constants.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from contract import TYPES
from onnx import TensorProto, helper
from onnx_helpers import DOMAIN, make_model, tensor, value_info

import extql


def options(level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, library=True):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    if library:
        extql.register(so)
    return so


def rng_values(rng, dtype_name, shape):
    dt, lo, hi = TYPES[dtype_name]
    if dtype_name in ("float16", "bfloat16"):
        return (rng.standard_normal(shape) * 100).astype(np.float32).astype(dt)
    return rng.integers(max(lo, -(2**20)), min(hi, 2**20) + 1, size=shape).astype(dt)


def if_model(outer_w: np.ndarray) -> onnx.ModelProto:
    """An If whose branches dequantize an outer-scope weight and a weight of
    their own."""
    def branch(name, scale):
        nodes = [
            helper.make_node("ExtendedDequantizeLinear", ["w", scale], [f"{name}_a"],
                             domain=DOMAIN),
            helper.make_node("ExtendedDequantizeLinear", [f"{name}_w", scale], [f"{name}_b"],
                             domain=DOMAIN),
            helper.make_node("Add", [f"{name}_a", f"{name}_b"], [f"{name}_c"]),
            helper.make_node("Add", [f"{name}_c", "x"], [f"{name}_out"]),
        ]
        return helper.make_graph(
            nodes, name, [], [value_info(f"{name}_out", TensorProto.FLOAT, (5,))],
            [tensor(f"{name}_w", np.arange(5, dtype=np.int8) * (2 if name == "then" else -3))],
        )

    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", "s"),
                            else_branch=branch("else", "s2"))
    return make_model(
        [node],
        [value_info("cond", TensorProto.BOOL, ()), value_info("x", TensorProto.FLOAT, (5,))],
        [value_info("y", TensorProto.FLOAT, (5,))],
        [tensor("w", outer_w), tensor("s", np.float32(0.5)), tensor("s2", np.float32(3.0))],
    )
