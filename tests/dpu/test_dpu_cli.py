"""Quark's DPU-emulation operators in the ``extql`` command, as real
processes: ``check`` validates them (exit 0; a refused input, attribute or
shape is a problem naming the node, exit 1), ``run`` runs the instance norm
with the library, ``inline`` replaces the LSTM too (exit 0; one whose input
size is unknown is an error naming the node, exit 2),
and ``analyze`` reports a DPU node as a point where error enters (its output
against ONNX's float InstanceNormalization on the same inputs)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from dpu_models import in_model, lstm_model
from lstm_data import CASES as LSTM_CASES
from onnx import TensorProto, helper

EXTQL = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"
# The processes run the kernels on the variant the CPU picks.
pytestmark = pytest.mark.usefixtures("kernel_isa")


def extql_process(*args) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", EXTQL, *map(str, args)], capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _attrs() -> dict:
    case = next(c for c in LSTM_CASES if c["attrs"]["hidden_size"] == 4 and c["check"] == "bits"
                and c["attrs"]["direction"] == "bidirectional")
    return dict(case["attrs"])


def _merged(models: list[onnx.ModelProto]) -> onnx.ModelProto:
    """The models' graphs side by side in one model (names prefixed m<i>_)."""
    parts = [onnx.compose.add_prefix(m, f"m{i}_") for i, m in enumerate(models)]
    graph = helper.make_graph(
        [n for p in parts for n in p.graph.node], "merged",
        [v for p in parts for v in p.graph.input], [v for p in parts for v in p.graph.output])
    opsets = {o.domain: o for p in parts for o in p.opset_import}
    return helper.make_model(graph, ir_version=8, opset_imports=list(opsets.values()))


def test_check_and_run_the_instance_norm(tmp_path):
    """Both names in one model: checked OK (nothing unsupported), run."""
    path = tmp_path / "in.onnx"
    onnx.save(_merged([in_model(op, x_shape=[1, 4, 5, 5], c=4, epsilon=1e-3,
                                y_shape=[1, 4, 5, 5])
                       for op in ("ExtendedInstanceNormalization", "VitisInstanceNormalization")]),
              str(path))
    proc = extql_process("check", path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("2 quantization node(s) checked: OK"), proc.stdout
    assert "unsupported" not in proc.stdout + proc.stderr
    proc = extql_process("run", path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for y in ("m0_y", "m1_y"):
        assert f"output {y}: float32[1, 4, 5, 5], 0 NaN" in proc.stdout


def test_check_names_each_refusal(tmp_path):
    """One line per refused node, named, in the rules' words, in graph
    order; exit 1."""
    h = 4
    attrs = _attrs()
    model = lstm_model(attrs, name="init")
    model.graph.node[0].input.extend(["", "h0"])
    model.graph.input.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, None))
    cases = [
        (in_model(x_shape=[1, 4, 5], c=4, name="short"),
         "ExtendedInstanceNormalization node m0_short: x must be float32, got int8"),
        (in_model("VitisInstanceNormalization", x_shape=[6], c=6, name="flat"),
         "VitisInstanceNormalization node m1_flat: x must have rank >= 2 (N, C, ...), "
         "got rank 1"),
        (lstm_model({k: v for k, v in attrs.items() if k != "y_scale"}, name="noscale"),
         "ExtendedLSTM node m2_noscale: missing required attribute(s) y_scale"),
        (lstm_model(dict(attrs, input_forget=1), "VitisLSTM", name="forget"),
         "VitisLSTM node m3_forget: input_forget must be 0, got 1"),
        (lstm_model(attrs, x_shape=[3, 1, 5], w_shape=[2, 4 * h, 6], name="wshape"),
         f"ExtendedLSTM node m4_wshape: W must have shape [2, {4 * h}, 5]"),
        (model, "ExtendedLSTM node m5_init: input initial_h is not supported: the DPU starts "
                "h from its output zero point"),
    ]
    cases[0][0].graph.input[0].type.tensor_type.elem_type = TensorProto.INT8
    path = tmp_path / "bad.onnx"
    onnx.save(_merged([m for m, _ in cases]), str(path))
    proc = extql_process("check", path, "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for line, (_, want) in zip(lines, cases, strict=False):
        assert line.startswith(want), proc.stdout
    assert f"{len(cases)} problem(s)" in lines[len(cases)], proc.stdout


def test_inline_replaces_the_lstm_and_refuses_an_unknown_input_size(tmp_path):
    """Both DPU operators inlined (exit 0, no custom op left:
    tests/dpu/test_lstm_fallback.py checks the values); an LSTM whose input
    size no static shape gives is an error naming it (exit 2, nothing
    written)."""
    path = tmp_path / "lstm.onnx"
    onnx.save(_merged([in_model(x_shape=[1, 4, 5, 5], c=4),
                       lstm_model(_attrs(), x_shape=[3, 1, 4], y_shapes=[[3, 2, 1, 4]])]),
              str(path))
    proc = extql_process("inline", path, tmp_path / "out.onnx", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = onnx.load(str(tmp_path / "out.onnx"))
    assert {n.domain for n in out.graph.node} <= {"", "ai.onnx"} and not out.functions
    onnx.save(_merged([in_model(x_shape=[1, 4, 5, 5], c=4), lstm_model(_attrs())]), str(path))
    proc = extql_process("inline", path, tmp_path / "out2.onnx", "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("extql inline: error: ExtendedLSTM node m1_lstm_node: the standard-ops fallback "
            "of the DPU LSTM needs the input size") in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out2.onnx").exists()


def _float_and_dpu(tmp_path):
    """FLOAT: Conv -> ONNX InstanceNormalization -> Relu; QUANT: the same
    with the DPU instance norm (Quark's DPU simulation keeps the names)."""
    rng = np.random.default_rng(5)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3],
                           (rng.standard_normal(108) * 0.3).astype(np.float32))
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [4], [1.0, 0.5, 2.0, 1.5])
    bias = helper.make_tensor("B", TensorProto.FLOAT, [4], [0.0, 0.1, -0.2, 0.3])
    paths = []
    for op, domain in (("InstanceNormalization", ""),
                       ("ExtendedInstanceNormalization", "com.amd.quark")):
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node(op, ["c", "scale", "B"], ["n"], name="norm", domain=domain,
                                  epsilon=1e-5),
                 helper.make_node("Relu", ["n"], ["y"])]
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
            initializer=[w, scale, bias])
        opsets = [helper.make_opsetid("", 17)] + (
            [helper.make_opsetid(domain, 1)] if domain else [])
        paths.append(tmp_path / f"{domain or 'float'}.onnx")
        onnx.save(helper.make_model(graph, ir_version=8, opset_imports=opsets), str(paths[-1]))
    return paths


def test_analyze_reports_the_dpu_node_as_a_point(tmp_path):
    """The point: the node's output against the float op's on the same
    inputs, bfloat16 arithmetic: a local SQNR near bfloat16's (about 50 dB),
    finite; the accumulated one against FLOAT's tensor of the same name."""
    fpath, qpath = _float_and_dpu(tmp_path)
    feeds = tmp_path / "in.npz"
    np.savez(feeds, x=np.random.default_rng(1).standard_normal((4, 1, 3, 8, 8))
             .astype(np.float32))
    proc = extql_process("analyze", fpath, qpath, "--inputs", feeds, "--json", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    (point,) = report["points"]
    assert point["tensor"] == "n" and point["node"] == "norm"
    assert point["kind"] == "activation" and point["type"] == "bfloat16"
    assert 35 < point["local_sqnr_db"] < 70, point
    assert point["accumulated_sqnr_db"] == pytest.approx(point["local_sqnr_db"], abs=1.0)
    assert point["clipped_fraction"] == 0.0
    assert 0 < point["max_abs_error"] < 0.1
    assert report["unmatched"] == []
