"""Every reference to a file of the repository names a file that is there.

Code, tests and documents cite each other by path (``docs/differences.rst``,
``tests/contract.py``, ``extql/src/extql_types.h``): such a path must be a
file git tracks, or a build product git ignores (a generated header).  A
document cited by its bare name (``README.md``, ``types.rst``) must exist
too (an .rst page, or a capitalised .md document).  The contract the code
cites is the repository's own
(docs/operators/*.rst, docs/differences.rst).
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The suffixes of the files read, and of the paths looked for.
TEXT_SUFFIXES = (".py", ".pyx", ".pxd", ".c", ".h", ".rst", ".md", ".toml", ".ini", ".cfg",
                 ".txt", ".in")
PATH_SUFFIXES = ("py", "pyx", "pxd", "c", "h", "rst", "md", "toml", "ini", "cfg", "txt", "json",
                 "onnx", "npz", "csv")
_PATH = re.compile(r"(?<![\w./*{}-])((?:\.\.?/)*(?:[\w.-]+/)+[\w.-]+\.(?:"
                   + "|".join(PATH_SUFFIXES) + r"))(?![\w/])")
# A document by its bare name: an .rst page, or a project document (README.md,
# CHANGELOG.md: capitalised by convention; a lower-case .md is an output file).
_DOCUMENT = re.compile(r"(?<![\w./*-])([\w-]+\.rst|[A-Z][\w-]*\.md)(?![\w/])")

#: (file, reference) pairs left as they are, each with its reason.
ALLOWED: set[tuple[str, str]] = set()


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout (the references are checked in one)",
                    allow_module_level=True)
    return tuple(out.stdout.split())


@cache
def _ignored(path: str) -> bool:
    """A build product: a path git ignores (generated headers, Cython's C)."""
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    return done.returncode == 0


def broken_references(path: str, text: str) -> list[str]:
    """The references in ``text`` (of the file ``path``) that name no file."""
    files = set(tracked())
    directories = {p.as_posix() for f in files for p in Path(f).parents}
    top = {f.split("/")[0] for f in files}
    names = {Path(f).name for f in files}
    here = Path(path).parent
    text = text.replace("{tox_root}/", "").replace("{toxinidir}/", "")
    broken = []
    for match in _PATH.finditer(text):
        ref = match.group(1)
        first = ref.split("/")[0]
        candidates = [Path(ref), here / ref]
        if first not in top and first not in (".", ".."):
            # Not rooted in the repository (a temporary file, a path inside
            # the installed package): a reference only where it resolves.
            candidates = [here / ref, Path("extql") / ref]
            if not any(c.as_posix() in files for c in candidates):
                continue
        resolved = [Path(*[p for p in c.parts if p != "."]).as_posix() for c in candidates]
        # (resolved against the repository, whatever the working directory)
        normal = [str((ROOT / r).resolve().relative_to(ROOT))
                  if (ROOT / r).resolve().is_relative_to(ROOT) else None for r in resolved]
        if any(n is not None and (n in files or n in directories or _ignored(n))
               for n in normal):
            continue
        broken.append(ref)
    for match in _DOCUMENT.finditer(text):
        if match.group(1) not in names:
            broken.append(match.group(1))
    return [ref for ref in broken if (path, ref) not in ALLOWED]


def _text_files() -> list[str]:
    return [f for f in tracked()
            if f.endswith(TEXT_SUFFIXES) and not f.startswith("tests/data/")]


@pytest.mark.parametrize("path", _text_files())
def test_references_name_files_of_the_repository(path):
    text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
    assert broken_references(path, text) == [], f"{path} cites files that are not here"


def test_the_reader_finds_a_broken_reference():
    """A made-up text citing a missing document, a missing file and real ones.
    (The missing names are put together here, so that this file cites none.)"""
    design, numerics = "DESIGN" + ".md", "docs/numerics" + ".rst"
    text = (f"See {design} and {numerics}, docs/differences.rst, "
            "tests/contract.py, ../guide/" "cli.rst, types.rst and /tmp/x/y.onnx.")
    assert broken_references("docs/operators/index.rst", text) == [numerics, design]
    assert broken_references("extql/rules/types.py", "extql/src/extql_types.h (generated)") == []
