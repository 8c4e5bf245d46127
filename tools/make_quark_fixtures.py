"""Write tests/data/quark/*.onnx: tiny models quantized by AMD Quark's own ONNX quantizer.

Run in an environment with ``amd-quark`` (0.13) and its PyTorch installed
(not extql's test environment)::

    python -m venv /tmp/venv-quark
    /tmp/venv-quark/bin/pip install torch==2.13.0 amd-quark
    /tmp/venv-quark/bin/python tools/make_quark_fixtures.py tests/data/quark

Two float models are built with onnx.helper (a CNN: Conv, Relu, MaxPool,
Flatten, Gemm; and a transformer block: LayerNormalization, MatMul + Add
projections, scores MatMul, Softmax, weighted sum), calibrated on random
data with a fixed seed and quantized with several of Quark's configurations,
per tensor and (where Quark offers it) per channel.  The output files are
Quark's, unchanged; the tests read them as users' models.

The float originals, the FLOAT half of every FLOAT / QUANT pair that
``extql analyze`` compares, need no Quark: ``--float`` writes them alone,
deterministically (fixed seeds), into ``tests/data/quark/float/``::

    python tools/make_quark_fixtures.py --float tests/data/quark/float

Beside each model, ``<model>.quark.npz`` holds an input ``x`` (fixed seed)
and the output ``y`` that onnxruntime computes with Quark's own custom-op
library registered (at the highest optimisation level that loads the
model): the bits extql must reproduce.
"""

from __future__ import annotations

import sys
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


def _config(name: str):
    """Quark's named configuration, or a 32-bit one (Quark has no named
    configuration for int32 / uint32: the same QDQ format with 32-bit types)."""
    from quark.onnx import ExtendedQuantFormat, ExtendedQuantType, QuantizationConfig
    from quark.onnx.quantization.config.custom_config import get_default_config

    wide = {"A32W32": ExtendedQuantType.QInt32, "AU32WU32": ExtendedQuantType.QUInt32}
    if name not in wide:
        return get_default_config(name)
    from quark.onnx import CalibrationMethod

    return QuantizationConfig(
        calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ,
        activation_type=wide[name], weight_type=wide[name],
        extra_options={"ForceQuantizeNoInputCheck": True})


def main(out_dir: str) -> int:
    from quark.onnx import Config, ModelQuantizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for model_name, build in (("cnn", _cnn), ("transformer", _transformer)):
        for config_name in CONFIGS:
            for per_channel in (False, True):
                config = _config(config_name)
                if per_channel:
                    # float types have scale 1: per channel means nothing there
                    if not hasattr(config, "per_channel") or config_name in ("FP16", "BF16") \
                            or "BFP" in config_name:
                        continue
                    config.per_channel = True
                model = build()
                suffix = "_pc" if per_channel else ""
                path = out / f"{model_name}_{config_name.lower()}{suffix}.onnx"
                try:
                    quantizer = ModelQuantizer(Config(global_quant_config=config))
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
            (y,) = session.run(None, {vi.name: x})
            np.savez(out / (path.stem + ".quark.npz"), x=x, y=y)
            print(f"wrote {path.stem}.quark.npz")
            break


#: The float originals by name, as ``--float`` writes them (``<name>.onnx``).
FLOAT_MODELS = {"cnn": _cnn, "transformer": _transformer}


def write_float_models(out_dir: str) -> int:
    """Write the float originals (no Quark needed): ``cnn.onnx``, ``transformer.onnx``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, build in FLOAT_MODELS.items():
        model = build()
        model.producer_name = "tools/make_quark_fixtures.py"
        onnx.save(model, str(out / f"{name}.onnx"))
        print(f"wrote {out / name}.onnx")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--float":
        sys.exit(write_float_models(sys.argv[2] if len(sys.argv) > 2
                                    else "tests/data/quark/float"))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/quark"))
