"""Expand a Tempita template (``*.tp``) of the kernels into the source it stands for.

The kernels (Cython, ``*.pxi.tp``) and their C primitives (``*.h.tp``) write
variants of one body (the drivers of both directions, the
loops of each form of a tile, the cases of each type in the type table) as
templates; the build expands them (``tools/gen_kernels.py``), as
scikit-learn's ``sklearn/_build_utils/tempita.py`` does for its ``*.pyx.tp``.
Tempita comes with Cython, which the build requires.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from Cython import Tempita


def expand(template: Path, namespace: dict[str, Any]) -> str:
    """The text of template expanded with namespace, headed by a line that
    names its source."""
    text = Tempita.sub(template.read_text(), **namespace)
    head = f"Generated from {template.name} by tools/tempita.py: do not edit."
    if template.name.endswith((".h.tp", ".c.tp")):
        return f"/* {head} */\n{text}"
    return f"# {head}\n{text}"
