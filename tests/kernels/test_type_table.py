"""The one type table (extql/rules/typetable.py) and what is generated from it: the
C header extql/src/extql_types.h the shim compiles with, and extql.rules.types.

Each value is compared with an independent source: ONNX's TensorProto codes,
NumPy's / ml_dtypes' sizes and limits."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from ortutil import node_model, session

import extql
from extql.rules.types import (
    MS_DEQUANTIZE_NAMES,
    MS_DEQUANTIZE_TYPES,
    MS_EXACT_TYPES,
    MS_QUANTIZE_NAMES,
    MS_QUANTIZE_TYPES,
    QTYPES,
    QUANTIZED,
    SUBBYTE,
)
from extql.rules.typetable import QTYPE_ROWS, SMALLFLOAT_ROWS, SUBBYTE_ROWS

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

ROOT = Path(__file__).resolve().parents[2]
#: The header the library was built with, as installed with the package.
HEADER = Path(extql.__file__).parent / "src" / "extql_types.h"


def _generator():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_types_header
    finally:
        sys.path.pop(0)
    return gen_types_header
NAMES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16"]


def _dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _limits(name: str) -> tuple[float, float]:
    info = ml_dtypes.finfo(_dtype(name)) if name.endswith("float16") else np.iinfo(name)
    return float(info.min), float(info.max)


def _header_rows(subbyte: bool = False) -> dict[str, tuple[int, int, float, float]]:
    """The X(...) rows of the header: the eight (element size in bytes), or
    the sub-byte ones (bits)."""
    text = HEADER.read_text()
    start = text.index("EXTQL_FOR_EACH_SUBBYTE")
    end = text.index("EXTQL_FOR_EACH_SMALLFLOAT")
    part = text[start:end] if subbyte else text[:start]
    rows = re.findall(r'X\((\w+), "(\w+)", (\d+), (\d+), (\S+), (\S+)\)', part)
    enum = dict(re.findall(r"EXTQL_(\w+)\s*= (\d+)", text))
    out = {}
    for upper, name, code, size, lo, hi in rows:
        assert upper == name.upper() and int(enum[upper]) == int(code)
        out[name] = (int(code), int(size), float(lo), float(hi))
    return out


def test_the_built_header_is_generated_from_the_table():
    assert HEADER.read_text() == _generator().header_text(QTYPE_ROWS, SUBBYTE_ROWS, SMALLFLOAT_ROWS)


def test_the_generator_rewrites_a_stale_header(tmp_path):
    """A header that is not the table's is rewritten; a current one is left alone."""
    gen = _generator()
    header = tmp_path / "extql_types.h"
    want = gen.header_text(QTYPE_ROWS, SUBBYTE_ROWS, SMALLFLOAT_ROWS)
    header.write_text(want.replace("= 3,", "= 4,"))
    assert gen.write_header(header) is True
    assert header.read_text() == want
    assert gen.write_header(header) is False  # already current: left alone


def test_the_header_holds_the_sub_byte_types():
    """The sub-byte rows: ONNX's codes, bits and ml_dtypes' ranges."""
    rows = _header_rows(subbyte=True)
    assert list(rows) == ["int4", "uint4", "int2", "uint2"]
    for name, (code, bits, lo, hi) in rows.items():
        info = ml_dtypes.iinfo(getattr(ml_dtypes, name))
        assert (lo, hi) == (info.min, info.max) and bits == info.bits, name
        if hasattr(TensorProto, name.upper()):  # int2 / uint2 from onnx 1.20
            assert code == getattr(TensorProto, name.upper()), name
    text = HEADER.read_text()
    assert f"#define EXTQL_N_SUBBYTE {len(rows)}" in text
    assert '#define EXTQL_SUBBYTE_NAMES "int4, uint4, int2, uint2"' in text


def test_the_header_holds_the_small_float_types():
    """The small float rows: ONNX's codes, and ml_dtypes' facts of each
    (bits, exponent / mantissa bits, bias, largest finite value, and how
    infinities and NaN are encoded)."""
    text = HEADER.read_text()
    cases = re.findall(r"case (\d+): f->bits = (\d+); f->ebits = (\d+); f->mbits = (\d+); "
                       r"f->bias = (\d+);\s+f->maxv = (\S+)f; f->kind = EXTQL_SF_(\w+);", text)
    assert len(cases) == 5
    for row, (code, bits, ebits, mbits, bias, maxv, kind) in zip(SMALLFLOAT_ROWS, cases,
                                                                  strict=True):
        name, onnx_code, ml_name = row[:3]
        assert int(code) == onnx_code == getattr(TensorProto, name.upper()), name
        info = ml_dtypes.finfo(getattr(ml_dtypes, ml_name))
        assert int(bits) == info.bits and int(mbits) == info.nmant, name
        assert int(ebits) == info.bits - 1 - info.nmant, name
        assert float(maxv) == float(info.max), name
        assert int(bias) == 1 - info.minexp, name
        dt = np.dtype(getattr(ml_dtypes, ml_name))
        inf = np.array([np.inf], np.float32).astype(dt).astype(np.float32)[0]
        negzero = np.array([-0.0], np.float32).astype(dt).view(np.uint8)[0]
        nan = np.isnan(np.array([np.nan], np.float32).astype(dt).astype(np.float32)[0])
        want = ("IEEE" if np.isinf(inf) else "FNUZ" if negzero == 0 and nan else
                "FN" if nan else "NONE")
        assert kind == want, name


def test_the_header_holds_every_type_with_its_facts():
    rows = _header_rows()
    assert list(rows) == NAMES
    for name, (code, size, lo, hi) in rows.items():
        assert code == getattr(TensorProto, name.upper()), name
        assert size == _dtype(name).itemsize, name
        assert (lo, hi) == _limits(name), name
    text = HEADER.read_text()
    assert f"#define EXTQL_N_QTYPES {len(NAMES)}" in text
    assert f'#define EXTQL_QTYPE_NAMES "{", ".join(NAMES)}"' in text


def test_python_types_come_from_the_same_table():
    assert [r[0] for r in QTYPE_ROWS] == list(QTYPES) == NAMES
    for name, qt in QTYPES.items():
        assert qt.dtype == _dtype(name)
        assert qt.onnx == getattr(TensorProto, name.upper())
        assert (float(qt.lo), float(qt.hi)) == _limits(name)
        assert qt.is_float == name.endswith("float16")


def test_a_changed_table_changes_the_header(tmp_path):
    """The generator writes what the table says (not a fixed text)."""
    gen = _generator()
    rows = list(gen.load_rows())
    rows.append(("int4", 22, 1, -8, 7))
    text = gen.header_text(tuple(rows))
    assert "EXTQL_INT4" in text and 'X(INT4, "int4", 22, 1, -8.0, 7.0)' in text
    assert "#define EXTQL_N_QTYPES 9" in text


def test_the_shim_names_the_types_of_the_table():
    """The native op's message lists every quantized type in the table's
    order, in the NumPy API's words."""
    model, _, _ = node_model("ExtendedDequantizeLinear", np.zeros(4, np.float64),
                             np.float32(1), None, zp_form="absent")
    words = "x must be one of " + ", ".join(QUANTIZED) + ", got float64"
    with pytest.raises(Exception, match=re.escape(words)):
        session(model, threads=1)
    with pytest.raises(TypeError, match=re.escape(words)):
        extql.dequantize_linear(np.zeros(4, np.float64), np.float32(1))


def test_the_sub_byte_types_of_the_table():
    """int4 / uint4 / int2 / uint2: ONNX codes and ml_dtypes' ranges; the
    8-bit carrier the kernels compute them in holds every value."""
    assert list(SUBBYTE) == ["int4", "uint4", "int2", "uint2"]
    for name, sub in SUBBYTE.items():
        # (onnx has int2 / uint2 from 1.20; the codes are ONNX's either way.)
        assert sub.onnx == getattr(TensorProto, name.upper(), {"int2": 26, "uint2": 25}.get(name))
        dtype = getattr(ml_dtypes, name)
        held = [v for v in range(-20, 21) if int(np.array(v).astype(dtype).astype(int)) == v]
        assert (sub.lo, sub.hi) == (min(held), max(held)) and len(held) == 2**sub.bits
        assert sub.dtype == np.dtype(dtype)
        carrier = np.iinfo(sub.carrier.dtype)
        assert carrier.min <= sub.lo and sub.hi <= carrier.max and sub.carrier.dtype.itemsize == 1


def _onnxruntime_microsoft_types(op_name: str, param: str) -> set[str]:
    from onnxruntime.capi import _pybind_state as state

    return {
        t[len("tensor("):-1]
        for d in state.get_all_opkernel_def()
        if d.domain == "com.microsoft" and d.op_name == op_name
        and d.provider == "CPUExecutionProvider"
        for t in d.type_constraints.get(param, [])
    }


@pytest.mark.parametrize(("op_name", "param", "names"), [
    ("QuantizeLinear", "T2", MS_QUANTIZE_NAMES),
    ("DequantizeLinear", "T1", MS_DEQUANTIZE_NAMES),
])
def test_the_microsoft_type_sets_are_onnxruntimes(op_name, param, names):
    """The quantized types of com.microsoft Q/DQ derived from the table are the
    ones onnxruntime's CPU kernels register (int4 / uint4 where this
    onnxruntime has them); their codes are the names' ONNX codes."""
    registered = _onnxruntime_microsoft_types(op_name, param)
    assert registered <= set(names)
    assert set(names) - registered <= set(SUBBYTE)
    codes = MS_QUANTIZE_TYPES if op_name == "QuantizeLinear" else MS_DEQUANTIZE_TYPES
    assert codes == {getattr(TensorProto, n.upper()) for n in names}
    assert MS_EXACT_TYPES <= codes and not {q.onnx for q in QTYPES.values() if q.is_float} & codes


def test_type_names_do_not_depend_on_the_onnx_version():
    """extql names its own types itself (onnx before 1.20 has no int2 /
    uint2) and any other code without failing."""
    from extql.onnx.graph import type_name

    assert [type_name(t.onnx) for t in QUANTIZED.values()] == list(QUANTIZED)
    assert type_name(TensorProto.FLOAT) == "float"
    assert type_name(999) == "ONNX type 999"
