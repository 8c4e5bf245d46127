"""Build extql's compiled extension: the Cython kernels and the onnxruntime shim.

OpenMP is used when the compiler supports it (a test compile decides) and the
kernels build serially otherwise (Apple clang, for example).  The default build
uses no host-specific instruction set, so the wheel runs on any CPU of its
platform.  Environment switches:

* ``EXTQL_NO_OPENMP=1``  build without OpenMP even where it is available.
* ``EXTQL_COVERAGE=1``   compile the Cython code with line tracing (coverage).
* ``EXTQL_NATIVE=1``     opt-in ``-march=native`` for local experiments only.
* ``EXTQL_BUILD_ONLY=extql._blockfmt``  build only the named extensions
  (comma-separated), to rebuild one quickly.
* ``EXTQL_SANITIZE=address[,undefined]``  build for AddressSanitizer /
  LeakSanitizer (and UBSan) runs (tox -e asan): ``-fsanitize=...``, frame
  pointers and debug information.  Never for a build that ships; Python must
  then run with the sanitizer runtime preloaded (see docs/reliability.md).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import platform
import shutil
import sys
import sysconfig
import tempfile

import numpy  # noqa: F401  (build requirement: keeps the ABI of the build env)
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.errors import CompileError
except ImportError:  # setuptools < 59
    from distutils.errors import CompileError

SRC = os.path.join("extql", "src")

# The symbols the kernels' translation unit exports (renamed in its AVX2 copy).
_EXPORTED = [
    "PyInit__kernels",
    "__pyx_module_is_main_extql___kernels",
    "extql_quantize_range",
    "extql_dequantize_range",
    "extql_quantize_range_ex",
    "extql_dequantize_range_ex",
    "extql_quantize_typed_range_ex",
    "extql_dequantize_typed_range_ex",
    "extql_quantize_typed",
    "extql_dequantize_typed",
    "extql_convert_scales",
    "extql_quotients_f64",
    "extql_f64_params",
    "extql_quantize_f64_range",
    "extql_unpack",
    "extql_quantize",
    "extql_dequantize",
    "extql_get_num_threads",
    "extql_set_num_threads",
    "extql_have_openmp",
]


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
            # -ffp-contract=off: every step of the formula rounds as the
            # contract says; a fused multiply-add would skip a rounding (and,
            # say, an overflow to inf before a zero point is added).
            compile_args = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off"]
            omp_compile, omp_link = ["-fopenmp"], ["-fopenmp"]
            if _flag("EXTQL_NATIVE"):
                compile_args.append("-march=native")
        sanitize = os.environ.get("EXTQL_SANITIZE", "").strip()
        sanitize_link: list[str] = []
        if sanitize:
            if ctype == "msvc":
                raise SystemExit("extql: EXTQL_SANITIZE needs GCC or Clang")
            compile_args = ["-O1", "-g", "-fno-omit-frame-pointer", f"-fsanitize={sanitize}",
                            "-fno-sanitize-recover=all", "-fno-math-errno",
                            "-fno-trapping-math", "-ffp-contract=off"]
            sanitize_link = [f"-fsanitize={sanitize}"]
            self.force = True  # never reuse objects of a normal build (or the reverse)
            print(f"extql: building with -fsanitize={sanitize} (not for release)",
                  file=sys.stderr)
        use_omp = not _flag("EXTQL_NO_OPENMP") and _compiler_accepts(
            self.compiler, omp_compile, omp_link
        )
        print(f"extql: building {'with' if use_omp else 'without'} OpenMP", file=sys.stderr)
        variants = []
        for ext in self.extensions:
            ext.extra_compile_args = compile_args + (omp_compile if use_omp else [])
            ext.extra_link_args = (omp_link if use_omp else []) + sanitize_link
            if self._wants_avx2_variant() and any(s.endswith("_kernels.c")
                                                  for s in ext.sources):
                variants.append(ext)
        if not variants:
            super().build_extensions()
            return
        # The AVX2 copy of the kernels compiles on a second core while the
        # baseline copy and the shim compile on the first (each copy of the
        # kernels is most of the build's time); the link waits for it.
        saved = [(ext, list(ext.extra_objects or []), list(ext.define_macros))
                 for ext in variants]
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            futures = [pool.submit(self._compile_avx2_variant, ext, list(ext.define_macros))
                       for ext in variants]
            for ext in variants:
                ext.extra_objects = list(ext.extra_objects or []) + self._avx2_objects(ext)
                ext.define_macros = ext.define_macros + [("EXTQL_HAVE_AVX2_VARIANT", "1")]
            link = self.compiler.link_shared_object

            def link_after_variants(*args, **kwargs):
                for future in futures:
                    future.result()  # CompileError when the variant failed
                return link(*args, **kwargs)

            self.compiler.link_shared_object = link_after_variants
            try:
                super().build_extensions()
            except CompileError as exc:
                # A compiler that cannot build the AVX2 copy: the baseline
                # alone, compiled again without the variant.
                print(f"extql: no AVX2 variant ({exc})", file=sys.stderr)
                for ext, objects, macros in saved:
                    ext.extra_objects, ext.define_macros = objects, macros
                self.force = True
                self.compiler.link_shared_object = link
                super().build_extensions()
            finally:
                self.compiler.link_shared_object = link

    def _wants_avx2_variant(self) -> bool:
        """Whether to compile the kernels a second time for AVX2/FMA/F16C
        (x86-64, GCC or Clang), with that copy's exported names suffixed
        ``_avx2``; the baseline copy calls it when the CPU has those
        instructions (see extql/src/extql_isa.h)."""
        machine = platform.machine().lower()
        return not (
            self.compiler.compiler_type != "unix"
            or machine not in ("x86_64", "amd64")
            or "arm64" in os.environ.get("ARCHFLAGS", "")
            or "universal2" in sysconfig.get_platform()
            or _flag("EXTQL_NO_DISPATCH")
            # Line tracing calls into the module's state, which only the
            # baseline copy (the one Python imports) ever initialises.
            or _flag("EXTQL_COVERAGE")
        )

    def _avx2_objects(self, ext: Extension) -> list[str]:
        """The object files of the AVX2 copy (what _compile_avx2_variant writes)."""
        sources = [s for s in ext.sources if s.endswith("_kernels.c")]
        return self.compiler.object_filenames(
            sources, output_dir=os.path.join(self.build_temp, "avx2"))

    def _compile_avx2_variant(self, ext: Extension, macros: list) -> list[str]:
        """Compile the AVX2 copy (macros: the extension's, before the
        baseline's EXTQL_HAVE_AVX2_VARIANT is added)."""
        sources = [s for s in ext.sources if s.endswith("_kernels.c")]
        renames = [(name, name + "_avx2") for name in _EXPORTED]
        print("extql: building the AVX2/FMA/F16C variant", file=sys.stderr)
        return self.compiler.compile(
            sources,
            output_dir=os.path.join(self.build_temp, "avx2"),
            macros=macros + [("EXTQL_VARIANT_AVX2", "1")] + renames,
            include_dirs=ext.include_dirs,
            extra_postargs=ext.extra_compile_args + ["-mavx2", "-mfma", "-mf16c"],
            depends=ext.depends,
        )


# The custom-op shim, one file per concern (see extql/src/ort_internal.h).
SHIM_SOURCES = [
    os.path.join(SRC, f"ort_{name}.c")
    for name in ("library", "register", "ops", "validate", "infer", "compute", "messages")
]
SHIM_HEADERS = ["ort_api.h", "ort_internal.h", "extql_types.h", "extql_split.h"]
KERNEL_HEADERS = [
    "extql_kernels.h", "extql_types.h", "extql_split.h", "extql_isa.h", "extql_primitives.h",
]


def _generate_types_header() -> None:
    """Write extql/src/extql_types.h from the type table (tools/gen_types_header.py)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools",
                        "gen_types_header.py")
    spec = importlib.util.spec_from_file_location("gen_types_header", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.write_header()


def _extensions() -> list[Extension]:
    _generate_types_header()
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if os.name != "nt":
        # The kernels' tile loops are inline functions called with constant
        # arguments (the tile length, the output mode); inlined, each is
        # compiled for its constants.  GCC otherwise leaves some out of line.
        macros.append(("CYTHON_INLINE", "__inline__ __attribute__((always_inline, unused))"))
    directives = {"language_level": "3"}
    if _flag("EXTQL_COVERAGE"):
        macros += [("CYTHON_TRACE_NOGIL", "1"), ("CYTHON_TRACE", "1")]
        directives.update(linetrace=True, binding=True)
    kernels = Extension(
        "extql._kernels",
        # The onnxruntime custom-op shim is part of the same shared object:
        # it exports RegisterCustomOps and calls the kernels' C entry points.
        sources=[os.path.join("extql", "_kernels.pyx")] + SHIM_SOURCES,
        depends=[os.path.join(SRC, h) for h in KERNEL_HEADERS + SHIM_HEADERS],
        include_dirs=[SRC],
        define_macros=macros,
    )
    # The block-format kernels (Quark's BFP / MX), a module of their own.
    blockfmt = Extension(
        "extql._blockfmt",
        sources=[os.path.join("extql", "_blockfmt.pyx")],
        depends=[os.path.join("extql", "kernels", f)
                 for f in ("blockfmt.pxi", "blockfmt_elements.pxi")]
        + [os.path.join(SRC, h) for h in ("extql_primitives.h", "extql_split.h")],
        include_dirs=[SRC],
        define_macros=macros,
    )
    extensions = [kernels, blockfmt]
    only = [name.strip() for name in os.environ.get("EXTQL_BUILD_ONLY", "").split(",")
            if name.strip()]
    if only:
        extensions = [ext for ext in extensions if ext.name in only]
    return cythonize(extensions, compiler_directives=directives)


if __name__ == "__main__":
    setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
