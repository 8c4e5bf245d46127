"""extql.tools.runtimes' table of what OpenVINO and tract keep, as the
commands read it (``extql inline --target``, ``extql run --runtime``), on
the models AMD Quark wrote: the nodes each runtime is warned about, and the
commands' messages where a runtime is not installed.  (tests/runtimes runs
the models in those runtimes and holds the table to what they do.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from extql.tools import runtimes

QUARK = Path(__file__).resolve().parent.parent / "data" / "quark"


def _limits(name: str, runtime: str) -> list[str]:
    return runtimes.model_limits(onnx.load(str(QUARK / f"{name}.onnx")), runtime)


def test_8_and_16_bit_models_are_exact_everywhere():
    for name in ("cnn_a8w8", "cnn_a8w8_pc", "cnn_a16w8"):
        for runtime in runtimes.RUNTIMES:
            assert _limits(name, runtime) == [], (name, runtime)
    # an asymmetric uint16 activation: OpenVINO's dequantize rewrite, only there
    name = "transformer_u16s8_aaws_pc"
    assert _limits(name, "tract") == []
    lines = _limits(name, "openvino")
    assert lines and all("uint16 dequantize: close in openvino" in line for line in lines)


def test_bfloat16_is_unsupported_in_tract_and_close_in_openvino():
    tract = _limits("cnn_bf16", "tract")
    model = onnx.load(str(QUARK / "cnn_bf16.onnx"))
    extended = [n for n in model.graph.node if n.domain == "com.amd.quark"]
    assert len(tract) == len(extended) > 0
    assert all("bfloat16" in line and ": unsupported in tract:" in line for line in tract)
    assert all(": close in openvino:" in line for line in _limits("cnn_bf16", "openvino"))
    # every line names its node
    assert {line.split(":")[0] for line in tract} == {
        f"{n.op_type} node {n.name}" for n in extended}


def test_uint32_dequantize_is_not_kept_in_either():
    for runtime in ("openvino", "tract"):
        lines = _limits("cnn_au32wu32", runtime)
        assert any(f"uint32 dequantize: {verdict} in" in line
                   for line in lines for verdict in ("wrong", "unsupported"))


def test_zero_point_and_granularity_select_the_row():
    # OpenVINO's bfloat16 dequantize is exact with a zero point of 0 only
    assert runtimes.limit_of("openvino", "DQ", "bfloat16", True, "tensor") is None
    assert runtimes.limit_of("openvino", "DQ", "bfloat16", False, "axis") is not None
    assert runtimes.limit_of("openvino", "Q", "float16", True, "tensor") is None
    # an 8-bit dequantize is exact with a zero point of 0 only
    assert runtimes.limit_of("openvino", "DQ", "int8", True, "axis") is None
    assert runtimes.limit_of("openvino", "DQ", "int8", False, "axis").verdict == "close"
    assert runtimes.limit_of("openvino", "DQ", "int32", False, "axis").verdict == "wrong"
    # not known (None) matches a row that could concern the node
    assert runtimes.limit_of("openvino", "DQ", "int8", None, None) is not None
    assert runtimes.limit_of("onnxruntime", "Q", "int32") is None


def test_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="unknown runtime 'ncnn'"):
        runtimes.limit_of("ncnn", "Q")
    with pytest.raises(ValueError, match="unknown runtime"):
        runtimes.model_limits(onnx.load(str(QUARK / "cnn_a8w8.onnx")), "ncnn")


def _extql(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "extql", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def test_inline_target_warns_per_node(tmp_path):
    out = tmp_path / "std.onnx"
    proc = _extql("inline", QUARK / "cnn_bf16.onnx", out, "--target", "tract", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "unsupported in tract" in line]
    assert len(warned) == len(_limits("cnn_bf16", "tract")) > 0
    assert "not exact in tract 0.23" in proc.stderr
    assert out.exists()
    # the same model for onnxruntime, and an exact one for tract: no warning
    for model, target in (("cnn_bf16", "onnxruntime"), ("cnn_a8w8", "tract")):
        proc = _extql("inline", QUARK / f"{model}.onnx", tmp_path / f"{model}_{target}.onnx",
                      "--target", target, cwd=tmp_path)
        assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("runtime", ["openvino", "tract"])
def test_run_runtime_not_installed_says_how_to_get_it(runtime, tmp_path):
    if importlib.util.find_spec(runtime) is not None:
        pytest.skip(f"{runtime} is installed here: tests/runtimes runs the command with it")
    proc = _extql("run", QUARK / "cnn_a8w8.onnx", "--runtime", runtime, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{runtime} is not installed (pip install {runtime})" in proc.stderr


def test_run_runtime_refuses_no_library(tmp_path):
    proc = _extql("run", QUARK / "cnn_a8w8.onnx", "--runtime", "openvino", "--no-library",
                  cwd=tmp_path)
    assert proc.returncode == 2
    if importlib.util.find_spec("openvino") is not None:
        assert "drop --no-library" in proc.stderr


def test_instance_norm_rows():
    from dpu_models import in_model

    for op in ("ExtendedInstanceNormalization", "VitisInstanceNormalization"):
        model = in_model(op, x_shape=[1, 4, 8, 8], c=4)
        (tract,) = runtimes.model_limits(model, "tract")
        assert tract.startswith(f"{op} node in_node: instance norm: unsupported in tract")
        (openvino,) = runtimes.model_limits(model, "openvino")
        assert ": close in openvino:" in openvino
        assert runtimes.model_limits(model, "onnxruntime") == []


def test_lstm_rows():
    from dpu_models import lstm_model

    for op in ("ExtendedLSTM", "VitisLSTM"):
        for runtime in ("openvino", "tract"):
            (line,) = runtimes.model_limits(lstm_model({}, op=op), runtime)
            assert line.startswith(f"{op} node lstm_node: LSTM: close in {runtime}: the gates' "
                                   "tanhf is the runtime's float32 Tanh"), line
