"""Write ``extql/src/extql_types.h``, the C view of the type table ``extql/rules/typetable.py``.

``setup.py`` runs this at build time, so the C sources always see the table
Python sees; the header is a build product (not kept in git).  By hand::

    python tools/gen_types_header.py           # (re)write the header
    python tools/gen_types_header.py --check   # exit 1 when it differs from the table
    python tools/gen_types_header.py --print   # print it

It reads the table by path, without importing ``extql`` (which needs the
compiled extension this header is part of).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "extql" / "rules" / "typetable.py"
HEADER = ROOT / "extql" / "src" / "extql_types.h"


def load_rows(table: Path = TABLE) -> tuple[tuple[str, int, int, float, float], ...]:
    """The rows of the type table file."""
    spec = importlib.util.spec_from_file_location("_extql_typetable", table)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{table}: cannot be read")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.QTYPE_ROWS)


def _table(table: Path):
    spec = importlib.util.spec_from_file_location("_extql_typetable", table)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{table}: cannot be read")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_subbyte_rows(table: Path = TABLE) -> tuple[tuple[str, int, int, int, int], ...]:
    """The sub-byte rows of the type table file (name, code, bits, lo, hi)."""
    return tuple(_table(table).SUBBYTE_ROWS)


def load_smallfloat_rows(table: Path = TABLE) -> tuple[tuple, ...]:
    """The small float rows of the type table file (float8, float4)."""
    return tuple(_table(table).SMALLFLOAT_ROWS)


#: The encodings of the small floats' special values, as C enumerators.
_KINDS = {"fn": "EXTQL_SF_FN", "fnuz": "EXTQL_SF_FNUZ", "ieee": "EXTQL_SF_IEEE",
          "none": "EXTQL_SF_NONE"}


def _smallfloat_text(rows: tuple[tuple, ...]) -> str:
    """The small float part of the header."""
    if not rows:
        return ""
    width = max(len(r[0]) for r in rows)
    enum = ",\n".join(f"  EXTQL_{r[0].upper():<{width}} = {r[1]}" for r in rows)
    cases = "\n".join(
        f"    case {r[1]}: f->bits = {r[3]}; f->ebits = {r[4]}; f->mbits = {r[5]}; "
        f"f->bias = {r[6]};\n"
        f"      f->maxv = {_c_double(r[7])}f; f->kind = {_KINDS[r[8]]}; return 1;"
        for r in rows
    )
    xrows = " \\\n".join(f"  X({r[0].upper()}, \"{r[0]}\", {r[1]}, {r[3]})" for r in rows)
    names = ", ".join(r[0] for r in rows)
    return f"""
/* The small float types (float8, float4): their codes, and how their
   special values are encoded: EXTQL_SF_FN no infinities, NaN with every
   exponent and mantissa bit set; EXTQL_SF_FNUZ no infinities and no
   negative zero, NaN 0x80; EXTQL_SF_IEEE infinities and NaNs as IEEE 754;
   EXTQL_SF_NONE neither (float4e2m1). */
enum {{
{enum}
}};
enum {{ EXTQL_SF_FN = 0, EXTQL_SF_FNUZ = 1, EXTQL_SF_IEEE = 2, EXTQL_SF_NONE = 3 }};

typedef struct {{
  int bits, ebits, mbits, bias, kind;
  float maxv; /* the largest finite value */
}} ExtqlSmallFloat;

/* 1 for a small float type code, with its facts in *f; else 0. */
static inline int extql_smallfloat(int code, ExtqlSmallFloat *f) {{
  switch (code) {{
{cases}
    default: return 0;
  }}
}}

#define EXTQL_N_SMALLFLOAT {len(rows)}
#define EXTQL_SMALLFLOAT_NAMES "{names}"

/* X(NAME, "name", onnx code, bits) for every small float type. */
#define EXTQL_FOR_EACH_SMALLFLOAT(X) \\
{xrows}
"""


def _c_double(value: float) -> str:
    """A C double literal that reads back as exactly ``value``."""
    text = repr(float(value))
    return text if ("e" in text or "." in text) else text + ".0"


def _subbyte_text(sub: tuple[tuple[str, int, int, int, int], ...]) -> str:
    """The sub-byte part of the header."""
    if not sub:
        return ""
    width = max(len(r[0]) for r in sub)
    enum = ",\n".join(f"  EXTQL_{r[0].upper():<{width}} = {r[1]}" for r in sub)
    cases = "\n".join(
        f"    case {r[1]}: *bits = {r[2]}; *lo = {r[3]}; *hi = {r[4]}; return 1;" for r in sub
    )
    xrows = " \\\n".join(
        f"  X({r[0].upper()}, \"{r[0]}\", {r[1]}, {r[2]}, {r[3]}, {r[4]})" for r in sub
    )
    names = ", ".join(r[0] for r in sub)
    return f"""
/* The packed sub-byte types: 8 / bits elements per byte, element k of a byte
   in its bits [k * bits, (k + 1) * bits) (ONNX's layout). */
enum {{
{enum}
}};

/* 1 for a sub-byte type code, with its bits and its range [lo, hi]; else 0. */
static inline int extql_subbyte(int code, int *bits, int *lo, int *hi) {{
  switch (code) {{
{cases}
    default: return 0;
  }}
}}

#define EXTQL_N_SUBBYTE {len(sub)}
#define EXTQL_SUBBYTE_NAMES "{names}"

/* X(NAME, "name", onnx code, bits, lo, hi) for every sub-byte type. */
#define EXTQL_FOR_EACH_SUBBYTE(X) \\
{xrows}
"""


def header_text(rows: tuple[tuple[str, int, int, float, float], ...],
                subbyte: tuple[tuple[str, int, int, int, int], ...] = (),
                smallfloat: tuple[tuple, ...] = ()) -> str:
    """The header for the table rows (and the sub-byte and small float rows)."""
    names = ", ".join(r[0] for r in rows)
    width = max(len(r[0]) for r in rows)
    enum = ",\n".join(f"  EXTQL_{r[0].upper():<{width}} = {r[1]}" for r in rows)
    facts = "\n".join(
        f"#define EXTQL_{r[0].upper()}_SIZE {r[2]}\n"
        f"#define EXTQL_{r[0].upper()}_LO ({_c_double(r[3])})\n"
        f"#define EXTQL_{r[0].upper()}_HI ({_c_double(r[4])})"
        for r in rows
    )
    cases = "\n".join(f"    case {r[1]}: return {r[2]};" for r in rows)
    xrows = " \\\n".join(
        f"  X({r[0].upper()}, \"{r[0]}\", {r[1]}, {r[2]}, {_c_double(r[3])}, {_c_double(r[4])})"
        for r in rows
    )
    return f"""\
/*
 * extql_types.h - the quantized element types, for C.
 *
 * GENERATED from extql/rules/typetable.py by tools/gen_types_header.py (setup.py
 * runs it at build time); edit the table, not this file.
 */
#ifndef EXTQL_TYPES_H
#define EXTQL_TYPES_H

/* Element type codes: ONNX's TensorProto.DataType. */
enum {{
{enum}
}};

#define EXTQL_N_QTYPES {len(rows)}

/* Per type: the element size in bytes and the saturation bounds lo / hi
   (the integer range, or the largest finite float16 / bfloat16 value), as
   doubles; cast them to float where float arithmetic is meant. */
{facts}

/* The element size of a type code, 0 for a code that is none of the types. */
static inline int extql_qtype_size(int code) {{
  switch (code) {{
{cases}
    default: return 0;
  }}
}}

/* The names, in the order users see them (messages). */
#define EXTQL_QTYPE_NAMES "{names}"

/* X(NAME, "name", onnx code, element bytes, lo, hi) for every type, in that
 * order; lo / hi are the saturation bounds (the integer range, or the largest
 * finite float16 / bfloat16 value), as doubles. */
#define EXTQL_FOR_EACH_QTYPE(X) \\
{xrows}
{_subbyte_text(subbyte)}{_smallfloat_text(smallfloat)}
#endif /* EXTQL_TYPES_H */
"""


def write_header(header: Path = HEADER, table: Path = TABLE) -> bool:
    """Write the header when its text differs; True when it was written.
    The operator rules' header is written next to it (tools/gen_rules_header.py)."""
    _load_tool("gen_rules_header").write_header(header.with_name("extql_rules.h"), table=table)
    text = header_text(load_rows(table), load_subbyte_rows(table), load_smallfloat_rows(table))
    if header.exists() and header.read_text() == text:
        return False
    header.write_text(text)
    return True


def _load_tool(name: str):
    """Another generator of tools/, by path (setup.py loads this one by path)."""
    spec = importlib.util.spec_from_file_location(f"_extql_{name}", Path(__file__).with_name(
        f"{name}.py"))
    if spec is None or spec.loader is None:
        raise SystemExit(f"tools/{name}.py: cannot be read")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        want = header_text(load_rows(), load_subbyte_rows(), load_smallfloat_rows())
        if not HEADER.exists() or HEADER.read_text() != want:
            print(f"{HEADER.relative_to(ROOT)} differs from {TABLE.relative_to(ROOT)}; "
                  "run python tools/gen_types_header.py", file=sys.stderr)
            return 1
        return 0
    if argv == ["--print"]:
        print(header_text(load_rows(), load_subbyte_rows(), load_smallfloat_rows()), end="")
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    write_header()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
