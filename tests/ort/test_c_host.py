"""extql's onnxruntime library in a C program with no Python in it, as C,
C++, C#, Java and Rust users (and Triton, onnxruntime-genai) load it.

The host (tests/chost/host.c, built once per session by tests/chostutil.py
against the C API its own header declares, linked with the onnxruntime
wheel's libonnxruntime) registers ``extql.get_library_path(standalone=True)``
with RegisterCustomOpsLibrary_V2, makes a session from a model file, feeds
raw inputs, runs and writes every output.  Each model runs in one host
process at every graph optimisation level with 1 and 2 intra-op threads,
and every run must give the bits of the Python path (onnxruntime with
``extql.register``, same level and threads) and, where it applies, of the
contract (tests/contract.py) or of AMD Quark's own library (the outputs
stored beside Quark's models).  The host runs the kernel variant of the
module (conftest.py) through EXTQL_ISA.

Types: every quantized type this onnxruntime takes in a custom operator
(the eight, float8; int4 / uint4 from 1.21; float4e2m1 from 1.24; no
release takes int2 / uint2, see test_ort_subbyte.py).

Skipped with the reason where the host cannot be built: not Linux, no C
compiler, or an onnxruntime wheel without libonnxruntime.so (1.18).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from blockfmt_data import BLOCK_OPS
from chostutil import LEVEL_NUMBERS, Host, build, run_python, unavailable
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
from extql.types import OP_NAMES

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "quark")
QUARK_MODELS = sorted(f[:-5] for f in os.listdir(DATA) if f.endswith(".onnx"))
ORT_VERSION = Version(ort.__version__)
#: Every (level, threads) a host process runs its model with.
RUNS = [(level, threads) for level in LEVEL_NUMBERS for threads in (1, 2)]
#: The quantized types this onnxruntime's custom operators take.
HOST_TYPES = [n for n in ALL_TYPES
              if n not in ("int2", "uint2")
              and (n not in ("int4", "uint4") or ORT_VERSION >= Version("1.21"))
              and (n != "float4e2m1" or ORT_VERSION >= Version("1.24"))]
SPECIALS = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -2.5, np.nan, np.inf, -np.inf, 1e30, -1e30,
                     1e-40, 3e4, -7e5], np.float32)
#: x's shape and, per granularity, the axis attribute (None: absent) and the
#: scale's shape.
X_SHAPE = (2, 4, 3, 5)
GRANULARITY = {"tensor": (None, ()), "axis-default": (None, (4,)), "axis-last": (-1, (5,))}


@pytest.fixture(scope="session")
def host(tmp_path_factory) -> Host:
    return build(tmp_path_factory.mktemp("c_host"))


def _library() -> str:
    return extql.get_library_path(standalone=True)


def _assert_runs_match(result, runs, expect_per_run, what: str) -> None:
    """The host exited 0 and each of its runs gave the expected bits."""
    assert result.returncode == 0, f"{what}: rc {result.returncode}\n{result.stderr}"
    assert len(result.outputs) == len(runs)
    for (level, threads), got, want in zip(runs, result.outputs, expect_per_run, strict=True):
        assert set(got) == set(want), (what, level, threads, sorted(got), sorted(want))
        for name in want:
            assert_same_bits(got[name], want[name], f"{what} {name} level {level} x{threads}")


def _python_runs(model, feeds, runs=RUNS) -> list[dict[str, np.ndarray]]:
    return [run_python(model, feeds, level, threads) for level, threads in runs]


# --------------------------------------------------------------------------
# The process


def test_the_host_process_has_no_python(host, tmp_path, kernel_isa):
    """The executable needs no libpython, and while the library runs in it
    (after its first run) no libpython and no Python extension module is
    mapped: extql's library and onnxruntime's are."""
    ldd = subprocess.run(["ldd", str(host.exe)], capture_output=True, text=True, check=True)
    assert "libonnxruntime.so.1" in ldd.stdout and "python" not in ldd.stdout.lower()
    model, feeds, _ = _extended_model(extql.DOMAIN, "tensor")
    result = host.run(_library(), model, feeds, [(99, 1)], tmp_path, isa=kernel_isa)
    assert result.returncode == 0, result.stderr
    assert result.version == ort.__version__
    names = {os.path.basename(p) for p in result.mapped}
    real = {os.path.realpath(p) for p in result.mapped}
    assert os.path.realpath(_library()) in real
    assert any(n.startswith("libonnxruntime.so") for n in names), names
    assert not [n for n in names if n.startswith("libpython") or ".cpython-" in n
                or n.startswith("_kernels")], names


# --------------------------------------------------------------------------
# Extended / Vitis models: every type, per tensor and per axis, quantize,
# dequantize of the quantized tensor, and a dequantize fed by the host


def _extended_model(domain: str, granularity: str):
    """x (float32) -> Q -> q_<type> -> DQ -> y_<type> for every type, and
    a dequantize of a fed quantized input xq_<type> -> d_<type>; returns the
    model, the feeds and the contract's outputs."""
    q_op, dq_op = OP_NAMES[domain]
    axis, pshape = GRANULARITY[granularity]
    rng = case_rng("c_host", domain, granularity)
    ax = 1 if axis is None else axis
    x = normal_with_specials(rng, X_SHAPE, 40.0, SPECIALS)
    attrs = {} if axis is None else {"axis": axis}
    nodes, inputs, outputs, inits = [], [value_info("x", TensorProto.FLOAT, X_SHAPE)], [], []
    feeds, want = {"x": x}, {}
    for name in HOST_TYPES:
        code = ONNX_OF[ALL_TYPES[name][0]]
        s = ((rng.random(pshape) + 0.05) * (2.0 if name in TYPES else 0.5)).astype(np.float32)
        z = zero_points(rng, name, pshape, bound=None if name in SMALLFLOAT_TYPES else 64)
        inits += [tensor(f"s_{name}", s), tensor(f"z_{name}", z)]
        params = [f"s_{name}", f"z_{name}"]
        nodes += [helper.make_node(q_op, ["x", *params], [f"q_{name}"], domain=domain, **attrs),
                  helper.make_node(dq_op, [f"q_{name}", *params], [f"y_{name}"], domain=domain,
                                   **attrs),
                  helper.make_node(dq_op, [f"xq_{name}", *params], [f"d_{name}"], domain=domain,
                                   **attrs)]
        xq = quantize(normal_with_specials(rng, X_SHAPE, 40.0, SPECIALS), s, z, axis=ax)
        inputs.append(value_info(f"xq_{name}", code, X_SHAPE))
        outputs += [value_info(f"q_{name}", code, X_SHAPE),
                    value_info(f"y_{name}", TensorProto.FLOAT, X_SHAPE),
                    value_info(f"d_{name}", TensorProto.FLOAT, X_SHAPE)]
        feeds[f"xq_{name}"] = xq
        q = quantize(x, s, z, axis=ax)
        want |= {f"q_{name}": q, f"y_{name}": dequantize(q, s, z, axis=ax),
                 f"d_{name}": dequantize(xq, s, z, axis=ax)}
    ir = 11 if "float4e2m1" in HOST_TYPES else 10 if "int4" in HOST_TYPES else 9
    model = make_model(nodes, inputs, outputs, inits, opset=21 if ir < 11 else 23,
                       domains=(domain,), ir_version=ir)
    return model, feeds, want


@pytest.mark.parametrize("granularity", list(GRANULARITY))
@pytest.mark.parametrize("domain", list(OP_NAMES))
def test_extended_models_give_the_python_paths_bits(host, tmp_path, kernel_isa, domain,
                                                    granularity):
    model, feeds, want = _extended_model(domain, granularity)
    result = host.run(_library(), model, feeds, RUNS, tmp_path, isa=kernel_isa)
    _assert_runs_match(result, RUNS, [want] * len(RUNS), f"{domain} {granularity} vs contract")
    _assert_runs_match(result, RUNS, _python_runs(model, feeds),
                       f"{domain} {granularity} vs Python")


# --------------------------------------------------------------------------
# Whole models in Quark's form


QUARK_FORM = all_models()


def _loads(model: onnx.ModelProto, level: int) -> bool:
    """Whether onnxruntime makes a session of the model at ``level``; the one
    known refusal is of Quark's int32 models, whose Q/DQ pairs onnxruntime's
    own optimisations rewrite into an int32 QuantizeLinear it does not have
    (tests/quark/test_quark_models.py)."""
    try:
        run_python(model, sample_input(model), level, 1)
    except Exception as exc:  # onnxruntime's error types are not importable everywhere
        assert "int32" in str(exc) and "QuantizeLinear" in str(exc), exc
        return False
    return True


@pytest.mark.parametrize("name", sorted(QUARK_FORM))
def test_quark_form_models_give_the_python_paths_bits(host, tmp_path, kernel_isa, name):
    """At every level onnxruntime loads the model at (all but Quark's int32
    models load at every level; those at level 0 at least)."""
    model = QUARK_FORM[name]
    feeds = sample_input(model)
    runs = [(level, threads) for level, threads in RUNS if _loads(model, level)]
    assert runs and (len(runs) == len(RUNS) or "int32" in name), runs
    result = host.run(_library(), model, feeds, runs, tmp_path, isa=kernel_isa)
    _assert_runs_match(result, runs, _python_runs(model, feeds, runs), name)


@functools.cache
def _runs_block_op(op: str) -> bool:
    """Whether the library runs ``op`` (com.amd.quark): a one-node model
    runs, or onnxruntime says the op is not registered."""
    node = helper.make_node(op, ["x"], ["y"], domain=extql.DOMAIN)
    model = make_model([node], [value_info("x", TensorProto.FLOAT, (1, 32))],
                       [value_info("y", TensorProto.FLOAT, (1, 32))], domains=(extql.DOMAIN,))
    try:
        run_python(model, {"x": np.ones((1, 32), np.float32)}, 99, 1)
    except Exception as exc:  # onnxruntime's own error type is not importable everywhere
        if f"{op}(" in str(exc) and "is not a registered" in str(exc):
            return False
        raise
    return True


@pytest.mark.parametrize("name", QUARK_MODELS)
def test_real_quark_models_give_quarks_and_the_python_paths_bits(host, tmp_path, kernel_isa,
                                                                 name):
    """Models AMD Quark's quantizer wrote (tests/data/quark): every run the
    bits Quark's own library gave (stored beside the model) and the Python
    path's.  The models with BFP / MX nodes wait for the library to run
    those operators."""
    path = Path(DATA, f"{name}.onnx")
    model = onnx.load(str(path))
    missing = sorted({n.op_type for n in model.graph.node if n.op_type in BLOCK_OPS}
                     - {op for op in BLOCK_OPS if _runs_block_op(op)})
    if missing:
        pytest.skip(f"{name}: extql's library does not run {', '.join(missing)} yet")
    with np.load(os.path.join(DATA, f"{name}.quark.npz")) as data:
        feeds, quark_y = {model.graph.input[0].name: data["x"]}, data["y"]
    result = host.run(_library(), path, feeds, RUNS, tmp_path, isa=kernel_isa)
    out = model.graph.output[0].name
    _assert_runs_match(result, RUNS, [{out: quark_y}] * len(RUNS), f"{name} vs Quark's library")
    _assert_runs_match(result, RUNS, [{out: r[out]} for r in _python_runs(model, feeds)],
                       f"{name} vs Python")


# --------------------------------------------------------------------------
# Refused models


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
    result = host.run(_library(), model, feeds, [(99, 1)], tmp_path, isa=kernel_isa)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert op in result.stderr and words in result.stderr, result.stderr
    stage, python_message = _python_failure(model, feeds)
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("host: ")]
    assert line.startswith(f"host: {stage} failed: "), (stage, line)
    message = line.split(" failed: ", 1)[1]
    assert message in python_message, (message, python_message)
