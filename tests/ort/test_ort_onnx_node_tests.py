"""ONNX's own QuantizeLinear / DequantizeLinear node tests
(onnx.backend.test.case.node.quantizelinear / dequantizelinear), re-pointed at
ExtendedQuantizeLinear / ExtendedDequantizeLinear and run in onnxruntime with
extql's library.

The Extended ops must stay backward compatible with the official ones, so
every case whose types, granularity (blocked quantization included) and
attributes extql shares must give ONNX's expected output bit for bit (and the
independent contract's).  Cases are left out only for what extql does not
have (float8e8m0 scales); test_collected checks that every
left-out case has such a reason.  A case runs in onnxruntime where its
custom operators and Python API take the types (int4 from 1.21, float8 from
1.20, float4e2m1 from 1.24, int2 / uint2 never) and the output's type is the
one the inputs give or, from extql.ort.INFERENCE_ONNXRUNTIME on, x's rank is
known (onnxruntime then types the output by output_dtype); elsewhere
the Extended node runs through onnx.reference with extql.reference.OPS (the
same kernels).  Every case also runs without the library, through the
fallback functions.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import (
    BF16,
    SMALLFLOAT_TYPES,
    SUBBYTE_TYPES,
    TYPES,
    assert_same_bits,
    dequantize,
    expand_blocks,
    quantize,
)
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator
from ortutil import DQ, INFERS, Q, node_model, run, run_node, session
from packaging.version import Version

import extql
import extql.ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

_ORT = Version(ort.__version__)
#: The types beyond the eight.
NEW = {np.dtype(dt) for dt, _, _ in (*SUBBYTE_TYPES.values(), *SMALLFLOAT_TYPES.values())}
SUPPORTED = {np.dtype(dt) for dt, _, _ in TYPES.values()} | NEW
#: Those extql's onnxruntime library runs, and Python binds, with this
#: onnxruntime: int4 / uint4 from 1.21, float8 from 1.20 (typed OrtValues),
#: float4e2m1 from 1.24; int2 / uint2 never.
ORT_NEW = (({np.dtype(SUBBYTE_TYPES[n][0]) for n in ("int4", "uint4")}
            if _ORT >= Version("1.21") else set())
           | ({np.dtype(dt) for n, (dt, _, _) in SMALLFLOAT_TYPES.items()
               if n.startswith("float8")} if extql.ort_io.has_typed_ortvalues() else set())
           | ({np.dtype(SMALLFLOAT_TYPES["float4e2m1"][0])}
              if _ORT >= Version("1.24") else set()))
OFFICIAL = {"QuantizeLinear": Q, "DequantizeLinear": DQ}


def _as_array(value: Any) -> np.ndarray | None:
    """A NumPy array of the value, or None for types NumPy/extql lack."""
    if isinstance(value, TensorProto):
        try:
            value = numpy_helper.to_array(value)
        except Exception:  # float4 / int2 and friends
            return None
    return np.asarray(value)


def _block_size(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "block_size"), 0)


def _collect() -> list[tuple[str, onnx.NodeProto, list, list]]:
    cases: list[tuple[str, onnx.NodeProto, list, list]] = []
    for module_name, cls_name in [
        ("onnx.backend.test.case.node.quantizelinear", "QuantizeLinear"),
        ("onnx.backend.test.case.node.dequantizelinear", "DequantizeLinear"),
    ]:
        module = importlib.import_module(module_name)
        cls = getattr(module, cls_name)
        original = module.expect

        def collect(node, inputs, outputs, name, **kwargs):
            cases.append((name, node, list(inputs), list(outputs)))

        module.expect = collect
        try:
            for attr in sorted(dir(cls)):
                if attr.startswith("export"):
                    getattr(cls, attr)()
        finally:
            module.expect = original
    return cases


REALS = {np.dtype(np.float32), np.dtype(np.float16), BF16}


def _attrs(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: a.i for a in node.attribute if a.name not in ("axis", "block_size")}


def _skip_reason(node: onnx.NodeProto, inputs: list, outputs: list) -> str | None:
    attrs = _attrs(node)
    unknown = set(attrs) - {"output_dtype", "precision", "saturate"}
    if unknown:
        return f"attributes extql does not have: {sorted(unknown)}"
    arrays = [_as_array(v) for v in inputs + outputs]
    if any(a is None for a in arrays):
        return "a type NumPy cannot hold (int2/int4/float4)"
    x, scale = arrays[0], arrays[1]
    quantized = x if node.op_type == "DequantizeLinear" else arrays[len(inputs)]
    if quantized.dtype not in SUPPORTED:
        return f"quantized type {quantized.dtype} is not one of extql's types"
    if node.op_type == "QuantizeLinear" and x.dtype not in REALS and x.dtype != np.int32:
        return f"x of type {x.dtype} (extql quantizes float32, float16, bfloat16, int32)"
    if scale.dtype not in REALS and not (node.op_type == "QuantizeLinear"
                                         and scale.dtype == np.int32):
        return f"scale of type {scale.dtype} (float8e8m0 scales)"
    return None


def _onnxruntime_cannot(node: onnx.NodeProto, arrays: list, expected: np.ndarray) -> str | None:
    """Why extql's onnxruntime library cannot run the case here, or None:
    a type its custom operators or onnxruntime's Python API lack, or an
    output_dtype other than the type the inputs give where onnxruntime types
    a custom operator's output from its inputs only (before
    extql.ort.INFERENCE_ONNXRUNTIME, or a scalar x)."""
    quantized = arrays[0] if node.op_type == "DequantizeLinear" else expected
    if quantized.dtype in NEW - ORT_NEW:
        return f"{quantized.dtype} in onnxruntime {ort.__version__}"
    given = node.op_type == "DequantizeLinear" and arrays[1].dtype or (
        arrays[2].dtype if len(arrays) > 2 and node.input[2] else np.dtype(np.uint8))
    if "output_dtype" in _attrs(node) and expected.dtype != given and not (
            INFERS and np.ndim(arrays[0]) > 0):
        return f"output_dtype {expected.dtype}"
    return None


CASES = _collect()
USABLE = [c for c in CASES if _skip_reason(c[1], c[2], c[3]) is None]
LEFT_OUT = {c[0]: _skip_reason(c[1], c[2], c[3]) for c in CASES if c not in USABLE}


def test_collected():
    """The collection found ONNX's cases, and the ones extql shares."""
    print(f"ONNX node tests: {len(CASES)} collected, {len(USABLE)} re-pointed at the Extended ops")
    assert len(CASES) >= 20
    assert len(USABLE) >= 6
    names = {c[0] for c in USABLE}
    for expected in ("test_quantizelinear", "test_quantizelinear_axis", "test_dequantizelinear",
                     "test_dequantizelinear_axis"):
        assert expected in names
    # Every case left out is left out for a type or attribute extql lacks.
    for name, reason in LEFT_OUT.items():
        assert reason and any(word in reason for word in ("type", "attributes")), (name, reason)
    # Blocked quantization is among the shared cases.
    assert any(_block_size(c[1]) for c in USABLE)


def _unpack(case) -> tuple:
    """One case's input arrays (x, scale[, zero point]), zero point (or
    None), ONNX's expected output and node_model's keywords."""
    _, node, inputs, outputs = case
    arrays = [_as_array(v) for v in inputs]
    zp = arrays[2] if len(arrays) > 2 and node.input[2] else None
    kw = {"zp_form": "given" if zp is not None else "absent",
          "axis": next((a.i for a in node.attribute if a.name == "axis"), None),
          "block_size": _block_size(node) or None, "attrs": _attrs(node)}
    return arrays, zp, _as_array(outputs[0]), kw


@pytest.mark.parametrize("case", USABLE, ids=[c[0] for c in USABLE])
def test_onnx_node_case(case):
    name, node = case[0], case[1]
    op = OFFICIAL[node.op_type]
    arrays, zp, expected, kw = _unpack(case)
    x, scale = arrays[0], arrays[1]
    axis, block, attrs = kw["axis"], _block_size(node), kw["attrs"]
    if _onnxruntime_cannot(node, arrays, expected):
        # The Extended node through onnx.reference with extql.reference.OPS
        # (the same kernels).
        model, feeds, _ = node_model(op, x, scale, zp, declare_output=False, **kw)
        model.opset_import[0].version = 25
        y = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(None, feeds)[0]
    else:
        y = run_node(op, x, scale, zp, **kw)
    assert_same_bits(y, expected.astype(y.dtype) if y.dtype != expected.dtype else expected,
                     f"{name}: vs ONNX's expected output")
    a = 1 if axis is None else axis
    if block:
        a %= x.ndim
        scale = expand_blocks(scale, a, block, x.shape[a])
        zp = None if zp is None else expand_blocks(zp, a, block, x.shape[a])
    prec = attrs.get("precision")
    prec = None if not prec else onnx.helper.tensor_dtype_to_np_dtype(prec)
    out = attrs.get("output_dtype")
    out = None if not out else onnx.helper.tensor_dtype_to_np_dtype(out)
    contract = (quantize(x, scale, zp, axis=a, precision=prec, dtype=out,
                         saturate=bool(attrs.get("saturate", 1))) if op == Q
                else dequantize(x, scale, zp, axis=a, output_dtype=out))
    assert_same_bits(y, contract, f"{name}: vs the contract")


@pytest.mark.fallback
@pytest.mark.parametrize("case", USABLE, ids=[c[0] for c in USABLE])
def test_onnx_node_case_through_the_fallbacks(case):
    """The same cases without the library: the Extended node given the
    fallback functions (attach_fallbacks, at the ai.onnx opset that has the
    type) gives ONNX's expected output, in onnxruntime where it has every op
    the functions need and can bind the types, else in onnx.reference."""
    from extql import fallbacks

    name, node = case[0], case[1]
    op = OFFICIAL[node.op_type]
    arrays, zp, expected, kw = _unpack(case)
    x, scale = arrays[0], arrays[1]
    model, feeds, _ = node_model(op, x, scale, zp, declare_output=False, **kw)
    qtype = extql.rules.types.quantized_type_of(x.dtype if op == DQ else expected.dtype)
    opset = max(model.opset_import[0].version, fallbacks.variant_opset(qtype.name))
    model.opset_import[0].version = opset
    model.ir_version = max(model.ir_version, 11 if opset >= 23 else 10)
    model = extql.attach_fallbacks(model)
    try:
        sess = session(model, register=False)
        y = run(sess, feeds, [expected.dtype], [expected.shape])[0]
        where = "onnxruntime"
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
        # (an op or type this onnxruntime lacks: Cast to float4e2m1, int4
        # before 1.23, float8 buffers before 1.20, opset 25 before ...)
        # The newest onnxruntime runs every case but float4e2m1's.
        assert _ORT < Version("1.32") or qtype.name == "float4e2m1", (
            f"{name}: the fallbacks in onnxruntime {ort.__version__}: {exc}")
        y = ReferenceEvaluator(model).run(None, feeds)[0]
        where = "onnx.reference"
    y = np.asarray(y)
    assert_same_bits(y.astype(np.float32) if y.dtype != expected.dtype else y,
                     expected.astype(np.float32) if y.dtype != expected.dtype else expected,
                     f"{name}: the fallbacks in {where} vs ONNX's expected output")
