"""``extql check`` and ``extql run`` on what users' model files hold, as real
processes: tensors in external data files (every model over 2 GB has them),
and ``--inputs`` files that lack one of the model's inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_battery import quark_model

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

TIMEOUT = 120


def extql(*args, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m extql ARGS`` in ``cwd``, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "extql", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ))


def _external(tmp_path: Path, location: str) -> Path:
    """quark_model() with every tensor in the side file ``location``."""
    (tmp_path / location).parent.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ext.onnx"
    onnx.save_model(quark_model(), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)
    unloaded = onnx.load(str(path), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in unloaded.graph.initializer)
    return path


@pytest.mark.parametrize("location", ["ext.onnx.data", "weights/ext.bin"])
@pytest.mark.parametrize("command", ["check", "run"])
def test_a_model_with_external_data_is_checked_and_run(tmp_path, command, location):
    """check and run read the tensors where the model says they are: both
    succeed, from the model's directory and from elsewhere."""
    path = _external(tmp_path, location)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, model in ((tmp_path, path.name), (elsewhere, path)):
        proc = extql(command, model, cwd=cwd)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and "problem" not in proc.stdout
        if command == "check":
            assert proc.stdout.splitlines()[-1].endswith("quantization node(s) checked: OK")
        else:
            assert "output out: float32[1, 3]" in proc.stdout


def test_check_of_external_data_still_finds_the_checkers_problems(tmp_path):
    """Checked by path, a model with external data is still held to the ONNX
    checker: an ir_version the checker refuses is a problem (exit 1)."""
    model = quark_model()
    model.ir_version = 99
    path = tmp_path / "future.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="future.onnx.data", size_threshold=0)
    proc = extql("check", path.name, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the ONNX checker rejects the model" in proc.stdout
    assert "regular file" not in proc.stdout


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_run_names_the_inputs_its_inputs_file_lacks(tmp_path, quiet):
    """An --inputs file without an array for one of the model's inputs: the
    run goes on with random values for it, and says so on stderr (also with
    -q), naming the file and the input; --json lists them."""
    model = quark_model()
    second = onnx.helper.make_tensor_value_info("x2", onnx.TensorProto.FLOAT, [1, 4])
    model.graph.input.append(second)
    model.graph.node.append(onnx.helper.make_node("Add", ["x", "x2"], ["s"], name="add"))
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        "s", onnx.TensorProto.FLOAT, [1, 4]))
    onnx.save(model, str(tmp_path / "two.onnx"))
    np.savez(tmp_path / "part.npz", x=np.ones((1, 4), np.float32))
    np.savez(tmp_path / "whole.npz", x=np.ones((1, 4), np.float32),
             x2=np.ones((1, 4), np.float32))

    proc = extql("run", "two.onnx", "--inputs", "part.npz", *quiet, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert "part.npz" in warning and "'x2'" in warning and "random float32[1, 4]" in warning
    assert "'x'" not in warning

    doc = json.loads(extql("run", "two.onnx", "--inputs", "part.npz", "--json",
                           cwd=tmp_path).stdout)
    assert doc["ok"] and doc["random_inputs"] == ["x2"]

    whole = extql("run", "two.onnx", "--inputs", "whole.npz", *quiet, cwd=tmp_path)
    assert whole.returncode == 0 and "warning" not in whole.stderr, whole.stderr
    assert json.loads(extql("run", "two.onnx", "--inputs", "whole.npz", "--json",
                            cwd=tmp_path).stdout)["random_inputs"] == []
