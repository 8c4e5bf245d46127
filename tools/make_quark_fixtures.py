"""Write tests/data/quark/*.onnx: tiny models quantized by AMD Quark's own ONNX quantizer.

Run in an environment with ``amd-quark`` (0.13) and its PyTorch installed
(not extql's test environment)::

    python3 -m venv /work/venvs/quark
    /work/venvs/quark/bin/pip install torch==2.13.0 amd-quark==0.13 \
        "onnxruntime>=1.22.2,<=1.28.0"
    /work/venvs/quark/bin/python -c "import quark.onnx"   # JIT-builds Quark's library
    /work/venvs/quark/bin/python tools/make_quark_fixtures.py tests/data/quark

(torch 2.13.0 from a local CPU wheel: ``PIP_FIND_LINKS=/opt/wheels``.)  With
``--only NAME ...`` only those configurations are made (names as in
:data:`CONFIGS` / :data:`BLOCK_CONFIGS`).  The block-format models were made
with::

    /work/venvs/quark/bin/python tools/make_quark_fixtures.py tests/data/quark --only \
        BFP16 MX4 MX6 MX9 MXFP8E5M2 MXFP8E4M3 MXFP6E3M2 MXFP6E2M3 MXFP4E2M1 MXINT8 \
        BF16_BFP16 BF16_MXINT8 MX9_INT8 BFP16_QC MX4_QC MX6_QC MX9_QC MXFP8E5M2_QC \
        MXFP8E4M3_QC MXFP6E3M2_QC MXFP6E2M3_QC MXFP4E2M1_QC MXINT8_QC

(which rewrote the BFP16 models byte for byte and added the node values to
their .quark.npz); the other models by an earlier version of this tool, run
without ``--only`` (same builders, seeds and inputs).

Two float models are built with onnx.helper (a CNN: Conv, Relu, MaxPool,
Flatten, Gemm; and a transformer block: LayerNormalization, MatMul + Add
projections, scores MatMul, Softmax, weighted sum), calibrated on random
data with a fixed seed and quantized with several of Quark's configurations,
per tensor and (where Quark offers it) per channel.  The output files are
Quark's, unchanged; the tests read them as users' models.

The block formats: every BFP and MX configuration Quark 0.13 offers, through
its named (legacy ``QuantizationConfig``) configurations -- BFP16 (rounding
mode 2), MX4 / MX6 / MX9 (to_bfp_prime), MXFP8E5M2, MXFP8E4M3, MXFP6E3M2,
MXFP6E2M3, MXFP4E2M1, MXINT8, and the mixes BF16_BFP16, BF16_MXINT8 and
MX9_INT8 -- and through the ``QConfig`` API with the ``*Spec`` classes
(names ending ``_qc``; BFP16Spec writes rounding mode 0).

Beside each model, ``<model>.quark.npz`` holds an input ``x`` (fixed seed)
and the output ``y`` that onnxruntime computes with Quark's own custom-op
library registered (at the highest optimisation level that loads the
model): the bits extql must reproduce.  For the models with BFP / MX nodes
it also holds each such node's input and output in that run,
``node_in__<node name>`` / ``node_out__<node name>`` (the node's tensors
made graph outputs of a copy of the model), for per-node comparisons.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal(4) * 0.5).astype(np.float32), "b"),
        numpy_helper.from_array((rng.standard_normal((5, 64)) * 0.1).astype(np.float32), "wg"),
        numpy_helper.from_array((rng.standard_normal(5) * 0.5).astype(np.float32), "bg"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def _transformer() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    d = 8
    inits = [numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(d, np.float32), "beta")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1)]
    for name in ("q", "k", "v"):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((d, d)) * 0.3).astype(np.float32), f"w{name}"))
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(d) * 0.1).astype(np.float32), f"b{name}"))
        nodes.append(helper.make_node("MatMul", ["ln", f"w{name}"], [f"m{name}"]))
        nodes.append(helper.make_node("Add", [f"m{name}", f"b{name}"], [name]))
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["sm"], axis=-1),
        helper.make_node("MatMul", ["sm", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "transformer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, d])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


class _Reader:
    """Calibration data: a few random batches (fixed seed)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        vi = model.graph.input[0]
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        rng = np.random.default_rng(7)
        self.items = iter([{vi.name: (rng.standard_normal(shape) * 2).astype(np.float32)}
                           for _ in range(8)])

    def get_next(self):
        return next(self.items, None)

    def rewind(self) -> None:  # noqa: D401 - Quark may call it
        pass


CONFIGS = ["A8W8", "A16W8", "U16S8_AAWS", "FP16", "BF16", "BFP16", "A32W32", "AU32WU32"]
#: The block-format configurations: Quark's named ones, and (``_QC``) the
#: QConfig API's ``*Spec`` classes, by spec class name.
BLOCK_CONFIGS = ["BFP16", "MX4", "MX6", "MX9", "MXFP8E5M2", "MXFP8E4M3", "MXFP6E3M2",
                 "MXFP6E2M3", "MXFP4E2M1", "MXINT8", "BF16_BFP16", "BF16_MXINT8", "MX9_INT8"]
QCONFIG_SPECS = {"BFP16_QC": "BFP16Spec", "MX4_QC": "MX4Spec", "MX6_QC": "MX6Spec",
                 "MX9_QC": "MX9Spec", "MXFP8E5M2_QC": "MXFP8E5M2Spec",
                 "MXFP8E4M3_QC": "MXFP8E4M3Spec", "MXFP6E3M2_QC": "MXFP6E3M2Spec",
                 "MXFP6E2M3_QC": "MXFP6E2M3Spec", "MXFP4E2M1_QC": "MXFP4E2M1Spec",
                 "MXINT8_QC": "MXInt8Spec"}
BLOCK_CONFIGS += list(QCONFIG_SPECS)
BLOCK_OPS = ("BFPQuantizeDequantize", "MXQuantizeDequantize")


def _config(name: str):
    """Quark's named configuration, a QConfig of one ``*Spec`` for activations
    and weights (names ending ``_QC``), or a 32-bit one (Quark has no named
    configuration for int32 / uint32: the same QDQ format with 32-bit types)."""
    from quark.onnx import ExtendedQuantFormat, ExtendedQuantType, QuantizationConfig
    from quark.onnx.quantization.config.custom_config import get_default_config

    if name in QCONFIG_SPECS:
        from quark.onnx.quantization.config import spec
        from quark.onnx.quantization.config.config import QConfig

        cls = getattr(spec, QCONFIG_SPECS[name])
        return QConfig(spec.QLayerConfig(activation=cls(), weight=cls()))

    wide = {"A32W32": ExtendedQuantType.QInt32, "AU32WU32": ExtendedQuantType.QUInt32}
    if name not in wide:
        return get_default_config(name)
    from quark.onnx import CalibrationMethod

    return QuantizationConfig(
        calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ,
        activation_type=wide[name], weight_type=wide[name],
        extra_options={"ForceQuantizeNoInputCheck": True})


def main(out_dir: str, only: list[str] | None = None) -> int:
    from quark.onnx import Config, ModelQuantizer
    from quark.onnx.quantization.config.config import QConfig

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(tempfile.mkdtemp())  # Quark writes quantized_info.csv into the current folder
    made = []
    names = list(dict.fromkeys(CONFIGS + BLOCK_CONFIGS))
    if only:
        unknown = set(only) - set(names)
        if unknown:
            print(f"unknown configuration(s): {sorted(unknown)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in only]
    for model_name, build in (("cnn", _cnn), ("transformer", _transformer)):
        for config_name in names:
            for per_channel in (False, True):
                config = _config(config_name)
                if per_channel:
                    # float types have scale 1: per channel means nothing there
                    if not hasattr(config, "per_channel") or config_name in ("FP16", "BF16") \
                            or config_name in BLOCK_CONFIGS:
                        continue
                    config.per_channel = True
                model = build()
                suffix = "_pc" if per_channel else ""
                path = out / f"{model_name}_{config_name.lower()}{suffix}.onnx"
                try:
                    quantizer = ModelQuantizer(config if isinstance(config, QConfig)
                                               else Config(global_quant_config=config))
                    quantizer.quantize_model(model, str(path), _Reader(model))
                except Exception as exc:  # noqa: BLE001 - report and go on with the others
                    print(f"{path.name}: Quark failed: {type(exc).__name__}: {exc}",
                          file=sys.stderr)
                    continue
                made.append(path.name)
                print(f"wrote {path}")
    print(f"{len(made)} model(s)")
    _quark_outputs(out, made)
    return 0 if made else 1


def _quark_outputs(out: Path, names: list[str]) -> None:
    """Save <model>.quark.npz: a fixed input and Quark's library's output."""
    import onnxruntime as ort
    from quark.onnx import get_library_path

    levels = [ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL]
    for name in names:
        path = out / name
        model = onnx.load(str(path))
        vi = model.graph.input[0]
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        x = (np.random.default_rng(11).standard_normal(shape) * 2).astype(np.float32)
        for level in levels:
            options = ort.SessionOptions()
            options.register_custom_ops_library(get_library_path())
            options.graph_optimization_level = level
            try:
                session = ort.InferenceSession(str(path), options,
                                               providers=["CPUExecutionProvider"])
            except Exception as exc:  # noqa: BLE001
                print(f"{name}: Quark's library, level {level}: {exc}", file=sys.stderr)
                continue
            (y,) = session.run(None, {vi.name: x.copy()})
            arrays = {"x": x, "y": y, **_node_values(model, options, vi.name, x)}
            np.savez(out / (path.stem + ".quark.npz"), **arrays)
            print(f"wrote {path.stem}.quark.npz")
            break


def _node_values(model: onnx.ModelProto, options, input_name: str,
                 x: np.ndarray) -> dict[str, np.ndarray]:
    """Every BFP / MX node's input and output in one run of the model with
    Quark's library (as ``node_in__<name>`` / ``node_out__<name>``): the
    node's tensors are made outputs of a copy of the model."""
    import onnxruntime as ort

    nodes = [n for n in model.graph.node if n.op_type in BLOCK_OPS]
    if not nodes:
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    tensors = list(dict.fromkeys(t for n in nodes for t in (n.input[0], n.output[0])))
    for t in tensors:
        if t not in have:
            probe.graph.output.append(onnx.ValueInfoProto(name=t))
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in session.get_outputs()],
                      session.run(None, {input_name: x.copy()}), strict=True))
    out = {}
    for n in nodes:
        out[f"node_in__{n.name}"] = values[n.input[0]]
        out[f"node_out__{n.name}"] = values[n.output[0]]
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", default="tests/data/quark")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="make only these configurations")
    args = parser.parse_args()
    sys.exit(main(args.out_dir, args.only))
