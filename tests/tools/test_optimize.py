"""extql.optimize and ``extql optimize`` / ``extql fold`` as a user runs them.

Expectations: onnxruntime's official QDQ model (quantize_static) for the
final outputs of int8 / uint8 / 16-bit models, and the unoptimised model run
with the library for every quantization node's output, at every onnxruntime
optimisation level.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contract import TYPES, assert_same_bits
from fold_models import if_model, options, rng_values
from onnx import TensorProto, helper
from onnx_helpers import DOMAIN, make_model, tensor, value_info
from ortutil import LEVELS

import extql

MS = "com.microsoft"


def run(model, feeds, so):
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def tiny_float_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv (+ residual Add) -> GlobalAveragePool -> Flatten
    -> Gemm, and a MatMul branch: the patterns onnxruntime's QDQ fusion knows."""
    rng = np.random.default_rng(0)
    inits = [
        tensor("w1", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
        tensor("b1", (rng.standard_normal(8) * 0.1).astype(np.float32)),
        tensor("w2", (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)),
        tensor("b2", (rng.standard_normal(8) * 0.1).astype(np.float32)),
        tensor("wg", (rng.standard_normal((8, 10)) * 0.3).astype(np.float32)),
        tensor("bg", (rng.standard_normal(10) * 0.1).astype(np.float32)),
        tensor("wm", (rng.standard_normal((10, 6)) * 0.3).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"]),
        helper.make_node("MatMul", ["g", "wm"], ["y"]),
    ]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, (1, 3, 12, 12))],
                      [value_info("y", TensorProto.FLOAT, (1, 6))], inits, domains=())


#: onnxruntime 1.18 fuses an opset-21 QDQ MatMul into a QLinearMatMul of
#: opset 21, for which it has no kernel (the official model fails the same way).
ORT_NO_QLINEARMATMUL_21 = tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 19)


def _mapping_for_old_quantization_tool() -> None:
    """onnxruntime 1.18's quantization tool reads ``onnx.mapping``, which
    newer onnx releases no longer have: give it the one table it uses (only
    there: newer onnxruntime releases do not read it)."""
    if hasattr(onnx, "mapping") or not ORT_NO_QLINEARMATMUL_21:
        return
    table = {}
    for code in TensorProto.DataType.values():
        try:
            table[code] = onnx.helper.tensor_dtype_to_np_dtype(code)
        except (KeyError, ValueError, TypeError):
            continue
    onnx.mapping = types.SimpleNamespace(TENSOR_TYPE_TO_NP_TYPE=table)


def official_qdq(activation: str) -> onnx.ModelProto:
    _mapping_for_old_quantization_tool()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    act = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8,
           "uint16": QuantType.QUInt16, "int16": QuantType.QInt16}[activation]
    model = tiny_float_model()

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
                            for _ in range(2)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save_model(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=act, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def renamed(model: onnx.ModelProto, from_domains=("", "ai.onnx"), to=DOMAIN):
    """Every QuantizeLinear / DequantizeLinear of ``from_domains`` renamed to
    the Extended operator (to=DOMAIN) or moved to com.microsoft (to=MS)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.domain in from_domains and node.op_type in ("QuantizeLinear",
                                                            "DequantizeLinear"):
            if to == DOMAIN:
                node.op_type = "Extended" + node.op_type
            node.domain = to
    out.opset_import.append(helper.make_opsetid(to, 1))
    return out


def quant_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every quantization node's output as a graph output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for node in out.graph.node:
        quantization = node.op_type.endswith(("QuantizeLinear", "DequantizeLinear"))
        if quantization and node.output[0] not in have:
            out.graph.output.append(helper.make_value_info(node.output[0], onnx.TypeProto()))
    inferred = onnx.shape_inference.infer_shapes(out)
    types = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for o in out.graph.output:
        if not o.type.HasField("tensor_type") and o.name in types:
            o.type.CopyFrom(types[o.name].type)
    return out


X = np.random.default_rng(7).standard_normal((1, 3, 12, 12)).astype(np.float32)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("activation", ["int8", "uint8", "uint16", "int16"])
def test_extended_model_runs_with_the_official_models_bits(activation):
    if ORT_NO_QLINEARMATMUL_21 and activation in ("int8", "uint8"):
        pytest.xfail("onnxruntime 1.18 has no QLinearMatMul-21 kernel for the fused 8-bit model")
    official = official_qdq(activation)
    optimized = extql.optimize(renamed(official))
    # 8-bit nodes are lowered for onnxruntime's fusion; 16-bit activation
    # nodes stay Extended (extql's kernels); weights are lowered.
    left = [n for n in optimized.graph.node if n.domain == DOMAIN]
    inits = {i.name for i in optimized.graph.initializer}
    if activation in ("int8", "uint8"):
        assert not left
    else:
        assert left and all(n.input[0] not in inits for n in left)
    for level in LEVELS:
        want = run(official, {"x": X}, options(level, library=False))["y"]
        got = run(optimized, {"x": X}, options(level))["y"]
        assert_same_bits(got, want, f"level {level}")


def test_int8_weight_dequantizers_that_fusion_needs_stay():
    official = official_qdq("int8")
    optimized = extql.optimize(renamed(official))
    dq_inputs = [n.input[0] for n in optimized.graph.node if n.op_type == "DequantizeLinear"]
    for w in ("w1", "w2", "wg", "wm"):
        assert any(name.startswith(w) for name in dq_inputs), w
    assert sorted(n.op_type for n in optimized.graph.node) == sorted(
        n.op_type for n in official.graph.node)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("activation", ["int8", "uint16"])
def test_every_quantization_nodes_output_is_kept(activation):
    """Without graph rewrites every output (quantization nodes and the final
    one) is the Extended model's; with them, the official model's (whose
    float ops onnxruntime rewrites the same way, e.g. MatMulNBits)."""
    official = quant_outputs(official_qdq(activation))
    model = quant_outputs(renamed(official_qdq(activation)))
    optimized = extql.optimize(model)
    assert [o.name for o in optimized.graph.output] == [o.name for o in model.graph.output]
    disabled = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = run(model, {"x": X}, options(disabled))
    got = run(optimized, {"x": X}, options(disabled))
    for name in want:
        assert_same_bits(got[name], want[name], name)
    for level in LEVELS:
        want = run(official, {"x": X}, options(level, library=False))
        got = run(optimized, {"x": X}, options(level))
        for name in want:
            assert_same_bits(got[name], want[name], f"{name} at level {level}")


def typed_model(qtype: str, per_channel: bool, opset: int = 21) -> onnx.ModelProto:
    """x -> Q/DQ (activation) -> MatMul with a weight stored as ``qtype``
    behind a DQ -> Q/DQ -> y, all Extended; every quantization output exposed
    (DQ outputs only for the float types)."""
    rng = np.random.default_rng(3)
    s_shape = (6,) if per_channel else ()
    w = rng_values(rng, qtype, (4, 6))
    if qtype in ("int32", "uint32"):
        w = (w % 7).astype(w.dtype)
    ws = (rng.random(s_shape) * 0.01 + 0.001).astype(np.float32)
    wz = np.zeros(s_shape, w.dtype) if qtype in ("float16", "bfloat16") else rng_values(
        rng, qtype, s_shape) % 3
    wz = wz.astype(w.dtype)
    az = np.zeros((), w.dtype)
    nodes = [
        helper.make_node("ExtendedQuantizeLinear", ["x", "as", "az"], ["xq"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["xq", "as", "az"], ["xd"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["w", "ws", "wz"], ["wd"], domain=DOMAIN,
                         axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["m"]),
        helper.make_node("ExtendedQuantizeLinear", ["m", "as", "az"], ["mq"], domain=DOMAIN),
        helper.make_node("ExtendedDequantizeLinear", ["mq", "as", "az"], ["y"], domain=DOMAIN),
    ]
    outputs = [value_info("y", TensorProto.FLOAT, (3, 6)),
               value_info("xd", TensorProto.FLOAT, (3, 4)),
               value_info("wd", TensorProto.FLOAT, (4, 6))]
    if qtype not in ("float16", "bfloat16"):
        outputs += [value_info("xq", _elem(qtype), (3, 4)),
                    value_info("mq", _elem(qtype), (3, 6))]
    return make_model(
        nodes, [value_info("x", TensorProto.FLOAT, (3, 4))], outputs,
        [tensor("w", w), tensor("ws", ws), tensor("wz", wz),
         tensor("as", np.float32(1.0 if qtype in ("float16", "bfloat16") else 0.05)),
         tensor("az", az)],
        opset=opset,
    )


def _elem(qtype: str) -> int:
    from onnx_helpers import ONNX_OF

    return ONNX_OF[qtype]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("qtype", list(TYPES))
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("opset", [17, 21])
def test_all_types_keep_their_bits_at_every_level(qtype, per_channel, opset):
    if ORT_NO_QLINEARMATMUL_21 and opset == 21 and qtype == "uint8":
        pytest.xfail("onnxruntime 1.18 has no QLinearMatMul-21 kernel for the fused uint8 model")
    model = typed_model(qtype, per_channel, opset)
    x = (np.random.default_rng(9).standard_normal((3, 4)) * 4).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, 1e30]
    want = run(model, {"x": x}, options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
    optimized = extql.optimize(model)
    # The weight's dequantize is gone (folded: a Constant, since it is a graph
    # output here) unless it stays for QDQ fusion.
    kept = [n for n in optimized.graph.node if "wd" in n.output and n.op_type != "Constant"]
    # Lowered weight dequantizers are left to onnxruntime, as in the official
    # model (8-bit ones feed its QDQ fusion); the others are folded.
    lowered = qtype in ("int8", "uint8") or (opset >= 21 and qtype in ("int16", "uint16"))
    if lowered:
        assert [(n.domain, n.op_type) for n in kept] == [("", "DequantizeLinear")]
    else:
        assert not kept
    for level in LEVELS:
        got = run(optimized, {"x": x}, options(level))
        for name in want:
            assert_same_bits(got[name], want[name], f"{name} at level {level}")


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("activation", ["int8", "uint16", "int16"])
def test_quark_form_model_keeps_its_bits(activation):
    """com.microsoft Q/DQ, opset 17, IR 8, as Quark writes them."""
    official = official_qdq(activation)
    quark = renamed(official, to=MS)
    del quark.opset_import[:]
    quark.opset_import.extend([helper.make_opsetid("", 17), helper.make_opsetid(MS, 1),
                               helper.make_opsetid(DOMAIN, 1)])
    quark.ir_version = 8
    optimized = extql.optimize(quark)
    # The 8-bit weight dequantizers of Conv / Gemm / MatMul stay for QDQ fusion.
    ms_dq = [n.input[0] for n in optimized.graph.node if n.op_type == "DequantizeLinear"]
    for w in ("w1", "w2", "wg", "wm"):
        assert any(name.startswith(w) for name in ms_dq), w
    # 16-bit activation nodes run in extql's kernels.
    raised = [n for n in optimized.graph.node if n.domain == DOMAIN]
    assert bool(raised) == (activation != "int8")
    for level in LEVELS:
        want = run(quark, {"x": X}, options(level, library=False))["y"]
        got = run(optimized, {"x": X}, options(level))["y"]
        assert_same_bits(got, want, f"level {level}")


@pytest.mark.usefixtures("kernel_isa")
def test_subgraph_nodes_are_optimized():
    model = if_model(np.int8([-128, -1, 0, 1, 127]))
    optimized = extql.optimize(model)
    for attr in optimized.graph.node[0].attribute:
        assert not [n for n in attr.g.node if n.domain == DOMAIN]
    x = np.linspace(-2, 2, 5).astype(np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": x}
        want = run(model, feeds, options())["y"]
        for level in LEVELS:
            assert_same_bits(run(optimized, feeds, options(level))["y"], want)


def test_model_problem_raises_value_error_naming_the_node():
    node = helper.make_node("ExtendedDequantizeLinear", ["w", "s"], ["wf"], domain=DOMAIN,
                            axis=0, name="broken_dq")
    model = make_model([node, helper.make_node("Identity", ["wf"], ["y"])], [],
                       [value_info("y", TensorProto.FLOAT, (4, 2))],
                       [tensor("w", np.zeros((4, 2), np.uint32)),
                        tensor("s", np.ones(3, np.float32))])
    with pytest.raises(ValueError, match="broken_dq"):
        extql.optimize(model)


# --------------------------------------------------------------------------
# The command, as a real process.


def extql_process(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from extql.cli import main; sys.exit(main(sys.argv[1:]))"
    with tempfile.TemporaryDirectory(prefix="extql-child-") as cwd:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, cwd=cwd, timeout=300)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("command", ["optimize", "fold"])
def test_cli_writes_the_model(tmp_path, command):
    if ORT_NO_QLINEARMATMUL_21 and command == "optimize":
        pytest.xfail("onnxruntime 1.18 has no QLinearMatMul-21 kernel for the fused 8-bit model")
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    model = renamed(official_qdq("int8"))
    onnx.save_model(model, str(src))
    proc = extql_process(command, str(src), str(dst), "-v")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "Traceback" not in proc.stderr
    out = onnx.load(str(dst))
    want = extql.optimize(model) if command == "optimize" else extql.fold_constants(model)
    assert out == want
    if command == "optimize":  # the official model's bits
        got = run(out, {"x": X}, options())["y"]
        want = run(official_qdq("int8"), {"x": X}, options(library=False))["y"]
    else:  # the Extended model's bits, without graph rewrites around the folded weights
        disabled = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        got = run(out, {"x": X}, options(disabled))["y"]
        want = run(model, {"x": X}, options(disabled))["y"]
    assert_same_bits(got, want)


@pytest.mark.parametrize("command", ["optimize", "fold"])
def test_cli_exit_codes(tmp_path, command):
    good = tmp_path / "good.onnx"
    onnx.save_model(renamed(official_qdq("int8")), str(good))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    bad = tmp_path / "bad.onnx"
    node = helper.make_node("ExtendedDequantizeLinear", ["w", "s"], ["wf"], domain=DOMAIN,
                            axis=0, name="broken_dq")
    onnx.save_model(make_model([node, helper.make_node("Identity", ["wf"], ["y"])], [],
                               [value_info("y", TensorProto.FLOAT, (4, 2))],
                               [tensor("w", np.zeros((4, 2), np.int8)),
                                tensor("s", np.ones(3, np.float32))]), str(bad))
    cases = [
        ((str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx")), 2, "no such file"),
        ((str(junk), str(tmp_path / "o.onnx")), 2, "not a readable ONNX model"),
        ((str(good), str(tmp_path / "no_dir" / "o.onnx")), 2, "does not exist"),
        ((str(good), str(tmp_path)), 2, "is a directory"),
        ((str(good), str(good)), 2, "different file"),
        ((str(bad), str(tmp_path / "o.onnx")), 1, "broken_dq"),
    ]
    for argv, code, message in cases:
        proc = extql_process(command, *argv, "-q")
        assert proc.returncode == code, (argv, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], proc.stderr
        assert lines[0].startswith(f"extql {command}: error:")


@pytest.mark.usefixtures("kernel_isa")
def test_fallback_functions_of_remaining_nodes_are_kept_and_input_unchanged():
    model = extql.attach_fallbacks(typed_model("bfloat16", per_channel=True))
    before = model.SerializeToString()
    optimized = extql.optimize(model)
    assert model.SerializeToString() == before
    left = {(n.domain, n.op_type) for n in optimized.graph.node if n.domain == DOMAIN}
    assert left == {(DOMAIN, "ExtendedQuantizeLinear"), (DOMAIN, "ExtendedDequantizeLinear")}
    assert {(f.domain, f.name) for f in optimized.functions} == left
    # Without the library the fallbacks run the activation pairs: same bits.
    x = (np.random.default_rng(2).standard_normal((3, 4)) * 4).astype(np.float32)
    want = run(model, {"x": x}, options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
    got = run(optimized, {"x": x}, options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                           library=False))
    for name in want:
        assert_same_bits(got[name], want[name], name)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("activation", ["int8", "uint16"])
@pytest.mark.parametrize("form", ["extended", "quark"])
def test_without_fusion_every_quantization_node_keeps_its_bits(activation, form):
    official = official_qdq(activation)
    model = renamed(official) if form == "extended" else renamed(official, to=MS)
    model = quant_outputs(model)
    optimized = extql.optimize(model, fuse=False)
    # Nothing is lowered and nothing is left to onnxruntime's Q/DQ kernels.
    assert not [n for n in optimized.graph.node
                if n.op_type.endswith("QuantizeLinear") and n.domain in ("", MS)]
    # The weights are folded.
    inits = {i.name for i in optimized.graph.initializer}
    assert not [n for n in optimized.graph.node if n.domain == DOMAIN and n.input[0] in inits]
    disabled = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = run(model, {"x": X}, options(disabled, library=form == "extended"))
    for level in LEVELS:
        got = run(optimized, {"x": X}, options(level))
        # Without graph rewrites every output is the same; with them, the
        # outputs that float ops do not reach (the input's Q/DQ, the weights).
        names = want if level == disabled else [
            n for n in want if n.startswith(("x_", "w1_", "w2_", "wg_", "wm_", "b1_", "b2_"))]
        assert len(names) >= 3
        for name in names:
            assert_same_bits(got[name], want[name], f"{name} at level {level}")


@pytest.mark.usefixtures("kernel_isa")
def test_cli_no_fuse(tmp_path):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    model = renamed(official_qdq("int8"))
    onnx.save_model(model, str(src))
    proc = extql_process("optimize", str(src), str(dst), "--no-fuse", "-q")
    assert proc.returncode == 0, proc.stderr
    assert onnx.load(str(dst)) == extql.optimize(model, fuse=False)


def test_public_names_stay_functions_after_the_cli_modules_are_imported():
    code = (
        "import extql.cli.optimize, extql.cli, extql.tools.fold, extql.tools.optimize, extql; "
        "from extql import cli; cli.build_parser(); "
        "assert callable(extql.optimize) and callable(extql.fold_constants), "
        "(extql.optimize, extql.fold_constants)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
