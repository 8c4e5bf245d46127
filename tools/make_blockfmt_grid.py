"""Write tests/data/blockfmt/: a grid of one-node models of Quark's block-format
ops run through AMD Quark 0.13's own custom-op library, so that tests can
compare extql (and the oracle ``tests/blockfmt_contract.py``) with Quark's
bits without torch or Quark installed.

The grid crosses every attribute of ``BFPQuantizeDequantize`` and
``MXQuantizeDequantize`` (domain com.amd.quark) and, on a few cases, of the
legacy ``BFPFixNeuron`` / ``MXFixNeuron`` (com.vai.quantize): both BFP methods
(and the old name to_bfp_prime_shared), the bit widths Quark's configurations
use (16 / 13 / 11) and the others the contract defines, block sizes that are
not powers of two or do not divide the line, sub-block sizes and shift bits,
the three rounding modes, bfloat16 pre-rounding, the compiler-version kernel,
every MX element type; ranks 0 to 4, positive and negative axes, float32 and
float16 inputs.  Inputs come from ``tests/blockfmt_values.py`` (specials and
planted rounding lanes) with seeds derived from each case.

Written files:

- ``grid.json``: the manifest: the versions used, every case (``id``,
  ``op_type``, ``attrs`` as written on the node, ``shape``, ``dtype``,
  ``file``, ``check``) and the ``skipped`` cases with the reason (the ones the
  contract refuses or leaves undefined: Quark's library aborts, divides by
  zero or reads uninitialised memory there, or computes what the contract
  does not define).
- ``grid_bfp.npz`` / ``grid_mx.npz``: ``<id>_x`` (the input as given to
  onnxruntime, before Quark's library modified it) and ``<id>_y`` (Quark's
  output).

``check`` is "bits" (Quark's output is the contract's) or "quark_bfloat_nan":
a case of ``convert_to_bfloat_before_bfp`` with NaN inputs, where Quark's
pre-rounding turns NaNs into -0 or +-inf and extql keeps them NaN (a
documented difference); Quark's output is then the contract's output on the
input rounded by Quark's bit rule.

Regenerate (Quark's environment, not extql's; ~2 minutes)::

    python3 -m venv /work/venvs/quark
    /work/venvs/quark/bin/pip install torch==2.13.0 amd-quark==0.13 \\
        "onnxruntime>=1.22.2,<=1.28.0"
    /work/venvs/quark/bin/python -c "import quark.onnx"   # JIT-builds the library
    /work/venvs/quark/bin/python tools/make_blockfmt_grid.py tests/data/blockfmt

(torch 2.13.0 from a local CPU wheel: ``PIP_FIND_LINKS=/opt/wheels``.)
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

import blockfmt_contract as bc  # noqa: E402
import blockfmt_values as bv  # noqa: E402
from contract import case_rng  # noqa: E402

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BFP, MX = "BFPQuantizeDequantize", "MXQuantizeDequantize"


# ---------------------------------------------------------------- shapes

def _shape(rng: np.random.Generator, rank: int, block: int, axis: int) -> tuple[int, ...]:
    """A shape of ``rank`` whose line along ``axis`` (rank 1: the only one) is
    a few blocks and usually a ragged last one; at most ~400 elements."""
    if rank == 0:
        return ()
    length = int(max(1, block * rng.integers(0, 4) + rng.integers(0, block + 1)))
    length = min(length, 96)
    other = max(1, 400 // length)
    dims = [int(rng.integers(1, 5)) for _ in range(rank)]
    a = axis % rank
    dims[a] = length
    while int(np.prod(dims)) > max(other * length, length) and max(dims) > 1:
        i = int(np.argmax([d if k != a else 0 for k, d in enumerate(dims)]))
        if dims[i] == 1:
            break
        dims[i] -= 1
    return tuple(dims)


def _axis(rng: np.random.Generator, rank: int) -> int:
    return int(rng.integers(-rank, rank)) if rank >= 2 else int(rng.integers(-1, 2))


# ---------------------------------------------------------------- cases

def _bfp_attrs(method: str, bit_width: int, block: int, mode: int, *, sub: int = 2,
               shift: int = 1, bf16: int = 0, compiler: int = 0) -> dict:
    a = {"bfp_method": method, "bit_width": bit_width, "block_size": block,
         "rounding_mode": mode, "convert_to_bfloat_before_bfp": bf16}
    if method == "to_bfp":
        a["use_compiler_version_cpu_kernel"] = compiler
    else:
        a.update(sub_block_size=sub, sub_block_shift_bits=shift)
    return a


def _case(op_type: str, attrs: dict, group: str, dtype=F32, *, rank: int | None = None,
          shape: tuple[int, ...] | None = None, exponent: int | None = None) -> dict:
    """One case: the node, its input's dtype, and the input's rank (random
    when None) or exact shape, or (group "boundary") the block exponent of
    an MX boundary block."""
    return {"op_type": op_type, "attrs": attrs, "group": group, "dtype": np.dtype(dtype),
            "rank": rank, "shape": shape, "exponent": exponent}


def _bfp_cases() -> list[dict]:
    """The BFP grid."""
    out = []
    methods = [("to_bfp", 0), ("to_bfp", 1), ("to_bfp_prime", 0)]
    # The core cross: method x bit width x rounding x dtype x pre-rounding,
    # on block configurations of Quark's configurations and odd ones.
    for method, compiler in methods:
        blocks = [(8, 2, 1), (16, 2, 1), (5, 5, 2)] if method == "to_bfp_prime" \
            else [(8, 2, 1), (16, 2, 1), (5, 2, 1)]
        for bw in (16, 13, 11):
            for mode in (0, 1, 2):
                for dtype in (F32, F16):
                    for bf16 in (0, 1):
                        for block, sub, shift in blocks:
                            attrs = _bfp_attrs(method, bw, block, mode, sub=sub, shift=shift,
                                               bf16=bf16, compiler=compiler)
                            out.append(_case(BFP, attrs, "core", dtype))
    # Every other bit width the contract defines, per mode.
    for method, compiler in methods:
        name = "to_bfp" if method == "to_bfp" else "to_bfp_prime"
        for bw in bc.DEFINED_BIT_WIDTHS[name]:
            if bw in (16, 13, 11):
                continue
            for mode in (0, 1, 2):
                attrs = _bfp_attrs(method, bw, 8 if method == "to_bfp" else 16, mode,
                                   compiler=compiler)
                out.append(_case(BFP, attrs, "bit_width"))
    # Block sizes: 1, non-powers of two, larger than the line.
    for block in (1, 2, 3, 4, 6, 7, 9, 12, 15, 17, 24, 31, 32, 33, 64):
        for method, compiler in methods:
            sub = max(d for d in (1, 2, 3, 4) if block % d == 0)
            attrs = _bfp_attrs(method, 16, block, block % 3, sub=sub, compiler=compiler)
            out.append(_case(BFP, attrs, "block_size"))
    # Sub-blocks and shift bits.
    for block, sub in ((16, 1), (16, 2), (16, 4), (16, 8), (16, 16), (12, 3), (12, 6), (6, 2),
                       (9, 3), (8, 8), (2, 1)):
        for shift in (0, 1, 2, 3, 8, 31):
            attrs = _bfp_attrs("to_bfp_prime", 16 if shift % 2 else 13, block, shift % 3,
                               sub=sub, shift=shift)
            out.append(_case(BFP, attrs, "sub_block"))
    # Ranks and axes, one-element tensors, both dtypes.
    for method, compiler in methods:
        attrs = _bfp_attrs(method, 16, 8 if method == "to_bfp" else 16, 2, compiler=compiler)
        for dtype in (F32, F16):
            for rank in (0, 1, 2, 2, 3, 3, 4, 4):
                out.append(_case(BFP, dict(attrs), "rank", dtype, rank=rank))
            for shape in ((), (1,), (1, 1, 1), (2,), (3, 1)):
                for bf16 in (0, 1):
                    out.append(_case(BFP, {**attrs, "convert_to_bfloat_before_bfp": bf16},
                                     "small", dtype, shape=shape))
    # The old method name, Quark's own defaults (no attribute), legacy names.
    out.append(_case(BFP, {"bfp_method": "to_bfp_prime_shared", "block_size": 16,
                           "rounding_mode": 2}, "old_name"))
    out.append(_case(BFP, {}, "defaults"))
    out.append(_case(BFP, {}, "defaults", F16))
    for method, compiler in methods:
        for dtype in (F32, F16):
            attrs = _bfp_attrs(method, 16, 8 if method == "to_bfp" else 16,
                               int(dtype == F16) * 2, compiler=compiler)
            out.append(_case("BFPFixNeuron", attrs, "legacy", dtype))
    return out


def _mx_cases() -> list[dict]:
    """The MX grid."""
    out = []
    for et in bc.ELEMENT_TYPES:
        for mode in (0, 1, 2):
            for dtype in (F32, F16):
                for block in (32, 8, 5):
                    attrs = {"element_dtype": et, "block_size": block, "rounding_mode": mode}
                    out.append(_case(MX, attrs, "core", dtype))
        for block in (1, 2, 3, 7, 16, 33, 64):
            attrs = {"element_dtype": et, "block_size": block, "rounding_mode": block % 3}
            out.append(_case(MX, attrs, "block_size"))
        for dtype in (F32, F16):
            for rank in (0, 1, 2, 3, 4):
                out.append(_case(MX, {"element_dtype": et, "rounding_mode": 2}, "rank", dtype,
                                 rank=rank))
            for shape in ((1,), (1, 1, 1), (2,), (3, 1)):
                out.append(_case(MX, {"element_dtype": et, "rounding_mode": 0}, "small", dtype,
                                 shape=shape))
            out.append(_case("MXFixNeuron", {"element_dtype": et, "rounding_mode": 2}, "legacy",
                             dtype))
    out.append(_case(MX, {}, "defaults"))
    return out


def _compiler_cases() -> list[dict]:
    """The compiler-version kernel's exponent bump at its edges, for block
    exponents from subnormal to the largest (where the bump reaches 255)."""
    out = []
    for E in (0, 1, 130, 254):
        for mode in (0, 1, 2):
            attrs = _bfp_attrs("to_bfp", 16, 8, mode, compiler=1)
            out.append(_case(BFP, attrs, "compiler_edges", exponent=E))
    return out


def _boundary_cases() -> list[dict]:
    """MX blocks at the edges of each element type's grid, for block
    exponents from the smallest to the largest (float32 only: float16 does
    not reach them)."""
    out = []
    for et in bc.ELEMENT_TYPES:
        for E in (1, 2, 9, 60, 127, 200, 253, 254):
            for mode in (0, 1, 2) if et == "int8" else (2,):
                attrs = {"element_dtype": et, "block_size": 32, "rounding_mode": mode}
                out.append(_case(MX, attrs, "boundary", exponent=E))
    return out


#: Cases the contract refuses or leaves undefined, with what Quark's library
#: does there: not run (some abort the process), recorded in the manifest.
SKIPPED = [
    (MX, {"element_dtype": "fp3"}, "unknown element_dtype: Quark's library aborts the process "
     "(assertion in to_mx)"),
    (BFP, {"bfp_method": "to_bfp_primes"}, "unknown bfp_method: refused (Quark: a failed run)"),
    (BFP, {"block_size": 0}, "block_size 0: Quark's library divides by zero (SIGFPE)"),
    (BFP, {"block_size": -3}, "block_size < 1: Quark's output is garbage"),
    (MX, {"block_size": 0}, "block_size 0: Quark's library divides by zero (SIGFPE)"),
    (BFP, {"rounding_mode": 3}, "rounding_mode not 0/1/2: Quark's to_bfp reads an "
     "uninitialised value"),
    (MX, {"rounding_mode": 3}, "rounding_mode not 0/1/2: refused (Quark's int8 takes mode 0, "
     "its float types ignore it)"),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 10, "sub_block_size": 4},
     "to_bfp_prime with block_size not a multiple of sub_block_size: Quark leaves the last "
     "elements of each block uninitialised"),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "sub_block_size": 0},
     "sub_block_size 0: Quark's library divides by zero"),
    (BFP, {"axis": 2}, "axis out of range for rank >= 2: refused (Quark: a failed run)"),
    (BFP, {"axis": 5, "shape": [1, 1]}, "axis out of range on a one-element rank-2 tensor: the "
     "contract refuses it; Quark passes the element through without looking at the axis"),
]
for _bw in (2, 8, 9, 33, 34, 40):
    SKIPPED.append((BFP, {"bfp_method": "to_bfp", "bit_width": _bw},
                    "bit_width outside the contract's defined range for to_bfp (10..32): "
                    "Quark clamps with crossed bounds (<= 9) or divides by a scale of 0 (>= 33)"))
for _bw in (34, 40, 41):
    SKIPPED.append((BFP, {"bfp_method": "to_bfp_prime", "bit_width": _bw},
                    "bit_width outside the contract's defined range for to_bfp_prime (9..33): "
                    "Quark's count of dropped bits wraps around (unsigned)"))
for _sb in (-1, 32, 33):
    SKIPPED.append((BFP, {"bfp_method": "to_bfp_prime", "sub_block_shift_bits": _sb},
                    "sub_block_shift_bits outside 0..31: Quark shifts a 32-bit 1 by it "
                    "(undefined in C; caps of 0 / 1 for 32 / 33 on x86)"))


# ---------------------------------------------------------------- running

def _model(op_type: str, attrs: dict, shape: tuple[int, ...], dtype: np.dtype):
    domain = bc.OPS[op_type][0]
    elem = TensorProto.FLOAT if dtype == F32 else TensorProto.FLOAT16
    node = helper.make_node(op_type, ["x"], ["y"], name=f"{op_type}_DequantizeLinear",
                            domain=domain, **attrs)
    graph = helper.make_graph([node], "blockfmt",
                              [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, list(shape))])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def _session(model, library: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _input(case_id: str, case: dict) -> np.ndarray:
    """The case's input (and its axis, written into ``case["attrs"]``)."""
    rng = case_rng("blockfmt-grid", case_id)
    op_type, attrs, dtype = case["op_type"], case["attrs"], case["dtype"]
    if case["group"] == "compiler_edges":
        attrs["axis"] = 1
        return bv.compiler_boundary_values(case["exponent"])
    if case["group"] == "boundary":
        attrs["axis"] = 1
        x = np.zeros((3, 32), F32)
        values = bv.mx_boundary_values(attrs["element_dtype"], case["exponent"])
        x[0, :values.size] = values
        x[1, :values.size] = -values[::-1]
        x[2] = bv.lane_values(rng, (1, 32), op_type, attrs, F32)[0]
        return x
    shape = case["shape"]
    rank = len(shape) if shape is not None else case["rank"]
    if case["group"] == "defaults":  # no attribute at all: the default axis 1
        rank = int(rng.choice([2, 3, 4]))
        axis = 1
    else:
        if rank is None:
            rank = int(rng.choice([1, 2, 2, 3, 3, 4]))
        axis = attrs["axis"] = _axis(rng, rank)
    if shape is None:
        shape = _shape(rng, rank, int(bc.attributes(op_type, attrs)["block_size"]), axis)
    rate = float(rng.choice([0.0, 0.02, 0.05, 0.15]))
    extra = bv.BFLOAT16_CASES if attrs.get("convert_to_bfloat_before_bfp") else None
    return np.asarray(bv.lane_values(rng, shape, op_type, attrs, dtype, special_rate=rate,
                                     extra=extra))


def _dumps(doc: dict) -> str:
    """The manifest as JSON with one case per line (small, and diffs well)."""
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
    arrays: dict[str, dict[str, np.ndarray]] = {"bfp": {}, "mx": {}}
    manifest: list[dict] = []
    cases = _bfp_cases() + _compiler_cases() + _mx_cases() + _boundary_cases()
    for i, case in enumerate(cases):
        op_type, dtype = case["op_type"], case["dtype"]
        attrs = case["attrs"] = dict(case["attrs"])
        fam = bc.family(op_type)
        case_id = f"{fam}{i:04d}"
        x = _input(case_id, case)
        check = "bits"
        if bc.attributes(op_type, attrs).get("convert_to_bfloat_before_bfp") \
                and np.isnan(x).any():
            check = "quark_bfloat_nan"
        (y,) = _session(_model(op_type, attrs, x.shape, dtype), library).run(
            None, {"x": x.copy()})  # a copy: Quark's pre-rounding writes into its input
        arrays[fam][f"{case_id}_x"] = x
        arrays[fam][f"{case_id}_y"] = np.asarray(y)
        manifest.append({"id": case_id, "op_type": op_type, "attrs": attrs,
                         "shape": list(x.shape), "dtype": str(dtype), "file": f"grid_{fam}.npz",
                         "group": case["group"], "check": check})
    for fam, items in arrays.items():
        np.savez_compressed(out / f"grid_{fam}.npz", **items)
    skipped = [{"op_type": op, "attrs": {k: v for k, v in a.items() if k != "shape"},
                "shape": a.get("shape"), "reason": why} for op, a, why in SKIPPED]
    versions = {name: metadata.version(name) for name in ("amd-quark", "onnxruntime", "torch")}
    doc = {"about": "Quark 0.13's custom-op library on one-node models; "
                    "made by tools/make_blockfmt_grid.py",
           "versions": versions, "cases": manifest, "skipped": skipped}
    (out / "grid.json").write_text(_dumps(doc))
    print(f"{len(manifest)} cases, {len(skipped)} skipped, in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests/data/blockfmt")))
