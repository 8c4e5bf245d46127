"""Build extql's compiled extension: the Cython kernels and the onnxruntime shim.

OpenMP is used when the compiler supports it (a test compile decides) and the
kernels build serially otherwise (Apple clang, for example).  The default build
uses no host-specific instruction set, so the wheel runs on any CPU of its
platform.  Environment switches:

* ``EXTQL_NO_OPENMP=1``  build without OpenMP even where it is available.
* ``EXTQL_COVERAGE=1``   compile the Cython code with line tracing (coverage).
* ``EXTQL_NATIVE=1``     opt-in ``-march=native`` for local experiments only.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import numpy  # noqa: F401  (build requirement: keeps the ABI of the build env)
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SRC = os.path.join("extql", "src")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _compiler_accepts(compiler, flags: list[str], link_flags: list[str]) -> bool:
    """Compile and link a tiny OpenMP program with the given flags."""
    code = "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
    tmp = tempfile.mkdtemp(prefix="extql-omp-")
    try:
        src = os.path.join(tmp, "check.c")
        with open(src, "w") as f:
            f.write(code)
        objects = compiler.compile([src], output_dir=tmp, extra_postargs=flags)
        compiler.link_executable(objects, "check", output_dir=tmp, extra_postargs=link_flags)
        return True
    except Exception:  # any compile or link failure means: no OpenMP
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildExt(build_ext):
    """build_ext that adds OpenMP and optimisation flags the compiler supports."""

    def build_extensions(self) -> None:
        ctype = self.compiler.compiler_type
        if ctype == "msvc":
            compile_args, omp_compile, omp_link = ["/O2"], ["/openmp"], []
        else:
            compile_args = ["-O3", "-fno-math-errno", "-fno-trapping-math"]
            omp_compile, omp_link = ["-fopenmp"], ["-fopenmp"]
            if _flag("EXTQL_NATIVE"):
                compile_args.append("-march=native")
        use_omp = not _flag("EXTQL_NO_OPENMP") and _compiler_accepts(
            self.compiler, omp_compile, omp_link
        )
        print(f"extql: building {'with' if use_omp else 'without'} OpenMP", file=sys.stderr)
        for ext in self.extensions:
            ext.extra_compile_args = compile_args + (omp_compile if use_omp else [])
            ext.extra_link_args = omp_link if use_omp else []
        super().build_extensions()


def _extensions() -> list[Extension]:
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    directives = {"language_level": "3"}
    if _flag("EXTQL_COVERAGE"):
        macros += [("CYTHON_TRACE_NOGIL", "1"), ("CYTHON_TRACE", "1")]
        directives.update(linetrace=True, binding=True)
    kernels = Extension(
        "extql._kernels",
        # The onnxruntime custom-op shim is part of the same shared object:
        # it exports RegisterCustomOps and calls the kernels' C entry points.
        sources=[os.path.join("extql", "_kernels.pyx"), os.path.join(SRC, "ort_shim.c")],
        depends=[os.path.join(SRC, h) for h in ("extql_kernels.h", "ort_api.h")],
        include_dirs=[SRC],
        define_macros=macros,
    )
    return cythonize([kernels], compiler_directives=directives)


if __name__ == "__main__":
    setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
