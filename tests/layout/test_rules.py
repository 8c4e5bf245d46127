"""The operator rules, written once (extql/rules/linear.py), and what is generated
from them or reads them: the C header extql/src/extql_rules.h the shim
compiles with, the ONNX schemas, the NumPy API, the reference ops, the eager
ops and the fallbacks.

The rules themselves are compared with an independent source where there is
one: the official QuantizeLinear / DequantizeLinear schemas of the installed
onnx (the Extended operators keep their attributes and defaults).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto

import extql
from extql import rules
from extql.rules.types import PRECISION_CODES, QUANTIZE_SCALE_CODES, default_precision

ROOT = Path(__file__).resolve().parents[2]
#: The header the library was built with, as installed with the package.
HEADER = Path(extql.__file__).parent / "src" / "extql_rules.h"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_rules_header",
                                                  ROOT / "tools" / "gen_rules_header.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_built_header_is_generated_from_the_rules():
    assert HEADER.read_text() == _generator().text_of()


def test_the_generator_rewrites_a_stale_header(tmp_path):
    gen = _generator()
    header = tmp_path / "extql_rules.h"
    header.write_text("/* stale */\n")
    assert gen.write_header(header) is True
    assert header.read_text() == gen.text_of()
    assert gen.write_header(header) is False  # already current: left alone


def test_the_header_says_what_the_rules_say():
    """The generated C, read back: defaults, input names, the type sets and
    the default precision, by ONNX code (TensorProto's, independently)."""
    text = HEADER.read_text()
    defaults = dict(re.findall(r"#define EXTQL_DEFAULT_(\w+) (-?\d+)", text))
    assert {k.lower(): int(v) for k, v in defaults.items()} == rules.DEFAULTS
    for direction, names in rules.INPUTS.items():
        quoted = ", ".join(f'"{n}"' for n in names)
        assert f"#define EXTQL_{direction.upper()}_INPUT_NAMES {{{quoted}}}" in text
    code = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
            "bfloat16": TensorProto.BFLOAT16, "int32": TensorProto.INT32,
            "float64": TensorProto.DOUBLE, "float8e8m0": 24}
    for function, names in [("extql_is_real_type", rules.REAL_TYPES),
                            ("extql_is_quantize_x_type", rules.QUANTIZE_X_TYPES),
                            ("extql_is_output_type", rules.OUTPUT_TYPES),
                            ("extql_is_precision_type", rules.PRECISION_TYPES)]:
        body = text[text.index(f"{function}(int code)"):]
        body = body[:body.index("}\n#define")]
        assert sorted(int(c) for c in re.findall(r"case (\d+):", body)) == sorted(
            code[n] for n in names), function
    body = text[text.index("extql_default_precision(int scale_type)"):]
    pairs = re.findall(r"case (\d+): /\* \w+ \*/\n\s+return (\d+);", body)
    assert {int(s): int(p) for s, p in pairs} == {
        code[s]: code[p] for s, p in rules.PRECISION_BY_SCALE.items()}


def _official(name: str) -> onnx.defs.OpSchema:
    return onnx.defs.get_schema(name, onnx.defs.onnx_opset_version(), "")


@pytest.mark.parametrize("direction", [rules.QUANTIZE, rules.DEQUANTIZE])
def test_the_rules_keep_the_official_attributes(direction):
    """Each attribute the official operator of the installed onnx has, with
    its default; the Extended operators add none (block_size, output_dtype,
    precision are the official ones of later opsets)."""
    official = _official("QuantizeLinear" if direction == rules.QUANTIZE else "DequantizeLinear")
    for name in rules.attribute_names(direction):
        attr = official.attributes.get(name)
        if attr is None:
            continue  # an older onnx: the attribute comes with a later opset
        default = onnx.helper.get_attribute_value(attr.default_value)
        assert default == rules.DEFAULTS[name], name
    assert set(official.attributes) <= set(rules.attribute_names(direction))
    assert [i.name for i in official.inputs] == list(rules.INPUTS[direction])


@pytest.mark.parametrize("domain", [extql.DOMAIN, extql.LEGACY_DOMAIN])
@pytest.mark.parametrize("direction", [rules.QUANTIZE, rules.DEQUANTIZE])
def test_the_schemas_are_the_rules(domain, direction):
    import extql.opset  # noqa: F401  (registers the schemas)
    from extql.rules.types import OP_NAMES

    name = OP_NAMES[domain][0 if direction == rules.QUANTIZE else 1]
    schema = onnx.defs.get_schema(name, 1, domain)
    attrs = {n: onnx.helper.get_attribute_value(a.default_value)
             for n, a in schema.attributes.items()}
    assert attrs == {n: rules.DEFAULTS[n] for n in rules.attribute_names(direction)}
    assert [i.name for i in schema.inputs] == list(rules.INPUTS[direction])


def _defaults(function) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(function).parameters.items()
            if n in rules.DEFAULTS}


def test_the_python_entry_points_take_the_rules_defaults():
    """The NumPy API, the reference ops and the fallbacks' eager signatures."""
    import extql.fallbacks
    import extql.reference

    want = rules.DEFAULTS
    # (The NumPy API's output_dtype / precision: None, not given, where the
    # node's attribute says 0; saturate a bool.)
    assert _defaults(extql.quantize_linear) == {"axis": want["axis"],
                                                "block_size": want["block_size"],
                                                "output_dtype": None, "precision": None,
                                                "saturate": bool(want["saturate"])}
    assert _defaults(extql.dequantize_linear) == {"axis": want["axis"],
                                                  "block_size": want["block_size"],
                                                  "output_dtype": None}
    for op, direction in [(extql.reference.ExtendedQuantizeLinear, rules.QUANTIZE),
                          (extql.reference.ExtendedDequantizeLinear, rules.DEQUANTIZE)]:
        assert _defaults(op._run) == {n: want[n] for n in rules.attribute_names(direction)}
    for table, direction in [(extql.fallbacks.QUANTIZE, rules.QUANTIZE),
                             (extql.fallbacks.DEQUANTIZE, rules.DEQUANTIZE)]:
        got = _defaults(table["int8"].function)
        assert got == {n: want[n] for n in rules.attribute_names(direction)}


def test_the_eager_ops_take_the_rules_attributes():
    from extql import quark

    x = np.zeros(3, np.float32)
    with pytest.raises(TypeError, match="unknown attribute 'bogus' \\(the operator has "
                       + ", ".join(sorted(rules.attribute_names(rules.QUANTIZE)))):
        quark.ExtendedQuantizeLinear(x, np.float32(1), bogus=1)


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("scale", [np.float32, np.float16, "bfloat16", np.int32,
                                   "float8e8m0"])
def test_the_default_precision_everywhere(scale):
    """Without ``precision`` a quantize divides in the rule's precision: the
    NumPy API gives the bits of an explicit precision of that type."""
    import ml_dtypes

    dtype = {"bfloat16": ml_dtypes.bfloat16, "float8e8m0": ml_dtypes.float8_e8m0fnu}.get(
        scale, scale)
    code = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
            "bfloat16": TensorProto.BFLOAT16, np.int32: TensorProto.INT32,
            "float8e8m0": 24}[scale]
    precision = default_precision(code)
    assert PRECISION_CODES[precision] == rules.default_precision(QUANTIZE_SCALE_CODES[code])
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4096) * 1e4).astype(np.float32)
    s = np.asarray(3 if scale is np.int32 else 0.375, dtype)
    z = np.int16(0)
    implicit = extql.quantize_linear(x, s, z)
    explicit = extql.quantize_linear(x, s, z, precision=precision)
    np.testing.assert_array_equal(implicit, explicit)
