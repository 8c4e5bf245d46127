"""Write what C and Cython need from ``extql/_entrypoints.py`` and expand the kernels' templates.

``setup.py`` runs this at build time; every output is a build product (not kept
in git).  From the list of entry points and instruction sets:

* ``extql/src/extql_kernels.h``  the public C header of the kernels (shipped
  with the package, for C callers and the onnxruntime shim);
* ``<gen>/extql_unit.h``         what each instruction set's copy of the
  dispatch unit is compiled against: its naming macro ``EXTQL_ISA_FN`` and the
  prototypes of its entry points (so the compiler checks their definitions);
* ``<gen>/extql_dispatch.h``     the CPU checks of the instruction sets and the
  public functions that forward each entry point to the copy the CPU runs
  (included by ``extql/src/extql_isa.c``);
* ``<gen>/extql_api.pxi``        the Cython declarations of the public header,
  for the Python extension;

and from each ``extql/kernels/*.pxi.tp`` Tempita template, ``<gen>/*.pxi``,
and from each ``extql/src/*.h.tp`` (the primitives' bodies per instruction
set), ``<gen>/*.h`` (``tools/tempita.py``; the templates read the type table).  By hand::

    python tools/gen_kernels.py GEN_DIR           # (re)write everything
    python tools/gen_kernels.py GEN_DIR --check   # exit 1 when an output differs

It reads the tables by path, without importing ``extql``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "extql" / "_entrypoints.py"
TYPES = ROOT / "extql" / "rules" / "typetable.py"
TEMPLATES = ROOT / "extql" / "kernels"
C_TEMPLATES = ROOT / "extql" / "src"
PUBLIC_HEADER = ROOT / "extql" / "src" / "extql_kernels.h"


def load(path: Path):
    """The module at path, loaded without importing its package."""
    spec = importlib.util.spec_from_file_location(f"_extql_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be read")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _comment(text: str, indent: str = "") -> str:
    lines = textwrap.fill(" ".join(text.split()), 88 - len(indent) - 3).splitlines()
    body = "\n".join(f"{indent} * {line}" for line in lines)
    return f"{indent}/*\n{body}\n{indent} */"


def _param_names(params: tuple[str, ...]) -> list[str]:
    return [re.split(r"[\s*]+", p.strip())[-1] for p in params]


def _proto(ret: str, name: str, params: tuple[str, ...]) -> str:
    return f"{ret} {name}({', '.join(params)})"


def _struct(name: str, members: tuple[str, ...], doc: str) -> str:
    lines = []
    for member in members:
        decl, what = member.split(":", 1)
        lines.append(f"  {decl.strip()}; /* {what.strip()} */")
    body = "\n".join(lines)
    return f"{_comment(doc)}\ntypedef struct {{\n{body}\n}} {name};"


def public_header(spec) -> str:
    """extql/src/extql_kernels.h."""
    isas = "\n".join(f"#define EXTQL_ISA_{name.upper()} {i}" for i, (name, _, _) in
                     enumerate(spec.ISAS))
    flags = "\n".join(f"{_comment(doc)}\n#define EXTQL_{name} {value}"
                      for name, value, doc in spec.FLAGS)
    protos = "\n\n".join(
        f"{_comment(doc)}\nEXTQL_API {_proto(ret, 'extql_' + name, params)};"
        for name, _, ret, params, doc in spec.ENTRY_POINTS)
    kinds = "\n".join(f"#define EXTQL_BLOCK_{name} {code}" for name, code in spec.BLOCK_KINDS)
    kinds += "".join(f"\n#define EXTQL_LSTM_{name} {code}" for name, code in spec.LSTM_CODES)
    structs = "\n\n".join(_struct(name, members, doc) for name, members, doc in spec.STRUCTS)
    return f"""/*
 * extql_kernels.h - the C entry points of extql's kernels.
 *
 * Generated from extql/_entrypoints.py by tools/gen_kernels.py: do not edit.
 *
 * The kernels are written in Cython (extql/kernels/), compiled once per
 * instruction set, and exported from extql's onnxruntime library (the
 * standalone libextql_ort, which needs no Python): each function below runs
 * the copy the CPU supports.  They touch no Python object and keep no state,
 * so a caller may use them from any thread.  Element types are numbered as
 * ONNX's TensorProto.DataType (extql_types.h); tensors are dense and
 * C-contiguous, seen as [outer, D, inner] with D the quantized axis (per
 * tensor: D = 1, inner = n).  Each range function works on elements
 * [start, stop), so that a caller splits a tensor among its threads.
 */
#ifndef EXTQL_KERNELS_H
#define EXTQL_KERNELS_H

#include <stdint.h>

#include "extql_types.h"

#ifdef __cplusplus
extern "C" {{
#endif

#ifndef EXTQL_API
#if defined(_WIN32) && defined(EXTQL_BUILDING)
#define EXTQL_API __declspec(dllexport)
#elif defined(_WIN32)
#define EXTQL_API __declspec(dllimport)
#elif defined(__GNUC__)
#define EXTQL_API __attribute__((visibility("default")))
#else
#define EXTQL_API
#endif
#endif

/* float32's and float64's codes (ONNX's TensorProto.FLOAT, DOUBLE). */
#define EXTQL_FLOAT32 1
#define EXTQL_FLOAT64 11

{flags}

/* The block formats' operations (ExtqlBlockParams.kind). */
{kinds}

{structs}

/* Outputs of at least this many bytes are streamed by extql's callers. */
#define EXTQL_STREAM_MIN_BYTES ({spec.STREAM_MIN_BYTES})
#define EXTQL_STREAM_FLAGS(out_bytes) ((out_bytes) >= EXTQL_STREAM_MIN_BYTES ? EXTQL_STREAM : 0)

{protos}

/* The instruction sets of the kernels. */
{isas}
#define EXTQL_ISA_COUNT {len(spec.ISAS)}

/* The instruction set the kernels run (an EXTQL_ISA_* code). */
EXTQL_API int extql_isa(void);
/* 1 when this build has the instruction set isa and the CPU runs it. */
EXTQL_API int extql_isa_supported(int isa);
/* Run the kernels on isa (a negative isa: choose by the CPU again, as at
 * start); 0, or -1 when the build or the CPU lacks it.  For tests and
 * benchmarks: not safe against kernels running at the time. */
EXTQL_API int extql_isa_force(int isa);
/* The name of isa ("baseline", "avx2", ...), or NULL for an unknown code. */
EXTQL_API const char *extql_isa_name(int isa);

/* How the AVX2 / AVX-512 kernels take the quantize's quotient x / s (the
 * 8/16-bit types, the 32-bit ones with the zero point 0): 1 by the division
 * instruction, 0 by the reciprocal and fused multiply-add corrections; both
 * give the division's bits.  Chosen once by the CPU (the division where it
 * is the faster: AMD family 19h and later), or EXTQL_QUOTIENT=division|fma. */
EXTQL_API int extql_quotient(void);
/* Take the quotient by the division (1) or the corrections (0); a negative
 * value: choose by the CPU again.  For tests and benchmarks: not safe
 * against kernels running at the time. */
EXTQL_API void extql_quotient_force(int division);

#ifdef __cplusplus
}}
#endif

#endif /* EXTQL_KERNELS_H */
"""


def unit_header(spec) -> str:
    """<gen>/extql_unit.h: included by every copy of the dispatch unit."""
    protos = "\n".join(f"{_proto(ret, f'EXTQL_ISA_FN(extql_{name})', params)};"
                       for name, _, ret, params, _ in spec.ENTRY_POINTS)
    return f"""/*
 * extql_unit.h - what each instruction set's copy of the kernels' dispatch
 * unit (extql/kernels/dispatch.pyx) is compiled against.  Generated from
 * extql/_entrypoints.py by tools/gen_kernels.py: do not edit.
 *
 * The build defines EXTQL_ISA as the instruction set's name; every entry
 * point of the copy is named EXTQL_ISA_FN(name), name_<isa>.  The unit's
 * module-level symbols (its never-imported Python module) are renamed the
 * same way, so that the copies link side by side.
 */
#ifndef EXTQL_UNIT_H
#define EXTQL_UNIT_H

#include <stdint.h>

#include "extql_kernels.h"

#ifndef EXTQL_ISA
#define EXTQL_ISA baseline
#endif
#define EXTQL_ISA_CAT2_(a, b) a##_##b
#define EXTQL_ISA_CAT_(a, b) EXTQL_ISA_CAT2_(a, b)
#define EXTQL_ISA_FN(name) EXTQL_ISA_CAT_(name, EXTQL_ISA)

#define PyInit_dispatch EXTQL_ISA_FN(PyInit_dispatch)
#define __pyx_module_is_main_dispatch EXTQL_ISA_FN(__pyx_module_is_main_dispatch)

{protos}

#endif /* EXTQL_UNIT_H */
"""


def dispatch_header(spec) -> str:
    """<gen>/extql_dispatch.h: the forwarding functions (extql_isa.c)."""
    parts = []
    for isa, _, features in spec.ISAS:
        guard = f"EXTQL_HAVE_ISA_{isa.upper()}"
        protos = "\n".join(_proto(ret, f"extql_{name}_{isa}", params) + ";"
                           for name, _, ret, params, _ in spec.ENTRY_POINTS)
        check = " && ".join(f'__builtin_cpu_supports("{f}")' for f in features) or "1"
        parts.append(f"#if defined({guard})\n{protos}\n#endif")
        parts.append(f"static int extql_cpu_has_{isa}(void) {{\n#if defined({guard})\n"
                     + ("  __builtin_cpu_init();\n" if features else "")
                     + f"  return {check};\n#else\n  return 0;\n#endif\n}}")
    names = ", ".join(f'"{isa}"' for isa, _, _ in spec.ISAS)
    checks = ", ".join(f"extql_cpu_has_{isa}" for isa, _, _ in spec.ISAS)
    forwards = []
    for name, per_isa, ret, params, _ in spec.ENTRY_POINTS:
        args = ", ".join(_param_names(params))
        cases = ""
        if per_isa:
            cases = "".join(
                f"#if defined(EXTQL_HAVE_ISA_{isa.upper()})\n"
                f"    case {i}: return extql_{name}_{isa}({args});\n#endif\n"
                for i, (isa, _, _) in enumerate(spec.ISAS) if i > 0)
        base = f"extql_{name}_{spec.ISAS[0][0]}({args})"
        body = (f"  switch (extql_isa()) {{\n{cases}    default: return {base};\n  }}"
                if per_isa else f"  return {base};")
        forwards.append(f"EXTQL_API {_proto(ret, 'extql_' + name, params)} {{\n{body}\n}}")
    return f"""/*
 * extql_dispatch.h - the instruction sets' CPU checks and the public entry
 * points, each forwarding to the copy of the kernels the CPU runs.
 * Generated from extql/_entrypoints.py by tools/gen_kernels.py: do not edit.
 * Included by extql/src/extql_isa.c only.  The build defines
 * EXTQL_HAVE_ISA_<NAME> for each instruction set it compiled.
 */
#ifndef EXTQL_DISPATCH_H
#define EXTQL_DISPATCH_H

#include "extql_kernels.h"

{chr(10).join(parts)}

static const char *const extql_isa_names[EXTQL_ISA_COUNT] = {{{names}}};
static int (*const extql_isa_checks[EXTQL_ISA_COUNT])(void) = {{{checks}}};

{chr(10).join(forwards)}

#endif /* EXTQL_DISPATCH_H */
"""


def api_pxi(spec) -> str:
    """<gen>/extql_api.pxi: the public header for Cython."""

    def cy(params: tuple[str, ...]) -> str:
        return ", ".join(params)

    decls = "\n".join(
        f"    {ret} extql_{name}({cy(params)}) noexcept nogil"
        for name, _, ret, params, _ in spec.ENTRY_POINTS)
    flags = "\n".join(f"        EXTQL_{name}" for name, _, _ in spec.FLAGS)
    kinds = "\n".join(f"        EXTQL_BLOCK_{name}" for name, _ in spec.BLOCK_KINDS)
    kinds += "".join(f"\n        EXTQL_LSTM_{name}" for name, _ in spec.LSTM_CODES)
    structs = "\n".join(
        f"    ctypedef struct {name}:\n"
        + "\n".join(f"        {m.split(':', 1)[0].strip()}" for m in members)
        for name, members, _ in spec.STRUCTS)
    return f"""# Generated from extql/_entrypoints.py by tools/gen_kernels.py: do not edit.
from libc.stdint cimport int64_t

cdef extern from "extql_kernels.h":
    enum:
        EXTQL_FLOAT32
        EXTQL_FLOAT64
{flags}
{kinds}
        EXTQL_ISA_COUNT
{structs}
    int64_t EXTQL_STREAM_MIN_BYTES
    int EXTQL_STREAM_FLAGS(int64_t out_bytes) noexcept nogil
{decls}
    int extql_isa() noexcept nogil
    int extql_isa_supported(int isa) noexcept nogil
    int extql_isa_force(int isa) noexcept nogil
    const char *extql_isa_name(int isa) noexcept nogil
    int extql_quotient() noexcept nogil
    void extql_quotient_force(int division) noexcept nogil
"""


def outputs(gen: Path) -> dict[Path, str]:
    """Every generated file and its text."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import tempita
    finally:
        sys.path.pop(0)
    spec = load(SPEC)
    types = load(TYPES)
    namespace = {name: getattr(types, name) for name in dir(types) if name.isupper()}
    out = {
        PUBLIC_HEADER: public_header(spec),
        gen / "extql_unit.h": unit_header(spec),
        gen / "extql_dispatch.h": dispatch_header(spec),
        gen / "extql_api.pxi": api_pxi(spec),
    }
    for template in sorted(TEMPLATES.glob("*.pxi.tp")) + sorted(C_TEMPLATES.glob("*.h.tp")):
        out[gen / template.name[:-3]] = tempita.expand(template, namespace)
    return out


def write(gen: Path) -> list[Path]:
    """Write the outputs that changed (so that unchanged ones keep their
    time stamps and nothing is rebuilt for them); returns those written."""
    gen.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in outputs(gen).items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    gen = Path(argv[0])
    if "--check" in argv[1:]:
        stale = [str(p) for p, t in outputs(gen).items()
                 if not p.exists() or p.read_text() != t]
        for p in stale:
            print(f"{p}: differs from what the tables and templates give", file=sys.stderr)
        return 1 if stale else 0
    for path in write(gen):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
