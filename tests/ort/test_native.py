"""Attached fallbacks with the extql library registered: the native kernels
must win (the functions are used only without the library), and both paths
must give the contract's bits."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import TYPES
from fallback_cases import FORMS, quantized_x, random_scale, special_x, zero_points
from onnx_helpers import DOMAIN, LEGACY, run_ort
from pass_models import ALL, X_KERNEL, assert_outputs, canonical_nans, mixed_model

import extql
from extql.rules.types import OP_NAMES

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")


def _ops_after_optimization(model: onnx.ModelProto, library: bool, tmp_path) -> set:
    """(domain, op_type) of the nodes onnxruntime actually runs."""
    so = ort.SessionOptions()
    if library:
        extql.register(so)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    path = os.path.join(tmp_path, f"optimized_{int(library)}.onnx")
    so.optimized_model_filepath = path
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return {(n.domain, n.op_type) for n in onnx.load(path).graph.node}


@pytest.mark.parametrize("domain", [DOMAIN, LEGACY])
def test_native_kernel_wins_over_attached_functions(domain, tmp_path):
    model, expected = mixed_model([*ALL, None], domain=domain)
    attached = extql.attach_fallbacks(model)
    names = set(OP_NAMES[domain])
    with_library = _ops_after_optimization(attached, True, tmp_path)
    assert {op for d, op in with_library if d == domain} == names
    assert all(d in ("", domain) for d, _ in with_library)
    without = _ops_after_optimization(attached, False, tmp_path)
    assert not {op for _, op in without} & names  # the functions were inlined
    so = extql.register(ort.SessionOptions())
    assert_outputs(run_ort(attached, {"x": X_KERNEL}, options=so), expected(X_KERNEL),
                   "native on an attached model")
    assert_outputs(run_ort(attached, {"x": X_KERNEL}), expected(X_KERNEL), "fallback")


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("qtype", [*ALL, None], ids=[*ALL, "default"])
def test_native_and_fallback_agree(qtype, form):
    """Every type and axis form: native (library) == fallback (no library) ==
    contract, on an attached Q->DQ chain and a lone dequantize."""
    from contract import dequantize, quantize
    from onnx_helpers import qdq_model

    rng = np.random.default_rng(23)
    x_shape, s_shape, axis = FORMS[form]
    scale = np.asarray(random_scale(s_shape, rng), np.float32)
    n = None if s_shape is None else s_shape[0]
    zp = None if qtype is None else zero_points(qtype, n, rng)
    ax = 1 if axis is None else axis
    model = extql.attach_fallbacks(qdq_model(qtype, x_shape, scale, zp, axis=axis))
    x = canonical_nans(special_x(x_shape, rng, qtype or "uint8"))
    q = quantize(x, scale, zp, axis=ax)
    want = {"y": q, "z": dequantize(q, scale, zp, axis=ax)}
    so = extql.register(ort.SessionOptions())
    assert_outputs(run_ort(model, {"x": x}, options=so), want, "native")
    assert_outputs(run_ort(model, {"x": x}), want, "fallback")
    if qtype is not None:
        dq = extql.attach_fallbacks(qdq_model(qtype, x_shape, scale, zp, axis=axis, chain="dq"))
        xq = quantized_x(qtype, x_shape, rng)
        want = {"z": dequantize(xq, scale, zp, axis=ax)}
        assert_outputs(run_ort(dq, {"x": xq}, options=so), want, "native dq")
        assert_outputs(run_ort(dq, {"x": xq}), want, "fallback dq")


def test_native_on_inlined_and_lowered_models_is_not_needed():
    """inline/lower leave no (resp. only some) Extended nodes; with the library
    registered the results stay the same."""
    model, expected = mixed_model(list(TYPES))
    so = extql.register(ort.SessionOptions())
    for out in (extql.inline_fallbacks(model),
                extql.attach_fallbacks(extql.lower_to_standard(model))):
        assert_outputs(run_ort(out, {"x": X_KERNEL}, options=so), expected(X_KERNEL), "native")
