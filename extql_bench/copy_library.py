"""The copy anchor's custom-op library, built on demand with the system C compiler.

``benchmarks/copy_ops/copy_ops.c`` registers QuantizeCopy / DequantizeCopy
(domain ``com.amd.quark.bench``) on the shim's own sources (every
``extql/src/ort_*.c`` but ``ort_library.c``, which is extql's operator table),
so the copy ops check and split their work exactly as extql's operators do.

It needs a source checkout of extql: the harness is installed with extql (the
top-level package ``extql_bench``), the copy source is not.  The checkout is
the one whose ``benchmarks`` directory ``EXTQL_BENCHMARKS`` names, else the
one this package runs from (``extql_bench`` beside ``benchmarks`` at its
root).  Without one, :func:`library_path` raises :class:`BuildError` and the
tables leave the copy column out, saying why.  The first use builds the
library into ``benchmarks/build/`` (again whenever a source is newer), with
``$CC`` or the compiler Python was built with, or ``cc``: a GCC- or
Clang-compatible compiler.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

#: The sources' file names, relative to the checkout's root.
COPY_SOURCE_NAME = Path("benchmarks") / "copy_ops" / "copy_ops.c"
#: The shim's files the copy library is made of (all but extql's op table).
SHIM_FILES = ("ort_register.c", "ort_callbacks.c", "ort_ops.c", "ort_blocks.c", "ort_validate.c",
              "ort_infer.c", "ort_compute.c", "ort_messages.c")
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]

#: Why the copy column is empty when no checkout provides the copy source.
NEEDS_CHECKOUT = (
    "the copy kernel is built from a source checkout of extql (benchmarks/copy_ops); run "
    "extql bench from a checkout, or set EXTQL_BENCHMARKS to a checkout's benchmarks directory"
)

_LIB: ctypes.CDLL | None = None


class BuildError(RuntimeError):
    """The copy library could not be built (no compiler, a failed compile)."""


class Unavailable(BuildError):
    """The copy library cannot be built here: no source checkout, or Windows."""


def checkout() -> Path:
    """The root of the source checkout the copy library is built from (it may
    lack the sources: :func:`library_path` says so)."""
    named = os.environ.get("EXTQL_BENCHMARKS")
    if named:
        return Path(named).resolve().parent
    return Path(__file__).resolve().parent.parent


def _suffix() -> str:
    return ".dylib" if sys.platform == "darwin" else ".so"


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _generated_headers(include: Path) -> None:
    """Write extql_types.h from the type table and extql_block_rules.h from
    the block formats' rules into include/ (as setup.py does)."""
    for tool, header in (("gen_types_header", "extql_types.h"),
                         ("gen_block_rules_header", "extql_block_rules.h")):
        spec = importlib.util.spec_from_file_location(tool, checkout() / "tools" / f"{tool}.py")
        if spec is None or spec.loader is None:
            raise BuildError(f"tools/{tool}.py is missing")
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        gen.write_header(include / header)


def sources() -> list[Path]:
    """The C files of the copy library."""
    root = checkout()
    return [root / COPY_SOURCE_NAME] + [root / "extql" / "src" / name for name in SHIM_FILES]


def library_path() -> str:
    """The path of the copy library, built first when missing or older than
    a source; raises BuildError when it cannot be built."""
    if os.name == "nt":
        raise Unavailable("the copy kernel is built with a Unix C compiler; not on Windows")
    root = checkout()
    src = root / "extql" / "src"
    if not (root / COPY_SOURCE_NAME).is_file():
        raise Unavailable(NEEDS_CHECKOUT)
    inputs = sources() + sorted(src.glob("*.h")) + [root / "extql" / "rules" / "typetable.py",
                                                     root / "extql" / "rules" / "blocks.py"]
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        raise BuildError(f"not a source checkout of extql: missing {', '.join(missing)}")
    build = root / "benchmarks" / "build"
    out = build / f"libextql_bench_copy{_suffix()}"
    if out.is_file() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return str(out)
    build.mkdir(exist_ok=True)
    include = build / "include"
    include.mkdir(exist_ok=True)
    _generated_headers(include)
    fd, tmp = tempfile.mkstemp(prefix=out.name, suffix=".tmp", dir=build)
    os.close(fd)
    cmd = (_compiler() + FLAGS + [f"-I{include}", f"-I{src}", "-o", tmp]
           + [str(p) for p in sources()])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        os.unlink(tmp)
        raise BuildError(f"cannot run the C compiler {cmd[0]!r}: {exc}") from None
    if proc.returncode != 0:
        os.unlink(tmp)
        raise BuildError(f"building the copy library failed:\n{' '.join(cmd)}\n{proc.stderr}")
    os.replace(tmp, out)  # atomic: a concurrent build never sees half a file
    return str(out)


def set_isa(isa: str) -> str:
    """Run the copy in the variant extql's kernels run (``extql._kernels.isa()``:
    ``baseline``, ``avx2`` or ``avx512``; the copy's vector loops are AVX2
    ones, which move the bytes at the memory's speed for the AVX-512 kernels
    too); returns the variant the copy now stands for."""
    global _LIB
    if _LIB is None:
        _LIB = ctypes.CDLL(library_path())
        _LIB.extql_bench_copy_set_isa.argtypes = [ctypes.c_int]
        _LIB.extql_bench_copy_set_isa.restype = ctypes.c_int
    vector = isa in ("avx2", "avx512")
    return isa if _LIB.extql_bench_copy_set_isa(1 if vector else 0) == vector else "baseline"
