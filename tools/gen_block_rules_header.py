"""Write ``extql/src/extql_block_rules.h``, the C view of ``extql/rules/blocks.py``.

The onnxruntime library's BFPQuantizeDequantize / MXQuantizeDequantize
(``extql/src/ort_blocks.c``) read and check their attributes with the rules
the NumPy API and the tools read: the operator names, the types of x, every
attribute with its kind and default, the bfp_method values, the rounding
modes, the ranges of bit_width and sub_block_shift_bits, the MX element
types, and the words of every refusal (each template of
``block_rules.MESSAGES`` becomes a C function of its fields).  ``setup.py``
runs this at build time, so the C sources always see the rules Python sees;
the header is a build product (not kept in git).  By hand::

    python tools/gen_block_rules_header.py           # (re)write the header
    python tools/gen_block_rules_header.py --check   # exit 1 when it differs from the rules
    python tools/gen_block_rules_header.py --print   # print it

It reads the rules by path, without importing ``extql`` (which needs the
compiled extension this header is part of): ``rules/blocks.py`` and the
module it imports, ``_entrypoints.py``, are plain data.
"""

from __future__ import annotations

import importlib.util
import string
import sys
import types
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "extql" / "rules" / "blocks.py"
HEADER = ROOT / "extql" / "src" / "extql_block_rules.h"
#: The package name the rules are loaded under (their relative import of
#: ``.._entrypoints`` resolves in it), never ``extql`` itself.
_PACKAGE = "_extql_block_rules_pkg"


def load_rules(rules: Path = RULES) -> ModuleType:
    """The rules module of ``rules`` (extql/rules/blocks.py, whose package's
    parent holds _entrypoints.py), loaded without running either package."""
    package = types.ModuleType(_PACKAGE)
    package.__path__ = [str(rules.parent.parent)]
    subpackage = types.ModuleType(f"{_PACKAGE}.rules")
    subpackage.__path__ = [str(rules.parent)]
    saved = {k: sys.modules[k] for k in list(sys.modules)
             if k == _PACKAGE or k.startswith(_PACKAGE + ".")}
    for k in saved:
        del sys.modules[k]
    sys.modules[_PACKAGE] = package
    sys.modules[subpackage.__name__] = subpackage
    try:
        spec = importlib.util.spec_from_file_location(f"{_PACKAGE}.rules.blocks", rules)
        if spec is None or spec.loader is None:
            raise SystemExit(f"{rules}: cannot be read")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for k in [k for k in sys.modules if k == _PACKAGE or k.startswith(_PACKAGE + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (ASCII)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_float(value: float) -> str:
    """A C float literal that reads back as exactly ``value``."""
    text = repr(float(value))
    return (text if ("e" in text or "." in text) else text + ".0") + "f"


def _message_function(key: str, template: str, choices: dict[str, str]) -> str:
    """The C function that writes message ``key`` into a buffer: its
    parameters are the template's fields (but the constant CHOICES) in the
    order they first appear; a string field (``!r``) is passed already
    quoted as Python's repr writes it, a text (``!s``) as it is, any other
    field as an integer."""
    fmt, args, params = [], [], []
    seen: set[str] = set()
    for literal, field, spec, conversion in string.Formatter().parse(template):
        fmt.append(literal.replace("%", "%%"))
        if field is None:
            continue
        if spec:
            raise SystemExit(f"block_rules.MESSAGES[{key!r}]: a format spec is not supported")
        if field in choices:
            fmt.append(choices[field].replace("%", "%%"))
            continue
        if conversion in ("r", "s"):
            fmt.append("%s")
            name = f"quoted_{field}" if conversion == "r" else field
            if field not in seen:
                params.append(f"const char *{name}")
        else:
            fmt.append("%lld")
            name = field
            if field not in seen:
                params.append(f"long long {name}")
        seen.add(field)
        args.append(name)
    call = ", ".join([_c_string("".join(fmt)), *args])
    return (f"/* {template} */\n"
            f"static inline int extql_block_msg_{key}(char *buf, size_t size"
            f"{''.join(', ' + p for p in params)}) {{\n"
            f"  return snprintf(buf, size, {call});\n}}\n")


def _attribute_table(prefix: str, table: tuple[tuple[str, str, object], ...]) -> str:
    enum = ",\n".join(f"  EXTQL_{prefix}_ATTR_{name.upper()} = {i}"
                      for i, (name, _, _) in enumerate(table))
    rows = ",\n".join(
        f"    {{{_c_string(name)}, '{kind}', {0 if kind == 's' else int(default)}, "
        f"{_c_string(str(default)) if kind == 's' else 'NULL'}}}"
        for name, kind, default in table)
    return f"""enum {{
{enum},
  EXTQL_{prefix}_N_ATTRS = {len(table)}
}};
static const ExtqlBlockAttr EXTQL_{prefix}_ATTRIBUTES[EXTQL_{prefix}_N_ATTRS] = {{
{rows}}};
"""


def header_text(rules: ModuleType) -> str:
    """The header for a rules module."""
    kinds = {code: f"EXTQL_BLOCK_{name}" for name, code in rules.BLOCK_KINDS}
    x_codes = ", ".join(f"{code} /* {name} */" for name, code in rules.X_TYPES)
    x_cases = "\n".join(f"    case {code}: /* {name} */" for name, code in rules.X_TYPES)
    methods = ",\n".join(f"    {{{_c_string(name)}, {kinds[kind]}}}"
                         for name, kind in rules.BFP_METHODS)
    modes = " || ".join(f"mode == {m}" for m, _ in rules.ROUNDING_MODES)
    ranges = "\n".join(
        f"    case {kinds[kind]}: *lo = {lo}; *hi = {hi}; return 1;"
        for kind, (lo, hi) in rules.BIT_WIDTH_RANGE.items())
    slo, shi = rules.SUB_BLOCK_SHIFT_BITS_RANGE
    elements = ",\n".join(
        f"    {{{_c_string(el.name)}, {el.ebits}, {el.mbits}, {el.emax}, {_c_float(el.largest)}}}"
        for el in rules.MX_ELEMENTS.values())
    messages = "\n".join(_message_function(key, template, rules.CHOICES)
                         for key, template in rules.MESSAGES.items())
    return f"""\
/*
 * extql_block_rules.h - the rules of BFPQuantizeDequantize and
 * MXQuantizeDequantize, for C.
 *
 * GENERATED from extql/rules/blocks.py by tools/gen_block_rules_header.py
 * (setup.py runs it at build time); edit the rules, not this file.  Type
 * codes are ONNX's TensorProto.DataType; the operations (EXTQL_BLOCK_*) are
 * extql_kernels.h's.
 */
#ifndef EXTQL_BLOCK_RULES_H
#define EXTQL_BLOCK_RULES_H

#include <stdint.h>
#include <stdio.h>

#include "extql_kernels.h"

/* The operators (com.amd.quark) and their legacy names (com.vai.quantize). */
#define EXTQL_BFP_OP {_c_string(rules.BFP_OP)}
#define EXTQL_MX_OP {_c_string(rules.MX_OP)}
#define EXTQL_BFP_LEGACY_OP {_c_string(rules.BFP_LEGACY_OP)}
#define EXTQL_MX_LEGACY_OP {_c_string(rules.MX_LEGACY_OP)}

/* The types of x (and y). */
#define EXTQL_BLOCK_N_X_TYPES {len(rules.X_TYPES)}
static const int EXTQL_BLOCK_X_TYPES[EXTQL_BLOCK_N_X_TYPES] = {{{x_codes}}};
static inline int extql_block_x_type_ok(int code) {{
  switch (code) {{
{x_cases}
      return 1;
    default:
      return 0;
  }}
}}

/* An attribute: its name, kind ('s' a string, 'i' an integer) and value
   when absent (int_default for an integer, string_default for a string). */
typedef struct {{
  const char *name;
  char kind;
  int64_t int_default;
  const char *string_default;
}} ExtqlBlockAttr;

/* BFPQuantizeDequantize's attributes, in Quark's order. */
{_attribute_table("BFP", rules.BFP_ATTRIBUTES)}
/* MXQuantizeDequantize's attributes. */
{_attribute_table("MX", rules.MX_ATTRIBUTES)}
/* A BFP element's bits besides its mantissa (m = bit_width - this). */
#define EXTQL_BFP_SIGN_AND_EXPONENT_BITS {rules.SIGN_AND_EXPONENT_BITS}

/* bfp_method values and the operation each one means. */
typedef struct {{
  const char *name;
  int kind;
}} ExtqlBfpMethod;
#define EXTQL_BFP_N_METHODS {len(rules.BFP_METHODS)}
static const ExtqlBfpMethod EXTQL_BFP_METHODS[EXTQL_BFP_N_METHODS] = {{
{methods}}};

/* rounding_mode values. */
static inline int extql_block_rounding_ok(int64_t mode) {{ return {modes}; }}

/* bit_width's range [lo, hi] for an operation; 0 for another. */
static inline int extql_bfp_bit_width_range(int kind, int64_t *lo, int64_t *hi) {{
  switch (kind) {{
{ranges}
    default: return 0;
  }}
}}

/* sub_block_shift_bits' range (to_bfp_prime). */
#define EXTQL_BFP_SHIFT_BITS_LO {slo}
#define EXTQL_BFP_SHIFT_BITS_HI {shi}

/* MX element types: name, exponent bits (0: int8), mantissa bits, emax,
   largest magnitude. */
typedef struct {{
  const char *name;
  int ebits, mbits, emax;
  float largest;
}} ExtqlMxElement;
#define EXTQL_MX_N_ELEMENTS {len(rules.MX_ELEMENTS)}
static const ExtqlMxElement EXTQL_MX_ELEMENTS[EXTQL_MX_N_ELEMENTS] = {{
{elements}}};

/* The words of each refusal (after "<operator> (node '<name>'): "): each
   writes its message into buf as snprintf does. */
{messages}
#endif /* EXTQL_BLOCK_RULES_H */
"""


def text_of(rules: Path = RULES) -> str:
    """The header of the rules file."""
    return header_text(load_rules(rules))


def write_header(header: Path = HEADER, rules: Path = RULES) -> bool:
    """Write the header when its text differs; True when it was written."""
    text = text_of(rules)
    if header.exists() and header.read_text() == text:
        return False
    header.write_text(text)
    return True


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if not HEADER.exists() or HEADER.read_text() != text_of():
            print(f"{HEADER.relative_to(ROOT)} differs from {RULES.relative_to(ROOT)}; "
                  "run python tools/gen_block_rules_header.py", file=sys.stderr)
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
