"""The copy anchor's custom-op library, built on demand with the system C compiler.

``benchmarks/copy_ops/copy_ops.c`` registers QuantizeCopy / DequantizeCopy
(domain ``com.amd.quark.bench``) on the shim's own sources (every
``extql/src/ort_*.c`` but ``ort_library.c``, which is extql's operator table),
so the copy ops check and split their work exactly as extql's operators do.
The library is not part of extql's wheel: the first use builds it into
``benchmarks/build/`` (again whenever a source is newer), with ``$CC`` or the
compiler Python was built with, or ``cc``.  It needs a source checkout (the
shim's sources) and a GCC- or Clang-compatible compiler.
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

BENCHMARKS = Path(__file__).resolve().parent.parent
ROOT = BENCHMARKS.parent
SRC = ROOT / "extql" / "src"
COPY_SOURCE = BENCHMARKS / "copy_ops" / "copy_ops.c"
BUILD = BENCHMARKS / "build"
#: The shim's files the copy library is made of (all but extql's op table).
SHIM_FILES = ("ort_register.c", "ort_ops.c", "ort_validate.c", "ort_infer.c",
              "ort_compute.c", "ort_messages.c")
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]

_LIB: ctypes.CDLL | None = None


class BuildError(RuntimeError):
    """The copy library could not be built (no compiler, no sources)."""


def _suffix() -> str:
    return ".dylib" if sys.platform == "darwin" else ".so"


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _types_header(include: Path) -> None:
    """Write extql_types.h from the type table into include/ (as setup.py does)."""
    spec = importlib.util.spec_from_file_location(
        "gen_types_header", ROOT / "tools" / "gen_types_header.py")
    if spec is None or spec.loader is None:
        raise BuildError("tools/gen_types_header.py is missing")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.write_header(include / "extql_types.h")


def sources() -> list[Path]:
    """The C files of the copy library."""
    return [COPY_SOURCE] + [SRC / name for name in SHIM_FILES]


def library_path() -> str:
    """The path of the copy library, built first when missing or older than
    a source; raises BuildError when it cannot be built."""
    if os.name == "nt":
        raise BuildError("the copy library is built with a Unix C compiler; not on Windows")
    inputs = sources() + sorted(SRC.glob("*.h")) + [ROOT / "extql" / "_typetable.py"]
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        raise BuildError(f"not a source checkout of extql: missing {', '.join(missing)}")
    out = BUILD / f"libextql_bench_copy{_suffix()}"
    if out.is_file() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return str(out)
    BUILD.mkdir(exist_ok=True)
    include = BUILD / "include"
    include.mkdir(exist_ok=True)
    _types_header(include)
    fd, tmp = tempfile.mkstemp(prefix=out.name, suffix=".tmp", dir=BUILD)
    os.close(fd)
    cmd = (_compiler() + FLAGS + [f"-I{include}", f"-I{SRC}", "-o", tmp]
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
    """Run the copy in the variant extql's kernels run (``extql._kernels.isa()``):
    the baseline's plain loops, or the AVX2 vector copy for ``avx2`` and
    ``avx512`` (64 bytes a step move at the cache's speed either way); returns
    the variant the copy now runs (``baseline`` or ``avx2``)."""
    global _LIB
    if _LIB is None:
        _LIB = ctypes.CDLL(library_path())
        _LIB.extql_bench_copy_set_isa.argtypes = [ctypes.c_int]
        _LIB.extql_bench_copy_set_isa.restype = ctypes.c_int
    return "avx2" if _LIB.extql_bench_copy_set_isa(0 if isa == "baseline" else 1) else "baseline"
