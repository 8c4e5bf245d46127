"""The stored bits of AMD Quark 0.13's own library for
ExtendedInstanceNormalization (tests/data/dpu/in.json and in.npz, made by
tools/make_dpu_in_grid.py), for the tests of every path to share:
:data:`CASES`, :func:`inputs`, :func:`quark_y` and :func:`epsilon`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "dpu"

#: The manifest: ``versions``, ``cases``, ``skipped``.
MANIFEST: dict = json.loads((DATA / "in.json").read_text())
#: Every case: ``id``, ``op_type``, ``epsilon`` (null: the attribute is
#: omitted), ``shape`` of x, ``kind``, ``check``.
CASES: list[dict] = MANIFEST["cases"]
_ARRAYS: dict[str, np.ndarray] = {}


def _arrays() -> dict[str, np.ndarray]:
    if not _ARRAYS:
        with np.load(DATA / "in.npz") as z:
            _ARRAYS.update({k: z[k] for k in z.files})
    return _ARRAYS


def inputs(case: dict) -> dict[str, np.ndarray]:
    """x, scale, B of the case as given to Quark's library (float32)."""
    got = _arrays()
    return {name: got[f"{case['id']}_{name}"] for name in ("x", "scale", "B")}


def epsilon(case: dict) -> float:
    """The epsilon the node computes with (the default 1e-5 when omitted)."""
    return 1e-5 if case["epsilon"] is None else case["epsilon"]


def quark_y(case: dict) -> np.ndarray:
    """Quark's y of the case (float32; stored as the upper 16 bits)."""
    hi = _arrays()[case["id"] + "_y"].astype(np.uint32) << 16
    return hi.view(np.float32)
