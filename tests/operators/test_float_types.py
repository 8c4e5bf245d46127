"""float16 / bfloat16 inputs, scales and outputs (the official operators'
T1 / T2 types) and the attributes ``precision`` and ``output_dtype``, on
every path -- the NumPy API and extql's onnxruntime library (every
optimisation level, one and two threads, scales and zero points as
initializers or inputs, per tensor, per axis (NCHW) and blocked) -- against
the contract (tests/contract.py), and through the NumPy API against ONNX's
reference implementation and onnxruntime's own QuantizeLinear /
DequantizeLinear, bit for bit, on every kernel variant (conftest.py).

Quantize divides in the precision of the scale's type (or ``precision``):
in float16 / bfloat16, x and the scale are rounded to it and their quotient
too, so ties, overflow to infinity and subnormal quotients of that type
matter; dequantize computes in float32 and rounds the result into the
output type (the scale's, or ``output_dtype``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import (
    BF16,
    REAL_TYPES,
    TYPES,
    assert_same_bits,
    case_rng,
    dequantize,
    expand_blocks,
    normal_with_specials,
    param_shape,
    quantize,
)
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from ortutil import DQ, LEVELS, Q, node_model, run_unaligned, session
from packaging.version import Version
from paths import LEVEL_IDS, LIBRARY, LIBRARY_LAYOUTS, NUMPY, dequantize_via, quantize_via

import extql
from extql import ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
REALS = list(REAL_TYPES)
ALL_TYPES = list(TYPES)
CODE = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16}

# Values where the precision matters: ties of float16 / bfloat16 quotients,
# their overflow edges and subnormals, signed zeros, infinities and NaN.
SPECIAL = np.array(
    [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 2049.0, 2051.0, -4097.0, 65504.0, 65519.0, 65520.0,
     -65536.0, 3.0e5, 1e30, -1e30, 3.3895e38, 6.0e-8, 2.0e-8, -3.0e-5, 1e-40,
     np.inf, -np.inf, np.nan, 257.0, 129.5, -128.5, 32767.5],
    np.float32,
)

# (x shape, axis, block size or 0): per tensor (scale shape ()), per axis
# (middle and last axis), blocked.
LAYOUTS = [
    ((3, 50), 1, 0, "tensor"),
    ((2, 5, 7, 3), 1, 0, "axis"),
    ((4, 37), -1, 0, "axis"),
    ((4, 37), 1, 8, "blocked"),
    ((6, 10, 7), 1, 3, "blocked"),
]


def _x(rng: np.random.Generator, shape, dtype: np.dtype, spread: float) -> np.ndarray:
    x = normal_with_specials(rng, shape, spread, SPECIAL)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _params(rng, name: str, shape, axis: int, block: int, kind: str, s_dtype: np.dtype):
    """Scale (of s_dtype: both signs, values that are not exact in float16 /
    bfloat16) and a zero point of the type name, of the layout's shape."""
    pshape = param_shape(shape, axis, block, kind)
    s = (rng.choice(np.array([0.37, 1 / 3, 2.0, -0.5, 3e-3, 0.1], np.float32), pshape)
         * (1 + rng.random(pshape))).astype(np.float32).astype(s_dtype)
    dt, lo, hi = TYPES[name]
    if name in ("float16", "bfloat16"):
        z = (rng.standard_normal(pshape) * 4).astype(np.float32).astype(dt)
    else:
        z = rng.integers(lo, hi, pshape, endpoint=True, dtype=np.int64).astype(dt)
    return np.asarray(s), np.asarray(z)


def _expanded(v: np.ndarray, shape, axis: int, block: int) -> np.ndarray:
    if not block:
        return v
    a = axis % len(shape)
    return expand_blocks(v, a, block, shape[a])



QUANTIZE_CASES = [
    pytest.param(NUMPY, x_type, s_type, precision, name, layout, None,
                 id=f"numpy-{layout[0]}-{layout[2]}-{name}-{precision}-{s_type}-{x_type}")
    for layout in LAYOUTS for name in ALL_TYPES for precision in [None, *REALS]
    for s_type in REALS for x_type in REALS
] + [
    pytest.param(LIBRARY, x_type, s_type, precision, name, layout, level,
                 id=f"library-{layout[3]}-{name}-{x_type}-{s_type}-{precision}-{level_id}")
    for layout in LIBRARY_LAYOUTS for name in ["int8", "uint16", "int32", "float16"]
    for x_type, s_type, precision in [
        ("float16", "float16", None), ("bfloat16", "bfloat16", None),
        ("float32", "float16", None), ("float16", "float32", None),
        ("float32", "float32", "bfloat16"), ("float16", "float16", "float32")]
    for level_id, level in LEVEL_IDS.items()
]


@pytest.mark.parametrize(("path", "x_type", "s_type", "precision", "name", "layout", "level"),
                         QUANTIZE_CASES)
def test_quantize_against_contract(path, x_type, s_type, precision, name, layout, level):
    shape, axis, block, kind = layout
    rng = case_rng(path, x_type, s_type, precision, name, shape, kind)
    s, z = _params(rng, name, shape, axis, block, kind, REAL_TYPES[s_type])
    x = _x(rng, shape, REAL_TYPES[x_type], 1e10 if name in ("int32", "uint32") else 300.0)
    prec = None if precision is None else REAL_TYPES[precision]
    y = quantize_via(path, x, s, z, axis=axis, block_size=block, precision=prec, level=level,
                     threads=2 if kind == "blocked" else 1,
                     params="input" if kind == "axis" else "const")
    want = quantize(x, _expanded(s, shape, axis, block), _expanded(z, shape, axis, block),
                    axis=axis % len(shape), precision=prec)
    assert_same_bits(y, want, f"{path}: Q x {x_type} s {s_type} precision {precision} -> "
                              f"{name} {kind}")


DEQUANTIZE_CASES = [
    pytest.param(NUMPY, s_type, output_dtype, name, layout, None,
                 id=f"numpy-{layout[0]}-{layout[2]}-{name}-{output_dtype}-{s_type}")
    for layout in LAYOUTS for name in ALL_TYPES for output_dtype in [None, *REALS]
    for s_type in REALS
] + [
    # (the library's output_dtype only repeats the scale's type before
    # onnxruntime 1.24: docs/differences.rst)
    pytest.param(LIBRARY, s_type, s_type if layout[3] == "axis" else None, name, layout, level,
                 id=f"library-{layout[3]}-{name}-{s_type}-{level_id}")
    for layout in LIBRARY_LAYOUTS for name in ["int8", "uint8", "int16", "int32", "bfloat16"]
    for s_type in ["float16", "bfloat16", "float32"]
    for level_id, level in LEVEL_IDS.items()
]


@pytest.mark.parametrize(("path", "s_type", "output_dtype", "name", "layout", "level"),
                         DEQUANTIZE_CASES)
def test_dequantize_against_contract(path, s_type, output_dtype, name, layout, level):
    """The output has the scale's type, or output_dtype's."""
    shape, axis, block, kind = layout
    rng = case_rng(path, s_type, output_dtype, name, shape, kind)
    s, z = _params(rng, name, shape, axis, block, kind, REAL_TYPES[s_type])
    x = extql.quantize_linear(_x(rng, shape, F32, 1e9 if "32" in name else 300.0),
                              np.float32(0.25), z.reshape(-1)[:1].reshape(()))
    out = None if output_dtype is None else REAL_TYPES[output_dtype]
    y = dequantize_via(path, x, s, z, axis=axis, block_size=block, output_dtype=out,
                       level=level, threads=1)
    assert y.dtype == (REAL_TYPES[s_type] if out is None else out)
    want = dequantize(x, _expanded(s, shape, axis, block), _expanded(z, shape, axis, block),
                      axis=axis % len(shape), output_dtype=out)
    assert_same_bits(y, want, f"{path}: DQ {name} s {s_type} -> {output_dtype} {kind}")


def test_float16_division_rounds_in_float16():
    """The rule that sets the precision apart: 2049 / 1 is a float16 tie
    (2048 and 2050 are neighbours) that rounds to 2048 in float16 and stays
    2049 in float32; 70000 / 1 overflows float16 to inf, which saturates."""
    x = np.array([2049.0, 2051.0, 70000.0, -70000.0, 0.1], np.float32)
    one16, one32 = np.float16(1), np.float32(1)
    zp = np.int32(0)
    assert extql.quantize_linear(x, one16, zp).tolist() == [2048, 2052, 2**31 - 1, -(2**31), 0]
    assert extql.quantize_linear(x, one32, zp).tolist() == [2049, 2051, 70000, -70000, 0]
    assert extql.quantize_linear(x, one32, zp, precision=np.float16).tolist() == [
        2048, 2052, 2**31 - 1, -(2**31), 0]
    assert extql.quantize_linear(x, one16, zp, precision=np.float32).tolist() == [
        2049, 2051, 70000, -70000, 0]
    # bfloat16 keeps 8 bits: 257 is a tie between 256 and 258.
    assert extql.quantize_linear(np.float32(257), np.ones((), BF16), zp).tolist() == 256


def test_dequantize_output_overflows_to_inf_and_keeps_nan():
    x = np.array([32767, -32768, 0, 1], np.int16)
    y = extql.dequantize_linear(x, np.float16(4.0))
    assert y.dtype == F16
    assert y.tolist()[:2] == [np.inf, -np.inf] and y.tolist()[2:] == [0.0, 4.0]
    y = extql.dequantize_linear(np.array([np.nan, 1.0], F16), np.float16(2.0), np.float16(0))
    assert np.isnan(y[0]) and y[1] == 2.0
    y = extql.dequantize_linear(x, np.float32(1e38), output_dtype=BF16)
    assert y.dtype == BF16 and np.isinf(y.astype(np.float32)[:2]).all()


SPLIT_CASES = [
    pytest.param(NUMPY, threads, x_type, s_type, (64, 70000), False,
                 id=f"numpy-{threads}-{x_type}-{s_type}")
    for threads in (1, 2) for x_type, s_type in [("float16", "float16"), ("bfloat16", "bfloat16"),
                                                 ("float32", "float16"), ("float16", "float32")]
] + [pytest.param(LIBRARY, 2, "float16", "float16", (8, 64, 56, 56), True,
                  id="library-2-float16-float16-nchw")]


@pytest.mark.parametrize(("path", "threads", "x_type", "s_type", "shape", "per_axis"),
                         SPLIT_CASES)
def test_large_tensors_split_and_streamed(path, threads, x_type, s_type, shape, per_axis):
    """Tensors split across threads (the NumPy API's, the session's),
    outputs large enough to be streamed; a quantize and its dequantize."""
    rng = np.random.default_rng(9)
    x = _x(rng, shape, REAL_TYPES[x_type], 30.0 if per_axis else 300.0)
    if per_axis:
        s = (rng.random(shape[1]) * 0.3 + 0.01).astype(REAL_TYPES[s_type])
        z = rng.integers(-5, 5, shape[1]).astype(np.int8)
    else:
        s, z = np.array([0.37], REAL_TYPES[s_type]), np.int16(3)
    old = extql.get_num_threads()
    extql.set_num_threads(threads)
    try:
        y = quantize_via(path, x, s, z, axis=1, level=LEVELS[-1], threads=threads)
        back = dequantize_via(path, y, s, z, axis=1, level=LEVELS[-1], threads=threads)
    finally:
        extql.set_num_threads(old)
    assert_same_bits(y, quantize(x, s, z, axis=1), f"{path}: quantize")
    assert back.dtype == REAL_TYPES[s_type]
    assert_same_bits(back, dequantize(y, s, z, axis=1), f"{path}: dequantize")


# (bfloat16 buffers can be bound from Python from onnxruntime 1.20 on.)
@pytest.mark.parametrize(("op", "s_type"), [(Q, "float16"), (DQ, "float16")] + (
    [(Q, "bfloat16")] if ort_io.has_typed_ortvalues() else []))
def test_unaligned_float16_buffers_in_the_library(op, s_type):
    """float16 / bfloat16 x, scale and output at odd addresses: the shim
    stages them through aligned copies and converts the staged scale."""
    rng = np.random.default_rng(12)
    fdt = REAL_TYPES[s_type]
    x = (rng.standard_normal((3, 200)) * 40).astype(np.float32).astype(fdt)
    s = np.array([0.37, 1.1, 3.3], np.float32).astype(fdt)
    z = np.array([1, -2, 5], np.int16)
    if op == DQ:
        x = quantize(x, s, z, axis=0)
        want = dequantize(x, s, z, axis=0)
    else:
        want = quantize(x, s, z, axis=0)
    model, _, out_dtype = node_model(op, x, s, z, axis=0, params="input")
    out = run_unaligned(session(model, threads=1, level=LEVELS[-1]), {"x": x, "s": s, "z": z},
                        out_dtype, x.shape)
    assert_same_bits(out, want, f"{op} {s_type} unaligned")


# ---------------------------------------------------------------------------
# The official operators: onnx.reference and onnxruntime
# ---------------------------------------------------------------------------

OPSETS = [v for v in (21, 23, 24, 25) if v <= onnx.defs.onnx_opset_version()]


def _official(op: str, types: tuple[int, int, int], out_type: int, opset: int,
              **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", "s", "z"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in zip("xsz", types,
                                                                                  strict=True)],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset <= 21 else 11
    return model


def _ort_run(model: onnx.ModelProto, feeds) -> np.ndarray | None:
    """onnxruntime's own operator's output, or None where this onnxruntime
    has no kernel for the types or cannot read the opset."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]
    except Exception as exc:  # noqa: BLE001 - only "not implemented / too new" is expected
        text = str(exc)
        if any(k in text for k in ("NOT_IMPLEMENTED", "IR version", "opset", "Opset",
                                   "not supported", "No Op registered")):
            return None
        raise


def _agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elements where two outputs hold the same bits (or both NaN)."""
    if a.dtype.kind == "f" or a.dtype == BF16:
        fa, fb = a.astype(np.float32), b.astype(np.float32)
        return (a.view(f"u{a.itemsize}") == b.view(f"u{b.itemsize}")) | (
            np.isnan(fa) & np.isnan(fb))
    return a == b


# x and the scale of different types, and the attribute precision: from
# opset 23 (before it the scale has x's type).
Q_CASES = [
    (opset, x_type, s_type, precision)
    for opset in OPSETS
    for x_type, s_type, precision in [
        ("float16", "float16", None), ("bfloat16", "bfloat16", None),
        ("float32", "float16", None), ("float16", "float32", None),
        ("float32", "bfloat16", None), ("float32", "float32", "float16"),
        ("float16", "float16", "float32"), ("bfloat16", "float32", "bfloat16"),
    ]
    if opset >= 23 or (x_type == s_type and precision is None)
]


@pytest.mark.parametrize(("opset", "x_type", "s_type", "precision"), Q_CASES)
@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint16"])
def test_quantize_against_the_official_operator(opset, x_type, s_type, precision, name):
    """Judged where onnxruntime's QuantizeLinear and onnx.reference agree (each
    alone where the other cannot run the case); they must agree on most."""
    rng = np.random.default_rng(4)
    shape = (3, 40)
    xd, sd = REAL_TYPES[x_type], REAL_TYPES[s_type]
    s, z = _params(rng, name, shape, 1, 0, "axis", sd)
    x = _x(rng, shape, xd, 300.0)
    attrs = {"axis": 1}
    if precision is not None:
        attrs["precision"] = CODE[REAL_TYPES[precision]]
    code = CODE.get(z.dtype) or onnx.helper.np_dtype_to_tensor_dtype(z.dtype)
    model = _official("QuantizeLinear", (CODE[xd], CODE[sd], code), code, opset, **attrs)
    feeds = {"x": x, "s": s, "z": z}
    prec = None if precision is None else REAL_TYPES[precision]
    y = extql.quantize_linear(x, s, z, axis=1, precision=prec)
    ref_model = model
    if precision is None and x_type != s_type:
        # "The type of y_scale determines the precision of the division":
        # onnx.reference divides in NumPy's promoted type instead unless the
        # attribute precision says so, so it is asked with the attribute.
        ref_model = _official("QuantizeLinear", (CODE[xd], CODE[sd], code), code, opset,
                              precision=CODE[sd], **attrs)
    ref = ReferenceEvaluator(ref_model).run(None, feeds)[0]
    # onnx.reference converts round(x / s) to int32 first: NaN, +-inf and
    # quotients beyond int32 come out wrapped there, so it is judged on the
    # others only (beyond float16's range a float16 quotient is inf).
    with np.errstate(all="ignore"):
        v = x.astype(np.float32) / s.astype(np.float32)[None, :]
        finite = np.isfinite(v) & (np.abs(v) < 6.0e4)
    got = _ort_run(model, feeds)
    judged = finite.copy()
    if got is not None:
        agree = finite & _agree(got, ref)
        # onnxruntime 1.18's float16 -> uint16 disagrees with the reference
        # on most elements; recent releases agree on most.
        if Version(ort.__version__) >= Version("1.20"):
            assert agree.sum() >= x.size * 0.6, (
                f"the official implementations disagree on {x.size - agree.sum()} of {x.size}")
        if agree.sum() >= x.size * 0.6:
            judged = agree
    assert_same_bits(y[judged], ref[judged], "extql vs the official operator")


# output_dtype of DequantizeLinear: from opset 23.
DQ_CASES = [(opset, s_type, out) for opset in OPSETS
            for s_type in ("float16", "bfloat16", "float32")
            for out in (None, "float32", "float16", "bfloat16") if opset >= 23 or out is None]


@pytest.mark.parametrize(("opset", "s_type", "output_dtype"), DQ_CASES)
@pytest.mark.parametrize("name", ["int8", "uint16", "int32"])
def test_dequantize_against_the_official_operator(opset, s_type, output_dtype, name):
    rng = np.random.default_rng(6)
    shape = (3, 40)
    sd = REAL_TYPES[s_type]
    s, z = _params(rng, name, shape, 1, 0, "axis", sd)
    if name == "int32":
        z = np.zeros_like(z)  # the official int32 computes x - zp in 32 bits
    x = extql.quantize_linear(_x(rng, shape, F32, 1e3), np.float32(0.01), z.reshape(-1)[:1][0])
    out = sd if output_dtype is None else REAL_TYPES[output_dtype]
    attrs = {"axis": 1}
    if output_dtype is not None:
        attrs["output_dtype"] = CODE[out]
    code = onnx.helper.np_dtype_to_tensor_dtype(z.dtype)
    model = _official("DequantizeLinear", (code, CODE[sd], code), CODE[out], opset, **attrs)
    feeds = {"x": x, "s": s, "z": z}
    y = extql.dequantize_linear(x, s, z, axis=1,
                                output_dtype=None if output_dtype is None else out)
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    got = _ort_run(model, feeds)
    judged = np.ones(x.shape, bool) if got is None else _agree(got, ref)
    assert judged.sum() >= x.size * 0.9
    assert_same_bits(y[judged], ref[judged].astype(y.dtype), "extql vs the official operator")


def test_onnxruntime_runs_float16_quantize():
    """So that the comparisons above are not silently judged by the
    reference alone where onnxruntime can run them."""
    if Version(ort.__version__) >= Version("1.20"):
        model = _official("QuantizeLinear", (TensorProto.FLOAT16,) * 2 + (TensorProto.INT8,),
                          TensorProto.INT8, 21, axis=1)
        got = _ort_run(model, {"x": np.ones((2, 3), F16), "s": np.ones(3, F16),
                               "z": np.zeros(3, np.int8)})
        assert got is not None and got.tolist() == [[1, 1, 1]] * 2
