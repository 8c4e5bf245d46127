"""Sphinx configuration for the extql documentation.

Build: ``tox -e docs`` (or ``sphinx-build -W --keep-going -b html docs
docs/_build/html`` in an environment where extql is installed with the
``docs`` extra).  autodoc imports the *installed* extql, so the compiled
kernels must be built; nothing here puts the source tree on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import extql

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "extql"
author = "extql developers"
copyright = "2026, extql developers"
release = extql.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",  # the Markdown reports: reliability.md, benchmarks-results.md
    "extql_docs",
]

# The onnxruntime registration, the fallbacks and the graph tools are documented
# through ``extql-if-available`` blocks.  With this True, a name such a block
# lists that the installed package lacks is a warning, so ``-W`` fails the
# build (False: the block shows a "not part of this build" note instead).
extql_docs_strict = True

templates_path: list[str] = []
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"undoc-members": False}

# The examples in the pages are run by `sphinx-build -b doctest` (tox -e docs).
# run_example("name.py") executes that file of docs/examples/ and returns its namespace.
EXAMPLES = Path(__file__).parent / "examples"
doctest_global_setup = f"""
import runpy
import numpy as np
import ml_dtypes
import extql

def run_example(name):
    return runpy.run_path({str(EXAMPLES)!r} + "/" + name)
"""

html_theme = "furo"
html_title = f"extql {release}"
html_static_path: list[str] = []
