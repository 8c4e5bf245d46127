"""ExtendedInstanceNormalization / VitisInstanceNormalization by standard
ONNX ops (extql.inline_fallbacks, extql.attach_fallbacks, ``extql inline``):
the inlined one-node models run in onnxruntime without the extql library and
in plain onnx.reference, and give the NumPy API's bits (and Quark's stored
ones) on every stored case, ranks 2-5, the special-value kinds and every
optimisation level.  The two documented differences
(docs/differences.rst) are pinned exactly: the few NaNs the page's ``bf``
turns into an infinity or zero, and squares below float32's normal range.
The standard ops the decomposition rests on are checked on their own:
CumSum adds in index order, Pow(v, -0.5) is the C library's powf (in
NumPy, where it is not SVML's)."""

from __future__ import annotations

import functools
import subprocess
import sys

import in_cases
import in_contract
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import quarkmodels as qm
from contract import assert_same_bits, case_rng
from dpu_models import IN_DOMAINS, in_model
from in_data import CASES, inputs, quark_y
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import extql

pytestmark = pytest.mark.usefixtures("kernel_isa")
F32 = np.float32
#: onnx.reference runs the decomposition op by op in NumPy: cases up to this
#: many elements (the stored ones above it run in onnxruntime only).
REFERENCE_MAX = 20_000
LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]


@functools.cache
def _inlined(op: str, eps: float | None, rank: int | None = None) -> bytes:
    """The one-node model inlined (x's rank known or not), serialised."""
    x_shape = None if rank is None else [f"d{i}" for i in range(rank)]
    out = extql.inline_fallbacks(in_model(op, x_shape=x_shape, epsilon=eps))
    return out.SerializeToString()


def _no_custom_ops(model: onnx.ModelProto) -> None:
    assert not model.functions
    for node in model.graph.node:
        assert node.domain in ("", "ai.onnx"), node
    assert not {o.domain for o in model.opset_import} & {*IN_DOMAINS.values(), "ai.extql.internal"}


@functools.cache
def _session(op: str, eps: float | None, rank: int | None = None,
             level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 2
    return ort.InferenceSession(_inlined(op, eps, rank), so, providers=["CPUExecutionProvider"])


@functools.cache
def _evaluator(op: str, eps: float | None) -> ReferenceEvaluator:
    # plain onnx.reference: no extql op anywhere
    return ReferenceEvaluator(onnx.load_from_string(_inlined(op, eps)))


def _reference(op: str, eps: float | None, feeds: dict) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _evaluator(op, eps).run(None, feeds)[0]


def _want(feeds: dict, eps: float | None) -> np.ndarray:
    return extql.extended_instance_normalization(
        feeds["x"], feeds["scale"], feeds["B"], epsilon=1e-5 if eps is None else eps)


def test_inlined_model_has_standard_ops_only():
    for op in IN_DOMAINS:
        shape = ["n", 3, "h", "w"]
        model = extql.inline_fallbacks(in_model(op, x_shape=shape, c=3, y_shape=shape))
        _no_custom_ops(model)
        onnx.checker.check_model(model)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        y = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}["y"]
        assert y.type.tensor_type.elem_type == TensorProto.FLOAT


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_quarks_stored_cases_under_both_names(case):
    """Quark's bits and the NumPy API's, in onnxruntime without the library
    and (cases up to REFERENCE_MAX elements) in onnx.reference."""
    feeds = inputs(case)
    want = _want(feeds, case["epsilon"])
    assert_same_bits(want, quark_y(case), case["id"])
    for op in IN_DOMAINS:
        y = _session(op, case["epsilon"]).run(None, feeds)[0]
        assert_same_bits(y, want, f"{case['id']} {op} onnxruntime")
    if feeds["x"].size <= REFERENCE_MAX:
        assert_same_bits(_reference(case["op_type"], case["epsilon"], feeds), want,
                         f"{case['id']} onnx.reference")


_SHAPES = [(3, 5), (1, 1), (2, 3, 1), (2, 4, 17), (1, 3, 7, 9), (2, 2, 1, 64), (1, 2, 3, 4, 5),
           (2, 3, 2, 2, 9)]


@pytest.mark.parametrize("kind", in_cases.KINDS)
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ranks_and_special_values(shape, kind):
    """Ranks 2-5 (static and unknown), every value kind (NaN / +-inf, ties,
    large offsets, constants, huge, tiny), γ / β with ties and specials."""
    rng = case_rng("dpu-in-fallback", kind, shape)
    x = in_cases.values(rng, shape, kind)
    g, b = in_cases.params(rng, shape[1], special=kind == "specials")
    feeds = {"x": x, "scale": g, "B": b}
    eps = float(rng.choice([1e-5, 1e-3, 0.0, 0.5]))
    want = _want(feeds, eps)
    y = _session("ExtendedInstanceNormalization", eps).run(None, feeds)[0]
    assert_same_bits(y, want, "rank unknown")
    # x's rank known (one epsilon: each model is inlined once)
    y = _session("ExtendedInstanceNormalization", 1e-5, len(shape)).run(None, feeds)[0]
    assert_same_bits(y, _want(feeds, 1e-5), f"rank {len(shape)}")
    if _SHAPES.index(shape) % 2 == 0:  # onnx.reference on every other shape (its time)
        assert_same_bits(_reference("VitisInstanceNormalization", eps, feeds), want, "reference")


def test_signed_zeros_and_specials_in_one_instance():
    x = np.array([[[0.0, -0.0, 1.0, -1.0]], [[-0.0, -0.0, -0.0, -0.0]], [[np.inf, 1.0, 2.0, 3.0]],
                  [[np.inf, -np.inf, 0.0, 1.0]], [[3e38, 3e38, -3e38, 1.0]],
                  [[1e-45, -1e-45, 0.0, 1e-40]]], F32).reshape(2, 3, 4)
    g = np.array([1.0, -0.0, np.inf], F32)
    b = np.array([-0.0, 0.0, 1.0], F32)
    feeds = {"x": x, "scale": g, "B": b}
    want = in_contract.expected(x, g, b)
    assert_same_bits(_want(feeds, None), want, "NumPy API")
    assert_same_bits(_session("ExtendedInstanceNormalization", None).run(None, feeds)[0], want)
    assert_same_bits(_reference("ExtendedInstanceNormalization", None, feeds), want)


def _nan_bits(hi: int, lo: int) -> F32:
    return np.array([(hi << 16) | lo], np.uint32).view(F32)[0]


def test_nans_bf_turns_into_infinities_or_zeros_are_the_documented_difference():
    """The page's bf maps 0x7F800001..0x7F808000 to +inf, 0x7FFF8000.. to
    -0 (and the negative twins to -inf / +0); the Cast pair gives a NaN for
    every NaN, and no standard op before opset 26 tells NaNs apart.  The
    fallback's result is then exactly the NumPy API's for that NaN replaced
    by a plain one; every other NaN (these quiet ones included) gives the
    NumPy API's bits."""
    odd = [_nan_bits(0x7F80, 0x0001), _nan_bits(0x7FFF, 0x8001), _nan_bits(0xFF80, 0x7FFF),
           _nan_bits(0xFFFF, 0xFFFF)]
    assert [in_contract.bf(np.array([v]))[0] for v in odd] == [np.inf, 0.0, -np.inf, 0.0]
    rng = case_rng("dpu-in-fallback", "nan-bits")
    x = rng.normal(0, 1, size=(1, 4, 6)).astype(F32)
    g, b = in_cases.params(rng, 4)
    for i, v in enumerate(odd):
        x[0, i, 2] = v
    feeds = {"x": x, "scale": g, "B": b}
    plain = x.copy()
    plain[0, :, 2] = np.nan
    y = _session("ExtendedInstanceNormalization", None).run(None, feeds)[0]
    assert_same_bits(y, _want({**feeds, "x": plain}, None))
    assert not np.isnan(_want(feeds, None)).all()  # the page's bits differ here
    quiet = x.copy()
    quiet[0, :, 2] = [_nan_bits(0x7FC0, 0), _nan_bits(0xFFC0, 0x8001), _nan_bits(0x7F81, 0),
                      _nan_bits(0x7FFE, 0x8000)]
    assert_same_bits(_session("ExtendedInstanceNormalization", None).run(
        None, {**feeds, "x": quiet})[0], _want({**feeds, "x": quiet}, None))


def _float32_squares_expected(x, g, b, eps=1e-5) -> np.ndarray:
    """The page's computation with each square rounded to float32 before it
    is added (what a float32 Mul and CumSum give): the documented bound."""
    original = in_contract.statistics

    def statistics(v, epsilon, lanes=None):
        n_inst, s = v.shape
        acc = np.zeros(n_inst, F32)
        sq = np.zeros(n_inst, F32)
        for j in range(s):
            acc = (acc + v[:, j]).astype(F32)
            sq = (sq + (v[:, j] * v[:, j]).astype(F32)).astype(F32)
        inv = F32(1.0 / s)
        mean, msq = (acc * inv).astype(F32), (sq * inv).astype(F32)
        mean_b = in_contract.bf(mean)
        r = np.array([in_contract._bf1(in_contract.powf(
            F32(in_contract.msc32(mean[i], mean[i], msq[i]) + F32(epsilon)), -0.5))
            for i in range(n_inst)], F32)
        return mean_b, r

    in_contract.statistics = statistics
    try:
        return in_contract.expected(x, g, b, eps)
    finally:
        in_contract.statistics = original


def test_squares_below_float32s_normal_range_are_the_documented_difference():
    """Squares of |bf(x)| in [2^-75, 2^-67) do not fit float32: the
    fallback rounds each before adding it, the page adds the exact square.
    Here the squares are ties or round to odd units, so the two differ; the fallback gives
    exactly the page's computation with float32 squares, and the NumPy API's
    bits as soon as the squares fit (the values scaled up)."""
    rng = case_rng("dpu-in-fallback", "tiny-squares")
    # odd multiples of 2^-75 (squares that are ties on float32's subnormal
    # grid) and of 2^-76 (squares of an odd count of units, after rounding)
    odd = 2 * rng.integers(0, 16, size=(2, 16, 3)) + 1
    x = np.ldexp(odd * rng.choice([-1.0, 1.0], size=odd.shape),
                 rng.choice([-75, -76], size=odd.shape)).astype(F32)
    x[1] *= F32(2.0**20)  # these squares fit
    g, b = in_cases.params(rng, 16)
    feeds = {"x": x, "scale": g, "B": b}
    y = _session("ExtendedInstanceNormalization", 0.0).run(None, feeds)[0]
    assert_same_bits(y, _float32_squares_expected(x, g, b, 0.0))
    want = _want(feeds, 0.0)
    assert_same_bits(y[1], want[1], "squares that fit")
    assert (y[0].view(np.uint32) != want[0].view(np.uint32)).any()


def _one_op(node: onnx.NodeProto, inits=()) -> ort.InferenceSession:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, None)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializer=list(inits))
    model = helper.make_model(graph, ir_version=10,
                              opset_imports=[helper.make_opsetid("", 21)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_cumsum_adds_in_index_order():
    """CumSum's last element is the sequential float32 sum: 1 followed by
    2^20 halves of its ulp stays 1 in index order (a pairwise or blocked sum
    would give 1.0625); random rows of 2^20 elements of mixed magnitudes give
    the bits of NumPy's add.accumulate, which is itself checked against a
    float32 loop one element at a time (2^16 steps)."""
    sess = _one_op(helper.make_node("CumSum", ["x", "axis"], ["y"]),
                   [helper.make_tensor("axis", TensorProto.INT64, [], [1])])
    n = 2**20
    x = np.concatenate([[1.0], np.full(n, 2.0**-24)]).astype(F32)[None]
    assert sess.run(None, {"x": x})[0][0, -1] == F32(1.0)
    assert np.cumsum(x, axis=1)[0, -1] == F32(1.0)  # onnx.reference's CumSum
    rng = case_rng("dpu-in-fallback", "cumsum")
    x = (rng.normal(3, 100, size=(3, n)) * rng.choice([1, 1e-3, 1e4], size=(3, n))).astype(F32)
    want = np.add.accumulate(x, axis=1, dtype=F32)
    assert_same_bits(sess.run(None, {"x": x})[0], want)
    acc = np.zeros(3, F32)
    for j in range(2**16):
        acc = (acc + x[:, j]).astype(F32)
    assert_same_bits(want[:, 2**16 - 1], acc, "NumPy's accumulate")


def _numpy_power_is_svml() -> bool:
    """Whether NumPy runs float32 ``power`` in its AVX-512 (SVML) loops on
    this CPU, instead of calling the C library's powf."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__
    return bool(__cpu_features__.get("AVX512_SKX"))


def test_pow_is_the_c_librarys_powf():
    """Pow(v, -0.5) in onnxruntime gives powf's bits on 200k values:
    variances from 0 to float32's largest, subnormals, 0, inf, NaN and
    negatives.  NumPy's power (onnx.reference's) does too, except on CPUs
    where NumPy computes it with SVML (AVX-512): there a fifth of the
    values are one unit apart, and the bfloat16 rounding the instance norm
    takes of the result (r) hides all but about 1 in 100,000
    (docs/differences.rst)."""
    sess = _one_op(helper.make_node("Pow", ["x", "p"], ["y"]),
                   [helper.make_tensor("p", TensorProto.FLOAT, [], [-0.5])])
    rng = case_rng("dpu-in-fallback", "powf")
    v = np.concatenate([rng.uniform(0, 10, 100_000), 10.0 ** rng.uniform(-45, 38.5, 100_000),
                        [0.0, -0.0, np.inf, -1.0, np.nan, 1e-45, -1e-30]]).astype(F32)
    want = np.array([in_contract.powf(a, -0.5) for a in v], F32)
    assert_same_bits(sess.run(None, {"x": v})[0], want, "onnxruntime")
    with np.errstate(all="ignore"):
        got = np.power(v, F32(-0.5))
    if not _numpy_power_is_svml():
        assert_same_bits(got, want, "NumPy")
        return
    finite = np.isfinite(want)
    assert_same_bits(got[~finite], want[~finite], "NumPy's special values")
    units = np.abs(got[finite].view(np.int32).astype(np.int64) - want[finite].view(np.int32))
    assert units.max() <= 1, f"NumPy's power: {units.max()} units from powf"
    assert 0.05 < np.mean(units) < 0.5, np.mean(units)
    seen = np.count_nonzero(in_contract.bf(got) != in_contract.bf(want))
    assert seen <= 10, f"{seen} of {v.size} bfloat16 roundings differ"


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: str(v).split(".")[-1])
def test_whole_model_at_every_level(level):
    """Float ops around the node, a static shape and initializers for γ /
    β: the optimiser may fold and fuse; the bits stay the NumPy API's."""
    rng = case_rng("dpu-in-fallback", "levels")
    g, b = in_cases.params(rng, 8)
    node = helper.make_node("ExtendedInstanceNormalization", ["xin", "scale", "B"], ["yin"],
                            name="in_node", domain="com.amd.quark", epsilon=1e-3)
    nodes = [helper.make_node("Mul", ["x", "two"], ["xin"]), node,
             helper.make_node("Add", ["yin", "two"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 7])],
        initializer=[onnx.numpy_helper.from_array(g, "scale"),
                     onnx.numpy_helper.from_array(b, "B"),
                     helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])
    inlined = extql.inline_fallbacks(model)
    _no_custom_ops(inlined)
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    sess = ort.InferenceSession(inlined.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    x = in_cases.values(rng, (1, 8, 5, 7), "offset")
    want = extql.extended_instance_normalization(x * F32(2), g, b, epsilon=1e-3) + F32(2)
    assert_same_bits(sess.run(None, {"x": x})[0], want)


def test_attach_keeps_the_node_and_runs_without_the_library():
    """attach_fallbacks: the node stays (the library's kernel wins where it
    is registered) with its epsilon spelled out and the function added;
    onnxruntime without the library runs the function."""
    model = extql.attach_fallbacks(in_model("VitisInstanceNormalization", x_shape=[2, 3, 4]))
    node = model.graph.node[0]
    assert (node.domain, node.op_type) == ("com.vai.quantize", "VitisInstanceNormalization")
    assert [(a.name, a.f) for a in node.attribute] == [("epsilon", F32(1e-5))]
    assert [(f.domain, f.name, f.overload) for f in model.functions] == [
        ("com.vai.quantize", "VitisInstanceNormalization", node.overload)]
    rng = case_rng("dpu-in-fallback", "attach")
    feeds = {"x": in_cases.values(rng, (2, 3, 4), "normal"), **dict(zip(
        ("scale", "B"), in_cases.params(rng, 3), strict=True))}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_same_bits(sess.run(None, feeds)[0], _want(feeds, None))
    so = ort.SessionOptions()
    extql.register(so)  # with the library: its kernel, the same bits
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert_same_bits(sess.run(None, feeds)[0], _want(feeds, None))


def test_refusals_name_the_node():
    with pytest.raises(ValueError, match="VitisInstanceNormalization node in_node: .*rank"):
        extql.inline_fallbacks(in_model("VitisInstanceNormalization", x_shape=[4]))
    with pytest.raises(ValueError, match="ExtendedInstanceNormalization node in_node: .*scale"):
        extql.attach_fallbacks(in_model(x_shape=[1, 4, 3], c=3))
    # unknown shapes: the inlined model's Reshape fails at run time, no answer
    sess = _session("ExtendedInstanceNormalization", None)
    for x, c, what in ((np.ones(4, F32), 4, "Gather"), (np.ones((1, 4, 3), F32), 3, "Reshape")):
        with pytest.raises(Exception, match=f"running {what} node"):
            sess.run(None, {"x": x, "scale": np.ones(c, F32), "B": np.ones(c, F32)})


def test_extql_inline_as_a_process(tmp_path):
    """``extql inline`` exits 0; the written model needs no custom operator
    and gives the NumPy API's bits in onnxruntime without the library."""
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(in_model(x_shape=[1, 4, 5, 5], c=4, epsilon=1e-4), str(src))
    code = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "inline", str(src), str(dst), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = onnx.load(str(dst))
    _no_custom_ops(model)
    rng = case_rng("dpu-in-fallback", "cli")
    g, b = in_cases.params(rng, 4)
    feeds = {"x": in_cases.values(rng, (1, 4, 5, 5), "ties"), "scale": g, "B": b}
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    assert_same_bits(sess.run(None, feeds)[0], _want(feeds, 1e-4))


@pytest.mark.parametrize("op", list(IN_DOMAINS))
def test_a_quark_model_with_bfp_around_the_instance_norm(op):
    """A model as Quark's DPU simulation with BFP16 writes it (Conv, BFP16
    nodes, the DPU instance norm): inlined, it runs in onnxruntime without
    the library and gives the bits of the original model run with it."""
    model = qm.emulation(op)
    inlined = extql.inline_fallbacks(model)
    _no_custom_ops(inlined)
    rng = case_rng("dpu-in-fallback", "quark-model", op)
    feeds = {i.name: rng.normal(0, 1, size=[d.dim_value for d in
                                            i.type.tensor_type.shape.dim]).astype(F32)
             for i in model.graph.input}
    so = ort.SessionOptions()
    extql.register(so)
    native = ort.InferenceSession(model.SerializeToString(), so,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(inlined.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for y, want in zip(got, native, strict=True):
        assert_same_bits(y, want)
