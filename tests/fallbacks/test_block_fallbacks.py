"""The block formats' fallback functions (BFPQuantizeDequantize /
MXQuantizeDequantize and the legacy BFPFixNeuron / MXFixNeuron decomposed
into standard ONNX ops) by behaviour, on every fallback path, without the
extql library (tests/blockfmt_paths.py):

* ``fallback`` -- ``extql.attach_fallbacks`` and onnxruntime, at every graph
  optimisation level;
* ``fallback-reference`` -- that model in ``onnx.reference``;
* ``inlined`` -- ``extql.inline_fallbacks`` and onnxruntime (no custom
  operator left), at every level.

Against AMD Quark 0.13's own library's bits (its single-node grid,
tests/data/blockfmt; its models, tests/data/quark) and the independent oracle
(tests/blockfmt_contract.py): hypothesis over every node the contract defines,
and the special values (signed zeros in every rounding mode, infinities, NaN,
subnormals, float16, one-element, rank-0 / rank-1 and empty tensors).  Bit
for bit, any NaN equal to any NaN.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from blockfmt_contract import expected
from blockfmt_data import (
    BLOCK_MODELS,
    GRID_CASES,
    QUARK,
    assert_quarks_bits,
    block_nodes,
    grid_arrays,
    model_values,
)
from blockfmt_paths import (
    FALLBACK,
    FALLBACK_PATHS,
    FALLBACK_REFERENCE,
    INLINED,
    LEVEL_IDS,
    NUMPY,
    block_via,
    fallback_groups,
    many_node_model,
    node_model,
    refusal_words,
    run_fallback,
)
from blockfmt_values import SPECIALS_F16, SPECIALS_F32, mixed_values, node_cases
from contract import assert_same_bits, case_rng
from hypothesis import HealthCheck, given, settings

import extql
from extql import fallbacks

pytestmark = pytest.mark.fallback

BFP = "BFPQuantizeDequantize"
MX = "MXQuantizeDequantize"
#: (path, level name): onnxruntime's paths at every level, onnx.reference once.
RUNS = ([(FALLBACK, level) for level in LEVEL_IDS] + [(INLINED, level) for level in LEVEL_IDS]
        + [(FALLBACK_REFERENCE, None)])
RUN_IDS = [f"{p}-{lv}" if lv else p for p, lv in RUNS]


def _via_many(path: str, level: str | None, cases: list[dict]) -> list[np.ndarray]:
    """Each case (``op_type``, ``attrs``, ``x``) through one run: the cases
    side by side, one model per (operator name, variant) -- a session's fixed
    cost paid once per model, not per case.  The outputs in the cases' order."""
    got: dict[int, np.ndarray] = {}
    for group in fallback_groups([{**c, "index": i} for i, c in enumerate(cases)]):
        model, feeds = many_node_model([(c["op_type"], c["attrs"], c["x"]) for c in group])
        out = run_fallback(path, model, feeds, level=None if level is None else LEVEL_IDS[level])
        for i, c in enumerate(group):
            got[c["index"]] = out[f"y{i}"]
    return [got[i] for i in range(len(cases))]


# ---------------------------------------------------------------- Quark's grid

def _grid_outputs(every_run: bool) -> dict[str, dict[tuple[str, str | None], np.ndarray]]:
    """Grid cases through the runs of RUNS, by case id and run: one model per
    (operator name, variant, run), so that runtimes that ignore overload run
    it.  With ``every_run`` every case takes every run; otherwise every case
    takes one run, in turn, so that each run (onnx.reference, onnxruntime's
    paths at each level) sees a share of every variant's cases (a session's
    creation costs about 0.1 ms per node, a fallback node is about 240
    standard ones, and onnx.reference runs them one by one in Python)."""
    by_run: dict[tuple[str, str | None], list[dict]] = {}
    for g, cases in enumerate(fallback_groups(GRID_CASES)):
        for i, c in enumerate(cases):
            for run in RUNS if every_run else [RUNS[(g + i) % len(RUNS)]]:
                by_run.setdefault(run, []).append(c)
    out: dict[str, dict[tuple[str, str | None], np.ndarray]] = {}
    for run, run_cases in by_run.items():
        got = _via_many(*run, [{**c, "x": grid_arrays(c)[0]} for c in run_cases])
        for c, y in zip(run_cases, got, strict=True):
            out.setdefault(c["id"], {})[run] = y
    return out


@pytest.fixture(scope="module")
def grid_outputs() -> dict[str, dict[tuple[str, str | None], np.ndarray]]:
    """Every grid case in one run of RUNS."""
    return _grid_outputs(every_run=False)


@pytest.mark.parametrize("case", GRID_CASES, ids=[c["id"] for c in GRID_CASES])
def test_quarks_bits_on_its_grid(grid_outputs, case):
    """Every grid case (every attribute, rank, axis, special value, float16,
    both domains' names) gives Quark's bits through a fallback path: each
    run (onnx.reference, onnxruntime's paths at each optimisation level)
    takes a share of the grid, and every run takes the special values below
    in full (the slow test below runs the whole grid through every run)."""
    assert len(grid_outputs[case["id"]]) == 1
    for (path, level), got in grid_outputs[case["id"]].items():
        assert_quarks_bits(got, case, f"{case['id']} {path} {level}")


@pytest.mark.slow
def test_quarks_bits_on_its_grid_every_run():
    """The whole grid through every fallback path at every optimisation level
    (about seven minutes)."""
    outputs = _grid_outputs(every_run=True)
    for case in GRID_CASES:
        assert len(outputs[case["id"]]) == len(RUNS)
        for (path, level), got in outputs[case["id"]].items():
            assert_quarks_bits(got, case, f"{case['id']} {path} {level}")


# ---------------------------------------------------------------- the oracle

@pytest.mark.parametrize("path", FALLBACK_PATHS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=node_cases())
def test_any_node_the_contract_defines(path, case):
    """Any op name, attributes, rank, axis and type the contract defines, on
    inputs that reach every lane (the oracle's own strategy)."""
    op_type, attrs, x = case
    assert_same_bits(block_via(path, op_type, x, attrs), expected(op_type, x, attrs),
                     f"{path} {op_type} {attrs}")


@pytest.mark.parametrize("path", FALLBACK_PATHS)
@pytest.mark.parametrize("op", [BFP, MX, "BFPFixNeuron", "MXFixNeuron"])
def test_defaults_are_quarks(path, op):
    """Without attributes: the op defaults (a block of 8 / 32 along axis 1)."""
    x = mixed_values(case_rng(op, "fallback-defaults"), (3, 40, 5))
    assert_same_bits(block_via(path, op, x, {}), expected(op, x, {}), f"{path} {op}")


# ---------------------------------------------------------------- special values

#: One node of every variant and rounding mode, with the bfloat16 pre-rounding.
VARIANT_NODES = (
    [(BFP, {"rounding_mode": r, "block_size": 4}) for r in (0, 1, 2)]
    + [(BFP, {"rounding_mode": r, "block_size": 4, "use_compiler_version_cpu_kernel": 1})
       for r in (0, 1, 2)]
    + [(BFP, {"bfp_method": "to_bfp_prime", "block_size": 4, "rounding_mode": r,
              "bit_width": 13}) for r in (0, 1, 2)]
    + [(BFP, {"bfp_method": "to_bfp_prime_shared", "block_size": 4, "bit_width": 9})]
    + [(BFP, {"convert_to_bfloat_before_bfp": 1, "block_size": 4, "rounding_mode": 2})]
    + [(MX, {"element_dtype": "int8", "block_size": 4, "rounding_mode": r}) for r in (0, 1, 2)]
    + [(MX, {"element_dtype": e, "block_size": 4})
       for e in ("fp8_e5m2", "fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")]
)
NODE_IDS = [f"{o[:3]}-" + "-".join(f"{k}={v}" for k, v in a.items()) for o, a in VARIANT_NODES]


def _signed_zero_lanes() -> np.ndarray:
    """Blocks of 4 whose small elements round to zero (or tie at one half)
    in every mode: a large element sets the block's exponent."""
    rows = []
    for big in (1.0, 96.0, 2.0**-120, 2.0**100):
        for small in (0.3, 0.5, 0.7, 1e-3, 0.0):
            for sign in (1.0, -1.0):
                rows.append([big, sign * small * big / 64, -sign * small * big / 128, sign * 0.0])
    return np.array(rows, np.float32)


def _check_many(run, cases: list[dict], what: str) -> None:
    """Every case through ``run`` against the oracle."""
    for c, got in zip(cases, _via_many(*run, cases), strict=True):
        assert_same_bits(got, expected(c["op_type"], c["x"], c["attrs"]),
                         f"{run} {what} {c['op_type']} {c['attrs']} {c['x'].dtype}"
                         f"{list(c['x'].shape)}")


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_signed_zeros_every_mode(run):
    """Results that are zero keep the sign each rule gives (-0 for modes 0
    and 1 and to_bfp_prime, +0 for mode 2 from a non-zero quotient and for
    MX float elements) at every optimisation level: no Where or no-op
    elimination loses a -0.  Every node of VARIANT_NODES."""
    x = _signed_zero_lanes()
    _check_many(run, [{"op_type": op, "attrs": {**attrs, "axis": 1}, "x": x}
                      for op, attrs in VARIANT_NODES], "signed zeros")


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_special_values(run, dtype):
    """NaNs (payloads, signs), +-inf, +-0, subnormals, the smallest normal
    and the largest finite values, float32 and float16 (widened exactly,
    rounded back), in blocks along a middle axis with a short last block.
    Every node of VARIANT_NODES."""
    specials = SPECIALS_F16 if dtype == np.float16 else SPECIALS_F32
    cases = []
    for op, attrs in VARIANT_NODES:
        rng = case_rng(op, "specials", str(attrs), str(dtype))
        base = rng.permutation(np.concatenate([specials, specials[::-1]]))
        cases.append({"op_type": op, "attrs": {**attrs, "axis": 1},
                      "x": np.resize(base, (2, 11, 3)).astype(dtype)})
    _check_many(run, cases, "special values")


SHAPES = [(), (1,), (1, 1, 1), (7,), (1, 9), (5, 1), (0,), (2, 0, 3)]


@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_small_and_empty_tensors(run):
    """A one-element tensor passes through (after the bfloat16 pre-rounding),
    rank 0 and rank 1 ignore the axis, an empty tensor gives an empty one
    (every third node of VARIANT_NODES, every shape of SHAPES)."""
    cases = []
    for op, attrs in VARIANT_NODES[::3]:
        for shape in SHAPES:
            rng = case_rng(op, "small", str(shape))
            cases.append({"op_type": op, "attrs": {**attrs, "axis": -1},
                          "x": np.asarray(rng.choice(SPECIALS_F32, shape), np.float32)})
    _check_many(run, cases, "small and empty")


@pytest.mark.parametrize("path", FALLBACK_PATHS)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_blocks_along_any_axis(path, axis):
    """Blocks along every axis (negative ones too) with a short last block."""
    x = mixed_values(case_rng("axis", axis), (5, 7, 9))
    for op, attrs in ((BFP, {"block_size": 4}),
                      (BFP, {"bfp_method": "to_bfp_prime", "block_size": 4}),
                      (MX, {"element_dtype": "fp6_e3m2", "block_size": 4})):
        a = {**attrs, "axis": axis}
        assert_same_bits(block_via(path, op, x, a), expected(op, x, a), f"{path} {op} {a}")


# ---------------------------------------------------------------- Quark's models

@pytest.mark.parametrize("runner", ["onnxruntime", "reference"])
@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_quark_models_inlined_give_quarks_bits(name, runner):
    """The models Quark's quantizer wrote, after inline_fallbacks: no custom
    operator left; onnxruntime without any library and onnx.reference give
    Quark's stored output, bit for bit.  onnxruntime runs each model at one
    optimisation level, in turn from model to model, so that every level
    runs a quarter of the models (a session of an inlined model takes about
    a second; the nodes run at every level in the tests above)."""
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    stored = model_values(name)
    inlined = extql.inline_fallbacks(model)
    assert {n.domain for n in inlined.graph.node} <= {"", "ai.onnx"}
    assert not inlined.functions
    feeds = {inlined.graph.input[0].name: stored["x"]}
    if runner == "reference":
        from onnx.reference import ReferenceEvaluator

        got = [ReferenceEvaluator(inlined).run(None, feeds)[0]]
    else:
        levels = list(LEVEL_IDS.values())
        so = ort.SessionOptions()
        so.graph_optimization_level = levels[BLOCK_MODELS.index(name) % len(levels)]
        sess = ort.InferenceSession(inlined.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        got = [sess.run(None, feeds)[0]]
    for y in got:
        assert_same_bits(y, stored["y"], f"{name} {runner}")


@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_quark_models_attached_run_without_the_library(name):
    """attach_fallbacks: the model runs in onnxruntime without any library,
    with Quark's output."""
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    stored = model_values(name)
    attached = extql.attach_fallbacks(model)
    onnx.checker.check_model(attached, full_check=True)
    sess = ort.InferenceSession(attached.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    y = sess.run(None, {sess.get_inputs()[0].name: stored["x"]})[0]
    assert_same_bits(y, stored["y"], name)


@pytest.mark.parametrize("path", [INLINED, FALLBACK_REFERENCE])
@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_quark_model_nodes_give_quarks_bits(name, path):
    """Each BFP / MX node of Quark's models on the input it had in Quark's
    run gives that run's output (the node alone: no float op around it;
    the attached functions run whole models in
    test_quark_models_attached_run_without_the_library)."""
    stored = model_values(name)
    cases = [{"op_type": node.op_type, "attrs": attrs, "name": node.name,
              "x": stored[f"node_in__{node.name}"]} for _, node, attrs in block_nodes(name)]
    # The model's nodes side by side, one model per (operator, variant).
    for c, got in zip(cases, _via_many(path, None, cases), strict=True):
        assert_same_bits(got, stored[f"node_out__{c['name']}"], f"{name} {c['name']} {path}")


# ---------------------------------------------------------------- attach / inline

REFUSED = [
    (BFP, {"bfp_method": "to_bfp_primes"}),
    (BFP, {"rounding_mode": 3}),
    (BFP, {"block_size": 0}),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_size": 3}),
    (BFP, {"bit_width": 33}),
    (BFP, {"bfp_method": "to_bfp_prime", "sub_block_shift_bits": 32}),
    (BFP, {"axis": 2}),
    (MX, {"element_dtype": "fp8"}),
    (MX, {"rounding_mode": -1}),
    (MX, {"axis": -3}),
    (MX, {"block_size": "8"}),
]


@pytest.mark.parametrize("how", [extql.attach_fallbacks, extql.inline_fallbacks],
                         ids=["attach", "inline"])
@pytest.mark.parametrize("op,attrs", REFUSED, ids=[str(a) for _, a in REFUSED])
def test_refused_nodes_name_node_attribute_value(how, op, attrs):
    """What the operator refuses, attach / inline refuse with the NumPy API's
    words, naming the node."""
    x = np.ones((2, 16), np.float32)
    words = refusal_words(NUMPY, op, x, attrs)
    with pytest.raises((ValueError, TypeError)) as info:
        how(node_model(op, x, attrs))
    assert str(info.value) == f"{op} node 'node0': {words}"


@pytest.mark.parametrize("opset", [13, 14])
def test_opset_below_15_named(opset):
    model = node_model(BFP, np.ones((2, 8), np.float32), {})
    model.opset_import[0].version = opset
    with pytest.raises(ValueError, match=r"BFPQuantizeDequantize node node0: .*opset >= 15"):
        extql.attach_fallbacks(model)


@pytest.mark.parametrize("opset", range(15, 22))
@pytest.mark.parametrize("path", [FALLBACK, FALLBACK_REFERENCE])
def test_every_opset_from_15(path, opset):
    """The functions are stamped with the model's opset, every one from 15."""
    x = mixed_values(case_rng("opset", opset), (4, 20))
    for op, attrs in VARIANT_NODES[::4]:
        model = node_model(op, x, {**attrs, "axis": 1})
        model.opset_import[0].version = opset
        got = run_fallback(path, model, {"x": x})["y"]
        assert_same_bits(got, expected(op, x, {**attrs, "axis": 1}), f"{opset} {op} {attrs}")


def test_variants_and_overloads():
    """Each node gets the overload of its variant and its function; the
    numeric attributes are spelled out with their defaults."""
    x = np.ones((2, 16), np.float32)
    model, _ = many_node_model([
        (BFP, {"bfp_method": "to_bfp_prime_shared"}, x),
        (BFP, {"use_compiler_version_cpu_kernel": 1}, x),
        (MX, {"element_dtype": "fp4_e2m1"}, x),
        ("MXFixNeuron", {}, x),
    ])
    # Two variants of one operator: runtimes that ignore overload would run
    # one function for both, which attach_fallbacks says (and only that).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = extql.attach_fallbacks(model)
    assert [str(w.message).split(":")[0] for w in caught] == [
        "BFPQuantizeDequantize is used with several variants (to_bfp_prime, to_bfp_compiler)"]
    assert [n.overload for n in out.graph.node] == ["to_bfp_prime", "to_bfp_compiler",
                                                     "fp4_e2m1", "int8"]
    assert {(f.domain, f.name, f.overload) for f in out.functions} == {
        ("com.amd.quark", BFP, "to_bfp_prime"), ("com.amd.quark", BFP, "to_bfp_compiler"),
        ("com.amd.quark", MX, "fp4_e2m1"), ("com.vai.quantize", "MXFixNeuron", "int8")}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in out.graph.node[0].attribute}
    assert attrs["rounding_mode"] == 0 and attrs["block_size"] == 8 and attrs["axis"] == 1
    assert {f.domain for f in out.functions} == {"com.amd.quark", "com.vai.quantize"}
    for f in out.functions:
        assert {n.domain for n in f.node} <= {""}
    twice = extql.attach_fallbacks(out)
    assert len(twice.functions) == len(out.functions)


def test_the_fallback_functions_are_exposed():
    """extql.fallbacks names every variant's function, flat and standard."""
    assert fallbacks.BLOCK_VARIANTS == {
        "bfp": ("to_bfp", "to_bfp_compiler", "to_bfp_prime"),
        "mx": ("int8", "fp8_e5m2", "fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")}
    for family, variants in fallbacks.BLOCK_VARIANTS.items():
        for variant in variants:
            proto = fallbacks.block_function_proto(family, variant, opset=17)
            assert proto.overload == variant
            assert {n.domain for n in proto.node} <= {""}
