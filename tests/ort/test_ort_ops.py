"""extql's custom ops in onnxruntime: every type, granularity, axis and
zero-point form, bit for bit against the independent contract
(tests/contract.py) and the NumPy API."""

from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest
from contract import BF16, TYPES, assert_same_bits, dequantize, quantize
from onnx import TensorProto, helper
from ortutil import (
    DQ,
    ONNX_OF,
    ORT_TYPE,
    Q,
    make_model,
    node_model,
    run,
    run_node,
    run_unaligned,
    session,
    tensor,
    value_info,
)

import extql
from extql import ort_io

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

TYPE_NAMES = list(TYPES)
RNG = np.random.default_rng(1234)


def special_floats(n: int, rng: np.random.Generator) -> np.ndarray:
    """Random float32 with the values that break careless kernels mixed in:
    ties, NaN, +-inf, huge values, signed zeros, subnormals."""
    x = (rng.standard_normal(n) * rng.choice([1, 10, 1000, 1e6], n)).astype(np.float32)
    specials = np.array(
        [0.5, 1.5, 2.5, -0.5, -2.5, np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 0.0, -0.0,
         1e-45, 65504.0, 65520.0, -1e9, 2.0**31, 2.0**32, 126.5, 127.5, -128.5],
        dtype=np.float32,
    )
    idx = rng.choice(n, min(n, specials.size), replace=False)
    x[idx] = specials[: idx.size]
    return x


def zero_point(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dt, lo, hi = TYPES[name]
    if name in ("float16", "bfloat16"):
        return rng.uniform(-4, 4, shape).astype(np.float32).astype(dt)
    span = min(hi - lo, 200)
    mid = (lo + hi) // 2
    return rng.integers(mid - span // 2, mid + span // 2, shape, endpoint=True).astype(dt)


def quantized(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values of a quantized type over its whole range (NaN/inf too)."""
    dt, lo, hi = TYPES[name]
    if name in ("float16", "bfloat16"):
        v = special_floats(int(np.prod(shape)), rng).reshape(shape)
        with np.errstate(over="ignore"):  # huge values become inf: wanted
            return v.astype(dt)
    return rng.integers(lo, hi, shape, endpoint=True, dtype=np.int64).astype(dt)


# (x shape, scale shape, axis attribute) -- per tensor and per axis
GRANULARITIES = [
    pytest.param((2, 3, 5), (), None, id="tensor-scalar"),
    pytest.param((2, 3, 5), (1,), None, id="tensor-[1]"),
    pytest.param((7,), (), 0, id="tensor-rank1"),
    pytest.param((), (), None, id="tensor-0d"),
    pytest.param((2, 3, 5), (3,), None, id="axis-default1"),
    pytest.param((2, 3, 5), (2,), 0, id="axis0"),
    pytest.param((2, 3, 5), (5,), 2, id="axis2"),
    pytest.param((2, 3, 5), (5,), -1, id="axis-1"),
    pytest.param((2, 3, 5), (2,), -3, id="axis-3"),
    pytest.param((4, 6), (6,), -1, id="axis-last-2d"),
    pytest.param((0, 3), (3,), 1, id="empty"),
]
ZP_FORMS = ["given", "absent", "empty"]


def scale_for(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.choice(np.array([0.5, 0.1, 3.0, 0.007, 1.0, 2.0**-10], np.float32), shape)


def _axis_for_contract(axis: int | None) -> int:
    return 1 if axis is None else axis


def seeded(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# Without a zero point a quantize has one output type, uint8.
QUANTIZE_FORMS = [(n, "given") for n in TYPE_NAMES] + [("uint8", "absent"), ("uint8", "empty")]


@pytest.mark.parametrize("name,zp_form", QUANTIZE_FORMS)
@pytest.mark.parametrize("xshape,sshape,axis", GRANULARITIES)
def test_quantize(name, xshape, sshape, axis, zp_form):
    rng = seeded(name, xshape, sshape, axis, zp_form)
    x = special_floats(max(int(np.prod(xshape)), 1), rng)[: int(np.prod(xshape))].reshape(xshape)
    s = scale_for(sshape, rng)
    zp = zero_point(name, sshape, rng) if zp_form == "given" else None
    y = run_node(Q, x, s, zp, zp_form=zp_form, axis=axis)
    a = _axis_for_contract(axis)
    assert_same_bits(y, quantize(x, s, zp, axis=a), f"quantize {name}")
    assert_same_bits(y, extql.quantize_linear(x, s, zp, axis=a), f"quantize {name} vs NumPy API")


@pytest.mark.parametrize("name", TYPE_NAMES)
@pytest.mark.parametrize("xshape,sshape,axis", GRANULARITIES)
@pytest.mark.parametrize("zp_form", ZP_FORMS)
def test_dequantize(name, xshape, sshape, axis, zp_form):
    rng = seeded(name, xshape, sshape, axis, zp_form, "dq")
    x = quantized(name, xshape, rng)
    s = scale_for(sshape, rng)
    zp = zero_point(name, sshape, rng) if zp_form == "given" else None
    y = run_node(DQ, x, s, zp, zp_form=zp_form, axis=axis)
    a = _axis_for_contract(axis)
    assert_same_bits(y, dequantize(x, s, zp, axis=a), f"dequantize {name}")
    assert_same_bits(y, extql.dequantize_linear(x, s, zp, axis=a), f"dequantize {name} vs NumPy")


@pytest.mark.parametrize("name", TYPE_NAMES)
@pytest.mark.parametrize("zp_shape", [(), (1,)])
def test_per_tensor_zero_point_shapes(name, zp_shape):
    """A scalar and a one-element zero point are both per tensor, with a
    scalar or one-element scale, as runtime inputs (not initializers)."""
    rng = np.random.default_rng(7)
    x = special_floats(60, rng).reshape(3, 4, 5)
    for s_shape in [(), (1,)]:
        s = np.full(s_shape, 0.25, np.float32)
        zp = zero_point(name, zp_shape, rng)
        y = run_node(Q, x, s, zp, params="input")
        assert_same_bits(y, quantize(x, s, zp), f"quantize {name} zp{zp_shape} s{s_shape}")
        q = quantized(name, (3, 4, 5), rng)
        d = run_node(DQ, q, s, zp, params="input")
        assert_same_bits(d, dequantize(q, s, zp), f"dequantize {name} zp{zp_shape} s{s_shape}")


@pytest.mark.parametrize("op", [Q, DQ])
@pytest.mark.parametrize("name", TYPE_NAMES)
def test_legacy_names(op, name):
    """VitisQuantizeLinear / VitisDequantizeLinear in com.vai.quantize."""
    rng = np.random.default_rng(11)
    s = scale_for((4,), rng)
    zp = zero_point(name, (4,), rng)
    if op == Q:
        x = special_floats(48, rng).reshape(3, 4, 4)
        y = run_node(Q, x, s, zp, legacy=True)
        assert_same_bits(y, quantize(x, s, zp, axis=1), f"VitisQuantizeLinear {name}")
    else:
        x = quantized(name, (3, 4, 4), rng)
        y = run_node(DQ, x, s, zp, legacy=True)
        assert_same_bits(y, dequantize(x, s, zp, axis=1), f"VitisDequantizeLinear {name}")


# --- type inference -----------------------------------------------------


@pytest.mark.parametrize("name", TYPE_NAMES)
@pytest.mark.parametrize("legacy", [False, True])
def test_inferred_types(name, legacy):
    """With no declared output type, onnxruntime's graph type inference must
    give the zero point's type (quantize), float (dequantize), and uint8 for
    a quantize without zero point (two inputs or an empty name)."""
    dt = TYPES[name][0]
    x32 = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    s = np.float32(0.5)
    cases = [
        (Q, x32, np.zeros((), dt), "given", ONNX_OF[dt]),
        (DQ, quantized(name, (2, 3), RNG), np.zeros((), dt), "given", TensorProto.FLOAT),
        (DQ, quantized(name, (2, 3), RNG), None, "absent", TensorProto.FLOAT),
        (DQ, quantized(name, (2, 3), RNG), None, "empty", TensorProto.FLOAT),
    ]
    if name == "uint8":
        cases += [(Q, x32, None, "absent", TensorProto.UINT8), (Q, x32, None, "empty",
                                                                  TensorProto.UINT8)]
    for op, x, zp, form, expected in cases:
        model, _, _ = node_model(op, x, s, zp, zp_form=form, legacy=legacy,
                                 declare_output=False, widen_bf16=False)
        got = session(model).get_outputs()[0].type
        assert got == ORT_TYPE[expected], f"{op} {name} zp {form}: inferred {got}"
        y = run_node(op, x, s, zp, zp_form=form, legacy=legacy, declare_output=False)
        if op == Q:
            assert_same_bits(y, quantize(x, s, zp), f"{op} {name} {form}")
        else:
            assert_same_bits(y, dequantize(x, s, zp), f"{op} {name} {form}")


# --- chains ---------------------------------------------------------------


@pytest.mark.parametrize("name", TYPE_NAMES)
@pytest.mark.parametrize("per_axis", [False, True])
def test_q_dq_chain_with_constants(name, per_axis):
    """x -> Q -> DQ with constant scale / zero point initializers and an
    untyped intermediate: the quantized value flows between the two ops."""
    rng = np.random.default_rng(3)
    x = special_floats(4 * 3 * 8, rng).reshape(4, 3, 8)
    sshape = (3,) if per_axis else ()
    s = scale_for(sshape, rng)
    zp = zero_point(name, sshape, rng)
    nodes = [
        helper.make_node(Q, ["x", "s", "z"], ["q"], domain="com.amd.quark", axis=1),
        helper.make_node(DQ, ["q", "s", "z"], ["y"], domain="com.amd.quark", axis=1),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, x.shape)],
        [value_info("y", TensorProto.FLOAT, x.shape)],
        [tensor("s", s), tensor("z", zp)],
    )
    (y,) = run(session(model), {"x": x}, [np.float32], [x.shape])
    expected = dequantize(quantize(x, s, zp, axis=1), s, zp, axis=1)
    assert_same_bits(y, expected, f"Q->DQ {name}")


def test_chain_mixed_with_standard_ops():
    """Extended ops between standard ops, the legacy names in the same model."""
    rng = np.random.default_rng(5)
    x = special_floats(64, rng).reshape(8, 8)
    s = np.float32(0.03)
    zp = np.int16(-7)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(Q, ["r", "s", "z"], ["q"], domain="com.amd.quark"),
        helper.make_node("VitisDequantizeLinear", ["q", "s", "z"], ["d"],
                         domain="com.vai.quantize"),
        helper.make_node("Neg", ["d"], ["y"]),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, x.shape)],
        [value_info("y", TensorProto.FLOAT, x.shape)],
        [tensor("s", np.asarray(s)), tensor("z", np.asarray(zp))],
        domains=("com.amd.quark", "com.vai.quantize"),
    )
    (y,) = run(session(model), {"x": x}, [np.float32], [x.shape])
    r = np.maximum(x, np.float32(0))
    r = np.where(np.isnan(x), x, r)  # ONNX Relu keeps NaN
    assert_same_bits(y, -dequantize(quantize(r, s, zp), s, zp), "Relu->Q->DQ->Neg")


# --- large tensors, threads ----------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["int8", "uint32", "bfloat16"])
def test_large_parallel(name, threads):
    """Tensors above the parallel minimum, split over the session's thread
    pool (or run inline with one thread), per tensor and per axis."""
    rng = np.random.default_rng(9)
    # 4 * 257 * 1021 elements: above the shim's parallel minimum (2^20).
    x = special_floats(4 * 257 * 1021, rng).reshape(4, 257, 1021)
    for sshape, axis in [((), None), ((257,), 1), ((1021,), -1), ((4,), 0)]:
        s = scale_for(sshape, rng)
        zp = zero_point(name, sshape, rng)
        a = _axis_for_contract(axis)
        y = run_node(Q, x, s, zp, axis=axis, threads=threads)
        assert_same_bits(y, quantize(x, s, zp, axis=a), f"quantize {name} {sshape}")
        q = quantized(name, x.shape, rng)
        d = run_node(DQ, q, s, zp, axis=axis, threads=threads)
        assert_same_bits(d, dequantize(q, s, zp, axis=a), f"dequantize {name} {sshape}")


def test_one_session_many_python_threads():
    """One session run from several Python threads at once: every run exact."""
    rng = np.random.default_rng(13)
    s = scale_for((16,), rng)
    zp = zero_point("int16", (16,), rng)
    model, _, _ = node_model(Q, np.zeros((8, 16, 4096), np.float32), s, zp, axis=1)
    sess = session(model, threads=2)
    inputs = [special_floats(8 * 16 * 4096, rng).reshape(8, 16, 4096) for _ in range(6)]
    expected = [quantize(x, s, zp, axis=1) for x in inputs]
    errors: list[str] = []

    def work(k: int) -> None:
        try:
            for i in range(5):
                j = (k + i) % len(inputs)
                y = sess.run(None, {"x": inputs[j]})[0]
                assert_same_bits(y, expected[j], f"thread {k} run {i}")
        except Exception as exc:  # collected and reported by the main thread
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run stalled"
    assert not errors, errors


def test_several_sessions_at_once():
    """Several sessions (own thread pools) running concurrently: no stall,
    exact results."""
    rng = np.random.default_rng(17)
    x = special_floats(4 * 64 * 1024, rng).reshape(4, 64, 1024)
    s = np.float32(0.02)
    zp = np.uint8(100)
    model, _, _ = node_model(Q, x, s, zp)
    sessions = [session(model, threads=2) for _ in range(4)]
    expected = quantize(x, s, zp)
    errors: list[str] = []

    def work(sess) -> None:
        try:
            for _ in range(4):
                assert_same_bits(sess.run(None, {"x": x})[0], expected, "concurrent sessions")
        except Exception as exc:  # collected and reported by the main thread
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(sess,)) for sess in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run stalled"
    assert not errors, errors


def test_bfloat16_io_binding():
    """bfloat16 in and out through IOBinding, NaN/inf/saturation included."""
    rng = np.random.default_rng(19)
    x = special_floats(500, rng).reshape(5, 100)
    s = np.float32(1e-3)
    zp = np.asarray(1.5, BF16)
    y = run_node(Q, x, s, zp)
    assert y.dtype == BF16
    assert_same_bits(y, quantize(x, s, zp), "bfloat16 quantize")
    d = run_node(DQ, y, s, zp)
    assert_same_bits(d, dequantize(y, s, zp), "bfloat16 dequantize")


@pytest.mark.parametrize("name", list(TYPES))
def test_unaligned_buffers(name):
    """Regression (found by the ASan/UBSan run): onnxruntime hands the
    kernel a caller's buffer as it is, and one from np.frombuffer at an odd
    offset is not aligned to its element size -- a misaligned typed pointer
    in the kernels, undefined behaviour.  The shim now stages such tensors
    (inputs and a bound output) through aligned copies; the bits are the
    same as from aligned ones.  (Under tox -e asan, UBSan checks there is no
    misaligned access left.)"""
    if name == "bfloat16" and not ort_io.has_typed_ortvalues():
        pytest.skip("this onnxruntime's Python API cannot bind a bfloat16 buffer")
    dt = TYPES[name][0]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 200)) * 40).astype(np.float32)
    s = np.array([0.5, 1.0, 3.0], np.float32)
    zp = quantize(np.array([1.0, -2.0, 5.0], np.float32), np.float32(1), np.zeros(3, dt))
    for op, inputs, want in (
        (Q, (x, s, zp), quantize(x, s, zp, 0)),
        (DQ, (quantize(x, s, zp, 0), s, zp), dequantize(quantize(x, s, zp, 0), s, zp, 0)),
    ):
        model, _, out_dtype = node_model(op, *inputs, axis=0, params="input")
        out = run_unaligned(session(model), dict(zip(("x", "s", "z"), inputs, strict=True)),
                            out_dtype, x.shape)
        assert_same_bits(out, want, f"{op} {name} unaligned")
