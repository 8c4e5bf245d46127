"""extql.ort_io: NumPy arrays in and out of onnxruntime sessions, bfloat16
included, on every supported onnxruntime.

Both ways of moving bfloat16 are run through real sessions with the extql
library: typed OrtValues (where this onnxruntime has them) and the model
rewrite older releases need (forced here, so it runs on every release).
The expectations are independent of the module: the fed bits themselves
(through Identity) and the contract's quantize / dequantize.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from contract import BF16, assert_same_bits, dequantize, quantize
from onnx import TensorProto, helper
from ortutil import make_model, session, tensor, value_info

from extql import ort_io
from extql.cli import session as cli_session

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

Q, DQ = "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"
N = 1 << 16
#: Every bfloat16 bit pattern (NaN payloads, infinities, subnormals, -0).
ALL_BF16 = np.arange(N, dtype=np.uint32).astype(np.uint16).view(BF16).reshape(256, 256)
X = (np.random.default_rng(7).standard_normal((256, 256)) * 300).astype(np.float32)
SCALE = np.float32(0.75)
ZP = np.asarray(-1.5, BF16)


def _model():
    """b (bfloat16) -> Identity -> b_out; x (float32) -> Q with a fed bfloat16
    zero point -> y (bfloat16) -> DQ -> z (float32)."""
    nodes = [
        helper.make_node("Identity", ["b"], ["b_out"]),
        helper.make_node(Q, ["x", "s", "zp"], ["y"], domain="com.amd.quark"),
        helper.make_node(DQ, ["y", "s", "zp"], ["z"], domain="com.amd.quark"),
    ]
    inputs = [value_info("b", TensorProto.BFLOAT16, ALL_BF16.shape),
              value_info("x", TensorProto.FLOAT, X.shape),
              value_info("zp", TensorProto.BFLOAT16, [])]
    outputs = [value_info("b_out", TensorProto.BFLOAT16, ALL_BF16.shape),
               value_info("y", TensorProto.BFLOAT16, X.shape),
               value_info("z", TensorProto.FLOAT, X.shape)]
    return make_model(nodes, inputs, outputs, [tensor("s", SCALE)])


FEEDS = {"b": ALL_BF16, "x": X, "zp": ZP}


def _expected() -> dict[str, np.ndarray]:
    y = quantize(X, SCALE, ZP)
    return {"b_out": ALL_BF16, "y": y, "z": dequantize(y, SCALE, ZP)}


def _check(got: dict[str, np.ndarray], what: str) -> None:
    want = _expected()
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, (what, name)
        assert_same_bits(got[name], value, f"{what} {name}")


def test_import_is_light():
    """Importing the module imports neither onnxruntime nor onnx."""
    code = ("import sys, extql.ort_io; "
            "print(sorted(m for m in ('onnxruntime', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_narrow_undoes_the_exact_widening():
    """Every bfloat16 bit pattern widened by ml_dtypes comes back unchanged."""
    wide = ALL_BF16.astype(np.float32)
    back = ort_io.narrow_bfloat16(wide)
    assert back.dtype == BF16
    np.testing.assert_array_equal(back.view(np.uint16), ALL_BF16.view(np.uint16))


@pytest.mark.skipif(not ort_io.has_typed_ortvalues(),
                    reason="this onnxruntime has no typed OrtValues (the rewrite is tested below)")
def test_typed_round_trip_into_preallocated_outputs():
    """bfloat16 bound both ways as typed OrtValues: every bit pattern passes
    Identity unchanged and the Extended ops give the contract's bits."""
    sess = session(_model())
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, FEEDS)
    outs = {k: np.empty(v.shape, v.dtype) for k, v in _expected().items()}
    alive += ort_io.bind_outputs(binding, outs)
    sess.run_with_iobinding(binding)
    _check(outs, "typed")


def test_forced_rewrite_round_trip():
    """The rewrite for onnxruntime without typed OrtValues, forced on this
    one: bfloat16 inputs become initializers, bfloat16 outputs are widened in
    the graph and narrowed back, with the same bits."""
    model, feeds, widened = ort_io.without_bfloat16_io(_model(), FEEDS)
    assert sorted(feeds) == ["x"]
    assert widened == {"b_out" + ort_io.WIDENED_SUFFIX: "b_out",
                       "y" + ort_io.WIDENED_SUFFIX: "y"}
    assert {i.name for i in model.graph.initializer} >= {"b", "zp"}
    assert all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in model.graph.output)
    sess = session(model)
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, feeds)
    want = _expected()
    outs = {o.name: np.empty(want[widened.get(o.name, o.name)].shape, np.float32)
            for o in model.graph.output}
    alive += ort_io.bind_outputs(binding, outs)
    sess.run_with_iobinding(binding)
    got = {widened.get(k, k): (ort_io.narrow_bfloat16(v) if k in widened else v)
           for k, v in outs.items()}
    _check(got, "widened")


@pytest.mark.parametrize("typed", [True, False])
def test_outputs_onnxruntime_allocates(typed, monkeypatch):
    """extql run's path (cli.session.run_model): outputs onnxruntime
    allocates are read by to_numpy, bfloat16 included; without typed
    OrtValues (forced) the bfloat16 feeds become initializers."""
    if typed and not ort_io.has_typed_ortvalues():
        pytest.skip("this onnxruntime has no typed OrtValues")
    if not typed:
        monkeypatch.setattr(ort_io, "has_typed_ortvalues", lambda: False)
    got = cli_session.run_model(_model(), dict(FEEDS), cli_session.library_options())
    _check(got, "run_model")


def test_rewrites_leave_their_arguments_alone():
    """The model given is not modified; without bfloat16 feeds the same
    model and equal feeds come back; a subset of outputs can be widened."""
    model = _model()
    before = model.SerializeToString()
    same, feeds = ort_io.bfloat16_inputs_as_initializers(model, {"x": X})
    assert same is model and list(feeds) == ["x"]
    ort_io.without_bfloat16_io(model, FEEDS)
    _, widened = ort_io.widen_bfloat16_outputs(model, ["y"])
    assert widened == {"y" + ort_io.WIDENED_SUFFIX: "y"}
    assert model.SerializeToString() == before


def test_ortvalue_refusals(monkeypatch):
    """A strided array cannot back an OrtValue; bfloat16 cannot be bound
    without typed OrtValues, and the message says why."""
    with pytest.raises(ValueError, match="C-contiguous"):
        ort_io.ortvalue(X[:, ::2])
    monkeypatch.setattr(ort_io, "has_typed_ortvalues", lambda: False)
    with pytest.raises(RuntimeError, match="cannot bind a bfloat16 buffer"):
        ort_io.ortvalue(ALL_BF16)
    ort_io.ortvalue(X)  # other types still bind


def test_strided_feeds_are_copied():
    """bind_inputs copies a non-contiguous feed (and keeps the copy alive)."""
    x = np.ascontiguousarray(np.repeat(X, 2, axis=1))[:, ::2]
    assert not x.flags.c_contiguous
    got = cli_session.run_model(_model(), {**FEEDS, "x": x}, cli_session.library_options())
    _check(got, "strided")
