"""The sub-byte types int4 / uint4 (QuantizeLinear-21) and int2 / uint2
(QuantizeLinear-25) on every path -- the NumPy API and the kernels' packed
layout, and extql's onnxruntime library (packed ONNX tensors bound from
Python or inside the graph, where onnxruntime's own DequantizeLinear reads
what extql wrote; every optimisation level, one and two threads, float32 /
float16 x and scale, per tensor, per axis (NCHW) and blocked (the LLM weight
case), tensors large enough to be split) -- against the contract
(tests/contract.py), ONNX's reference implementation and onnxruntime's own
QuantizeLinear / DequantizeLinear, bit for bit, on every kernel variant
(conftest.py).

onnxruntime takes int4 in a custom operator from 1.21 (extql registers the
types there); int2 / uint2 in none (the session fails, naming the type).

In NumPy the types are ml_dtypes' (one element per byte, in its low bits);
in ONNX tensors they are packed 8 / bits per byte, element k of a byte in its
bits [k * bits, (k + 1) * bits) -- the layout ``pack`` below writes from that
sentence, which the kernels' packed output must match.
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import (
    BF16,
    SUBBYTE_TYPES,
    assert_same_bits,
    dequantize,
    expand_blocks,
    normal_with_specials,
    param_shape,
    quantize,
)
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from ortutil import DOMAIN, DQ, LEVELS, Q, session
from packaging.version import Version
from paths import LIBRARY, NUMPY, dequantize_via, quantize_via

import extql
from extql import _kernels

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
NAMES = list(SUBBYTE_TYPES)
BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
CODE = {name: getattr(TensorProto, name.upper(), None) for name in NAMES}
#: The first ai.onnx opset of each type.
FIRST_OPSET = {"int4": 21, "uint4": 21, "int2": 25, "uint2": 25}
ONNX_OPSET = onnx.defs.onnx_opset_version()
ORT_VERSION = Version(ort.__version__)
RUNS_INT4 = ORT_VERSION >= Version("1.21")
#: The tests that run int4 in the library (the last one checks the releases
#: before 1.21).
needs_int4 = pytest.mark.skipif(not RUNS_INT4, reason="onnxruntime < 1.21: no int4 custom ops; "
                                "test_int4_from_onnxruntime_1_21 checks the failure")
#: The library's cases of the contract tests: int4 / uint4 graph inputs and
#: outputs (packed by extql.ort_io), the parameters initializers or inputs.
LIBRARY_CASES = [
    pytest.param(LIBRARY, "float32", name, ((3, 8, 5), 1, 0, "axis"), params, marks=needs_int4,
                 id=f"library-{name}-{params}")
    for name in ("int4", "uint4") for params in ("const", "input")
]

SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 3.5, 7.5, -8.5, 15.5, 1e30, -1e30,
                    np.inf, -np.inf, np.nan, 1e-40, 2049.0], np.float32)

# (x shape, axis, block size, kind): per tensor, per axis (middle and last
# axis), blocked along the last axis (aligned power-of-two blocks, and a
# ragged tail) and along a middle axis.
LAYOUTS = [
    ((3, 51), 1, 0, "tensor"),
    ((2, 5, 7, 3), 1, 0, "axis"),
    ((4, 37), -1, 0, "axis"),
    ((4, 256), 1, 32, "blocked"),
    ((3, 300), 1, 128, "blocked"),
    ((6, 10, 7), 1, 3, "blocked"),
]


def pack(values: np.ndarray, bits: int) -> np.ndarray:
    """ONNX's packed bytes of the integer values: 8 // bits per byte, element
    k of a byte in its bits [k * bits, (k + 1) * bits), unused bits 0."""
    per, mask = 8 // bits, (1 << bits) - 1
    flat = np.asarray(values, np.int64).reshape(-1)
    out = np.zeros(-(-flat.size // per), np.uint8)
    for k in range(per):
        part = flat[k::per] & mask
        out[: part.size] |= (part << (k * bits)).astype(np.uint8)
    return out


def _params(rng, name: str, shape, axis: int, block: int, kind: str, s_dtype=F32):
    pshape = param_shape(shape, axis, block, kind)
    s = (rng.choice(np.array([0.37, 1 / 3, 2.0, -0.5, 0.1, 1.0], np.float32), pshape)
         * (1 + rng.random(pshape))).astype(np.float32).astype(s_dtype)
    dt, lo, hi = SUBBYTE_TYPES[name]
    z = rng.integers(lo, hi, pshape, endpoint=True, dtype=np.int64).astype(dt)
    return np.asarray(s), np.asarray(z)


def _x(rng, shape, dtype=F32, spread: float = 6.0) -> np.ndarray:
    x = normal_with_specials(rng, shape, spread, SPECIAL)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _expanded(v: np.ndarray, shape, axis: int, block: int) -> np.ndarray:
    if not block:
        return v
    a = axis % len(shape)
    return expand_blocks(v, a, block, shape[a])


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())  # (str hashes vary between runs)


# --------------------------------------------------------------------------
# NumPy API against the contract


QUANTIZE_CASES = [
    pytest.param(NUMPY, x_type, name, layout, "const",
                 id=f"numpy-{layout[0]}-{layout[2]}-{name}-{x_type}")
    for layout in LAYOUTS for name in NAMES for x_type in ["float32", "float16", "bfloat16"]
] + LIBRARY_CASES


@pytest.mark.parametrize(("path", "x_type", "name", "layout", "params"), QUANTIZE_CASES)
def test_quantize_against_contract(path, x_type, name, layout, params):
    shape, axis, block, kind = layout
    dtype = {"float32": F32, "float16": F16, "bfloat16": BF16}[x_type]
    rng = np.random.default_rng(_seed(path, x_type, name, shape, block, params))
    s, z = _params(rng, name, shape, axis, block, kind, dtype)
    x = _x(rng, shape, dtype, spread=60.0 if path == LIBRARY else 6.0)
    # (saturate, meaningless for these types, is given to the library's node)
    y = quantize_via(path, x, s, z, axis=axis, block_size=block, params=params, threads=2,
                     saturate=False if path == LIBRARY else None)
    assert y.dtype == SUBBYTE_TYPES[name][0]
    want = quantize(x, _expanded(s, shape, axis, block), _expanded(z, shape, axis, block),
                    axis=axis % len(shape))
    assert_same_bits(y, want, f"{path}: Q {x_type} -> {name} {kind}")
    # ml_dtypes' layout: the value in the low bits, the others 0.
    assert not (y.view(np.uint8) >> BITS[name]).any()


DEQUANTIZE_CASES = [
    pytest.param(NUMPY, s_type, name, layout, "const",
                 id=f"numpy-{layout[0]}-{layout[2]}-{name}-{s_type}")
    for layout in LAYOUTS for name in NAMES for s_type in ["float32", "float16", "bfloat16"]
] + LIBRARY_CASES


@pytest.mark.parametrize(("path", "s_type", "name", "layout", "params"), DEQUANTIZE_CASES)
def test_dequantize_against_contract(path, s_type, name, layout, params):
    shape, axis, block, kind = layout
    dtype = {"float32": F32, "float16": F16, "bfloat16": BF16}[s_type]
    rng = np.random.default_rng(_seed(path, s_type, name, shape, block, "dq", params))
    s, z = _params(rng, name, shape, axis, block, kind, dtype)
    dt, lo, hi = SUBBYTE_TYPES[name]
    x = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    y = dequantize_via(path, x, s, z, axis=axis, block_size=block, params=params, threads=2)
    assert y.dtype == dtype
    want = dequantize(x, _expanded(s, shape, axis, block), _expanded(z, shape, axis, block),
                      axis=axis % len(shape))
    assert_same_bits(y, want, f"{path}: DQ {name} s {s_type} {kind}")


@pytest.mark.parametrize("name", NAMES)
def test_saturation_and_nan(name):
    """Out of range values saturate to the type's range, NaN gives its low end,
    and the zero point shifts before the clamp."""
    dt, lo, hi = SUBBYTE_TYPES[name]
    x = np.array([np.nan, np.inf, -np.inf, 1e9, -1e9, 0.5, 1.5, -0.5], np.float32)
    y = extql.quantize_linear(x, np.float32(1), np.asarray(hi, dt))
    assert y.astype(int).tolist() == [lo, hi, lo, hi, lo, hi, hi, hi]
    y = extql.quantize_linear(x, np.float32(1), np.asarray(lo, dt))
    assert y.astype(int).tolist() == [lo, hi, lo, hi, lo, lo, min(lo + 2, hi), lo]


@pytest.mark.parametrize("name", NAMES)
def test_zero_point_from_python_numbers_and_output_dtype(name):
    dt, lo, hi = SUBBYTE_TYPES[name]
    x = np.array([hi - lo, 0, lo - hi], np.int64).astype(np.float32)
    y = extql.quantize_linear(x, np.float32(1), output_dtype=dt)
    assert y.dtype == dt
    assert y.astype(int).tolist() == [hi, max(lo, 0), lo]
    q = np.array([lo, hi], dt)
    assert extql.dequantize_linear(q, np.float32(2), lo).tolist() == [0.0, 2.0 * (hi - lo)]
    with pytest.raises(ValueError, match=f"not representable as {name}"):
        extql.dequantize_linear(q, np.float32(2), hi + 1)
    with pytest.raises(TypeError, match="output_dtype .* must be the zero point's type"):
        extql.quantize_linear(x, np.float32(1), np.int8(0), output_dtype=dt)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("threads", [1, 2])
def test_large_tensors_every_split(name, threads):
    """Tensors the kernels split across threads and into passes (8192
    elements), blocked along the last axis and per axis, with odd lengths."""
    rng = np.random.default_rng(_seed(name, threads))
    extql.set_num_threads(threads)
    try:
        for shape, axis, block, kind in [((3, 100_003), 1, 0, "tensor"),
                                         ((1025, 256), 1, 32, "blocked"),
                                         ((517, 131), 0, 0, "axis"),
                                         ((3, 7, 9, 1041), 1, 0, "axis")]:
            s, z = _params(rng, name, shape, axis, block, kind)
            x = _x(rng, shape)
            y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
            se, ze = _expanded(s, shape, axis, block), _expanded(z, shape, axis, block)
            assert_same_bits(y, quantize(x, se, ze, axis=axis), f"Q {name} {kind} t={threads}")
            d = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
            assert_same_bits(d, dequantize(y, se, ze, axis=axis),
                             f"DQ {name} {kind} t={threads}")
    finally:
        extql.set_num_threads(None)


# --------------------------------------------------------------------------
# The packed layout (what the onnxruntime library reads and writes)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 127, 8191, 8193, 70_001])
def test_packed_layout_is_onnxs(name, n):
    """The kernels' packed output is ONNX's layout (odd tails included), and
    packed input reads back to the same values."""
    rng = np.random.default_rng(_seed(name, n))
    dt, lo, hi = SUBBYTE_TYPES[name]
    bits = BITS[name]
    x = _x(rng, (n,))
    s = np.array([0.7], np.float32)
    z = np.array([rng.integers(lo, hi, endpoint=True)], np.int64)
    carrier = np.int8 if lo < 0 else np.uint8
    want = quantize(x, s[0], z.astype(dt)[0])
    y = np.zeros(-(-n * bits // 8), np.uint8)
    _kernels.quantize(CODE_OF[name], 1, 1, x.view(np.uint8), s, z.astype(carrier).view(np.uint8),
                      y, n, 1, n)
    np.testing.assert_array_equal(y, pack(want, bits))
    unpacked = np.zeros(n, np.uint8)
    _kernels.unpack(CODE_OF[name], y, unpacked, n)
    np.testing.assert_array_equal(unpacked.view(carrier).astype(np.int64), want.astype(np.int64))
    d = np.zeros(n, np.float32)
    _kernels.dequantize(CODE_OF[name], 1, y, s, z.astype(carrier).view(np.uint8),
                        d.view(np.uint8), n, 1, n)
    assert_same_bits(d, dequantize(want, s[0], z.astype(dt)[0]), f"packed DQ {name} {n}")


def test_packed_ranges_must_start_on_a_byte():
    """A packed range that does not start on a byte boundary would share its
    first byte with another range: the kernel refuses it."""
    x = np.zeros(8, np.float32)
    y = np.zeros(4, np.uint8)
    import capi

    fn = capi.LIB.extql_quantize_range
    s = np.ones(1, np.float32)
    args = (x.ctypes.data, s.ctypes.data, None, y.ctypes.data, 1, 8, 0)
    assert fn(CODE_OF["int4"], 1, 1, *args, 1, 8, 0) == -1
    assert fn(CODE_OF["int4"], 1, 1, *args, 2, 8, 0) == 0
    assert fn(CODE_OF["int2"], 1, 1, *args, 2, 8, 0) == -1


CODE_OF = {"int4": 22, "uint4": 21, "int2": 26, "uint2": 25}


def test_codes_are_onnxs():
    for name in NAMES:
        if CODE[name] is not None:
            assert CODE_OF[name] == CODE[name]
        assert extql.rules.types.SUBBYTE[name].onnx == CODE_OF[name]


# --------------------------------------------------------------------------
# Against the official operators: onnx.reference and onnxruntime


def _initializer(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4),
                       np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)):
        code = CODE[value.dtype.name]
        return helper.make_tensor(name, code, value.shape, value.astype(np.int64).reshape(-1))
    if value.dtype == BF16:
        return helper.make_tensor(name, TensorProto.BFLOAT16, value.shape,
                                  value.view(np.uint16).tobytes(), raw=True)
    return onnx.numpy_helper.from_array(value, name)


def _official_qdq(name, opset, shape, s, z, axis, block):
    """QuantizeLinear -> y (the official op), and y read as float through a
    DequantizeLinear with scale 1 and zero point 0 (onnxruntime's Python API
    hands no sub-byte output over); and DequantizeLinear of y."""
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "one", "zero"], ["values"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], **attrs)]
    inits = [_initializer("s", s), _initializer("z", z),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("zero", CODE[name], [], [0])]
    x_code = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16}
    s_code = x_code[np.asarray(s).dtype]
    out_code = s_code
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("dq", out_code, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10 if opset < 25 else 11)


def _ort_runs(model) -> ort.InferenceSession | None:
    try:
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime's own exception types
        return None


#: (opset, type) pairs this onnx has: opsets 21, 23, 24, 25 from each type's first.
OFFICIAL = [(opset, name) for name in NAMES for opset in (21, 23, 24, 25)
            if FIRST_OPSET[name] <= opset <= ONNX_OPSET and CODE[name] is not None]
#: The first onnxruntime release whose own operators run the type.
ORT_FIRST = {4: Version("1.19"), 2: Version("1.24")}


@pytest.mark.parametrize(("opset", "name"), OFFICIAL)
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LAYOUTS)
def test_against_the_official_operators(opset, name, shape, axis, block, kind):
    """extql's quantize and dequantize give the bits of onnxruntime's own
    operators (where onnxruntime runs the type) and of ONNX's reference
    implementation, with float32 x and scale.  The two official ones
    disagree where x / s is NaN, +-inf or |x / s| >= 2^31: onnx.reference
    converts the rounded quotient to int32 before it adds the zero point
    (+inf and 1e30 become the low end, NaN the low end or -- the sum
    wrapping around -- the high end); onnxruntime saturates and takes NaN to
    the low end, as the contract does (docs/differences.rst)."""
    rng = np.random.default_rng(_seed(opset, name, shape, block))
    s, z = _params(rng, name, shape, axis, block, kind)
    x = _x(rng, shape)
    y = extql.quantize_linear(x, s, z, axis=axis, block_size=block)
    dq = extql.dequantize_linear(y, s, z, axis=axis, block_size=block)
    a = axis % len(shape)
    with np.errstate(all="ignore"):
        ratio = x / np.broadcast_to(_along_x(_expanded(s, shape, axis, block), shape, a), shape)
    beyond = ~(np.abs(ratio) < 2.0**31)  # NaN too
    assert beyond.any() and not beyond.all()  # both kinds of element are judged
    model = _official_qdq(name, opset, shape, s, z, a, block)
    ref_values, ref_dq = (np.asarray(v) for v in ReferenceEvaluator(model).run(None, {"x": x}))
    assert_same_bits(y.astype(np.float32)[~beyond], ref_values[~beyond],
                     f"Q {name} {kind} opset {opset} vs onnx.reference")
    assert_same_bits(dq[~beyond], ref_dq[~beyond],
                     f"DQ {name} {kind} opset {opset} vs onnx.reference")
    sess = _ort_runs(model)
    if sess is None:
        assert ORT_VERSION < ORT_FIRST[BITS[name]], (
            f"onnxruntime {ort.__version__} does not run {name} at opset {opset}")
        return
    values, got_dq = sess.run(None, {"x": x})
    assert_same_bits(y.astype(np.float32), values, f"Q {name} {kind} opset {opset} vs onnxruntime")
    assert_same_bits(dq, got_dq, f"DQ {name} {kind} opset {opset} vs onnxruntime")
    # Where the two official implementations differ, it is only there.
    assert not (ref_values != values)[~beyond].any()


def _along_x(v: np.ndarray, shape, axis: int) -> np.ndarray:
    """A per-tensor, per-axis or expanded blocked parameter broadcastable to x."""
    v = np.asarray(v)
    if v.ndim == len(shape) and v.ndim >= 2:
        return v
    if v.size == 1:
        return v.reshape(())
    view = [1] * len(shape)
    view[axis] = v.shape[0]
    return v.reshape(view)


# --------------------------------------------------------------------------
# Through the library, the packed tensors inside the graph

LIBRARY_CODE = {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4}
F_CODE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
LIBRARY_SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, -2.5, 7.5, -8.5, 1e30, np.inf, -np.inf, np.nan],
                   np.float32)
# (x shape, axis, block size, granularity)
LIBRARY_LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 8, 5, 7), 1, 0, "axis"),
                   ((16, 256), 1, 32, "blocked"), ((8, 300), 1, 128, "blocked"),
                   ((600, 512), 1, 32, "blocked-large")]


def _session(model, level, threads: int) -> ort.InferenceSession:
    return session(model, threads=threads, level=level)


def _tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype.name in LIBRARY_CODE:
        return helper.make_tensor(name, LIBRARY_CODE[value.dtype.name], value.shape,
                                  value.astype(np.int64).reshape(-1))
    return onnx.numpy_helper.from_array(value, name)


def _library_params(rng, name, shape, axis, block, f_dtype):
    """Scale and zero point: per tensor (axis None), per axis or blocked."""
    if axis is None:
        pshape: tuple[int, ...] = ()
    else:
        a = axis % len(shape)
        pshape = (shape[a],) if not block else shape[:a] + (-(-shape[a] // block),) + shape[a + 1:]
    s = ((rng.random(pshape) + 0.05) * 0.7).astype(np.float32).astype(f_dtype)
    dt, lo, hi = SUBBYTE_TYPES[name]
    return np.asarray(s), np.asarray(rng.integers(lo, hi, pshape, endpoint=True).astype(dt))




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


@needs_int4
@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("f_type", ["float32", "float16"])
@pytest.mark.parametrize("name", list(LIBRARY_CODE))
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LIBRARY_LAYOUTS)
def test_quantize_dequantize_in_the_library(level, threads, f_type, name, shape, axis, block,
                                            kind):
    rng = np.random.default_rng(zlib.crc32(repr((name, shape, f_type)).encode()))
    f_dtype = np.dtype(f_type)
    s, z = _library_params(rng, name, shape, axis if kind != "tensor" else None, block, f_dtype)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[: LIBRARY_SPECIAL.size] = LIBRARY_SPECIAL
    with np.errstate(over="ignore"):
        x = x.astype(f_dtype)
    a = axis % len(shape)
    sess = _session(_chain_model(name, shape, f_dtype, s, z, axis, block), level, threads)
    y, y_official = sess.run(None, {"x": x})
    se, ze = _expanded(s, shape, axis, block), _expanded(z, shape, axis, block)
    q = quantize(x, se, ze, axis=a)
    want = dequantize(q, se, ze, axis=a)
    assert_same_bits(y, want, f"{name} {kind} {f_type} level {level} t={threads}")
    assert_same_bits(y_official, want, f"official DQ of extql's {name} {kind}")


@needs_int4
@pytest.mark.parametrize("name", list(LIBRARY_CODE))
@pytest.mark.parametrize(("shape", "axis", "block", "kind"), LIBRARY_LAYOUTS)
def test_the_library_dequantizes_onnx_packed_initializers(name, shape, axis, block, kind):
    """A packed initializer as onnx writes it (odd element counts too)."""
    rng = np.random.default_rng(7)
    shape = shape[:-1] + (shape[-1] + 1,) if not block else shape
    s, z = _library_params(rng, name, shape, axis if kind != "tensor" else None, block,
                   np.dtype(np.float32))
    dt, lo, hi = SUBBYTE_TYPES[name]
    xq = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    y = _session(_dq_model(name, xq, s, z, axis, block), LEVELS[0], 2).run(None, {})[0]
    a = axis % len(shape)
    want = dequantize(xq, _expanded(s, shape, axis, block), _expanded(z, shape, axis, block),
                      axis=a)
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
    s, z = _library_params(rng, "int4", shape, axis, block, np.dtype(np.float32))
    model = _chain_model("int4", shape, np.float32, s, z, axis, block)
    lowered = extql.lower_to_standard(model)
    assert [n.op_type for n in lowered.graph.node] == ["QuantizeLinear", "DequantizeLinear",
                                                       "DequantizeLinear"]
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[: LIBRARY_SPECIAL.size] = LIBRARY_SPECIAL
    y, y_official = ort.InferenceSession(lowered.SerializeToString(),
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x})
    se, ze = _expanded(s, shape, axis, block), _expanded(z, shape, axis, block)
    want = dequantize(quantize(x, se, ze, axis=axis), se, ze, axis=axis)
    assert_same_bits(y, want, "lowered")
    assert_same_bits(y_official, want, "lowered")


def test_int2_is_not_taken_by_onnxruntime_custom_operators():
    """onnxruntime's custom operators take no int2 tensor: the session fails
    and names the type (extql's NumPy API and reference ops run int2)."""
    rng = np.random.default_rng(5)
    s, z = _library_params(rng, "int2", (4, 8), None, 0, np.dtype(np.float32))
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
