"""Write tests/data/dpu/in.json and in.npz: one-node
ExtendedInstanceNormalization / VitisInstanceNormalization models run
through AMD Quark 0.13's own custom-op library, so that tests compare extql
(and the oracle ``tests/in_contract.py``) with Quark's bits without torch or
Quark installed.

The cases cross ranks 2 to 5 (rank 2: one element per instance) and shapes up
to the CNN activation norms 1 x 64 x 56 x 56 and 1 x 256 x 14 x 14 with the
value kinds of ``tests/in_cases.py`` (normal values, large offsets over a
small spread, constant instances, bfloat16 ties, NaN / +-inf, squares that
overflow float32, subnormals), γ / β with ties and specials, several
epsilons (the attribute omitted, 1e-5, 1e-3, 0.5, 1e-12, 0) and both
operator names.  Inputs come with seeds derived from each case.

Written files:

- ``in.json``: the versions used, every case (``id``, ``op_type``,
  ``epsilon`` as written on the node, null when omitted, ``shape`` of x,
  ``kind``, ``check``) and the ranges left out (``skipped``) with the reason.
- ``in.npz``: ``<id>_x``, ``<id>_scale``, ``<id>_B`` (the inputs) and
  ``<id>_y``, Quark's output as its upper 16 bits (uint16: every output is a
  bfloat16 value, its low half 0; the test checks that too).

``check`` is "bits": Quark's output is the contract's, bit for bit.

Regenerate (Quark's environment, not extql's; see
tools/make_blockfmt_grid.py for setting it up; ~1 minute)::

    /work/venvs/quark/bin/python tools/make_dpu_in_grid.py tests/data/dpu
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import in_cases  # noqa: E402
from contract import case_rng  # noqa: E402

OPS = {"ExtendedInstanceNormalization": "com.amd.quark",
       "VitisInstanceNormalization": "com.vai.quantize"}
EXT, VITIS = OPS

#: Shapes of the main cross, ranks 2 to 5.
SHAPES = [(3, 5), (1, 1), (4, 16), (2, 3, 7), (1, 8, 33), (2, 4, 1), (3, 2, 64),
          (1, 3, 4, 5), (2, 4, 8, 8), (1, 16, 1, 1), (2, 6, 9, 11), (1, 2, 3, 4, 5),
          (2, 3, 2, 3, 4), (1, 4, 1, 7, 9)]
#: CNN activation norms (Quark's DPU models' sizes).
LARGE = [(1, 64, 56, 56), (1, 256, 14, 14)]
EPSILONS = [None, 1e-5, 1e-3, 0.5, 1e-12, 0.0]

#: Ranges the contract refuses or leaves to extql: not run.
SKIPPED = [
    "x of another type than float32: Quark refuses (its error is a thrown exception)",
    "rank below 2: Quark refuses",
    ("a scale or B whose length is not C: Quark reads out of bounds (shorter) or ignores the "
     "rest (longer); extql refuses both"),
    "empty tensors: no instance to compute (extql returns the empty output)",
]


def _cases() -> list[dict]:
    out = []
    for i, shape in enumerate(SHAPES):
        for j, kind in enumerate(in_cases.KINDS):
            out.append({"shape": shape, "kind": kind, "op_type": VITIS if (i + j) % 5 == 4 else EXT,
                        "epsilon": EPSILONS[(i + j) % len(EPSILONS)],
                        "special_params": (i + j) % 7 == 3})
    for shape in LARGE:
        for kind, eps in (("normal", None), ("offset", 1e-5)):
            out.append({"shape": shape, "kind": kind, "op_type": EXT, "epsilon": eps,
                        "special_params": False})
    out.append({"shape": LARGE[1], "kind": "specials", "op_type": VITIS, "epsilon": 1e-3,
                "special_params": True})
    return out


def _model(op_type: str, epsilon, x_shape, c: int):
    domain = OPS[op_type]
    attrs = {} if epsilon is None else {"epsilon": float(epsilon)}
    node = helper.make_node(op_type, ["x", "scale", "B"], ["y"], name=f"{op_type}_node",
                            domain=domain, **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
              helper.make_tensor_value_info("scale", TensorProto.FLOAT, [c]),
              helper.make_tensor_value_info("B", TensorProto.FLOAT, [c])]
    graph = helper.make_graph([node], "in", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def _run(model, library: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.copy() for k, v in feeds.items()})[0]


def _dumps(doc: dict) -> str:
    """The manifest as JSON with one case per line."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v, sort_keys=True) for v in value)
            lines.append(f"{json.dumps(key)}: [\n{items}\n]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(out_dir: str) -> int:
    import torch  # noqa: F401 - Quark's library links against torch's libc10
    from quark.onnx import get_library_path

    library = get_library_path()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    manifest = []
    for i, case in enumerate(_cases()):
        case_id = f"in{i:03d}"
        rng = case_rng("dpu-in-grid", case_id)
        shape = case["shape"]
        x = in_cases.values(rng, shape, case["kind"])
        g, b = in_cases.params(rng, shape[1], case["special_params"])
        feeds = {"x": x, "scale": g, "B": b}
        y = np.asarray(_run(_model(case["op_type"], case["epsilon"], shape, shape[1]),
                            library, feeds), dtype=np.float32)
        bits = y.view(np.uint32)
        assert not (bits & 0xFFFF).any(), "Quark's output is not bfloat16-valued"
        arrays[f"{case_id}_x"] = x
        arrays[f"{case_id}_scale"] = g
        arrays[f"{case_id}_B"] = b
        arrays[f"{case_id}_y"] = (bits >> 16).astype(np.uint16)
        manifest.append({"id": case_id, "op_type": case["op_type"], "epsilon": case["epsilon"],
                         "shape": list(shape), "kind": case["kind"], "check": "bits"})
    np.savez_compressed(out / "in.npz", **arrays)
    versions = {name: metadata.version(name) for name in ("amd-quark", "onnxruntime", "torch")}
    doc = {"about": "Quark 0.13's custom-op library on one-node ExtendedInstanceNormalization / "
                    "VitisInstanceNormalization models; made by tools/make_dpu_in_grid.py",
           "versions": versions, "cases": manifest, "skipped": SKIPPED}
    (out / "in.json").write_text(_dumps(doc))
    print(f"{len(manifest)} cases in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests/data/dpu")))
