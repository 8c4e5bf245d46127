"""Processes that use extql exit cleanly, with their own exit code.

Importing :mod:`extql.opset` registers operator schemas whose type inference
is a Python-held function; onnx's C++ registry used to destroy it after the
interpreter had finalised, which crashed every tool at exit (SIGSEGV, rc 139,
with onnx 1.20-1.22) or hung it (onnx 1.19), after it had printed its
result.  These tests run real interpreters and check the exit status; tox's
``onnx119`` / ``onnx121`` / ``onnx122`` envs run them with those onnx
releases.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import extql

# Long enough for a slow machine to start Python and import onnx; a hang at
# exit (the onnx 1.19 symptom) runs into it.
TIMEOUT = 120


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "PYTHONFAULTHANDLER": "1"})


#: The ``extql`` command, run by this interpreter (as the console script does).
EXTQL = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"


def _extql(*args) -> subprocess.CompletedProcess:
    return _python(EXTQL, *map(str, args))


@pytest.mark.parametrize("modules", ["extql.opset, extql.tools.inline",
                                     "extql.reference, extql.cli.run"])
def test_import_exits_zero(modules):
    proc = _python(f"import {modules}; print('imported')")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "imported"


def test_passes_without_fallbacks_do_not_load_onnxscript():
    """``extql run`` (with the library), ``lower`` and ``optimize`` name the
    fallbacks' variants but build no function: they start without onnxscript
    (about a second of imports), which attach / inline / --no-library load."""
    code = ("import sys, extql.cli.run, extql.tools.lower, extql.tools.optimize{}; "
            "print('onnxscript' in sys.modules)")
    proc = _python(code.format(""))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
    proc = _python(code.format(", extql.tools.attach"))
    assert proc.stdout.strip() == "True"  # (the check can fail)


def test_onnx_reference_imports_after_the_schemas():
    """onnx.reference, first imported after extql registered its schemas
    (com.microsoft's QuantizeLinear among them), still imports and runs: it
    refuses an operator name that two domains have if it sees them both."""
    proc = _python("import extql.onnx.schemas as s; s.register_schemas(); "
                   "import onnx.reference; print('imported')")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "imported"


def test_inference_through_extended_nodes_then_exit():
    """The registered inference still works (output type from the zero point,
    shape of x), and the process exits 0 after using it."""
    code = """
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
import extql.opset
node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp"], ["y"], domain="com.amd.quark")
node2 = helper.make_node("QuantizeLinear", ["x", "s", "zp16"], ["y2"], domain="com.microsoft")
graph = helper.make_graph(
    [node, node2], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
    [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("y2")],
    [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
     numpy_helper.from_array(np.array(-5, np.int32), "zp"),
     numpy_helper.from_array(np.array(7, np.uint16), "zp16")])
model = helper.make_model(graph, ir_version=8, opset_imports=[
    helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1),
    helper.make_opsetid("com.microsoft", 1)])
out = onnx.shape_inference.infer_shapes(model)
for o in out.graph.output:
    t = o.type.tensor_type
    print(o.name, t.elem_type, [d.dim_value for d in t.shape.dim])
"""
    proc = _python(code)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.split("\n")
    assert lines[0] == f"y {TensorProto.INT32} [3, 4]"
    assert lines[1] == f"y2 {TensorProto.UINT16} [3, 4]"


def _model(tmp_path):
    node = helper.make_node("ExtendedQuantizeLinear", ["x", "s", "zp"], ["y"],
                            domain=extql.DOMAIN)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 3])],
        [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         onnx.numpy_helper.from_array(np.array(3, np.int32), "zp")])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(extql.DOMAIN, 1)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("command", ["check", "run", "attach", "inline", "lower"])
def test_every_tool_exits_with_its_own_code(command, tmp_path):
    path = _model(tmp_path)
    args = [command, path]
    if command in ("attach", "inline", "lower"):
        args.append(tmp_path / "out.onnx")
    proc = _extql(*args, "-q")
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr


def test_check_with_a_problem_exits_one(tmp_path):
    """rc 1 is the model's problem, not a crash at exit hiding rc 0."""
    model = onnx.load(str(_model(tmp_path)))
    model.graph.node[0].attribute.append(helper.make_attribute("axis", 5))
    model.graph.initializer[0].CopyFrom(
        onnx.numpy_helper.from_array(np.array([0.5, 0.25], np.float32), "s"))
    model.graph.initializer[1].CopyFrom(
        onnx.numpy_helper.from_array(np.array([3, 3], np.int32), "zp"))
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    proc = _extql("check", path, "-q")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "axis 5 is out of range" in proc.stdout
