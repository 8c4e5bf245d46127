"""The README's examples: the NumPy one runs and gives the contract's bits;
the onnxruntime one is the file the documentation runs as a doctest."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from contract import assert_same_bits, dequantize, quantize

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_numpy_example_runs_and_matches_the_contract():
    (block,) = [b for b in _python_blocks() if "register" not in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    x, s, q, y = (namespace[k] for k in ("x", "s", "q", "y"))
    zp = np.zeros(3, np.int16)
    assert q.dtype == np.int16 and y.dtype == np.float32 and q.shape == x.shape
    assert_same_bits(q, quantize(x, s, zp, axis=1), "README quantize")
    assert_same_bits(y, dequantize(q, s, zp, axis=1), "README dequantize")


def test_onnxruntime_example_is_the_documented_one():
    """docs/guide/onnxruntime.rst runs docs/examples/quickstart.py (sphinx
    doctest, once extql.register exists); the README shows the same code."""
    (block,) = [b for b in _python_blocks() if "extql.register" in b]
    assert block == (ROOT / "docs" / "examples" / "quickstart.py").read_text(encoding="utf-8")
