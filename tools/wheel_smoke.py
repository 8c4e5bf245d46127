"""What a user of an installed extql runs, checked inside a fresh virtual
environment by ``tools/check_wheel.py`` (run with that environment's Python,
outside the source tree).

    python wheel_smoke.py DATA_DIR [--library python|standalone]
        [--providers P ...] [--close]

For every model AMD Quark's quantizer wrote in DATA_DIR (``tests/data/quark``:
``NAME.onnx`` with ``NAME.quark.npz`` holding the input ``x`` and the output
``y`` onnxruntime gave with Quark's own custom-op library), except the BFP16
ones (not onnxruntime ops): register extql's library, the Python extension
(``extql.get_library_path()``) or the standalone library
(``extql.get_library_path(standalone=True)``), run the model on onnxruntime
with the given providers (default: the CPU provider), and compare the output
with Quark's, bit for bit (``--close``: within a tolerance, for providers that
compute the float operators around the quantization nodes differently).

Prints one line per model and exits 1 when any differs, 2 when the library
cannot be registered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.reshape(-1).view(unsigned), b.reshape(-1).view(unsigned)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path, help="the directory of the Quark models")
    p.add_argument("--library", choices=("python", "standalone"), default="python")
    p.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"])
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
    models = sorted(m for m in args.data.glob("*.onnx") if "bfp" not in m.stem)
    if not models:
        print(f"no Quark model in {args.data}")
        return 2
    failed = 0
    for model in models:
        so = ort.SessionOptions()
        try:
            so.register_custom_ops_library(path)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
            print(f"cannot register {path}: {exc}")
            return 2
        session = ort.InferenceSession(str(model), so, providers=args.providers)
        with np.load(model.with_suffix(".quark.npz")) as data:
            x, want = data["x"], data["y"]
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        if args.close:
            scale = float(np.abs(want).max()) + 1.0
            ok = got.shape == want.shape and bool(
                np.allclose(got, want, atol=0.05 * scale, rtol=0))
            verdict = "close to Quark's output" if ok else "FAR from Quark's output"
        else:
            ok = _same_bits(got, want)
            verdict = "Quark's bits" if ok else "DIFFERENT bits from Quark's"
        failed += not ok
        print(f"{model.stem}: {verdict}")
    print(f"{len(models) - failed} of {len(models)} models with the {args.library} library "
          f"({path}) on {', '.join(args.providers)}, onnxruntime {ort.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
