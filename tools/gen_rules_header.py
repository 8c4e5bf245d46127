"""Write ``extql/src/extql_rules.h``, the C view of the operator rules ``extql/rules/linear.py``.

The onnxruntime shim (``extql/src/ort_*.c``) checks a node's inputs and
attributes with the rules every Python layer reads: the inputs' names, the
attributes' defaults, the types of the float side and the precision of the
division.  ``tools/gen_types_header.py`` calls :func:`write_header` when
``setup.py`` generates the type header at build time, so the C sources always
see the rules Python sees; the header is a build product (not kept in git).
By hand::

    python tools/gen_rules_header.py           # (re)write the header
    python tools/gen_rules_header.py --check   # exit 1 when it differs from the rules
    python tools/gen_rules_header.py --print   # print it

It reads the rules and the type table by path, without importing ``extql``
(which needs the compiled extension this header is part of).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "extql" / "rules" / "linear.py"
TABLE = ROOT / "extql" / "rules" / "typetable.py"
HEADER = ROOT / "extql" / "src" / "extql_rules.h"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be read")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def type_codes(rules: ModuleType, table: ModuleType) -> dict[str, int]:
    """Type name -> ONNX code, for every type the rules can name."""
    codes = {row[0]: row[1] for row in (*table.QTYPE_ROWS, *table.SUBBYTE_ROWS,
                                        *table.SMALLFLOAT_ROWS)}
    codes[table.E8M0_SCALE[0]] = table.E8M0_SCALE[1]
    codes.update(rules.OTHER_CODES)
    return codes


def _type_set(function: str, macro: str, names: tuple[str, ...], codes: dict[str, int],
              what: str) -> str:
    cases = "\n".join(f"    case {codes[n]}: /* {n} */" for n in names)
    return f"""
/* {what} */
static inline int {function}(int code) {{
  switch (code) {{
{cases}
      return 1;
    default:
      return 0;
  }}
}}
#define {macro} "{', '.join(names)}"
"""


def header_text(rules: ModuleType, table: ModuleType) -> str:
    """The header for the rules (and the type table's codes)."""
    codes = type_codes(rules, table)
    inputs = "\n".join(
        f"#define EXTQL_{direction.upper()}_INPUT_NAMES "
        f"{{{', '.join(f'{chr(34)}{n}{chr(34)}' for n in names)}}}"
        for direction, names in rules.INPUTS.items()
    )
    defaults = "\n".join(f"#define EXTQL_DEFAULT_{name.upper()} {default}"
                         for name, default, _, _ in rules.ATTRIBUTES)
    sets = "".join([
        _type_set("extql_is_real_type", "EXTQL_REAL_NAMES", rules.REAL_TYPES, codes,
                  "The float side: quantize's x and scale, dequantize's scale and output."),
        _type_set("extql_is_quantize_x_type", "EXTQL_QUANTIZE_X_NAMES", rules.QUANTIZE_X_TYPES,
                  codes, "Quantize's x."),
        _type_set("extql_is_output_type", "EXTQL_OUTPUT_NAMES", rules.OUTPUT_TYPES, codes,
                  "Dequantize's output_dtype."),
        _type_set("extql_is_precision_type", "EXTQL_PRECISION_NAMES", rules.PRECISION_TYPES,
                  codes, "Quantize's precision."),
    ])
    by_scale = "\n".join(
        f"    case {codes[scale]}: /* {scale} */\n"
        f"      return {codes[precision]}; /* {precision} */"
        for scale, precision in rules.PRECISION_BY_SCALE.items()
    )
    return f"""\
/*
 * extql_rules.h - the operator rules, for C.
 *
 * GENERATED from extql/rules/linear.py by tools/gen_rules_header.py (setup.py runs
 * it at build time); edit the rules, not this file.  Type codes are ONNX's
 * TensorProto.DataType.
 */
#ifndef EXTQL_RULES_H
#define EXTQL_RULES_H

/* The inputs of each operator, as the operator documents name them. */
{inputs}

/* The attributes' defaults (output_dtype and precision 0: not given). */
{defaults}
{sets}
/* The precision of the division of a quantize without the attribute
   precision, by its scale's type: the scale's type but for these. */
static inline int extql_default_precision(int scale_type) {{
  switch (scale_type) {{
{by_scale}
    default:
      return scale_type;
  }}
}}

#endif /* EXTQL_RULES_H */
"""


def text_of(rules: Path = RULES, table: Path = TABLE) -> str:
    """The header of the rules and table files."""
    return header_text(_load(rules, "_extql_rules"), _load(table, "_extql_typetable"))


def write_header(header: Path = HEADER, rules: Path = RULES, table: Path = TABLE) -> bool:
    """Write the header when its text differs; True when it was written."""
    text = text_of(rules, table)
    if header.exists() and header.read_text() == text:
        return False
    header.write_text(text)
    return True


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if not HEADER.exists() or HEADER.read_text() != text_of():
            print(f"{HEADER.relative_to(ROOT)} differs from {RULES.relative_to(ROOT)}; "
                  "run python tools/gen_rules_header.py", file=sys.stderr)
            return 1
        return 0
    if argv == ["--print"]:
        print(text_of(), end="")
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    write_header()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
