"""AMD Quark's own custom-op library as a benchmark contender, in a child
process (benchmarks/block_formats.py, benchmarks/dpu_ops.py).

Quark's library needs PyTorch and amd-quark, which extql's environment does
not have, so it runs in another Python (``--quark-python``: a venv with
torch and amd-quark, whose ``quark.onnx.get_library_path`` builds the
library).  The parent writes a model file and its inputs as ``.npy`` files;
the child answers one JSON request per stdin line:

* its first line: ``{"ok": true, "library": ..., "amd-quark": ...,
  "torch": ..., "onnxruntime": ...}``, or ``{"error": ...}`` when the
  library does not load;
* ``{"cmd": "load", "model": PATH, "x": [PATH, ...], "y": PATH, "axis": A}``:
  a session of the model with Quark's library registered, at 1 thread (its
  kernels are single-threaded), run once on every input slice (the graph
  input ``x``); the outputs, joined along ``A``, are saved to ``y``;
* ``{"cmd": "time", "k": K}``: K runs over every slice; the mean seconds of
  one.

Run as a script it is the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np


def timed(fn, k: int) -> float:
    """The mean seconds of one of ``k`` calls of ``fn``."""
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - t0) / k


def serve() -> int:
    """The child's side: load Quark's library, then answer requests."""
    try:
        import onnxruntime as ort
        import torch  # noqa: F401 - Quark's library links against torch's libc10
        from quark.onnx import get_library_path

        library = get_library_path()
    except Exception as exc:  # noqa: BLE001 - any reason Quark cannot load is the answer
        sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
        sys.stdout.flush()
        return 0
    from importlib import metadata

    sys.stdout.write(json.dumps({"ok": True, "library": library,
                                 "amd-quark": metadata.version("amd-quark"),
                                 "torch": metadata.version("torch"),
                                 "onnxruntime": ort.__version__}) + "\n")
    sys.stdout.flush()
    session = None
    slices: list[np.ndarray] = []
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "load":
            options = ort.SessionOptions()
            options.register_custom_ops_library(library)
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(req["model"], options,
                                           providers=["CPUExecutionProvider"])
            slices = [np.load(p) for p in req["x"]]
            ys = [session.run(None, {"x": x})[0] for x in slices]
            np.save(req["y"], np.concatenate(ys, axis=req["axis"]) if len(ys) > 1 else ys[0])
            answer: dict = {"ok": True}
        else:
            t0 = time.perf_counter()
            for _ in range(req["k"]):
                for x in slices:
                    session.run(None, {"x": x})
            answer = {"seconds": (time.perf_counter() - t0) / req["k"]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


class Quark:
    """The child process running Quark's library.  ``why`` says why it is
    not available (None: it is); ``info`` holds the versions it reported."""

    def __init__(self, python: str) -> None:
        self.proc: subprocess.Popen | None = None
        self.why: str | None = None
        self.info: dict = {}
        if not os.path.exists(python):
            self.why = f"no Quark environment at {python} (--quark-python)"
            return
        self.proc = subprocess.Popen([python, os.path.abspath(__file__)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = self._read()
        if "error" in first:
            self.why = f"Quark's library does not load: {first['error']}"
            self.close()
        else:
            self.info = first

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the Quark process ended (see its error above)")
        return json.loads(line)

    def ask(self, **req) -> dict:
        """Send one request (see the module's docstring); its answer."""
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def load(self, model: str, xs: list[str], y: str, axis: int = 0) -> None:
        """A session of the model file on the input files; Y saved to ``y``."""
        self.ask(cmd="load", model=model, x=xs, y=y, axis=axis)

    def time(self, k: int) -> float:
        """The mean seconds of one run over the loaded inputs, of ``k``."""
        return self.ask(cmd="time", k=k)["seconds"]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.proc = None


if __name__ == "__main__":
    sys.exit(serve())
