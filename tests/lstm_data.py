"""The stored bits of AMD Quark 0.13's own library for ExtendedLSTM
(tests/data/dpu/lstm.json and lstm.npz, made by tools/make_dpu_lstm_grid.py),
for the tests of every path to share: :data:`CASES`, :func:`inputs` and
:func:`quark_y`, and :func:`contract_inputs`, the inputs on which the
contract's output is Quark's (the ``check`` of a case).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "dpu"

#: The manifest: ``versions``, ``cases``, ``skipped``.
MANIFEST: dict = json.loads((DATA / "lstm.json").read_text())
#: Every case: ``id``, ``op_type``, ``attrs`` (as on the node), ``shape`` (of
#: X), ``group``, ``check``.
CASES: list[dict] = MANIFEST["cases"]
_ARRAYS: dict[str, np.ndarray] = {}


def _arrays() -> dict[str, np.ndarray]:
    if not _ARRAYS:
        with np.load(DATA / "lstm.npz") as z:
            _ARRAYS.update({k: z[k] for k in z.files})
    return _ARRAYS


def inputs(case: dict) -> dict[str, np.ndarray]:
    """X, W, R, B of the case as given to Quark's library (float32)."""
    got = _arrays()
    out = {}
    for name in "XWRB":
        key = f"{case['id']}_{name}"
        if key + "q" in got:  # stored as uint16 codes of its grid
            p = name.lower()
            q = got[key + "q"].astype(np.int64) - case["attrs"][f"{p}_zero_point"]
            out[name] = q.astype(np.float32) * np.float32(case["attrs"][f"{p}_scale"])
        else:
            out[name] = got[key]
    return out


def contract_inputs(case: dict) -> dict[str, np.ndarray]:
    """The inputs on which the contract gives Quark's output: the case's own,
    or (``quark_plus_inf``) X with +inf as -inf (Quark quantizes +inf to 0,
    its float -> int64 conversion being undefined there; the contract to
    65535)."""
    feeds = inputs(case)
    if case["check"] == "quark_plus_inf":
        feeds["X"] = np.where(feeds["X"] == np.inf, -np.inf, feeds["X"]).astype(np.float32)
    else:
        assert case["check"] == "bits", case["check"]
    return feeds


def quark_y(case: dict) -> np.ndarray:
    """Quark's Y of the case."""
    return _arrays()[case["id"] + "_Y"]
