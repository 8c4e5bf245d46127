"""No kernel source file holds more than 3 twin definitions.

Twins are function definitions whose bodies are the same but for a few
tokens: a signed and an unsigned store that differ by one intrinsic and
their types, say.  The kernel layout writes such variants once, as a
Tempita template (``*.pxi.tp``, ``*.h.tp``) that the build expands
(tools/gen_kernels.py), so that a fix to one variant cannot miss the other.

The detector reads the C, Cython and template sources that git tracks under
extql/src and extql/kernels, splits each into its function definitions (C:
a signature at the start of a line and its braces; Cython: a ``def`` /
``cdef`` / ``cpdef`` line and its indented block), tokenises the bodies
(names, numbers, punctuation), and calls two definitions of one file twins
when their token sequences have the same length (at least MIN_TOKENS) and
differ in at most MAX_DIFFERENT positions.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("extql/src", "extql/kernels")
SUFFIXES = (".c", ".h", ".pyx", ".pxi", ".tp")
#: The most twin definitions one file may hold.
LIMIT = 3
#: Definitions shorter than this (one-line accessors) are not compared.
MIN_TOKENS = 24
#: Token positions in which two twins may differ.
MAX_DIFFERENT = 6

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|\S")
_C_DEF = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.M)
_CY_DEF = re.compile(r"^([ \t]*)(?:c?p?def)\b[^\n]*?\b([A-Za-z_]\w*)\s*\(", re.M)


def _strip_comments(text: str, cython: bool) -> str:
    if cython:
        text = re.sub(r'"""[\s\S]*?"""', '""', text)
        return re.sub(r"#[^\n]*", "", text)
    text = re.sub(r"/\*[\s\S]*?\*/", " ", text)
    return re.sub(r"//[^\n]*", "", text)


def _c_definitions(text: str) -> list[tuple[str, list[str]]]:
    out = []
    for match in _C_DEF.finditer(text):
        depth, i = 0, match.end() - 1
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        out.append((match.group(1), _TOKEN.findall(text[match.start():i + 1])))
    return out


def _cython_definitions(text: str) -> list[tuple[str, list[str]]]:
    out = []
    lines = text.splitlines()
    starts = {text.count("\n", 0, m.start()): m for m in _CY_DEF.finditer(text)}
    for first, match in starts.items():
        indent = len(match.group(1).expandtabs())
        body = [lines[first]]
        for line in lines[first + 1:]:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            body.append(line)
        out.append((match.group(2), _TOKEN.findall("\n".join(body))))
    return out


def definitions(path: Path) -> list[tuple[str, list[str]]]:
    """(name, tokens) of each function defined in path."""
    name = path.name[:-3] if path.name.endswith(".tp") else path.name
    cython = name.endswith((".pyx", ".pxi"))
    text = _strip_comments(path.read_text(encoding="utf-8"), cython)
    return _cython_definitions(text) if cython else _c_definitions(text)


def twins(defs: list[tuple[str, list[str]]]) -> set[str]:
    """The names of the definitions that have a twin among defs."""
    found: set[str] = set()
    for i, (a, ta) in enumerate(defs):
        for b, tb in defs[i + 1:]:
            if len(ta) != len(tb) or len(ta) < MIN_TOKENS:
                continue
            if sum(x != y for x, y in zip(ta, tb, strict=True)) <= MAX_DIFFERENT:
                found.update((a, b))
    return found


def _sources() -> list[Path]:
    out = subprocess.run(["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / f for f in out.stdout.split() if f.endswith(SUFFIXES)]


def test_the_detector_finds_a_signed_unsigned_pair():
    source = """
static inline void extql_store_i8(int8_t *dst, const int32_t *t, int64_t n) {
  for (int64_t k = 0; k + 32 <= n; k += 32) put(dst + k, _mm256_packs_epi16(a(t), b(t)));
  for (int64_t k = 0; k < n; k++) dst[k] = (int8_t)t[k];
}
static inline void extql_store_u8(uint8_t *dst, const int32_t *t, int64_t n) {
  for (int64_t k = 0; k + 32 <= n; k += 32) put(dst + k, _mm256_packus_epi16(a(t), b(t)));
  for (int64_t k = 0; k < n; k++) dst[k] = (uint8_t)t[k];
}
static inline void extql_fill(uint32_t *p, uint32_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) p[k] = v; if (n > 3) { p[0] = p[1] + p[2] * v; }
}
"""
    assert twins(_c_definitions(source)) == {"extql_store_i8", "extql_store_u8"}
    cy = '''
cdef inline int add_i8(int8_t *p, int64_t n) noexcept nogil:
    cdef int64_t k
    cdef int s = 0
    for k in range(n):
        s += p[k] * 2 + 1
    return s


cdef inline int add_u8(uint8_t *p, int64_t n) noexcept nogil:
    cdef int64_t k
    cdef int s = 0
    for k in range(n):
        s += p[k] * 2 + 1
    return s
'''
    assert twins(_cython_definitions(cy)) == {"add_i8", "add_u8"}


def test_no_kernel_source_holds_more_than_three_twins():
    sources = _sources()
    assert any(p.name.startswith("extql_primitives") for p in sources)
    over = {}
    for path in sources:
        found = twins(definitions(path))
        if len(found) > LIMIT:
            over[str(path.relative_to(ROOT))] = sorted(found)
    assert not over, f"twin definitions (write them once, as a Tempita template): {over}"
