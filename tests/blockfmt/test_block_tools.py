"""The block formats (BFPQuantizeDequantize / MXQuantizeDequantize, legacy
BFPFixNeuron / MXFixNeuron) in extql's ONNX tools, on the models AMD Quark
0.13 wrote (tests/data/quark) and on single nodes:

* onnx.reference with ``extql.reference.OPS`` runs every Quark-written BFP /
  MX model: each block node gives Quark's library's bits on the input
  Quark's run gave it (stored with the model), the whole model Quark's
  output;
* the operators' ONNX schemas: ``onnx.checker`` (with strict shape
  inference) accepts every such model, shape inference gives each node's
  output x's type and shape, and a node's wrong attribute or type of x is
  named;
* ``extql check`` (real processes): every attribute value the contract
  leaves undefined, every attribute of the wrong kind, every other type of
  x and an axis outside x's rank is a problem (exit 1) on a line naming the
  node, in the words of the NumPy API; a node it cannot see wrong passes;
* ``fold_constants`` / ``optimize`` on every Quark BFP / MX model: each node
  on a weight becomes an initializer with Quark's library's bits for that
  node, the nodes on activations stay, and the model gives the unfolded
  model's bits (and Quark's); constants of other forms (a ``Constant``
  node, float16, a chain, a subgraph) against the oracle; a node the
  operator refuses is named, never folded silently;
* ``lower_to_standard`` and ``optimize`` report the block nodes they leave.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest
from blockfmt_contract import OPS, expected
from blockfmt_data import BLOCK_MODELS, QUARK, model_values
from blockfmt_paths import (
    NODE,
    NUMPY,
    elem_type,
    many_node_model,
    node,
    node_model,
    refusal_words,
)
from blockfmt_refusals import (
    OTHER_X_TYPES,
    REFUSED,
    WRONG_KIND,
    refused_attribute,
    refused_id,
    refused_shape,
)
from contract import assert_same_bits
from onnx import TensorProto, helper
from onnx_helpers import run_ort
from ortutil import make_model, value_info

import extql
import extql.reference
from extql.onnx.blocks import block_family
from extql.onnx.graph import graphs
from extql.onnx.schemas import register_schemas

pytestmark = pytest.mark.usefixtures("kernel_isa")

EXTQL = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"
BFP = "BFPQuantizeDequantize"
MX = "MXQuantizeDequantize"


def extql_process(*args) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", EXTQL, *map(str, args)], capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _quark(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A Quark model, its feeds (Quark's input) and its stored values."""
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    values = model_values(name)
    return model, {model.graph.input[0].name: values["x"]}, values


def _weights(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The model's block nodes that read an initializer (Quark's weights)."""
    inits = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if block_family(n) and n.input[0] in inits]


def _native(model: onnx.ModelProto, feeds) -> np.ndarray:
    out = run_ort(model, feeds, options=extql.register(ort.SessionOptions()))
    return out[model.graph.output[0].name]


# ---------------------------------------------------------------- reference ops

def _nodes_alone(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Every block node of the model, as written, in a model of its own
    inputs ``x<i>`` and outputs ``y<i>``; the nodes' names in that order."""
    nodes, inputs, outputs, names = [], [], [], []
    for i, n in enumerate(b for b in model.graph.node if block_family(b)):
        alone = onnx.NodeProto()
        alone.CopyFrom(n)
        alone.input[0], alone.output[0] = f"x{i}", f"y{i}"
        nodes.append(alone)
        inputs.append(value_info(f"x{i}", TensorProto.FLOAT))
        outputs.append(value_info(f"y{i}", TensorProto.FLOAT))
        names.append(n.name)
    return make_model(nodes, inputs, outputs,
                      domains=sorted({n.domain for n in nodes})), names


@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_reference_ops_give_quarks_bits(name):
    model, feeds, values = _quark(name)
    alone, names = _nodes_alone(model)
    ref = onnx.reference.ReferenceEvaluator(alone, new_ops=extql.reference.OPS)
    outs = ref.run(None, {f"x{i}": values[f"node_in__{n}"] for i, n in enumerate(names)})
    for n, y in zip(names, outs, strict=True):
        assert_same_bits(y, values[f"node_out__{n}"], f"{name} {n}")
    whole = onnx.reference.ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(
        None, feeds)[0]
    # The float ops between them are onnx.reference's (NumPy), not onnxruntime's.
    scale = float(np.abs(values["y"]).max()) + 1.0
    np.testing.assert_allclose(whole, values["y"], atol=1e-5 * scale, rtol=0)


# ---------------------------------------------------------------- schemas

@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_onnx_checker_accepts_quarks_models(name):
    register_schemas()
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {v.name: v.type.tensor_type for v in (*inferred.graph.value_info,
                                                  *inferred.graph.input,
                                                  *inferred.graph.output)}
    known.update({i.name: helper.make_tensor_type_proto(i.data_type, i.dims).tensor_type
                  for i in model.graph.initializer})
    for n in model.graph.node:
        if block_family(n):
            x, y = known[n.input[0]], known[n.output[0]]
            assert (y.elem_type, y.shape) == (x.elem_type, x.shape), n.name


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_shape_inference_gives_x_type_and_shape(op, dtype):
    register_schemas()
    x = np.ones((2, 3, 5), dtype)
    model = node_model(op, x, {"axis": -1}, declare_output=False)
    (y,) = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output
    assert y.type.tensor_type.elem_type == elem_type(dtype)
    assert [d.dim_value for d in y.type.tensor_type.shape.dim] == [2, 3, 5]


@pytest.mark.parametrize("op,attrs,dtype,words", [
    (BFP, {"bits": 16}, np.float32, "Unrecognized attribute: bits"),
    ("MXFixNeuron", {"element_dtype": 4}, np.float32, "Mismatched attribute type"),
    (MX, {}, np.float64, "unsupported type: tensor(double)"),
])
def test_onnx_checker_names_what_is_wrong(op, attrs, dtype, words):
    register_schemas()
    model = node_model(op, np.ones((2, 8), dtype), attrs)
    with pytest.raises(Exception) as info:
        onnx.checker.check_model(model, full_check=True)
    assert words in str(info.value) and op in str(info.value)


# ---------------------------------------------------------------- extql check

def _check_line(op: str, words: str, name: str = NODE) -> str:
    return f"{op} node {name}: {words}"


def test_check_refuses_what_the_operator_refuses(tmp_path):
    """Every refused case of tests/blockfmt_refusals.py, one node each in one
    model: ``check`` names each node with the operator's own words (the
    NumPy API's), in the graph's order, and counts them; an axis a rank-1 x
    ignores is no problem."""
    cases = [(op, attrs, np.ones(refused_shape(rank), np.float32))
             for op, attrs, rank in REFUSED]
    want = []
    for i, (op, attrs, x) in enumerate(cases):
        name, value = refused_attribute(attrs)
        if x.ndim == 1 and name == "axis":  # rank 1 ignores the axis: the node is fine
            continue
        words = refusal_words(NUMPY, op, x, attrs)
        assert words.startswith(f"{name} ") and str(value) in words, (refused_id(REFUSED[i]),
                                                                     words)
        want.append(_check_line(op, words, f"node{i}"))
    assert len(want) < len(REFUSED)  # (a rank-1 axis case is among them)
    path = tmp_path / "refused.onnx"
    onnx.save(many_node_model(cases)[0], str(path))
    proc = extql_process("check", path, "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[:len(want)] == want, proc.stdout
    assert f"{len(want)} problem(s)" in proc.stdout


def test_check_refuses_wrong_kinds_and_types_of_x(tmp_path):
    """Attributes of the wrong kind, an unknown attribute, x of every other
    type, a node with two inputs: one node each in one model, one line each
    (``--json``: the problems)."""
    cases = [(op, {attr: float(np.float32(v)) if isinstance(v, float) else v},
              np.ones((2, 8), np.float32), words)
             for op in (BFP, "MXFixNeuron") for attr, v, words in WRONG_KIND]
    cases += [(op, {attr: 3}, np.ones((2, 8), np.float32),
               f"attribute {attr} must be a string, got 3")
              for op, attr in ((BFP, "bfp_method"), (MX, "element_dtype"))]
    cases += [(op, {}, np.ones((2, 8), dtype), f"x must be one of float32, float16, got {dtype}")
              for op in (MX, "BFPFixNeuron") for dtype in OTHER_X_TYPES]
    nodes, inputs, outputs, want = [], [], [], []
    for i, (op, attrs, x, words) in enumerate(cases):
        nodes.append(node(op, attrs, f"x{i}", f"y{i}", name=f"node{i}"))
        inputs.append(value_info(f"x{i}", elem_type(x.dtype), x.shape))
        outputs.append(value_info(f"y{i}", elem_type(x.dtype), x.shape))
        want.append(_check_line(op, words, f"node{i}"))
    extra = len(cases)
    nodes.append(helper.make_node(BFP, ["x0"], [f"y{extra}"], name=f"node{extra}",
                                  domain=OPS[BFP][0], block_bits=8))
    outputs.append(value_info(f"y{extra}", TensorProto.FLOAT, (2, 8)))
    unknown = refusal_words("reference", BFP, np.ones((2, 8), np.float32), {"block_bits": 8})
    assert unknown.startswith("unknown attribute 'block_bits'"), unknown
    want.append(_check_line(BFP, unknown, f"node{extra}"))
    nodes.append(helper.make_node(MX, ["x0", "x1"], [f"y{extra + 1}"], name=f"node{extra + 1}",
                                  domain=OPS[MX][0]))
    outputs.append(value_info(f"y{extra + 1}", TensorProto.FLOAT, (2, 8)))
    want.append(_check_line(MX, "has 2 input(s), expected 1 (x)", f"node{extra + 1}"))
    path = tmp_path / "nodes.onnx"
    onnx.save(make_model(nodes, inputs, outputs, domains=sorted({n.domain for n in nodes})),
              str(path))
    proc = extql_process("check", path, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["problems"] == want
    assert doc["quantization_nodes"] == len(nodes)


def test_check_takes_the_axis_where_the_rank_is_known(tmp_path):
    """An axis outside x's rank is a problem where the graph gives the rank
    (by x's declared shape, or inferred through the ops before it); where it
    does not (x reshaped to a shape of unknown length), check cannot see it
    (the library refuses the node when it runs)."""
    attrs = {"axis": 3}
    x = np.ones((2, 8, 4), np.float32)
    given = node_model(BFP, x, attrs)
    inferred = node_model(BFP, x, attrs)
    inferred.graph.node.insert(0, helper.make_node("Relu", ["x"], ["r"]))
    inferred.graph.node[1].input[0] = "r"
    unknown = node_model(BFP, x, attrs)
    unknown.graph.node.insert(0, helper.make_node("Reshape", ["x", "shape"], ["r"]))
    unknown.graph.node[1].input[0] = "r"
    unknown.graph.node[1].output[0] = "b"
    unknown.graph.node.append(helper.make_node("ReduceSum", ["b"], ["y"], keepdims=0))
    unknown.graph.input.append(value_info("shape", TensorProto.INT64, ["n"]))
    del unknown.graph.output[:]
    unknown.graph.output.append(value_info("y", TensorProto.FLOAT, ()))
    words = refusal_words(NUMPY, BFP, x, attrs)
    for what, model, status in (("given", given, 1), ("inferred", inferred, 1),
                                ("unknown", unknown, 0)):
        path = tmp_path / f"{what}.onnx"
        onnx.save(model, str(path))
        proc = extql_process("check", path, "-q")
        assert proc.returncode == status, (what, proc.stdout + proc.stderr)
        assert (_check_line(BFP, words) in proc.stdout) == (status == 1), (what, proc.stdout)


# ---------------------------------------------------------------- folding

@pytest.mark.parametrize("name", BLOCK_MODELS)
def test_fold_and_optimize_keep_the_bits(name):
    model, feeds, values = _quark(name)
    weights = _weights(model)
    activations = [n.name for n in model.graph.node if block_family(n) and n not in weights]
    unfolded = _native(model, feeds)
    assert_same_bits(unfolded, values["y"], f"{name}: unfolded vs Quark's library")
    for how, out in (("fold", extql.fold_constants(model)), ("optimize", extql.optimize(model))):
        left = [n.name for n in out.graph.node if block_family(n)]
        assert left == activations, (how, left)
        inits = {i.name: i for i in out.graph.initializer}
        for n in weights:
            assert n.input[0] not in inits  # the float32 weight is gone
            folded = onnx.numpy_helper.to_array(inits[n.output[0]])
            assert_same_bits(folded, values[f"node_out__{n.name}"], f"{name} {how} {n.name}")
        assert_same_bits(_native(out, feeds), unfolded, f"{name}: {how}")


def _constant_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Block nodes on constants of every form: an initializer through two
    nodes (a chain), a float16 ``Constant`` node through MXFixNeuron, and an
    If branch whose node reads the outer initializer.  Returns the model
    and each constant's expected folded value (the oracle's)."""
    rng = np.random.default_rng(31)
    w = (rng.standard_normal((4, 24)) * 3).astype(np.float32)
    h = (rng.standard_normal((3, 40)) * 50).astype(np.float16)
    bfp = {"bfp_method": "to_bfp", "bit_width": 12, "block_size": 8, "axis": -1,
           "rounding_mode": 1}
    mx = {"element_dtype": "fp6_e2m3", "block_size": 32, "axis": 1, "rounding_mode": 2}
    prime = {"bfp_method": "to_bfp_prime", "bit_width": 13, "block_size": 16, "axis": 0}
    w1 = expected(BFP, w, bfp)
    want = {"w2": expected(BFP, w1, {**bfp, "bit_width": 10}), "h1": expected("MXFixNeuron", h, mx),
            "wb": expected(BFP, w, prime)}
    branch = helper.make_graph(
        [node(BFP, prime, "w", "wb", name="in_branch"),
         helper.make_node("Identity", ["wb"], ["out"])], "then", [],
        [value_info("out", TensorProto.FLOAT, w.shape)])
    nodes = [
        node(BFP, bfp, "w", "w1", name="first"),
        node(BFP, {**bfp, "bit_width": 10}, "w1", "w2", name="second"),
        helper.make_node("Constant", [], ["h"], value=onnx.numpy_helper.from_array(h, "h")),
        node("MXFixNeuron", mx, "h", "h1", name="legacy"),
        helper.make_node("Cast", ["h1"], ["h32"], to=TensorProto.FLOAT),
        helper.make_node("If", ["cond"], ["picked"], then_branch=branch, else_branch=branch),
        helper.make_node("MatMul", ["x", "w2"], ["xw"]),
        helper.make_node("ReduceSum", ["h32"], ["hs"], keepdims=0),
        helper.make_node("Add", ["xw", "hs"], ["y"]),
    ]
    model = make_model(
        nodes, [value_info("x", TensorProto.FLOAT, (2, 4)),
                value_info("cond", TensorProto.BOOL, ())],
        [value_info("y", TensorProto.FLOAT, (2, 24)),
         value_info("picked", TensorProto.FLOAT, w.shape)],
        [onnx.numpy_helper.from_array(w, "w")], domains=(OPS[BFP][0], OPS["MXFixNeuron"][0]))
    return model, want


def test_fold_constants_of_every_form():
    model, want = _constant_model()
    folded = extql.fold_constants(model)
    assert not [n for g in graphs(folded.graph) for n in g.node if block_family(n)]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in folded.graph.initializer}
    assert "w1" not in inits  # read by nothing any more, as the Constant h
    assert "h" not in {o for n in folded.graph.node for o in n.output}
    assert_same_bits(inits["w2"], want["w2"], "the chain")
    assert_same_bits(inits["h1"], want["h1"], "float16 Constant, legacy name")
    assert inits["h1"].dtype == np.float16
    branch = next(n for n in folded.graph.node if n.op_type == "If").attribute[0].g
    assert_same_bits(onnx.numpy_helper.to_array(branch.initializer[0]), want["wb"], "subgraph")
    feeds = {"x": np.ones((2, 4), np.float32), "cond": np.array(True)}
    for got, was in zip(run_ort(folded, feeds).values(), _run_all(model, feeds), strict=True):
        assert_same_bits(got, was, "the folded model, without the library")


def _run_all(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    return list(run_ort(model, feeds, options=extql.register(ort.SessionOptions())).values())


def test_a_refused_node_is_not_folded(tmp_path):
    """A node on a constant whose attributes the operator refuses: a
    ValueError naming it (``extql fold``: exit 1, one line), as running it
    would fail."""
    attrs = {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_size": 3}
    w = np.ones((2, 16), np.float32)
    model = make_model([node(BFP, attrs, "w", "y")], [], [value_info("y", TensorProto.FLOAT,
                                                                       w.shape)],
                       [onnx.numpy_helper.from_array(w, "w")])
    words = refusal_words(NUMPY, BFP, w, attrs)
    with pytest.raises(ValueError) as info:
        extql.fold_constants(model)
    assert str(info.value).startswith(f"{BFP} node {NODE}: cannot be folded: ")
    assert str(info.value).endswith(words)
    src = tmp_path / "refused.onnx"
    onnx.save(model, str(src))
    for command in ("fold", "optimize"):
        proc = extql_process(command, src, tmp_path / f"{command}.onnx")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"{BFP} node {NODE}" in proc.stderr and words in proc.stderr, proc.stderr
        assert not (tmp_path / f"{command}.onnx").exists()


def test_fold_command(tmp_path):
    src = QUARK / "transformer_bfp16.onnx"
    model = onnx.load(str(src))
    proc = extql_process("fold", src, tmp_path / "folded.onnx")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    count = sum(1 for n in model.graph.node if block_family(n))
    assert f"quantization nodes {count} -> {count - len(_weights(model))}" in proc.stdout
    assert len(_weights(model)) == 6


# ---------------------------------------------------------------- reports

def test_lower_and_optimize_report_the_nodes_they_leave():
    model, _, _ = _quark("cnn_mx6_qc")
    blocks = [n.name for n in model.graph.node if block_family(n)]
    report: list[str] = []
    lowered = extql.lower_to_standard(model, report=report)
    assert [n.name for n in lowered.graph.node if block_family(n)] == blocks
    assert [line.split(":")[0] for line in report] == [f"{BFP} node {n}" for n in blocks]
    assert all("left as is: a block format" in line for line in report), report
    report = []
    optimized = extql.optimize(model, report=report)
    left = [n.name for n in optimized.graph.node if block_family(n)]
    assert left and len(left) < len(blocks)
    assert [line.split(":")[0] for line in report] == [f"{BFP} node {n}" for n in left]
