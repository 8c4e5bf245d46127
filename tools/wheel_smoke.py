"""What a user of an installed extql runs, checked inside a fresh virtual
environment by ``tools/check_wheel.py`` (run with that environment's Python,
outside the source tree).

    python wheel_smoke.py DATA_DIR [--library python|standalone]
        [--providers P ...] [--ulps N] [--close]

For every model AMD Quark's quantizer wrote in DATA_DIR (``tests/data/quark``:
``NAME.onnx`` with ``NAME.quark.npz`` holding the input ``x`` and the output
``y`` onnxruntime gave with Quark's own custom-op library), those with
block-format nodes (BFPQuantizeDequantize, MXQuantizeDequantize) included:
register extql's library
(``extql.get_library_path()``, or the same file as other hosts take it,
``extql.get_library_path(standalone=True)``), run the model on onnxruntime
with the given providers (default: the CPU provider), and compare the output
with Quark's, bit for bit.

The fixtures' outputs were computed by one onnxruntime release; another one
may round the float operators after the last quantization node (MatMul,
Softmax) differently.  With ``--ulps N`` a model whose output differs is
accepted when every difference is within N units in the last place of the
output's largest magnitude, and every
quantization node of the model gives the fallback functions' bits on the
same inputs (``extql run --compare-fallback``, in this process): the
difference is then onnxruntime's, not extql's.  ``--close`` compares within
5% of the output's range instead (for a provider that computes the float
operators itself, such as OpenVINO's); a model with no node in extql's
domains (only ``com.microsoft`` QuantizeLinear / DequantizeLinear) is then
the other provider's result alone, printed with its difference but not
counted (OpenVINO's provider 1.24 takes transformer_a8w8_pc 0.25 from
Quark's output, on which the CPU provider gives Quark's bits).

With another provider before the CPU one, each run is profiled and every
node that ran is counted by provider: the Extended nodes must all run on the
CPU provider with extql's kernels, and at least one model must have given
nodes to the first provider (else the split was not tested).

Prints one line per model and exits 1 when any fails, 2 when the library
cannot be registered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.reshape(-1).view(unsigned), b.reshape(-1).view(unsigned)))


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference, in units in the last place of ``want``'s
    largest magnitude (float operators' rounding drifts on that scale)."""
    if got.shape != want.shape or got.dtype != want.dtype or got.dtype.kind != "f":
        return float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
        return float("inf")
    diff = np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64))
    scale = np.spacing(np.abs(want[finite]).max(initial=0.0))
    return float(diff.max(initial=0.0) / scale)


def _nodes_match_the_fallbacks(model: Path) -> bool:
    """``extql run MODEL --compare-fallback -q`` exits 0: every quantization
    node gives the fallback functions' bits on the inputs it received."""
    import contextlib
    import io

    from extql.cli import main as extql

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = extql(["run", str(model), "--compare-fallback", "-q"])
    return status == 0 and "quantization nodes: all" in out.getvalue()


def _extql_ops(model: Path) -> set[str]:
    """The operators of the model's nodes in extql's domains (Quark's
    ``com.amd.quark`` and the legacy ``com.vai.quantize``): where another
    provider leaves them, the CPU provider runs them with extql's kernels."""
    import onnx

    from extql.rules.types import DOMAIN, LEGACY_DOMAIN

    graph = onnx.load(str(model), load_external_data=False).graph
    return {n.op_type for n in graph.node if n.domain in (DOMAIN, LEGACY_DOMAIN)}


def _placement(profile: str) -> dict[str, list[str]]:
    """provider -> the operators of the nodes it ran (onnxruntime's profile)."""
    with open(profile) as f:
        events = json.load(f)
    ran: dict[str, list[str]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            ran.setdefault(e["args"].get("provider", "?"), []).append(e["args"].get("op_name"))
    return ran


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path, help="the directory of the Quark models")
    p.add_argument("--library", choices=("python", "standalone"), default="python")
    p.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"])
    p.add_argument("--ulps", type=int, default=0,
                   help="accept an output within N units in the last place of Quark's when "
                        "every quantization node gives the fallback's bits (default 0)")
    p.add_argument("--close", action="store_true",
                   help="compare within 5%% of the output's range instead of bit for bit")
    args = p.parse_args(argv)

    import onnxruntime as ort

    import extql

    path = extql.get_library_path(standalone=args.library == "standalone")
    available = ort.get_available_providers()
    missing = [name for name in args.providers if name not in available]
    if missing:
        print(f"providers {missing} are not in this onnxruntime ({available})")
        return 2
    models = sorted(args.data.glob("*.onnx"))
    if not models:
        print(f"no Quark model in {args.data}")
        return 2
    failed = 0
    split = len(args.providers) > 1
    first_took_nodes = False
    profiles = tempfile.mkdtemp(prefix="extql-smoke-")
    for model in models:
        ours = _extql_ops(model)
        so = ort.SessionOptions()
        if split:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(profiles, model.stem)
        try:
            so.register_custom_ops_library(path)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
            print(f"cannot register {path}: {exc}")
            return 2
        session = ort.InferenceSession(str(model), so, providers=args.providers)
        with np.load(model.with_suffix(".quark.npz")) as data:
            x, want = data["x"], data["y"]
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        placed = ""
        if split:
            ran = _placement(session.end_profiling())
            stray = [(p, op) for p, ops in ran.items() for op in ops
                     if op in ours and p != "CPUExecutionProvider"]
            first_took_nodes |= bool(ran.get(args.providers[0]))
            extended = sum(op in ours for op in ran.get("CPUExecutionProvider", []))
            placed = (f"; {len(ran.get(args.providers[0], []))} node(s) on "
                      f"{args.providers[0]}, {extended} extql node(s) on the CPU provider")
            if stray:
                print(f"{model.stem}: extql nodes ran on {sorted(set(stray))}")
                failed += 1
        if args.close:
            scale = float(np.abs(want).max()) + 1.0
            ok = got.shape == want.shape and bool(
                np.allclose(got, want, atol=0.05 * scale, rtol=0))
            verdict = "close to Quark's output" if ok else "FAR from Quark's output"
            if not ours and not ok and got.shape == want.shape:
                # Only the other provider's own operators (onnxruntime's
                # QuantizeLinear / DequantizeLinear included): its result,
                # not extql's, which this check has nothing to judge by.
                ok = True
                verdict += (f" ({np.abs(got - want).max():.3g}), with no extql node: "
                            f"{args.providers[0]}'s own operators, not counted")
        elif _same_bits(got, want):
            ok, verdict = True, "Quark's bits"
        else:
            ulps = _ulps(got, want)
            ok = ulps <= args.ulps and _nodes_match_the_fallbacks(model)
            verdict = (f"within {ulps:.0f} ulp of Quark's output (onnxruntime's float operators), "
                       "every quantization node the fallback's bits" if ok
                       else f"DIFFERENT from Quark's ({ulps:.3g} ulp)")
        failed += not ok
        print(f"{model.stem}: {verdict}{placed}")
    print(f"{len(models) - failed} of {len(models)} models with the {args.library} library "
          f"({path}) on {', '.join(args.providers)}, onnxruntime {ort.__version__}")
    if split and not first_took_nodes:
        print(f"{args.providers[0]} ran no node of any model: the split was not tested")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
