"""Quantize of precision float64 through the fallback functions, without the
library: an int32 scale without ``precision`` (ONNX's QuantizeLinear takes
one, and onnx.reference then divides in float64) and ``precision`` 11 on
any scale.

The contract (tests/contract.py, ``quantize``): the quotient of the exact
values in float64, rounded there to an integer (integer types), or added to
the zero point (float16, bfloat16, float4e2m1), or as it is (float8), then
rounded once to float32 and put through the float32 route.  The models
here -- ExtendedQuantizeLinear and the legacy VitisQuantizeLinear, every
output type the opset allows (21 and 25), x of float32 / float16 / bfloat16
/ int32, per tensor / per axis (NCHW, axis 1) / blocked (block_size 32 and a
short last block) -- get the fallbacks (``attach_fallbacks``,
``inline_fallbacks``) and run in onnxruntime at every optimisation level
and in onnx.reference; their bits are compared with the contract's.  The
data are where a float32 division would give other bits: int32 values
beyond 2^24 and at the ends of int32, quotients that are ties only in
float64, scales of 2^30 + 3 and 0 (inf / NaN, saturated).  Also: the
dispatcher (runtimes that ignore ``overload``), an int32 scale with a float
``precision`` (the float functions), the script fallbacks called from
onnxscript and eagerly, and the graph passes.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import onnxscript
import pytest
from contract import (
    ALL_TYPES,
    BF16,
    FLOAT_TYPES,
    SMALLFLOAT_TYPES,
    assert_same_bits,
    case_rng,
    full_param,
    param_shape,
    quantize,
    zero_points,
)
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnxscript import BFLOAT16, FLOAT, FLOAT16, INT8, INT32, UINT8
from onnxscript import opset21 as op
from ortutil import LEVELS, ONNX_OF, bfloat16_io_fallback, ort_casts_to, run, session, tensor

import extql
import extql.fallbacks
from extql import fallbacks, ort_io, quark
from extql.rules.types import FLOAT64_CODE, OP_NAMES, type_opset

pytestmark = pytest.mark.fallback

DOMAIN = "com.amd.quark"
LEGACY = "com.vai.quantize"
F64 = np.dtype(np.float64)
I32 = np.iinfo(np.int32)

#: int32 x where float32 differs: 2^24 and beyond (2^24 + 1 is not a
#: float32), the ends of int32, odd values (ties after a division by 2).
X_INT = np.array(
    [0, 1, -1, 2, 3, 5, -5, 7, -7, 127, 128, -128, 255, 256, 32767, 65504, 65520, 2**24 - 1,
     2**24, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 1, -(2**25 + 1), 2**25 + 3, 2**25 + 6,
     2**30 + 3, 1610612741, -1610612741, I32.max, I32.max - 1, I32.min, I32.min + 1],
    np.int64,
).astype(np.int32)
#: float x: NaN, infinities, signed zeros, ties, huge and tiny values.
X_FLOAT = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, 5.0, -5.0, 7.5, 127.5,
     -128.5, 32767.5, 65504.0, 65520.0, 16777216.0, 16777218.0, 33554436.0, 1e30, -1e30,
     3.4e38, -3.4e38, 1e-45, -1e-45, 2.0**-24, 448.0, 464.0, 57344.0, 6.0, 7.0],
    np.float32,
)
#: Scales: of int32 (1, -1, 3, 2^30 + 3, 0, the ends) and of the float types.
S_INT = np.array([1, -1, 2, 3, -3, 7, 0, 2**30 + 3, -(2**30 + 3), I32.max, I32.min, 5],
                 np.int64).astype(np.int32)
S_FLOAT = np.array([0.37, 1 / 3, 2.0, -0.5, 1.0, 3.0, 0.0, 1e-3, -7.0, 2.0**-20, 1e5],
                   np.float32)

#: (x shape, axis, block_size) of each granularity.
LAYOUTS = {
    "tensor": ((3, 41), 1, 0),
    "axis": ((2, 6, 3, 5), 1, 0),  # an NCHW activation, per channel
    "blocked": ((2, 3, 70), -1, 32),  # blocks of 32, 32 and 6
}

#: (x type, scale type, precision, layout, ai.onnx opset, domain): an int32
#: scale without precision, an int32 one with precision 11, float scales
#: with precision 11.
CASES = [
    ("int32", "int32", None, "tensor", 21, DOMAIN),
    ("int32", "int32", None, "axis", 25, DOMAIN),
    ("int32", "int32", None, "blocked", 25, LEGACY),
    ("float32", "int32", None, "axis", 21, LEGACY),
    ("float16", "int32", None, "blocked", 25, DOMAIN),
    ("bfloat16", "int32", None, "tensor", 25, DOMAIN),
    ("int32", "int32", 11, "axis", 21, DOMAIN),
    ("int32", "float32", 11, "tensor", 25, DOMAIN),
    ("float32", "float32", 11, "blocked", 21, DOMAIN),
    ("float16", "float16", 11, "axis", 21, LEGACY),
    ("bfloat16", "bfloat16", 11, "axis", 25, DOMAIN),
    ("float32", "bfloat16", 11, "tensor", 25, DOMAIN),
]
DTYPES = {"int32": np.dtype(np.int32), "float32": np.dtype(np.float32),
          "float16": np.dtype(np.float16), "bfloat16": BF16}


def _case_id(case) -> str:
    x, s, precision, layout, opset, domain = case
    return (f"x{x}-s{s}-{'p11' if precision else 'default'}-{layout}-op{opset}"
            f"{'-vitis' if domain == LEGACY else ''}")


def types_at(opset: int) -> list[str]:
    """The output types an opset expresses (and the installed onnx has)."""
    return [n for n in ALL_TYPES
            if type_opset(n) <= opset and hasattr(TensorProto, n.upper())]


def ort_runs(name: str, opset: int) -> bool:
    """Whether this onnxruntime has the Cast the type's function needs (none
    has one to float4e2m1 so far) and this test can bind the type."""
    if name in SMALLFLOAT_TYPES and not ort_io.has_typed_ortvalues():
        return False
    return ort_casts_to(getattr(TensorProto, name.upper()), opset)


@functools.cache
def ort_honours_overload() -> bool:
    """Whether this onnxruntime picks a model-local function by its
    ``overload`` (releases before take one function of a name for every
    call, so a model with several types of one operator needs the
    dispatcher, which covers the eight types only)."""
    def function(overload: str, op_type: str) -> onnx.FunctionProto:
        return helper.make_function("probe", "F", ["x"], ["y"],
                                    [helper.make_node(op_type, ["x"], ["y"])],
                                    [helper.make_opsetid("", 21)], overload=overload)

    node = helper.make_node("F", ["x"], ["y"], domain="probe")
    node.overload = "same"
    results = []
    for functions in ([function("same", "Identity"), function("other", "Neg")],
                      [function("other", "Neg"), function("same", "Identity")]):
        model = helper.make_model(
            helper.make_graph([node], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
            ir_version=10, functions=functions,
            opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("probe", 1)])
        (y,) = session(model, register=False).run(None, {"x": np.ones(1, np.float32)})
        results.append(float(y[0]) == 1.0)
    return all(results)


def check_onnxruntime_types(x, s, zps: dict, kw: dict, want: dict, what: str) -> None:
    """The types of ``zps`` that this onnxruntime runs, attached and run at
    every level: in one model, or one model per type where onnxruntime
    does not honour ``overload``."""
    names = ort_runs_all(zps, kw["opset"])
    groups = [names] if ort_honours_overload() else [[n] for n in names]
    for group in (g for g in groups if g):
        model = attach(quantize_model(x, s, {n: zps[n] for n in group}, **kw))
        check_onnxruntime(model, {"x": x}, {f"y_{n}": want[f"y_{n}"] for n in group}, what)


def ort_runs_all(names, opset: int) -> list[str]:
    """The names (types, "default": uint8) whose models this onnxruntime
    loads and runs at the opset (none where it cannot load the opset or IR
    version at all)."""
    return [n for n in names if ort_runs("uint8" if n == "default" else n, opset)]


def make_x(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    """x of the kind with the special values at random places."""
    n = int(np.prod(shape))
    if kind == "int32":
        v = np.where(rng.random(n) < 0.5, rng.integers(I32.min, I32.max, n, endpoint=True),
                     rng.integers(-700, 700, n, endpoint=True))
        specials = X_INT
    else:
        v = rng.standard_normal(n) * 300.0
        specials = X_FLOAT
    v = v.astype(np.int32 if kind == "int32" else np.float32)
    v[rng.choice(n, min(n, specials.size), replace=False)] = specials[:n]
    with np.errstate(over="ignore"):
        return v.reshape(shape).astype(DTYPES[kind])


def make_scale(rng: np.random.Generator, pshape, kind: str) -> np.ndarray:
    values = S_INT if kind == "int32" else S_FLOAT
    if not pshape:
        return np.asarray(rng.choice(values[values != 0])).astype(DTYPES[kind])
    with np.errstate(over="ignore"):
        return rng.choice(values, pshape).astype(DTYPES[kind])


def make_zero_point(rng: np.random.Generator, name: str, pshape) -> np.ndarray:
    """The contract's zero points; the float types' with signed zeros
    (+0 for a scalar: the constant onnxruntime would fold away)."""
    dt = ALL_TYPES[name][0]
    if name in FLOAT_TYPES or name == "float4e2m1":
        if not pshape:
            return np.zeros((), dt)
        return rng.choice(np.array([0.0, -0.0, 1.5, -3.0, 0.5], np.float32), pshape).astype(dt)
    return zero_points(rng, name, pshape)


def quantize_model(x, s, zps: dict, *, axis: int, block: int, opset: int, domain: str = DOMAIN,
                   attrs: dict | None = None, params: str = "const") -> onnx.ModelProto:
    """One quantize node per entry of ``zps`` (name -> zero point, or None
    for none), output ``y_<name>``; the scale ``s`` and the zero points are
    initializers (``params`` "input": the scale is a graph input of unknown
    shape)."""
    op_name = OP_NAMES[domain][0]
    inputs = [helper.make_tensor_value_info("x", ONNX_OF[x.dtype], x.shape)]
    inits = []
    if params == "input":
        inputs.append(helper.make_tensor_value_info("s", ONNX_OF[s.dtype], None))
    else:
        inits.append(tensor("s", s))
    nodes, outputs = [], []
    for name, z in zps.items():
        names = ["x", "s"]
        if z is not None:
            inits.append(tensor(f"z_{name}", z))
            names.append(f"z_{name}")
        kw = {"axis": axis, **(attrs or {})}
        if block:
            kw["block_size"] = block
        nodes.append(helper.make_node(op_name, names, [f"y_{name}"], domain=domain, **kw))
        code = ONNX_OF[np.asarray(z).dtype] if z is not None else TensorProto.UINT8
        outputs.append(helper.make_tensor_value_info(f"y_{name}", code, x.shape))
    graph = helper.make_graph(nodes, "float64_division", inputs, outputs, inits)
    return helper.make_model(graph, ir_version=11 if opset >= 23 else 10, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)])


def attach(model: onnx.ModelProto) -> onnx.ModelProto:
    """attach_fallbacks, quiet about operators used with types beyond the
    dispatcher's eight (the runtimes here honour overload or get one node)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return extql.attach_fallbacks(model)


def check_reference(model: onnx.ModelProto, feeds: dict, want: dict, what: str) -> None:
    names = [o.name for o in model.graph.output]
    got = dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))
    for name, expected in want.items():
        assert_same_bits(np.asarray(got[name]), expected, f"onnx.reference {what} {name}")


def check_onnxruntime(model: onnx.ModelProto, feeds: dict, want: dict, what: str,
                      levels=LEVELS) -> None:
    """Every output of ``model`` (in ``want``'s order) at each level."""
    m, f = bfloat16_io_fallback(model, feeds)
    for level in levels:
        outs = run(session(m, register=False, level=level), f,
                   [w.dtype for w in want.values()], [w.shape for w in want.values()])
        for (name, expected), got in zip(want.items(), outs, strict=True):
            assert_same_bits(got, expected, f"onnxruntime {level} {what} {name}")


def case_data(case):
    """x, the scale, the zero points (name -> array; "default": none) and
    the contract's outputs of one case."""
    x_kind, s_kind, precision, layout, opset, _ = case
    shape, axis, block = LAYOUTS[layout]
    rng = case_rng("float64", *case)
    kind = "blocked" if block else layout
    pshape = param_shape(shape, axis, block, kind)
    x = make_x(rng, shape, x_kind)
    s = make_scale(rng, pshape, s_kind)
    zps = {name: make_zero_point(rng, name, pshape) for name in types_at(opset)}
    zps["default"] = None
    prec = None if precision is None else F64
    want = {}
    for name, z in zps.items():
        zf = None if z is None else full_param(z, shape, axis, block)
        want[f"y_{name}"] = quantize(x, full_param(s, shape, axis, block), zf, axis=axis,
                                     precision=prec)
    return x, s, zps, want


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_every_type_matches_the_contract(case):
    """Each type's node alone in onnx.reference (which ignores overload),
    all of them in one model in onnxruntime at every level."""
    _, _, precision, layout, opset, domain = case
    _, axis, block = LAYOUTS[layout]
    x, s, zps, want = case_data(case)
    attrs = {} if precision is None else {"precision": precision}
    kw = {"axis": axis, "block": block, "opset": opset, "domain": domain, "attrs": attrs}
    for name, z in zps.items():
        model = extql.attach_fallbacks(quantize_model(x, s, {name: z}, **kw))
        (node,) = model.graph.node
        assert node.overload == fallbacks.float64_overload(name)
        assert {a.name: a.i for a in node.attribute}["precision"] == FLOAT64_CODE
        (fn,) = model.functions
        assert fn.overload == node.overload
        check_reference(model, {"x": x}, {f"y_{name}": want[f"y_{name}"]}, _case_id(case))
    check_onnxruntime_types(x, s, zps, kw, want, _case_id(case))


# (x, scale) pairs around quotients that are ties in float32 or in float64
# only: x beyond 2^24 (rounded in float32), scales of 2^30 + 3 and 2^25 + 1
# (2^30 and 2^25 in float32); the first ten round to other integers through
# a float32 division (checked below).  Then ties, the ends of int32 and
# divisions by zero.
DISCRIMINATING = [
    (25165829, 3), (21000010, 7), (1610612739, 2**30 + 3), (-1610612740, 2**30 + 3),
    (1000503002, 1000003), (18518518, 12345679), (30864198, 12345679), (50331649, 2**25 + 1),
    (83886083, 2**25 + 1), (-117440514, 2**25 + 1),
    (2**25 + 1, 2), (2**24 + 1, 3), (2**24 + 3, 2), (5, 2), (7, 2), (-5, 2), (I32.max, 2),
    (I32.min, 2), (I32.max, 2**30 + 3), (I32.min, -(2**30 + 3)), (I32.max, 1), (I32.min, -1),
    (2**24 + 1, 1), (-(2**24 + 1), -1), (0, -1), (0, 0), (1, 0), (-1, 0), (I32.max, 0),
]


@pytest.mark.parametrize("opset", [21, 25])
def test_quotients_a_float32_division_gets_wrong(opset):
    """Element-wise (x, scale) pairs (the scale blocked with block_size 1,
    so each x has its own) through every type: the bits are the contract's
    float64 ones, which differ from a float32 division's (the data do test
    the route)."""
    x = np.array([[p[0] for p in DISCRIMINATING]], np.int64).astype(np.int32)
    s = np.array([[p[1] for p in DISCRIMINATING]], np.int64).astype(np.int32)
    rng = case_rng("discriminating", opset)
    zps = {name: make_zero_point(rng, name, s.shape) for name in types_at(opset)}
    zps["default"] = None
    want = {f"y_{n}": quantize(x, s, z, axis=1) for n, z in zps.items()}
    zero = np.zeros(s.shape, np.int32)
    f32 = quantize(x, s, zero, axis=1, precision=np.float32)
    assert (quantize(x, s, zero, axis=1) != f32)[0, :10].all()
    assert (want["y_default"] != quantize(x, s, axis=1, precision=np.float32)).any()
    kw = {"axis": 1, "block": 1, "opset": opset}
    for name, z in zps.items():
        model = extql.attach_fallbacks(quantize_model(x, s, {name: z}, **kw))
        check_reference(model, {"x": x}, {f"y_{name}": want[f"y_{name}"]}, "pairs")
    check_onnxruntime_types(x, s, zps, kw, want, "pairs")


@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_saturate_with_a_float64_quotient(saturate):
    """float8 takes float32(q): beyond the range (the int32 ends over 1, a
    division by 0) it saturates, or without saturation becomes inf
    (float8e5m2) or NaN."""
    x = np.array([I32.max, I32.min, 449, 465, 57345, 61441, 0, 1, -1, 7, -7, 3], np.int32)
    s = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 2, -2, 2], np.int32)
    names = [n for n in SMALLFLOAT_TYPES if n != "float4e2m1"]
    zps = {n: np.zeros(s.shape, ALL_TYPES[n][0]) for n in names}
    want = {f"y_{n}": quantize(x, s, z, axis=0, saturate=bool(saturate))
            for n, z in zps.items()}
    kw = {"axis": 0, "block": 1, "opset": 21, "attrs": {"saturate": saturate}}
    for name, z in zps.items():
        model = extql.attach_fallbacks(quantize_model(x, s, {name: z}, **kw))
        check_reference(model, {"x": x}, {f"y_{name}": want[f"y_{name}"]}, "saturate")
    check_onnxruntime_types(x, s, zps, kw, want, f"saturate={saturate}")


def test_oldest_opset_and_a_float8e8m0_scale():
    """The float64 functions at ai.onnx opset 13 (their types' oldest: no
    Reshape allowzero there), and precision 11 on a float8e8m0 scale (a
    power of two, exact in float64) at opset 25."""
    rng = case_rng("opset13")
    x = make_x(rng, (2, 6, 5), "int32")
    s = make_scale(rng, (6,), "int32")
    for name in ("int8", "uint32", "float16", "default"):
        z = None if name == "default" else make_zero_point(rng, name, (6,))
        model = extql.attach_fallbacks(quantize_model(x, s, {name: z}, axis=1, block=0,
                                                      opset=13))
        want = {f"y_{name}": quantize(x, s, z)}
        check_reference(model, {"x": x}, want, "opset 13")
        check_onnxruntime(model, {"x": x}, want, "opset 13", levels=LEVELS[::3])
    if not hasattr(TensorProto, "FLOAT8E8M0"):
        return
    xf = make_x(rng, (2, 6, 5), "float32")
    codes = np.array([127, 130, 100, 150, 255, 127], np.uint8)  # 1, 8, 2^-27, 2^23, NaN, 1
    e8m0 = helper.make_tensor("s", TensorProto.FLOAT8E8M0, [6], codes.tobytes(), raw=True)
    scale = onnx.numpy_helper.to_array(e8m0).astype(np.float32)
    for name in ("int16", "bfloat16", "float8e4m3fn"):
        z = make_zero_point(rng, name, (6,))
        model = quantize_model(xf, scale, {name: z}, axis=1, block=0, opset=25,
                               attrs={"precision": 11})
        model.graph.initializer[0].CopyFrom(e8m0)
        model = extql.attach_fallbacks(model)
        assert model.graph.node[0].overload == f"{name}-float64"
        want = {f"y_{name}": quantize(xf, scale, z, precision=F64)}
        check_reference(model, {"x": xf}, want, "float8e8m0")
        if ort_runs(name, 25) and ort_casts_to(TensorProto.FLOAT8E8M0, 25):
            check_onnxruntime(model, {"x": xf}, want, "float8e8m0", levels=LEVELS[::3])


# --------------------------------------------------------------------------
# Several functions of one operator: the type-generic dispatcher.


def _mixed_model(x, s_int, s_float, zps, opset=21):
    """int8 of precision float64 (int32 scale), int8 of float32 (a float32
    scale), uint16 / float16 of precision float64 (int32 scale, precision
    11 on a float scale), bfloat16 with an int32 scale and no zero point
    (uint8)."""
    inits = [tensor("si", s_int), tensor("sf", s_float),
             *[tensor(f"z_{n}", z) for n, z in zps.items()]]
    q = "ExtendedQuantizeLinear"
    nodes = [
        helper.make_node(q, ["x", "si", "z_int8"], ["a"], domain=DOMAIN),
        helper.make_node(q, ["x", "sf", "z_int8"], ["b"], domain=DOMAIN),
        helper.make_node(q, ["x", "si", "z_uint16"], ["c"], domain=DOMAIN),
        helper.make_node(q, ["x", "sf", "z_float16"], ["d"], domain=DOMAIN, precision=11),
        helper.make_node(q, ["x", "si", "z_bfloat16"], ["e"], domain=DOMAIN),
        helper.make_node(q, ["x", "si"], ["f"], domain=DOMAIN),
        helper.make_node(q, ["x", "sf", "z_int32"], ["g"], domain=DOMAIN,
                         precision=TensorProto.BFLOAT16),
    ]
    codes = [TensorProto.INT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.FLOAT16,
             TensorProto.BFLOAT16, TensorProto.UINT8, TensorProto.INT32]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", ONNX_OF[x.dtype], x.shape)],
        [helper.make_tensor_value_info(n, c, x.shape) for n, c in zip("abcdefg", codes,
                                                                      strict=True)], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)])


def _mixed_case(x_kind: str):
    rng = case_rng("mixed", x_kind)
    x = make_x(rng, (2, 6, 9), x_kind)
    s_int = make_scale(rng, (6,), "int32")
    s_float = make_scale(rng, (6,), "float32")
    zps = {n: make_zero_point(rng, n, (6,)) for n in ("int8", "uint16", "float16", "bfloat16",
                                                       "int32")}
    # Channel 1: x = 0 over negative scales and a zero point of -0, so that
    # the float types' result is -0 (that no Where may turn into +0).
    x[:, 1, :2] = 0
    s_int[1], s_float[1] = -3, -0.5
    zps["float16"][:2] = [0.0, -0.0]
    zps["bfloat16"][:2] = [0.0, -0.0]
    # Channels 0 and 3: scales of 2^25 + 1 and -(2^30 + 3) (2^25 and -2^30
    # in float32) under x = (odd k + 1/2) * 2^25 / 2^30: a float32 division
    # gives ties, rounded to the even k + 1, the float64 one rounds to k.
    s_int[0], s_int[3] = 2**25 + 1, -(2**30 + 3)
    x[:, 0, 2:6] = np.array([1.5, 3.5, -1.5, 5.5]) * 2**25
    x[:, 3, 2:4] = np.array([1.5, -1.5]) * 2**30
    want = {
        "a": quantize(x, s_int, zps["int8"]),
        "b": quantize(x, s_float, zps["int8"]),
        "c": quantize(x, s_int, zps["uint16"]),
        "d": quantize(x, s_float, zps["float16"], precision=F64),
        "e": quantize(x, s_int, zps["bfloat16"]),
        "f": quantize(x, s_int),
        "g": quantize(x, s_float, zps["int32"], precision=BF16),
    }
    return x, _mixed_model(x, s_int, s_float, zps), want


@pytest.mark.parametrize("x_kind", ["int32", "float32", "bfloat16"])
def test_dispatcher_with_float64_nodes(x_kind):
    """One operator with float64 and float functions of one type (int8 and
    int8-float64) and others: attach lists the dispatcher last, and

    * onnx.reference, which ignores overload, runs it for every node;
    * onnxruntime runs the per-type functions (it honours overload) and, with
      them removed and the overloads cleared (a runtime without overload
      support), the dispatcher, at every level.
    """
    x, model, want = _mixed_case(x_kind)
    s_int = onnx.numpy_helper.to_array(model.graph.initializer[0])
    z_int8 = onnx.numpy_helper.to_array(model.graph.initializer[2])
    assert (want["a"] != quantize(x, s_int, z_int8, precision=np.float32)).sum() >= 4
    attached = extql.attach_fallbacks(model)
    overloads = [n.overload for n in attached.graph.node]
    assert overloads == ["int8-float64", "int8", "uint16-float64", "float16-float64",
                         "bfloat16-float64", "uint8-float64", "int32"]
    assert attached.functions[-1].overload == ""  # the dispatcher, last
    # (the one that computes both quotients; an operator without float64
    # nodes gets the one that computes the float quotient only)
    assert attached.functions[-1].node == fallbacks.dispatcher_proto(
        True, opset=attached.functions[-1].opset_import[0].version, float64=True).node
    float_only = [n for n in model.graph.node if n.output[0] in ("b", "g")]
    del model.graph.node[:]
    model.graph.node.extend(float_only)
    plain = extql.attach_fallbacks(model).functions[-1]
    assert plain.overload == "" and plain.node == fallbacks.dispatcher_proto(
        True, opset=plain.opset_import[0].version).node
    assert len(plain.node) < len(attached.functions[-1].node)
    check_reference(attached, {"x": x}, want, f"dispatcher x {x_kind}")
    check_onnxruntime(attached, {"x": x}, want, f"overloads x {x_kind}")
    only = onnx.ModelProto()
    only.CopyFrom(attached)
    kept = [f for f in only.functions if not f.overload]
    del only.functions[:]
    only.functions.extend(kept)
    for node in only.graph.node:
        node.overload = ""
    check_onnxruntime(only, {"x": x}, want, f"dispatcher x {x_kind}")


# --------------------------------------------------------------------------
# The float functions stay the float ones.


@pytest.mark.parametrize("precision", [np.float32, np.float16, BF16],
                         ids=["float32", "float16", "bfloat16"])
def test_int32_scale_with_a_float_precision(precision):
    """An int32 scale with a float ``precision``: rounded to nearest even
    into float32, then to the precision -- the float functions, unchanged,
    with the node's precision kept."""
    rng = case_rng("float precision", np.dtype(precision).name)
    x = make_x(rng, (2, 6, 9), "int32")
    s = np.array([2**24 + 1, 2**30 + 3, 3, -(2**25 + 3), 0, 2049], np.int32)
    code = ONNX_OF[np.dtype(precision)]
    for name in ("int8", "int32", "float16", "bfloat16", "default"):
        z = None if name == "default" else make_zero_point(rng, name, (6,))
        model = extql.attach_fallbacks(quantize_model(x, s, {name: z}, axis=1, block=0,
                                                      opset=21, attrs={"precision": code}))
        (node,) = model.graph.node
        assert node.overload == name
        assert {a.name: a.i for a in node.attribute}["precision"] == code
        want = {f"y_{name}": quantize(x, s, z, precision=precision)}
        check_reference(model, {"x": x}, want, f"precision {code}")
        check_onnxruntime(model, {"x": x}, want, f"precision {code}", levels=LEVELS[::3])


def test_attach_spells_out_precision_float64():
    """An int32 scale without precision gets precision 11 (never the
    scale's type, int32, nor a float type) and the float64 function; a float
    scale gets its type; the float functions carry no float64 op."""
    x = np.ones((2, 3), np.float32)
    z = np.zeros((), np.int8)
    for s, code, overload in [(np.int32(3), FLOAT64_CODE, "int8-float64"),
                              (np.float32(3), TensorProto.FLOAT, "int8"),
                              (np.float16(3), TensorProto.FLOAT16, "int8")]:
        model = extql.attach_fallbacks(quantize_model(x, np.asarray(s), {"int8": z}, axis=1,
                                                      block=0, opset=21))
        (node,) = model.graph.node
        assert ({a.name: a.i for a in node.attribute}["precision"], node.overload) == (
            code, overload)
        (fn,) = model.functions
        assert fn.overload == overload
        casts = {a.i for n in fn.node if n.op_type == "Cast" for a in n.attribute}
        assert (TensorProto.DOUBLE in casts) == (overload == "int8-float64")
    # Twice is harmless: the precision stays, the function is replaced.
    again = extql.attach_fallbacks(model)
    assert [f.overload for f in again.functions] == ["int8"]


def test_float64_function_protos():
    for variant in fallbacks.FLOAT64_VARIANTS:
        opset = max(21, fallbacks.variant_opset(variant))
        fp = fallbacks.function_proto(True, variant, domain=LEGACY, opset=opset)
        assert (fp.domain, fp.name, fp.overload) == (LEGACY, "VitisQuantizeLinear", variant)
        assert {n.domain for n in fp.node} == {""}
        assert [a.name for a in fp.attribute_proto][:3] == ["axis", "block_size", "precision"]
        core = fallbacks.core_proto(True, variant, opset=opset)
        assert core.name == "Quantize_" + variant.replace("-", "_")
        assert "precision" not in [a.name for a in core.attribute_proto]
    assert fallbacks.variant_opset("int4-float64") == 21
    assert fallbacks.split_overload("uint2-float64") == ("uint2", True)
    with pytest.raises(ValueError, match="dequantize has no precision"):
        fallbacks.function_proto(False, "int8-float64")
    with pytest.raises(ValueError, match="unknown fallback variant"):
        fallbacks.function_proto(True, "float32-float64")


# --------------------------------------------------------------------------
# Graph passes.


@pytest.mark.parametrize("params", ["const", "input"])
@pytest.mark.parametrize("case", [CASES[1], CASES[5], CASES[9]],
                         ids=[_case_id(c) for c in (CASES[1], CASES[5], CASES[9])])
def test_inline_fallbacks(case, params):
    """inline_fallbacks: the float64 cores where the granularity is static
    (initializer scale), the flat float64 functions where it is not (a scale
    input of unknown shape); no Extended node or function left."""
    _, _, precision, layout, opset, domain = case
    _, axis, block = LAYOUTS[layout]
    x, s, zps, want = case_data(case)
    # (not int4: onnxruntime has no Reshape for it, which the static path
    # uses on a per-axis zero point, whatever the precision)
    names = [n for n in ("int8", "uint16", "int32", "uint32", "float16", "bfloat16",
                         "float8e5m2", "default") if n in zps]
    attrs = {} if precision is None else {"precision": precision}
    feeds = {"x": x} if params == "const" else {"x": x, "s": s}
    for runtime, chosen in (("reference", names), ("onnxruntime", ort_runs_all(names, opset))):
        if not chosen:
            continue
        model = quantize_model(x, s, {n: zps[n] for n in chosen}, axis=axis, block=block,
                               opset=opset, domain=domain, attrs=attrs, params=params)
        inlined = extql.inline_fallbacks(model)
        assert not [n for n in inlined.graph.node if n.domain in OP_NAMES]
        assert not inlined.functions
        expected = {f"y_{n}": want[f"y_{n}"] for n in chosen}
        if runtime == "reference":
            check_reference(inlined, feeds, expected, "inlined")
        else:
            check_onnxruntime(inlined, feeds, expected, "inlined")


@pytest.mark.usefixtures("kernel_isa")
def test_fold_and_optimize_keep_the_float64_bits():
    """fold_constants computes a constant int32-scale / precision-11 node
    with the kernels (the contract's bits); lower_to_standard leaves such
    nodes Extended (the official operator is not lowered to for them);
    optimize keeps their bits (run here through the fallbacks)."""
    x = np.array([2**24 + 1, 5, -5, 1610612741, I32.max, I32.min, 7, 0], np.int32)
    s = np.array(3, np.int32)
    xf = np.array([2.5, -2.5, 1e9, 0.1, 7.0, -0.0, np.inf, np.nan], np.float32)
    nodes = [helper.make_node("ExtendedQuantizeLinear", ["xc", "s", "z"], ["a"], domain=DOMAIN),
             helper.make_node("ExtendedQuantizeLinear", ["xi", "s", "z"], ["b"], domain=DOMAIN),
             helper.make_node("ExtendedQuantizeLinear", ["xf", "t", "z"], ["c"], domain=DOMAIN,
                              precision=11)]
    graph = helper.make_graph(
        nodes, "passes",
        [helper.make_tensor_value_info("xi", TensorProto.INT32, x.shape),
         helper.make_tensor_value_info("xf", TensorProto.FLOAT, xf.shape)],
        [helper.make_tensor_value_info(n, TensorProto.INT16, x.shape) for n in "abc"],
        [tensor("xc", x), tensor("s", s), tensor("t", np.float32(0.3)),
         tensor("z", np.int16(-3))])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    z = np.int16(-3)
    want = {"a": quantize(x, s, z), "b": quantize(x, s, z),
            "c": quantize(xf, np.float32(0.3), z, precision=F64)}
    feeds = {"xi": x, "xf": xf}
    folded = extql.fold_constants(model)
    (a,) = [n for n in folded.graph.node if n.output[0] == "a"]  # (a graph output)
    assert a.op_type == "Constant"
    assert_same_bits(onnx.numpy_helper.to_array(a.attribute[0].t), want["a"], "folded")
    report: list[str] = []
    lowered = extql.lower_to_standard(model, report=report)
    assert [n.domain for n in lowered.graph.node] == [DOMAIN] * 3
    assert len(report) == 3
    optimized = extql.attach_fallbacks(extql.optimize(model))
    check_reference(optimized, feeds, want, "optimized")
    check_onnxruntime(optimized, feeds, want, "optimized")


# --------------------------------------------------------------------------
# User scripts: the script fallbacks and the quark ops, converted and eager.

q_int8 = extql.fallbacks.QUANTIZE["int8"]
q_bfloat16 = extql.fallbacks.QUANTIZE["bfloat16"]
q_float16 = extql.fallbacks.QUANTIZE["float16"]
q_uint8 = extql.fallbacks.QUANTIZE["default"]


@onnxscript.script(default_opset=op)
def float64_fallbacks(
    x: INT32[2, 6], s: INT32[6], zp: INT8[6], t: FLOAT[6], bz: BFLOAT16[6], hz: FLOAT16[6],
) -> tuple[INT8[2, 6], INT8[2, 6], BFLOAT16[2, 6], UINT8[2, 6], INT8[2, 6], FLOAT16[2, 6]]:
    a = q_int8(x, s, zp)  # int32 scale: precision float64
    b = q_int8(x, t, zp, precision=11)
    c = q_bfloat16(x, s, bz)
    d = q_uint8(x, s)
    e = q_int8(x, s, zp, precision=1)  # the scale rounded to float32
    f = q_float16(x, t, hz, precision=11)
    return a, b, c, d, e, f


def _script_inputs():
    rng = case_rng("scripts")
    x = make_x(rng, (2, 6), "int32")
    s = np.array([2, 3, -1, 2**30 + 3, 0, 7], np.int32)
    zp = zero_points(rng, "int8", (6,))
    t = np.array([0.3, 1 / 3, 2.0, -7.0, 0.0, 1e-3], np.float32)
    bz = np.array([0.0, -0.0, 1.5, -3.0, 0.5, 0.0], np.float32).astype(BF16)
    hz = np.array([-0.0, 0.0, 0.0, -0.0, 2.5, -1.0], np.float16)
    want = [quantize(x, s, zp), quantize(x, t, zp, precision=F64), quantize(x, s, bz),
            quantize(x, s), quantize(x, s, zp, precision=np.float32),
            quantize(x, t, hz, precision=F64)]
    return {"x": x, "s": s, "zp": zp, "t": t, "bz": bz, "hz": hz}, want


def test_script_fallbacks_converted():
    """A call of precision float64 (an int32 scale, precision=11) calls the
    variant's float64 function, which the model carries; the others stay."""
    model = extql.to_model_proto(float64_fallbacks)
    onnx.checker.check_model(model, full_check=True)
    calls = [(n.op_type, {a.name: a.i for a in n.attribute}["precision"])
             for n in model.graph.node if n.domain == "ai.extql.fallbacks"]
    assert calls == [("ExtendedQuantizeLinear_int8-float64", 11),
                     ("ExtendedQuantizeLinear_int8-float64", 11),
                     ("ExtendedQuantizeLinear_bfloat16-float64", 11),
                     ("ExtendedQuantizeLinear_default-float64", 11),
                     ("ExtendedQuantizeLinear_int8", 1),
                     ("ExtendedQuantizeLinear_float16-float64", 11)]
    assert sorted(f.name for f in model.functions) == [
        "ExtendedQuantizeLinear_bfloat16-float64", "ExtendedQuantizeLinear_default-float64",
        "ExtendedQuantizeLinear_float16-float64", "ExtendedQuantizeLinear_int8",
        "ExtendedQuantizeLinear_int8-float64"]
    feeds, want = _script_inputs()
    expected = dict(zip([o.name for o in model.graph.output], want, strict=True))
    check_reference(model, feeds, expected, "script")
    check_onnxruntime(model, feeds, expected, "script")


def test_script_fallbacks_eager():
    feeds, want = _script_inputs()
    got = float64_fallbacks(*feeds.values())
    for i, (actual, expected) in enumerate(zip(got, want, strict=True)):
        assert_same_bits(np.asarray(actual), expected, f"eager fallback output {i}")


@onnxscript.script(default_opset=op)
def quantize_in_a_helper(values, scale, zero_point):
    return q_int8(values, scale, zero_point)


@onnxscript.script(default_opset=op)
def calls_the_helper(x: INT32[2, 6], s: INT32[6], zp: INT8[6]) -> INT8[2, 6]:
    return quantize_in_a_helper(x, s, zp)


def test_script_fallback_in_a_helper_function():
    """In a function of the user's, the scale's type is what its calls pass
    (its names are not the graph's): an int32 scale, precision float64."""
    model = extql.to_model_proto(calls_the_helper)
    helper_fn = next(f for f in model.functions if f.name == "quantize_in_a_helper")
    (call,) = [n for n in helper_fn.node if n.domain == "ai.extql.fallbacks"]
    assert call.op_type == "ExtendedQuantizeLinear_int8-float64"
    feeds, _ = _script_inputs()
    feeds = {k: feeds[k] for k in ("x", "s", "zp")}
    want = {model.graph.output[0].name: quantize(feeds["x"], feeds["s"], feeds["zp"])}
    check_reference(model, feeds, want, "helper")
    check_onnxruntime(model, feeds, want, "helper", levels=LEVELS[::3])


def test_script_fallback_with_a_scale_of_unknown_type_is_an_error():
    """Without the scale's type (nothing annotated) and without
    ``precision``, the division's precision cannot be chosen: an error that
    names the call, not a float32 division by default."""

    @onnxscript.script(default_opset=op)
    def untyped(x, s, zp):
        return q_int8(x, s, zp)

    with pytest.raises(ValueError, match="ExtendedQuantizeLinear_int8: the type of its "
                                         "scale 's' is not known .*pass precision="):
        extql.to_model_proto(untyped)

    @onnxscript.script(default_opset=op)
    def untyped_with_precision(x, s, zp):
        return q_int8(x, s, zp, precision=11)

    model = extql.to_model_proto(untyped_with_precision)
    assert [n.op_type for n in model.graph.node] == ["ExtendedQuantizeLinear_int8-float64"]


@onnxscript.script(default_opset=op)
def quark_int32_scale(x: INT32[2, 6], s: INT32[6], zp: INT8[6], t: FLOAT[6]) -> tuple[
        INT8[2, 6], INT8[2, 6]]:
    return quark.ExtendedQuantizeLinear(x, s, zp), quark.ExtendedQuantizeLinear(
        x, t, zp, precision=11)


@pytest.mark.usefixtures("kernel_isa")
def test_quark_ops_with_an_int32_scale():
    """quark.ExtendedQuantizeLinear with an int32 scale / precision 11:
    eagerly on the kernels, converted and attached through the fallbacks."""
    feeds, _ = _script_inputs()
    feeds = {k: feeds[k] for k in ("x", "s", "zp", "t")}
    want = [quantize(feeds["x"], feeds["s"], feeds["zp"]),
            quantize(feeds["x"], feeds["t"], feeds["zp"], precision=F64)]
    for i, (actual, expected) in enumerate(zip(quark_int32_scale(*feeds.values()), want,
                                               strict=True)):
        assert_same_bits(np.asarray(actual), expected, f"eager quark output {i}")
    model = extql.attach_fallbacks(extql.to_model_proto(quark_int32_scale))
    assert [n.overload for n in model.graph.node] == ["int8-float64"] * 2
    expected = dict(zip([o.name for o in model.graph.output], want, strict=True))
    check_reference(model, feeds, expected, "quark")
    check_onnxruntime(model, feeds, expected, "quark", levels=LEVELS[::3])


def test_eager_fallback_precision_defaults():
    """Eagerly, an int32 scale without precision divides in float64, with
    an explicit float precision in it (its scale rounded to float32 first),
    and precision 11 works on a float scale."""
    x = np.array([2**24 + 1, 5, -5, 1610612741, I32.max, I32.min], np.int32)
    s = np.array(2**30 + 3, np.int32)
    zp = np.array(-1, np.int8)
    assert_same_bits(np.asarray(q_int8(x, s, zp)), quantize(x, s, zp), "default")
    assert_same_bits(np.asarray(q_int8(x, s, zp, precision=TensorProto.BFLOAT16)),
                     quantize(x, s, zp, precision=BF16), "bfloat16")
    s3 = np.array(3, np.int32)
    assert_same_bits(np.asarray(q_uint8(x, s3)), quantize(x, s3), "no zero point")
    assert_same_bits(np.asarray(q_int8(x, np.array(3, np.float32), zp, precision=11)),
                     quantize(x, np.float32(3), zp, precision=F64), "precision 11")
