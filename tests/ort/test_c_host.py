"""extql's onnxruntime library in a C program with no Python in it, as C,
C++, C#, Java and Rust users (and Triton, onnxruntime-genai) load it.

The host (tests/chost/host.c, built once per session by tests/chostutil.py
against the C API its own header declares, linked with the onnxruntime
wheel's libonnxruntime) registers ``extql.get_library_path(standalone=True)``
with RegisterCustomOpsLibrary_V2, makes a session from a model file, feeds
raw inputs, runs and writes every output.  The models of a test family run
as jobs of one host process (one onnxruntime environment, as a serving
application has): the Extended models at every graph optimisation level
with 1 and with 2 intra-op threads, the whole models at every level with 1
and 2 threads in turn, the DPU-emulation models (instance norms and LSTMs
under both names, Quark's LSTM size, batch > 1, one direction, layout 1,
Y / Y_h / Y_c) like the Extended ones.  Every run must give the bits of
the Python path (onnxruntime with ``extql.register``, same level and
threads) and of the contract (tests/contract.py, tests/in_contract.py,
tests/lstm_contract.py) where it applies; Quark's own models must also
come close to what Quark's own library gave (stored beside them).  A model
the library refuses ends the host with status 1 and the library's message.

The module runs once, with the kernel variant the CPU picks (the variants
are compared with each other in-process elsewhere); the host is told the
same variant through EXTQL_ISA.

Types: every quantized type this onnxruntime takes in a custom operator
(the eight, float8; int4 / uint4 from 1.21; float4e2m1 from 1.24; no
release takes int2 / uint2, see test_ort_subbyte.py).

Skipped with the reason where the host cannot be built: not Linux, no C
compiler, or an onnxruntime wheel without libonnxruntime.so (1.18).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import in_contract
import lstm_contract
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from blockfmt_data import BLOCK_MODELS
from chostutil import LEVEL_NUMBERS, Host, Job, build, run_python, unavailable
from contract import (
    ALL_TYPES,
    SMALLFLOAT_TYPES,
    TYPES,
    assert_same_bits,
    case_rng,
    dequantize,
    normal_with_specials,
    quantize,
    zero_points,
)
from onnx import TensorProto, helper
from onnx_helpers import make_model
from ortutil import ONNX_OF, tensor, value_info
from packaging.version import Version
from quarkmodels import all_models, sample_input

import extql
from extql.rules.types import OP_NAMES

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

DATA = Path(__file__).resolve().parents[1] / "data" / "quark"
QUARK_MODELS = sorted(p.stem for p in DATA.glob("*.onnx"))
ORT_VERSION = Version(ort.__version__)
#: Every (level, threads), one session each: the Extended models' runs (their
#: large chains are split over the session's threads).
RUNS = [(level, threads) for level in LEVEL_NUMBERS for threads in (1, 2)]
#: The whole models' runs: every level, 1 and 2 threads in turn (their
#: tensors are below the size the library splits, so the thread count only
#: changes onnxruntime's own operators).
MODEL_RUNS = [(level, 1 + k % 2) for k, level in enumerate(LEVEL_NUMBERS)]
#: The quantized types this onnxruntime's custom operators take.
HOST_TYPES = [n for n in ALL_TYPES
              if n not in ("int2", "uint2")
              and (n not in ("int4", "uint4") or ORT_VERSION >= Version("1.21"))
              and (n != "float4e2m1" or ORT_VERSION >= Version("1.24"))]
SPECIALS = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -2.5, np.nan, np.inf, -np.inf, 1e30, -1e30,
                     1e-40, 3e4, -7e5], np.float32)
#: x's shape and, per granularity, the axis attribute (None: absent), the
#: scale's shape, and the type of the large chain (split over the threads).
X_SHAPE = (2, 4, 3, 5)
GRANULARITY = {"tensor": (None, (), "uint16"), "axis-default": (None, (4,), "int8"),
               "axis-last": (-1, (5,), "bfloat16")}
#: The large chain's x: above the size from which the library hands a
#: tensor to the session's thread pool (extql/src/extql_split.h).
LARGE_SHAPE = (3, 4, 130, 170)
EXTENDED = [(domain, g) for domain in OP_NAMES for g in GRANULARITY]


@pytest.fixture(scope="session")
def host(tmp_path_factory) -> Host:
    return build(tmp_path_factory.mktemp("c_host"))


def _library() -> str:
    return extql.get_library_path(standalone=True)


def _assert_runs_match(got_runs, runs, want_runs, what: str) -> None:
    """Each run's outputs are the expected bits."""
    assert len(got_runs) == len(runs) == len(want_runs), what
    for (level, threads), got, want in zip(runs, got_runs, want_runs, strict=True):
        assert set(got) == set(want), (what, level, threads, sorted(got), sorted(want))
        for name in want:
            assert_same_bits(got[name], want[name], f"{what} {name} level {level} x{threads}")


def _python_runs(model, feeds, runs=RUNS) -> list[dict[str, np.ndarray]]:
    return [run_python(model, feeds, level, threads) for level, threads in runs]


def _host_done(result, job: int, what: str) -> None:
    assert job not in result.failed, f"{what}: status {result.failed[job]}\n{result.stderr}"


# --------------------------------------------------------------------------
# Extended / Vitis models: every type, per tensor and per axis, quantize,
# dequantize of the quantized tensor, and a dequantize fed by the host


def _chain(domain, name, x, axis, pshape, rng, prefix=""):
    """Nodes, initializers, the fed quantized input and the contract's
    outputs of x -> Q -> q -> DQ -> y and xq (fed) -> DQ -> d for one type."""
    q_op, dq_op = OP_NAMES[domain]
    ax = 1 if axis is None else axis
    attrs = {} if axis is None else {"axis": axis}
    s = ((rng.random(pshape) + 0.05) * (2.0 if name in TYPES else 0.5)).astype(np.float32)
    z = zero_points(rng, name, pshape, bound=None if name in SMALLFLOAT_TYPES else 64)
    t = f"{prefix}{name}"
    params = [f"s_{t}", f"z_{t}"]
    nodes = [helper.make_node(q_op, [f"{prefix}x", *params], [f"q_{t}"], domain=domain, **attrs),
             helper.make_node(dq_op, [f"q_{t}", *params], [f"y_{t}"], domain=domain, **attrs),
             helper.make_node(dq_op, [f"xq_{t}", *params], [f"d_{t}"], domain=domain, **attrs)]
    xq = quantize(normal_with_specials(rng, x.shape, 40.0, SPECIALS), s, z, axis=ax)
    q = quantize(x, s, z, axis=ax)
    want = {f"q_{t}": q, f"y_{t}": dequantize(q, s, z, axis=ax),
            f"d_{t}": dequantize(xq, s, z, axis=ax)}
    return nodes, [tensor(f"s_{t}", s), tensor(f"z_{t}", z)], {f"xq_{t}": xq}, want


def _extended_model(domain: str, granularity: str):
    """x (float32) through a chain of every type, and a large x through the
    granularity's large chain; returns the model, the feeds and the
    contract's outputs."""
    axis, pshape, large_type = GRANULARITY[granularity]
    rng = case_rng("c_host", domain, granularity)
    feeds = {"x": normal_with_specials(rng, X_SHAPE, 40.0, SPECIALS),
             "large_x": normal_with_specials(rng, LARGE_SHAPE, 40.0, SPECIALS)}
    chains = [(name, "") for name in HOST_TYPES] + [(large_type, "large_")]
    nodes, inits, want = [], [], {}
    for name, prefix in chains:
        x = feeds[f"{prefix}x"]
        shape = pshape if not pshape else (x.shape[1 if axis is None else axis],)
        n, i, f, w = _chain(domain, name, x, axis, shape, rng, prefix)
        nodes += n
        inits += i
        feeds |= f
        want |= w
    inputs = [value_info(k, ONNX_OF[v.dtype], v.shape) for k, v in feeds.items()]
    outputs = [value_info(k, ONNX_OF[v.dtype], v.shape) for k, v in want.items()]
    ir = 11 if "float4e2m1" in HOST_TYPES else 10 if "int4" in HOST_TYPES else 9
    model = make_model(nodes, inputs, outputs, inits, opset=21 if ir < 11 else 23,
                       domains=(domain,), ir_version=ir)
    return model, feeds, want


@pytest.fixture(scope="module")
def extended(host, tmp_path_factory, kernel_isa):
    """Every Extended model as a job of one host process, every run."""
    built = [_extended_model(domain, g) for domain, g in EXTENDED]
    jobs = [Job(model, feeds, RUNS) for model, feeds, _ in built]
    result = host.run(_library(), jobs, tmp_path_factory.mktemp("extended"), isa=kernel_isa)
    return built, result


def test_the_host_process_has_no_python(host, extended):
    """The executable needs no libpython, and while the library runs in it
    (after its first run) no libpython and no Python extension module is
    mapped: extql's library and onnxruntime's are."""
    ldd = subprocess.run(["ldd", str(host.exe)], capture_output=True, text=True, check=True)
    assert "libonnxruntime.so.1" in ldd.stdout and "python" not in ldd.stdout.lower()
    _, result = extended
    _host_done(result, 0, "the first Extended model")
    assert result.version == ort.__version__
    names = {os.path.basename(p) for p in result.mapped}
    assert os.path.realpath(_library()) in {os.path.realpath(p) for p in result.mapped}
    assert any(n.startswith("libonnxruntime.so") for n in names), names
    assert not [n for n in names if n.startswith("libpython") or ".cpython-" in n
                or n.startswith("_kernels")], names


@pytest.mark.parametrize("domain,granularity", EXTENDED)
def test_extended_models_give_the_contracts_and_python_paths_bits(extended, domain,
                                                                  granularity):
    built, result = extended
    j = EXTENDED.index((domain, granularity))
    model, feeds, want = built[j]
    what = f"{domain} {granularity}"
    _host_done(result, j, what)
    _assert_runs_match(result.outputs[j], RUNS, [want] * len(RUNS), f"{what} vs contract")
    _assert_runs_match(result.outputs[j], RUNS, _python_runs(model, feeds), f"{what} vs Python")


# --------------------------------------------------------------------------
# Whole models in Quark's form


QUARK_FORM = all_models()
QUARK_FORM_NAMES = sorted(QUARK_FORM)


def _python_where_it_loads(model, feeds):
    """The runs of MODEL_RUNS at whose level onnxruntime makes a session of the
    model, and the Python path's outputs there.  The one known refusal is of
    Quark's int32 models, whose Q/DQ pairs onnxruntime's own optimisations
    rewrite into an int32 QuantizeLinear it does not have
    (tests/quark/test_quark_models.py)."""
    runs, outputs = [], []
    for level, threads in MODEL_RUNS:
        try:
            outputs.append(run_python(model, feeds, level, threads))
        except Exception as exc:  # onnxruntime's error types are not importable everywhere
            assert "int32" in str(exc) and "QuantizeLinear" in str(exc), exc
            continue
        runs.append((level, threads))
    return runs, outputs


@pytest.fixture(scope="module")
def quark_form(host, tmp_path_factory, kernel_isa):
    """Every Quark-form model as a job of one host process, at the runs the
    Python path loads it at; with the Python path's outputs."""
    expected = {}
    for name in QUARK_FORM_NAMES:
        feeds = sample_input(QUARK_FORM[name])
        expected[name] = (feeds, *_python_where_it_loads(QUARK_FORM[name], feeds))
    jobs = [Job(QUARK_FORM[n], expected[n][0], expected[n][1]) for n in QUARK_FORM_NAMES]
    result = host.run(_library(), jobs, tmp_path_factory.mktemp("quark_form"), isa=kernel_isa)
    return expected, result


@pytest.mark.parametrize("name", QUARK_FORM_NAMES)
def test_quark_form_models_give_the_python_paths_bits(quark_form, name):
    """At every level onnxruntime loads the model at: every level, but for
    Quark's int32 models, which load at level 0 at least."""
    expected, result = quark_form
    _, runs, python = expected[name]
    assert runs and (len(runs) == len(MODEL_RUNS) or "int32" in name), runs
    j = QUARK_FORM_NAMES.index(name)
    _host_done(result, j, name)
    _assert_runs_match(result.outputs[j], runs, python, name)


# --------------------------------------------------------------------------
# The models AMD Quark's quantizer wrote (tests/data/quark)


def _quark_values(name: str):
    model = onnx.load(str(DATA / f"{name}.onnx"))
    with np.load(DATA / f"{name}.quark.npz") as data:
        return model, {model.graph.input[0].name: data["x"]}, data["y"]


@pytest.fixture(scope="module")
def quark_real(host, tmp_path_factory, kernel_isa):
    """Every model as a job of one host process (the files as Quark wrote
    them), every run."""
    jobs = [Job(DATA / f"{n}.onnx", _quark_values(n)[1], MODEL_RUNS) for n in QUARK_MODELS]
    result = host.run(_library(), jobs, tmp_path_factory.mktemp("quark"), isa=kernel_isa)
    return QUARK_MODELS, result


@pytest.mark.parametrize("name", QUARK_MODELS)
def test_real_quark_models_give_the_python_paths_bits(quark_real, name):
    """Every run: the Python path's bits, and close to what Quark's own
    library gave (stored beside the model; the bits of it are the Python
    path's at onnxruntime's default level, tests/quark/test_quark_real.py:
    other levels and releases may round the float operators around the
    quantization nodes differently).  The models with BFP / MX nodes
    (BLOCK_MODELS) too, which also give Quark's bits at the default level
    (the last run)."""
    names, result = quark_real
    j = names.index(name)
    _host_done(result, j, name)
    model, feeds, quark_y = _quark_values(name)
    out = model.graph.output[0].name
    python = _python_runs(model, feeds, MODEL_RUNS)
    _assert_runs_match(result.outputs[j], MODEL_RUNS, [{out: r[out]} for r in python],
                       f"{name} vs Python")
    scale = float(np.abs(quark_y).max()) + 1.0
    for (level, _), got in zip(MODEL_RUNS, result.outputs[j], strict=True):
        np.testing.assert_allclose(got[out], quark_y, rtol=0, atol=0.05 * scale,
                                   err_msg=f"{name} vs Quark's library, level {level}")
    if name in BLOCK_MODELS:
        assert MODEL_RUNS[-1][0] == LEVEL_NUMBERS[-1]  # (onnxruntime's default, all)
        assert_same_bits(result.outputs[j][-1][out], quark_y, f"{name} vs Quark's library")


# --------------------------------------------------------------------------
# Refused models: one host process each


def _refused(op: str, domain: str, x: np.ndarray, s: np.ndarray, axis: int,
             runtime_scale: bool = False):
    """One node with an axis or scale extql refuses; the scale is fed at run
    time with runtime_scale (the refusal then comes from the run)."""
    z = np.zeros(s.shape, np.int8)
    inits = [tensor("z", z)] + ([] if runtime_scale else [tensor("s", s)])
    inputs = [value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    feeds = {"x": x}
    if runtime_scale:
        inputs.append(value_info("s", TensorProto.FLOAT, s.shape))
        feeds["s"] = s
    out = TensorProto.INT8 if x.dtype == np.float32 else TensorProto.FLOAT
    node = helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain, axis=axis)
    model = make_model([node], inputs, [value_info("y", out, x.shape)], inits, domains=(domain,))
    return model, feeds


F32 = np.float32
REFUSED = {
    "q_axis_out_of_range": (
        _refused("ExtendedQuantizeLinear", extql.DOMAIN, np.ones((2, 3, 5), F32),
                 np.ones(3, F32), axis=3),
        "ExtendedQuantizeLinear", "axis 3 is out of range for x of rank 3"),
    "dq_axis_out_of_range": (
        _refused("ExtendedDequantizeLinear", extql.DOMAIN, np.ones((3, 4), np.int8),
                 np.ones(3, F32), axis=-3),
        "ExtendedDequantizeLinear", "axis -3 is out of range for x of rank 2"),
    "vitis_q_axis_out_of_range": (
        _refused("VitisQuantizeLinear", "com.vai.quantize", np.ones((2, 2), F32),
                 np.ones(2, F32), axis=2),
        "VitisQuantizeLinear", "axis 2 is out of range"),
    "q_scale_length_at_run_time": (
        _refused("ExtendedQuantizeLinear", extql.DOMAIN, np.ones((2, 3, 5), F32),
                 np.ones(7, F32), axis=1, runtime_scale=True),
        "ExtendedQuantizeLinear", "the scale has 7 elements but x has 3 along axis 1"),
}


def _python_failure(model, feeds) -> tuple[str, str]:
    """Where the Python path fails (the host's name of the call) and
    onnxruntime's message there."""
    so = extql.register(ort.SessionOptions())
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's error types are not importable everywhere
        return "CreateSession", str(exc)
    with pytest.raises(Exception) as info:
        sess.run(None, feeds)
    return "Run", str(info.value)


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_models_fail_with_the_librarys_message(host, tmp_path, kernel_isa, case):
    """Exit status 1 and, on stderr, the message the library gave the
    Python path, which names the operator and the problem; the host fails
    where Python does (making the session, or running it)."""
    (model, feeds), op, words = REFUSED[case]
    result = host.run(_library(), [Job(model, feeds, [(99, 1)])], tmp_path, isa=kernel_isa)
    assert result.returncode == 1 and result.failed == {0: 1}, (result.stdout, result.stderr)
    assert op in result.stderr and words in result.stderr, result.stderr
    stage, python_message = _python_failure(model, feeds)
    prefix = f"host: job 0: {stage} failed: "  # (after onnxruntime's own log lines)
    assert prefix in result.stderr, (stage, result.stderr)
    message = result.stderr.split(prefix, 1)[1].rstrip("\n")
    assert message and message in python_message, (message, python_message)


# --------------------------------------------------------------------------
# Quark's DPU-emulation operators: instance norms and LSTMs under both names


def _dpu_in(op: str, shape, kind: str, with_epsilon: bool):
    """An instance norm of x (fed) with γ / β as initializers."""
    from dpu_models import in_model
    from in_cases import params, values

    rng = case_rng("c_host", "dpu", op, shape, kind)
    x = values(rng, shape, kind)
    g, b = params(rng, shape[1], special=kind == "specials")
    eps = 1e-3 if with_epsilon else None
    model = in_model(op, x_shape=list(shape), c=shape[1], epsilon=eps, y_shape=list(shape))
    model.graph.initializer.extend([tensor("scale", g), tensor("B", b)])
    del model.graph.input[1:]
    want = {"y": in_contract.expected(x, g, b, 1e-5 if eps is None else eps)}
    return model, {"x": x}, want


def _dpu_lstm(op: str, seq: int, n_in: int, hidden: int, batch: int, direction: str,
              layout: int, weights_fed: bool):
    """An LSTM with every output (Y, Y_h, Y_c); W / R / B initializers (as
    Quark writes them) or fed."""
    from dpu_models import lstm_model
    from lstm_cases import make_case

    rng = case_rng("c_host", "dpu", op, seq, n_in, hidden, batch, direction, layout)
    attrs, feeds = make_case(rng, seq, n_in, hidden, batch=batch, direction=direction,
                             layout=layout, specials=True)
    inits = [] if weights_fed else [tensor(k, feeds[k]) for k in "WRB"]
    x_shape = list(feeds["X"].shape)
    model = lstm_model(attrs, op, x_shape=x_shape, w_shape=list(feeds["W"].shape),
                       r_shape=list(feeds["R"].shape), b_shape=list(feeds["B"].shape),
                       outputs=("Y", "Y_h", "Y_c"), initializers=inits)
    y, y_h, y_c = lstm_contract.expected(attrs, feeds["X"], feeds["W"], feeds["R"], feeds["B"])
    fed = feeds if weights_fed else {"X": feeds["X"]}
    return model, fed, {"Y": y, "Y_h": y_h, "Y_c": y_c}


#: name -> (model, feeds, the contract's outputs): both names of each op;
#: an instance norm above the size the library splits over the threads; an
#: LSTM of Quark's size (seq 80, input 64, hidden 128) and the beyond-Quark
#: forms (batch > 1, one direction, layout 1).
DPU = {
    "in_specials": lambda: _dpu_in("ExtendedInstanceNormalization", (2, 6, 5, 7), "specials",
                                   False),
    "in_vitis_ties": lambda: _dpu_in("VitisInstanceNormalization", (3, 5, 33), "ties", True),
    "in_large": lambda: _dpu_in("ExtendedInstanceNormalization", (2, 64, 28, 28), "offset",
                                False),
    "lstm_quark_size": lambda: _dpu_lstm("ExtendedLSTM", 80, 64, 128, 1, "bidirectional", 0,
                                         False),
    "lstm_vitis_fed": lambda: _dpu_lstm("VitisLSTM", 7, 9, 6, 1, "bidirectional", 0, True),
    "lstm_batch3_reverse_layout1": lambda: _dpu_lstm("ExtendedLSTM", 6, 5, 4, 3, "reverse", 1,
                                                     False),
    "lstm_batch2_forward": lambda: _dpu_lstm("VitisLSTM", 5, 4, 3, 2, "forward", 0, True),
}


@pytest.fixture(scope="module")
def dpu(host, tmp_path_factory, kernel_isa):
    """Every DPU model as a job of one host process, every run."""
    built = {name: make() for name, make in DPU.items()}
    jobs = [Job(model, feeds, RUNS) for model, feeds, _ in built.values()]
    result = host.run(_library(), jobs, tmp_path_factory.mktemp("dpu"), isa=kernel_isa)
    return built, result


@pytest.mark.parametrize("name", list(DPU))
def test_dpu_models_give_the_contracts_and_python_paths_bits(dpu, name):
    """Every run (level, threads) of the host: the contract oracle's bits
    (tests/in_contract.py, tests/lstm_contract.py) and the Python path's."""
    built, result = dpu
    j = list(DPU).index(name)
    model, feeds, want = built[name]
    _host_done(result, j, name)
    _assert_runs_match(result.outputs[j], RUNS, [want] * len(RUNS), f"{name} vs contract")
    _assert_runs_match(result.outputs[j], RUNS, _python_runs(model, feeds), f"{name} vs Python")


def test_a_refused_dpu_node_fails_with_the_librarys_message(host, tmp_path, kernel_isa):
    """An LSTM with an optional ONNX input the op does not take
    (sequence_lens): status 1 and the library's message naming the node
    and the input, where the Python path fails."""
    from dpu_models import lstm_model
    from lstm_cases import make_case

    attrs, feeds = make_case(np.random.default_rng(7), 4, 3, 2)
    model = lstm_model(attrs, x_shape=list(feeds["X"].shape), initializers=[
        tensor(k, feeds[k]) for k in "WRB"])
    node = model.graph.node[0]
    node.input.append("seq_lens")
    model.graph.input.append(value_info("seq_lens", TensorProto.INT32, [1]))
    run = {"X": feeds["X"], "seq_lens": np.array([4], np.int32)}
    result = host.run(_library(), [Job(model, run, [(99, 1)])], tmp_path, isa=kernel_isa)
    assert result.returncode == 1 and result.failed == {0: 1}, (result.stdout, result.stderr)
    assert "lstm_node" in result.stderr and "sequence_lens" in result.stderr, result.stderr
    stage, python_message = _python_failure(model, feeds | run)
    prefix = f"host: job 0: {stage} failed: "
    assert prefix in result.stderr, (stage, result.stderr)
    message = result.stderr.split(prefix, 1)[1].rstrip("\n")
    assert message and message in python_message, (message, python_message)
