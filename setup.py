"""Build extql's compiled parts: the onnxruntime library and the Python extension.

Two shared objects, in this order:

* ``extql/libextql_ort`` (``.so`` / ``.dylib`` / ``.dll``): the kernels and
  the onnxruntime custom-op shim, with no Python in it -- the library that
  onnxruntime registers (``extql.get_library_path()``), from Python or from
  any other host.  The kernels' dispatch unit (``extql/kernels/dispatch.pyx``)
  is turned into C once and compiled once per instruction set of
  ``extql/_entrypoints.py`` (on x86-64 with GCC or Clang: baseline, AVX2,
  AVX-512; elsewhere the baseline), each copy's entry points suffixed with the
  set's name; ``src/extql_isa.c`` forwards each public entry point to the copy
  the CPU runs.  The unit's Python parts are never called: the link drops
  them (section garbage collection) and exports only the public entry points
  and ``RegisterCustomOps``.
* ``extql._kernels``: the Python wrappers and the OpenMP loops over whole
  tensors, compiled once, linked against the library.

OpenMP is used when the compiler supports it (a test compile decides); the
kernels build serially otherwise (Apple clang, for example).  The default
build uses no host-specific instruction set, so the wheel runs on any CPU of
its platform.  Environment switches:

* ``EXTQL_NO_OPENMP=1``  build without OpenMP even where it is available.
* ``EXTQL_NO_DISPATCH=1`` compile only the baseline copy of the kernels.
* ``EXTQL_COVERAGE=1``   compile the Python extension with line tracing.
* ``EXTQL_NATIVE=1``     opt-in ``-march=native`` for local experiments only.
* ``EXTQL_DEBUG=1``      keep debug information (``-g``); release builds have none.
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

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join("extql", "src")
KERNELS = os.path.join("extql", "kernels")
#: Where the build writes what it generates (templates expanded, headers,
#: Cython's C): never in the source tree's folders of sources.
GEN = os.path.join("build", "extql-gen")
#: The onnxruntime library's extension name (its file is libextql_ort.*).
LIBRARY = "extql.libextql_ort"

# The custom-op shim, one file per concern (see extql/src/ort_internal.h),
# and the choice of the kernels' copy.
SHIM_SOURCES = [
    os.path.join(SRC, f"ort_{name}.c")
    for name in ("library", "register", "callbacks", "ops", "blocks", "dpu", "lstm", "validate",
                 "infer", "compute", "messages")
] + [os.path.join(SRC, "extql_isa.c")]
HEADERS = [os.path.join(SRC, h) for h in (
    "ort_api.h", "ort_internal.h", "extql_types.h", "extql_split.h", "extql_primitives.h",
    "extql_primitives_avx512.h.tp", "extql_primitives_avx2.h.tp", "extql_primitives_c.h.tp",
    "extql_kernels.h", "extql_rules.h", "extql_block_rules.h")]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _load(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def _library_filename() -> str:
    if sys.platform == "win32":
        return "extql_ort.dll"
    if sys.platform == "darwin":
        return "libextql_ort.dylib"
    return "libextql_ort.so"


class BuildExt(build_ext):
    """build_ext that builds the onnxruntime library first (the dispatch
    unit per instruction set, the shim), then the Python extension against
    it."""

    def get_ext_filename(self, fullname: str) -> str:
        # (Called with the full name, or with its last part alone.)
        if fullname == LIBRARY:
            return os.path.join("extql", _library_filename())
        if fullname == LIBRARY.rsplit(".", 1)[1]:
            return _library_filename()
        return super().get_ext_filename(fullname)

    def build_extensions(self) -> None:
        unix = self.compiler.compiler_type != "msvc"
        self.sanitize = os.environ.get("EXTQL_SANITIZE", "").strip()
        if not unix:
            self.base_args = ["/O2"]
            omp_compile, omp_link = ["/openmp"], []
        else:
            # -ffp-contract=off: every step of the formula rounds as the
            # contract says; a fused multiply-add would skip a rounding (and,
            # say, an overflow to inf before a zero point is added).
            self.base_args = ["-O3", "-fno-math-errno", "-fno-trapping-math",
                              "-ffp-contract=off"]
            self.base_args.append("-g" if _flag("EXTQL_DEBUG") else "-g0")
            omp_compile, omp_link = ["-fopenmp"], ["-fopenmp"]
            if _flag("EXTQL_NATIVE"):
                self.base_args.append("-march=native")
        self.sanitize_link: list[str] = []
        if self.sanitize:
            if not unix:
                raise SystemExit("extql: EXTQL_SANITIZE needs GCC or Clang")
            self.base_args = ["-O1", "-g", "-fno-omit-frame-pointer",
                              f"-fsanitize={self.sanitize}", "-fno-sanitize-recover=all",
                              "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off"]
            self.sanitize_link = [f"-fsanitize={self.sanitize}"]
            self.force = True  # never reuse objects of a normal build (or the reverse)
            print(f"extql: building with -fsanitize={self.sanitize} (not for release)",
                  file=sys.stderr)
        use_omp = not _flag("EXTQL_NO_OPENMP") and _compiler_accepts(
            self.compiler, omp_compile, omp_link)
        print(f"extql: building {'with' if use_omp else 'without'} OpenMP", file=sys.stderr)
        for ext in self.extensions:
            if ext.name == LIBRARY:
                continue
            ext.extra_compile_args = self.base_args + (omp_compile if use_omp else [])
            ext.extra_link_args = (omp_link if use_omp else []) + self.sanitize_link
        # The library first: the extension links against it.
        self.extensions.sort(key=lambda e: e.name != LIBRARY)
        super().build_extensions()

    def build_extension(self, ext: Extension) -> None:
        if ext.name == LIBRARY:
            self._build_library(ext)
            return
        library = self.get_ext_fullpath(LIBRARY)
        if sys.platform == "win32":
            ext.extra_objects = [os.path.splitext(library)[0] + ".lib"]
        else:
            ext.extra_objects = [library]
            ext.runtime_library_dirs = [] if sys.platform == "darwin" else ["$ORIGIN"]
            if sys.platform == "darwin":
                ext.extra_link_args = ext.extra_link_args + ["-Wl,-rpath,@loader_path"]
        super().build_extension(ext)

    # -- the onnxruntime library ---------------------------------------------------

    def _isas(self) -> list[tuple[str, tuple[str, ...]]]:
        """The instruction sets to compile the dispatch unit for."""
        isas = _load(os.path.join(ROOT, "extql", "_entrypoints.py")).ISAS
        machine = platform.machine().lower()
        if (self.compiler.compiler_type != "unix"
                or machine not in ("x86_64", "amd64")
                or "arm64" in os.environ.get("ARCHFLAGS", "")
                or "universal2" in sysconfig.get_platform()
                or _flag("EXTQL_NO_DISPATCH")):
            return [(isas[0][0], isas[0][1])]
        return [(name, flags) for name, flags, _ in isas]

    def _build_library(self, ext: Extension) -> None:
        output = self.get_ext_fullpath(ext.name)
        depends = ext.sources + list(ext.depends)
        if not (self.force or _newer_group(depends, output)):
            print(f"extql: {output} is up to date", file=sys.stderr)
            return
        unix = self.compiler.compiler_type != "msvc"
        sections = ["-ffunction-sections", "-fdata-sections"] if unix else ["/Gy"]
        # Cython's C of the unit includes Python.h (for the module parts the
        # link drops): the headers, never the library.
        includes = ext.include_dirs + [sysconfig.get_paths()["include"]]
        unit = [s for s in ext.sources if s.endswith("dispatch.c")]
        shim = [s for s in ext.sources if not s.endswith("dispatch.c")]
        isas = self._isas()
        temp = os.path.join(self.build_temp, "extql_ort")

        def compile_isa(name: str, flags: tuple[str, ...]) -> list[str]:
            print(f"extql: compiling the kernels for {name}", file=sys.stderr)
            return self.compiler.compile(
                unit, output_dir=os.path.join(temp, name),
                macros=ext.define_macros + [("EXTQL_ISA", name)], include_dirs=includes,
                extra_postargs=self.base_args + sections + list(flags), depends=depends)

        # The copies of the unit are most of the build's time: two at a
        # time, beside the shim.
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(compile_isa, name, flags) for name, flags in isas]
            have = [(f"EXTQL_HAVE_ISA_{name.upper()}", "1") for name, _ in isas]
            objects = self.compiler.compile(
                shim, output_dir=os.path.join(temp, "shim"),
                macros=ext.define_macros + have, include_dirs=includes,
                extra_postargs=self.base_args + sections, depends=depends)
            for future in futures:
                objects += future.result()
        self.mkpath(os.path.dirname(output))
        link_args = list(self.sanitize_link)
        exports = _exported_names()
        if sys.platform == "darwin":
            listing = os.path.join(temp, "exports.txt")
            _write(listing, "".join(f"_{name}\n" for name in exports))
            link_args += ["-Wl,-dead_strip", f"-Wl,-exported_symbols_list,{listing}",
                          "-Wl,-install_name,@rpath/" + os.path.basename(output)]
        elif unix:
            script = os.path.join(temp, "exports.map")
            _write(script, "{\n  global:\n" + "".join(f"    {n};\n" for n in exports)
                   + "  local: *;\n};\n")
            link_args += ["-Wl,--gc-sections", f"-Wl,--version-script={script}",
                          "-Wl,-soname," + os.path.basename(output)]
        else:
            definition = os.path.join(temp, "extql_ort.def")
            _write(definition, "EXPORTS\n" + "".join(f"    {n}\n" for n in exports))
            link_args += ["/OPT:REF", f"/DEF:{definition}"]
        self.compiler.link_shared_object(
            objects, output, libraries=["m"] if unix and sys.platform != "darwin" else None,
            extra_postargs=link_args, target_lang="c")


def _newer_group(sources: list[str], target: str) -> bool:
    if not os.path.exists(target):
        return True
    mtime = os.path.getmtime(target)
    return any(os.path.exists(s) and os.path.getmtime(s) > mtime for s in sources)


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _exported_names() -> list[str]:
    """What the onnxruntime library exports: RegisterCustomOps and the
    kernels' public entry points (extql/_entrypoints.py)."""
    spec = _load(os.path.join(ROOT, "extql", "_entrypoints.py"))
    names = ["RegisterCustomOps", "extql_isa", "extql_isa_supported", "extql_isa_force",
             "extql_isa_name", "extql_quotient", "extql_quotient_force"]
    return names + [f"extql_{name}" for name, *_ in spec.ENTRY_POINTS]


def _generate() -> None:
    """The type table's header, the block formats' rules header, the entry
    points' headers and the expanded templates (tools/gen_types_header.py,
    tools/gen_block_rules_header.py, tools/gen_kernels.py)."""
    _load(os.path.join(ROOT, "tools", "gen_types_header.py")).write_header()
    _load(os.path.join(ROOT, "tools", "gen_block_rules_header.py")).write_header()
    _load(os.path.join(ROOT, "tools", "gen_kernels.py")).write(
        __import__("pathlib").Path(ROOT, GEN))


def _extensions() -> list[Extension]:
    _generate()
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if os.name != "nt":
        # The kernels' tile loops are inline functions called with constant
        # arguments (the tile length); inlined, each is compiled for them.
        # GCC otherwise leaves some out of line.
        macros.append(("CYTHON_INLINE", "__inline__ __attribute__((always_inline, unused))"))
    include = [GEN, KERNELS, SRC]
    directives = {"language_level": "3"}
    unit = cythonize(
        [Extension("dispatch", [os.path.join(KERNELS, "dispatch.pyx")])],
        include_path=include, build_dir=GEN, compiler_directives=directives, quiet=True,
    )[0]
    library = Extension(
        LIBRARY, sources=unit.sources + SHIM_SOURCES,
        depends=HEADERS + [os.path.join(GEN, f) for f in os.listdir(GEN)],
        include_dirs=include, define_macros=macros + [("EXTQL_BUILDING", "1")],
    )
    python_directives = dict(directives)
    python_macros = list(macros)
    if _flag("EXTQL_COVERAGE"):
        python_macros += [("CYTHON_TRACE_NOGIL", "1"), ("CYTHON_TRACE", "1")]
        python_directives.update(linetrace=True, binding=True)
    wrappers = cythonize(
        [Extension("extql._kernels", [os.path.join("extql", "_kernels.pyx")],
                   depends=HEADERS, include_dirs=include, define_macros=python_macros)],
        include_path=include, compiler_directives=python_directives, quiet=True,
    )
    return [library] + wrappers


if __name__ == "__main__":
    setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
