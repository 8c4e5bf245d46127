"""extql check / attach / inline / lower / run on models in a temporary directory."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from contract import TYPES, assert_same_bits, dequantize, quantize
from onnx import TensorProto, helper
from onnx_helpers import DOMAIN, make_model, qdq_model, run_ort, tensor, value_info
from pass_models import X_KERNEL, assert_outputs, mixed_model

import extql
from extql import cli
from extql.onnx.graph import extended_nodes


def extql_cmd(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def save(model, path, *, external=False):
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=path.name + ".data",
                        size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


@pytest.fixture
def mixed(tmp_path):
    model, expected = mixed_model([*TYPES, None])
    return save(model, tmp_path / "mixed.onnx"), expected


# --------------------------------------------------------------------------
# help


@pytest.mark.parametrize("command", ["check", "attach", "inline", "lower", "run"])
def test_help_explains_each_command(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: extql {command}" in out
    assert "ExtendedQuantizeLinear" in out or "Extended" in out or "extql library" in out


def test_top_level_help_lists_the_commands(capsys):
    code, out, _ = extql_cmd(capsys)
    assert code == 2
    for command in ("check", "attach", "inline", "lower", "run"):
        assert command in out


# --------------------------------------------------------------------------
# check


@pytest.mark.usefixtures("kernel_isa")
def test_check_good_model(mixed, capsys):
    path, _ = mixed
    code, out, _ = extql_cmd(capsys, "check", path)
    assert code == 0
    assert "18 quantization node(s) checked: OK" in out


def test_check_reports_every_bad_node(tmp_path, capsys):
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "s4", "zp4"], ["a"], domain=DOMAIN,
                         name="wrong_length", axis=1),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s3", "zpf"], ["b"], domain=DOMAIN,
                         name="float_zero_point", axis=1),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s3", "zp3"], ["c"], domain=DOMAIN,
                         name="axis_out_of_range", axis=3),
        helper.make_node("ExtendedDequantizeLinear", ["q", "s3", "zp3"], ["d"], domain=DOMAIN,
                         name="zp_type_mismatch", axis=1),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s2d"], ["e"], domain=DOMAIN,
                         name="scale_rank_2"),
        helper.make_node("ExtendedQuantizeLinear", ["x", "s3", "zp3"], ["f"], domain=DOMAIN,
                         name="fine", axis=-2),
    ]
    model = make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, [2, 3, 4]), value_info("q", TensorProto.UINT16,
                                                                  [2, 3, 4])],
        [value_info(n, TensorProto.UNDEFINED, None) for n in "abcdef"],
        [tensor("s4", np.ones(4, np.float32)), tensor("zp4", np.zeros(4, np.int8)),
         tensor("s3", np.ones(3, np.float32)), tensor("zp3", np.zeros(3, np.int8)),
         tensor("zpf", np.zeros(3, np.float32)), tensor("s2d", np.ones((1, 3), np.float32))],
    )
    path = save(model, tmp_path / "bad.onnx")
    code, out, _ = extql_cmd(capsys, "check", path)
    assert code == 1
    lines = out.splitlines()
    assert any("wrong_length" in s and "4 elements but x has 3 along axis 1" in s for s in lines)
    assert any("float_zero_point" in s and "must be one of" in s and "float" in s for s in lines)
    assert any("axis_out_of_range" in s and "axis 3 is out of range" in s for s in lines)
    assert any("zp_type_mismatch" in s and "type of x (uint16)" in s for s in lines)
    assert any("scale_rank_2" in s and "scalar or 1-D" in s for s in lines)
    assert not any("fine" in s for s in lines if "node fine" in s)
    assert "6 quantization node(s) checked: 5 problem(s)" in out


def test_check_missing_opset_import(tmp_path, capsys):
    model = qdq_model("int8", [4], np.float32(1), np.int8(0), chain="q")
    del model.opset_import[1:]
    code, out, _ = extql_cmd(capsys, "check", save(model, tmp_path / "m.onnx"))
    assert code == 1 and "no opset import for 'com.amd.quark'" in out


@pytest.mark.usefixtures("kernel_isa")
def test_check_without_extended_nodes(tmp_path, capsys):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [value_info("x", TensorProto.FLOAT, [2])],
                       [value_info("y", TensorProto.FLOAT, [2])])
    code, out, _ = extql_cmd(capsys, "check", save(model, tmp_path / "relu.onnx"))
    assert code == 0 and "no ExtendedQuantizeLinear" in out


@pytest.mark.usefixtures("kernel_isa")
def test_check_unknown_types_are_notes_and_progress_is_shown(tmp_path, capsys):
    """A big model gets progress lines; a zero point of unknown type cannot be
    checked, which is said but is not a failure."""
    n = 250
    # onnxruntime's com.microsoft QLinearAdd: an operator onnxruntime runs (here
    # int8 zp + zp -> an int8 scalar) whose output type onnx shape inference
    # cannot know (onnx has no schema for it).
    nodes = [helper.make_node("QLinearAdd", ["zp", "s", "zp", "zp", "s", "zp", "s", "zp"],
                              ["zp_unknown"], domain="com.microsoft")]
    outputs = []
    for i in range(n):
        zin = "zp_unknown" if i == 0 else "zp"
        nodes.append(helper.make_node("ExtendedQuantizeLinear", ["x", "s", zin], [f"y{i}"],
                                      domain=DOMAIN, name=f"q{i}"))
        outputs.append(value_info(f"y{i}", TensorProto.INT8, [4]))
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, [4])], outputs,
                       [tensor("s", np.float32(1)), tensor("zp", np.int8(0))],
                       domains=(DOMAIN, "com.microsoft"))
    code, out, err = extql_cmd(capsys, "check", save(model, tmp_path / "big.onnx"))
    assert code == 0
    assert "note: ExtendedQuantizeLinear node q0: the type of 'zp_unknown' is unknown" in out
    assert f"checked: {n}/{n}" in err
    assert f"{n} quantization node(s) checked: OK" in out


def test_check_missing_file_says_so(tmp_path, capsys):
    code, _, err = extql_cmd(capsys, "check", tmp_path / "nope.onnx")
    assert code == 2 and "no such file" in err


def test_check_not_a_model(tmp_path, capsys):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\x00 definitely not protobuf \x12\x34")
    code, _, err = extql_cmd(capsys, "check", path)
    assert code == 2 and "not a readable ONNX model" in err


# --------------------------------------------------------------------------
# attach / inline / lower


@pytest.mark.parametrize("command", ["attach", "inline", "lower"])
def test_transform_commands(command, mixed, tmp_path, capsys):
    path, expected = mixed
    out_path = tmp_path / f"{command}.onnx"
    code, out, err = extql_cmd(capsys, command, path, out_path)
    assert code == 0, err
    assert f"wrote {out_path}" in out
    result = onnx.load(str(out_path))
    onnx.checker.check_model(result, full_check=True)
    if command == "inline":
        assert not extended_nodes(result)
    if command == "lower":
        assert "left as is" in out  # the report names the nodes it could not lower
        ops = {n.op_type for n in result.graph.node}
        assert {"QuantizeLinear", "DequantizeLinear", "ExtendedQuantizeLinear"} <= ops
        result = extql.attach_fallbacks(result)
    assert_outputs(run_ort(result, {"x": X_KERNEL}), expected(X_KERNEL), command)


def test_transform_refuses_to_overwrite_its_input(mixed, capsys):
    path, _ = mixed
    code, _, err = extql_cmd(capsys, "attach", path, path)
    assert code == 2 and "different file" in err


def test_transform_error_is_reported(tmp_path, capsys):
    model = qdq_model("int8", [2, 3, 4], np.ones(4, np.float32), np.zeros(4, np.int8), axis=1)
    code, _, err = extql_cmd(capsys, "inline", save(model, tmp_path / "m.onnx"),
                             tmp_path / "o.onnx")
    assert code == 2 and "scale has 4 elements" in err
    assert not (tmp_path / "o.onnx").exists()


def test_lower_warns_about_old_opset(tmp_path, capsys):
    model, _ = mixed_model(["int16"], opset=17)
    code, out, _ = extql_cmd(capsys, "lower", save(model, tmp_path / "m.onnx"),
                             tmp_path / "o.onnx")
    assert code == 0
    assert "needs ai.onnx opset >= 21, the model imports 17" in out


@pytest.mark.parametrize("command", ["attach", "inline", "lower"])
def test_external_data_round_trip(command, tmp_path, capsys):
    """A model whose tensors live in a side file is read with them and
    written the same way (or into one file on request)."""
    shape = (2, 512, 3)  # scales of 2 KiB: above the 1 KiB external-data threshold
    model, expected = mixed_model(["int16", "uint8", "float16"], shape=shape)
    src = save(model, tmp_path / "ext.onnx", external=True)
    assert (tmp_path / "ext.onnx.data").exists()
    dst = tmp_path / "out" / "result.onnx"
    dst.parent.mkdir()
    code, out, err = extql_cmd(capsys, command, src, dst)
    assert code == 0, err
    assert (dst.parent / "result.onnx.data").exists()
    assert "tensors in result.onnx.data" in out
    unloaded = onnx.load(str(dst), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in unloaded.graph.initializer)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 100
    result = onnx.load(str(dst))
    if command == "lower":
        result = extql.attach_fallbacks(result)
    assert_outputs(run_ort(result, {"x": x}), expected(x), f"{command} external data")
    # onnxruntime reads the written model by path, external data included.
    if command != "lower":
        assert_outputs(run_ort(str(dst), {"x": x}), expected(x), "by path")
    single = tmp_path / "single.onnx"
    code, _, _ = extql_cmd(capsys, command, src, single, "--no-external-data")
    assert code == 0 and not (tmp_path / "single.onnx.data").exists()


def test_missing_external_data_is_explained(tmp_path, capsys):
    model, _ = mixed_model(["int8"])
    src = save(model, tmp_path / "m.onnx", external=True)
    os.remove(tmp_path / "m.onnx.data")
    code, _, err = extql_cmd(capsys, "attach", src, tmp_path / "o.onnx")
    assert code == 2 and "external data" in err and "next to the model" in err


# --------------------------------------------------------------------------
# run


@pytest.mark.usefixtures("kernel_isa")
def test_run_compare_fallback_agrees(mixed, capsys):
    path, _ = mixed
    code, out, err = extql_cmd(capsys, "run", path, "--compare-fallback")
    assert code == 0, err
    assert "quantization nodes: all 18 output(s) identical" in out
    assert "whole model: all 18 output(s) agree bit for bit" in out
    assert "output q6: float16[2, 3, 4]" in out


@pytest.mark.usefixtures("kernel_isa")
def test_run_with_inputs_file_and_saved_outputs(tmp_path, capsys):
    model = qdq_model("bfloat16", [3, 5], np.float32(0.25),
                      np.asarray(TYPES["bfloat16"][0].type(1.5)), chain="dq")
    path = save(model, tmp_path / "dq_bf16.onnx")
    xq = (np.arange(15, dtype=np.float32).reshape(3, 5) - 7).astype(TYPES["bfloat16"][0])
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=xq)
    outputs = tmp_path / "out.npz"
    code, out, err = extql_cmd(capsys, "run", path, "--inputs", inputs, "--compare-fallback",
                               "--save-outputs", outputs)
    assert code == 0, err
    assert "agree" in out
    with np.load(outputs) as data:
        got = data["z"]
    assert_same_bits(got, dequantize(xq, np.float32(0.25), np.asarray(xq.dtype.type(1.5))))


def test_run_without_library(mixed, capsys):
    path, expected = mixed
    code, out, err = extql_cmd(capsys, "run", path, "--no-library", "-q")
    assert code == 0 and not err
    assert "output d0: float32[2, 3, 4]" in out


@pytest.mark.usefixtures("kernel_isa")
def test_run_reports_a_difference(tmp_path, capsys, monkeypatch):
    """If native and fallback ever disagree on a node, run says where and exits 1."""
    from extql.cli import session

    model = qdq_model("int8", [4], np.float32(1), np.int8(0), chain="q")
    path = save(model, tmp_path / "m.onnx")
    real = session.run_model
    calls = []

    def fake(model_or_path, feeds, options=None):
        out = real(model_or_path, feeds, options)
        name = getattr(getattr(model_or_path, "graph", None), "name", "")
        calls.append(name)
        if name == "extql_quantization_nodes":  # the nodes through the fallback
            out = {k: v + np.int8(1) for k, v in out.items()}
        return out

    monkeypatch.setattr(session, "run_model", fake)
    code, out, _ = extql_cmd(capsys, "run", path, "--compare-fallback")
    assert code == 1 and "DIFFER" in out and "4 of 4 elements differ" in out
    assert "ExtendedQuantizeLinear node (unnamed, output 'y') (output 'y')" in out
    # the model, the model with the nodes exposed, the nodes alone, the whole fallback
    assert len(calls) == 4 and calls.count("extql_quantization_nodes") == 1


@pytest.mark.usefixtures("kernel_isa")
def test_run_whole_model_difference_is_information(tmp_path, capsys, monkeypatch):
    """A whole-model difference with identical nodes is reported, exit 0."""
    from extql.cli import session

    model = qdq_model("int8", [4], np.float32(1), np.int8(0), chain="qdq")
    path = save(model, tmp_path / "m.onnx")
    real = session.run_model
    seen = []

    def fake(model_or_path, feeds, options=None):
        out = real(model_or_path, feeds, options)
        seen.append(1)
        if len(seen) == 4:  # the whole model through the fallback
            out = {k: (v + 1).astype(v.dtype) for k, v in out.items()}
        return out

    monkeypatch.setattr(session, "run_model", fake)
    code, out, _ = extql_cmd(capsys, "run", path, "--compare-fallback")
    assert code == 0, out
    assert "quantization nodes: all 2 output(s) identical" in out
    assert "whole model (information, not a failure" in out and "4 of 4 elements differ" in out


def test_run_rejects_unknown_inputs(mixed, tmp_path, capsys):
    path, _ = mixed
    inputs = tmp_path / "in.npz"
    np.savez(inputs, nope=np.zeros(3, np.float32))
    code, _, err = extql_cmd(capsys, "run", path, "--inputs", inputs)
    assert code == 2 and "'nope'" in err and "not inputs of the model" in err


@pytest.mark.usefixtures("kernel_isa")
def test_run_symbolic_dims(tmp_path, capsys):
    model = make_model(
        [helper.make_node("ExtendedQuantizeLinear", ["x", "s"], ["y"], domain=DOMAIN)],
        [value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [value_info("y", TensorProto.UINT8, ["batch", 3])],
        [tensor("s", np.float32(0.5))],
    )
    path = save(model, tmp_path / "dyn.onnx")
    code, out, _ = extql_cmd(capsys, "run", path, "--dim", "batch=5", "--compare-fallback")
    assert code == 0 and "output y: uint8[5, 3]" in out and "agree" in out


@pytest.mark.usefixtures("kernel_isa")
def test_run_matches_the_contract(tmp_path, capsys):
    x = np.linspace(-300, 300, 24, dtype=np.float32).reshape(2, 3, 4)
    scale, zp = np.float32(0.75), np.uint16(100)
    model = qdq_model("uint16", [2, 3, 4], scale, np.asarray(zp))
    path = save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    code, _, _ = extql_cmd(capsys, "run", path, "--inputs", tmp_path / "in.npz",
                           "--save-outputs", tmp_path / "out.npz")
    assert code == 0
    with np.load(tmp_path / "out.npz") as data:
        q = quantize(x, scale, np.asarray(zp))
        assert_same_bits(data["y"], q)
        assert_same_bits(data["z"], dequantize(q, scale, np.asarray(zp)))
