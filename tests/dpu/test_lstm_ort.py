"""ExtendedLSTM / VitisLSTM in extql's onnxruntime library: Quark 0.13's stored
bits under both names, the NumPy API's bits (Y, Y_h, Y_c), the cases beyond
Quark (batch 3 against three batch-1 runs, forward and reverse against the
halves of bidirectional with sliced weights, layout 1 against layout 0
transposed), one session run from 4 threads, whole models at every
optimisation level, shape inference, and every refusal as a clean session
error naming the node, in a child process that exits normally, in the words
of the NumPy API's rules (extql.rules.lstm)."""

from __future__ import annotations

import inspect
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
from childproc import run_python
from contract import assert_same_bits
from lstm_cases import make_case
from lstm_data import CASES, contract_inputs, quark_y
from onnx import TensorProto, helper

import extql
from extql.rules import lstm as rules

OPS = {"ExtendedLSTM": "com.amd.quark", "VitisLSTM": "com.vai.quantize"}
F = TensorProto.FLOAT
LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          ort.GraphOptimizationLevel.ORT_ENABLE_ALL]

pytestmark = pytest.mark.usefixtures("kernel_isa")


def _model(attrs, op="ExtendedLSTM", inputs=("X", "W", "R", "B"), outputs=("Y",),
           around=False, x_shape=None, inits=()):
    """One node (optionally between a Mul and an Add, so that the optimiser
    sees a graph around it); W, R, B graph inputs unless given in inits."""
    names = list(inputs)
    if around:
        names[0] = "xin"
    node_out = [f"{o}in" if around and o == "Y" else o for o in outputs]
    node = helper.make_node(op, names, node_out, name="lstm_node", domain=OPS[op], **attrs)
    nodes = [node]
    init = [helper.make_tensor(n, F, v.shape, v.reshape(-1).tolist()) for n, v in inits]
    init_names = {n for n, _ in inits}
    if around:
        nodes = [helper.make_node("Mul", ["X", "two"], ["xin"]), node,
                 helper.make_node("Add", ["Yin", "two"], ["Y"])]
        init.append(helper.make_tensor("two", F, [], [2.0]))
    graph_in = [helper.make_tensor_value_info(n, F, x_shape if n == "X" else None)
                for n in inputs if n and n not in init_names]
    graph_out = [helper.make_tensor_value_info(o, F, None) for o in outputs if o]
    graph = helper.make_graph(nodes, "lstm", graph_in, graph_out, initializer=init)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(OPS[op], 1)])


def _session(model, threads=0, level=None):
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    if level is not None:
        so.graph_optimization_level = level
    extql.register(so)
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _numpy(attrs, feeds, outputs="Y,Y_h,Y_c"):
    return extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds.get("B"),
                               outputs=outputs, **attrs)


def _run(attrs, feeds, outputs=("Y", "Y_h", "Y_c"), **kw):
    names = tuple(n for n in ("X", "W", "R", "B") if n in feeds)
    sess = _session(_model(attrs, inputs=names, outputs=outputs, **{
        k: v for k, v in kw.items() if k in ("op", "around", "x_shape")}),
        threads=kw.get("threads", 0), level=kw.get("level"))
    return sess.run(None, feeds)


# ------------------------------------------------------------------ Quark's bits

@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_library_gives_quarks_bits_under_both_names(case, op):
    feeds = contract_inputs(case)
    y = _session(_model(case["attrs"], op), threads=2).run(None, feeds)[0]
    assert_same_bits(y, quark_y(case), f"{case['id']} as {op}")


# ------------------------------------------------------------ beyond Quark's kernel

def _case(seed, **kw):
    return make_case(np.random.default_rng(seed), kw.pop("seq", 7), kw.pop("n_in", 11),
                     kw.pop("hidden", 9), **kw)


@pytest.mark.parametrize(("direction", "layout", "symmetric"), [
    ("bidirectional", 0, False), ("forward", 0, True), ("reverse", 1, False),
    ("bidirectional", 1, True)])
def test_every_output_is_the_numpy_apis(direction, layout, symmetric):
    attrs, feeds = _case(11, batch=3, direction=direction, layout=layout, symmetric=symmetric)
    if layout == 1:
        feeds["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    got = _run(attrs, feeds, threads=2)
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got, _numpy(attrs, feeds), strict=True):
        assert_same_bits(g, w, name)


def test_no_bias_and_outputs_left_out():
    attrs, feeds = _case(12, batch=2)
    no_b = {k: v for k, v in feeds.items() if k != "B"}
    y_h, y_c = _numpy(attrs, no_b, "Y_h,Y_c")
    # B absent (three inputs), then B as an empty name; Y_h only, Y_c only
    assert_same_bits(_run(attrs, no_b, ("Y", "Y_h"))[1], y_h, "Y_h without B")
    sess = _session(_model(attrs, inputs=("X", "W", "R", ""), outputs=("Y", "", "Y_c")))
    got = sess.run(None, no_b)
    assert len(got) == 2
    assert_same_bits(got[1], y_c, "Y_c alone without B")
    assert_same_bits(got[0], _numpy(attrs, no_b, "Y"), "Y without B")


def test_batch_three_is_three_batch_one_runs():
    attrs, feeds = _case(13, batch=3)
    whole = _run(attrs, feeds, threads=2)
    for n in range(3):
        one = dict(feeds, X=np.ascontiguousarray(feeds["X"][:, n:n + 1]))
        y, y_h, y_c = _run(attrs, one)
        assert_same_bits(whole[0][:, :, n:n + 1], y, f"Y of element {n}")
        assert_same_bits(whole[1][:, n:n + 1], y_h, f"Y_h of element {n}")
        assert_same_bits(whole[2][:, n:n + 1], y_c, f"Y_c of element {n}")


@pytest.mark.parametrize("layout", [0, 1])
def test_forward_and_reverse_are_the_halves_of_bidirectional(layout):
    attrs, feeds = _case(14, batch=2, layout=layout)
    if layout == 1:
        feeds["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    both = _run(attrs, feeds)
    for d, direction in enumerate(("forward", "reverse")):
        half = {k: np.ascontiguousarray(v[d:d + 1]) for k, v in feeds.items() if k != "X"}
        got = _run(dict(attrs, direction=direction), dict(half, X=feeds["X"]))
        ys = both[0][:, :, d:d + 1] if layout == 1 else both[0][:, d:d + 1]
        assert_same_bits(got[0], ys, f"Y {direction}")
        hs = (slice(None), slice(d, d + 1)) if layout == 1 else (slice(d, d + 1),)
        assert_same_bits(got[1], both[1][hs], f"Y_h {direction}")
        assert_same_bits(got[2], both[2][hs], f"Y_c {direction}")


def test_layout_one_is_layout_zero_transposed():
    attrs, feeds = _case(15, batch=3)
    y0, h0, c0 = _run(attrs, feeds)
    x1 = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    y1, h1, c1 = _run(dict(attrs, layout=1), dict(feeds, X=x1))
    assert_same_bits(y1, y0.transpose(2, 0, 1, 3), "Y")
    assert_same_bits(h1, h0.transpose(1, 0, 2), "Y_h")
    assert_same_bits(c1, c0.transpose(1, 0, 2), "Y_c")


def test_empty_sequence_and_batch():
    attrs, feeds = _case(16, batch=2)
    empty = dict(feeds, X=np.zeros((0, 2, feeds["X"].shape[2]), np.float32))
    y, y_h, y_c = _run(attrs, empty)
    want = _numpy(attrs, empty)
    assert y.shape == (0, 2, 2, attrs["hidden_size"])
    assert_same_bits(y_h, want[1], "Y_h")
    assert_same_bits(y_c, want[2], "Y_c")
    none = dict(feeds, X=np.zeros((5, 0, feeds["X"].shape[2]), np.float32))
    assert [a.shape for a in _run(attrs, none)] == [(5, 2, 0, 9), (2, 0, 9), (2, 0, 9)]


# ------------------------------------------------------------------ sessions

def test_four_threads_on_one_session_give_the_serial_bits():
    attrs, _ = _case(17, batch=2)
    sess = _session(_model(attrs, outputs=("Y", "Y_h", "Y_c")), threads=2)
    feeds = [_case(17, batch=2 + k % 2, seq=5 + k)[1] for k in range(6)]
    serial = [sess.run(None, f) for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(2):
            got = list(pool.map(lambda f: sess.run(None, f), feeds * 2))
            for k, outs in enumerate(got):
                for g, s in zip(outs, serial[k % len(feeds)], strict=True):
                    assert_same_bits(g, s, f"run {k}")
    for f, outs in zip(feeds, serial, strict=True):
        for g, w in zip(outs, _numpy(attrs, f), strict=True):
            assert_same_bits(g, w)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("threads", [1, 2])
def test_whole_model_at_every_level(level, threads):
    attrs, feeds = _case(18, batch=2, seq=5)
    # W, R, B constant initializers (what the optimiser may fold or move)
    inits = [(k, feeds[k]) for k in ("W", "R", "B")]
    model = _model(attrs, around=True, x_shape=list(feeds["X"].shape), inits=inits)
    y = _session(model, threads=threads, level=level).run(None, {"X": feeds["X"]})[0]
    want = _numpy(dict(attrs), dict(feeds, X=feeds["X"] * np.float32(2)), "Y") + np.float32(2)
    assert_same_bits(y, want)


@pytest.mark.parametrize("constant", ["WRB", "WR", "W", "WR+B fed", "RB"])
def test_constant_weights_give_the_fed_weights_bits_from_threads(constant):
    """W / R / B as initializers (the kernel quantizes them once, when it is
    made, where all it has of them are constants): every output the NumPy
    API's, for runs of several batch sizes and lengths from four threads at
    once, B absent ("WR") or fed, and with only some of them constant (each
    run quantizes its own)."""
    attrs, feeds = _case(21, batch=2, n_in=6, hidden=5)
    names = ["X", "W", "R"] + ([] if constant == "WR" else ["B"])
    inits = [(k, feeds[k]) for k in constant.split("+")[0]]
    sess = _session(_model(attrs, inputs=tuple(names), outputs=("Y", "Y_h", "Y_c"),
                           inits=inits), threads=2)
    fed = [k for k in names if k not in dict(inits)]
    runs = []
    for k in range(6):
        x = _case(21 + k, batch=1 + k % 3, seq=3 + k, n_in=6, hidden=5)[1]["X"]
        runs.append({n: x if n == "X" else feeds[n] for n in fed})
    want = [_numpy(attrs, {**{n: feeds[n] for n in names}, "X": r["X"]}) for r in runs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda r: sess.run(None, r), runs * 2))
    for k, outs in enumerate(got):
        for name, g, w in zip(("Y", "Y_h", "Y_c"), outs, want[k % len(runs)], strict=True):
            assert_same_bits(g, w, f"{constant} run {k} {name}")


def test_constant_weights_still_refuse_an_x_of_another_input_size():
    """With W a constant, an X whose input size is not W's is refused at
    the run, naming W's shape (the prepared weights are not used)."""
    attrs, feeds = _case(22, n_in=6, hidden=5)
    inits = [(k, feeds[k]) for k in "WRB"]
    sess = _session(_model(attrs, inits=inits))
    with pytest.raises(Exception, match=r"lstm_node.*W must have shape \[2, 20, 7\]"):
        sess.run(None, {"X": np.zeros((3, 1, 7), np.float32)})


def test_two_nodes_on_one_weight_initializer_keep_their_own_parameters():
    """Two LSTM nodes reading the same W / R / B initializers with
    different quantization attributes: each node's own bits."""
    attrs, feeds = _case(23, n_in=6, hidden=5)
    other = {**attrs, "w_zero_point": 30000, "r_scale": attrs["r_scale"] * 2}
    nodes = [helper.make_node("ExtendedLSTM", ["X", "W", "R", "B"], [y], name=y,
                              domain=OPS["ExtendedLSTM"], **a)
             for y, a in (("y0", attrs), ("y1", other))]
    init = [helper.make_tensor(n, F, feeds[n].shape, feeds[n].reshape(-1).tolist())
            for n in "WRB"]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("X", F, None)],
                              [helper.make_tensor_value_info(y, F, None) for y in ("y0", "y1")],
                              initializer=init)
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(OPS["ExtendedLSTM"], 1)])
    y0, y1 = _session(model).run(None, {"X": feeds["X"]})
    assert_same_bits(y0, _numpy(attrs, feeds, "Y"), "y0")
    assert_same_bits(y1, _numpy(other, feeds, "Y"), "y1")
    assert not np.array_equal(y0, y1)


@pytest.mark.parametrize("layout", [0, 1])
def test_shape_inference_gives_y_its_type(layout):
    attrs, feeds = _case(19, batch=3, seq=4, direction="reverse", layout=layout)
    if layout == 1:
        feeds["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    x_shape = ["n" if layout == 1 else "s", "n" if layout == 0 else "s", 11]
    node = helper.make_node("ExtendedLSTM", ["X", "W", "R", "B"], ["t"], domain="com.amd.quark",
                            **attrs)
    relu = helper.make_node("Relu", ["t"], ["y"])
    graph = helper.make_graph(
        [node, relu], "g",
        [helper.make_tensor_value_info("X", F, x_shape)]
        + [helper.make_tensor_value_info(k, F, list(feeds[k].shape)) for k in "WRB"],
        [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])
    sess = _session(model)
    out = sess.get_outputs()[0]
    assert out.type == "tensor(float)"
    want = np.maximum(_numpy(attrs, feeds, "Y"), 0)
    assert_same_bits(sess.run(None, feeds)[0], want)


# ------------------------------------------------------------------ refusals

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxruntime as ort
    from onnx import TensorProto, helper
    import extql
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    F = TensorProto.FLOAT
    out = []
    for case in spec:
        try:
            names = case["inputs"]
            node = helper.make_node(case["op"], names, case["outputs"], name="bad_node",
                                    domain=case["domain"], **case["attrs"])
            ins = [helper.make_tensor_value_info(n, case["types"].get(n, 1), None)
                   for n in names if n]
            outs = [helper.make_tensor_value_info(o, F, None) for o in case["outputs"] if o]
            g = helper.make_graph([node], "g", ins, outs)
            m = helper.make_model(g, ir_version=8, opset_imports=[
                helper.make_opsetid("", 17), helper.make_opsetid(case["domain"], 1)])
            so = ort.SessionOptions(); extql.register(so)
            s = ort.InferenceSession(m.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
            feeds = {n: np.array(v["data"], dtype=v["dtype"]).reshape(v["shape"])
                     for n, v in case["feeds"].items()}
            s.run(None, feeds)
            out.append("ran")
        except Exception as e:
            out.append(str(e))
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def base():
    return make_case(np.random.default_rng(1), 4, 6, 5, batch=2, symmetric=True)


def _python_words(base, change):
    """The NumPy API's (or the rules') message for the same change, without
    its 'ExtendedLSTM: ' prefix."""
    attrs, feeds = base
    args = {"x": feeds["X"], "w": feeds["W"], "r": feeds["R"], "b": feeds["B"]}
    kw = dict(attrs)
    for k, v in change.items():
        if k in args:
            args[k] = v
        else:
            kw[k] = v  # None: absent (the API's "missing")
    try:
        if set(kw) - set(inspect.signature(extql.extended_lstm).parameters):
            rules.check_lstm(kw)
        else:
            extql.extended_lstm(args.pop("x"), args.pop("w"), args.pop("r"), args.pop("b"),
                                **kw)
    except (TypeError, ValueError) as exc:
        return str(exc).split(": ", 1)[1]
    raise AssertionError(f"the NumPy API took {change}")


_ATTR_CHANGES = [
    {"hidden_size": 0}, {"hidden_size": 4}, {"hidden_size": None}, {"y_scale": None},
    {"x_scale": None, "b_zero_point": None}, {"x_scale": 0.0}, {"w_scale": -0.5},
    {"r_scale": float("nan")}, {"b_scale": float("inf")}, {"x_zero_point": 65536},
    {"y_zero_point": -1}, {"direction": "both"}, {"layout": 2},
    {"direction": "forward"}, {"y_scale": 0.05}, {"x_scale": 0.5, "w_scale": 0.5},
    {"x_scale": 1e-7, "w_scale": 1e-7}, {"input_forget": 1}, {"clip": 3.0},
    {"activations": ["Sigmoid", "Tanh", "Tanh"]}, {"activation_alpha": [1.0]},
    {"hidden_size": 5.0}, {"y_zero_point": 3.5}, {"x_scale": "0.1"}, {"layout": 1.0},
]
_INPUT_CHANGES = [
    {"r": np.zeros((2, 20, 4), np.float32)}, {"b": np.zeros((2, 20), np.float32)},
    {"x": np.zeros((4, 6), np.float32)}, {"x": np.zeros((4, 1, 0), np.float32)},
    {"w": np.zeros((2, 20, 7), np.float32)},
]
_TYPE_CHANGES = [("X", np.float64), ("W", np.int16), ("R", np.float16)]


def _spec(base, op, change=None, inputs=None, types=None, outputs=("Y",)):
    attrs, feeds = base
    attrs = dict(attrs)
    feeds = dict(feeds)
    for k, v in (change or {}).items():
        if k in ("x", "w", "r", "b"):
            feeds[k.upper()] = v
        elif v is None:
            attrs.pop(k, None)
        else:
            attrs[k] = v
    names = list(inputs or ("X", "W", "R", "B"))
    for name, dtype in (types or {}).items():
        feeds[name] = feeds[name].astype(dtype)
    feed = {}
    for n in names:
        if not n:
            continue
        v = feeds.get(n, np.zeros((1,), np.float32))  # (float: the output keeps its type)
        feed[n] = {"data": v.reshape(-1).tolist(), "dtype": str(v.dtype), "shape": list(v.shape)}
    onnx_types = {n: helper.np_dtype_to_tensor_dtype(np.dtype(v["dtype"]))
                  for n, v in feed.items()}
    return {"op": op, "domain": OPS[op], "attrs": attrs, "inputs": names,
            "outputs": list(outputs), "types": onnx_types, "feeds": feed}


def test_refusals_are_clean_session_errors_naming_the_node(base, tmp_path):
    specs, wanted = [], []
    for k, change in enumerate(_ATTR_CHANGES + _INPUT_CHANGES):
        op = list(OPS)[k % 2]
        specs.append(_spec(base, op, change))
        wanted.append((op, _python_words(base, change)))
    for k, (name, dtype) in enumerate(_TYPE_CHANGES):
        op = list(OPS)[k % 2]
        specs.append(_spec(base, op, types={name: dtype}))
        wanted.append((op, _python_words(base, {name.lower(): base[1][name].astype(dtype)})))
    for index, (name, why) in rules.REFUSED_INPUTS.items():
        inputs = ["X", "W", "R", "B", "", "", "", ""][:index] + [name]
        specs.append(_spec(base, "ExtendedLSTM", inputs=inputs))
        wanted.append(("ExtendedLSTM", f"input {name} is not supported: {why}"))
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(specs))
    proc = run_python("-c", _CHILD, str(path))
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == len(wanted)
    for message, (op, words) in zip(got, wanted, strict=True):
        assert f"{op} (node 'bad_node')" in message, message
        # the NumPy API's words; its rank check names no layout, the rules' does
        for piece in words.split(", got") if words.startswith("X must have rank") else [words]:
            assert piece in message, (words, message)


def test_the_library_registers_both_names():
    """Both names, each in its own domain, in one session (the names the
    module's documentation lists); a name in the other domain is unknown."""
    attrs, feeds = _case(20, batch=1)
    for op in OPS:
        assert op in extql.ort.__doc__
    nodes = [helper.make_node(op, ["X", "W", "R", "B"], [f"Y{k}"], domain=OPS[op], **attrs)
             for k, op in enumerate(OPS)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, None) for n in "XWRB"],
        [helper.make_tensor_value_info(f"Y{k}", F, None) for k in range(2)])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1),
        helper.make_opsetid("com.vai.quantize", 1)])
    y0, y1 = _session(model).run(None, feeds)
    want = _numpy(attrs, feeds, "Y")
    assert_same_bits(y0, want, "ExtendedLSTM")
    assert_same_bits(y1, want, "VitisLSTM")
    wrong = _model(attrs)
    wrong.graph.node[0].domain = "com.vai.quantize"
    wrong.opset_import[1].domain = "com.vai.quantize"
    with pytest.raises(Exception, match="ExtendedLSTM"):
        _session(wrong)
