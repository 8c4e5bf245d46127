"""The kernels' C entry points (src/extql_kernels.h), called as a C caller
would: through ctypes (capi.py, declared from extql/_entrypoints.py), which
releases the GIL for the call; and the library's exports and header, checked
against that one list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import capi
import numpy as np
import pytest
from contract import TYPES, assert_same_bits, dequantize, quantize

import extql
from extql import _kernels
from extql._entrypoints import ENTRY_POINTS, ISAS
from extql.rules.types import QTYPES

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

LIB = capi.LIB
ptr = capi.ptr
F32 = 1
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(TYPES))
def test_ranges_compose_to_the_whole_tensor(name):
    """Any split of [0, n) into ranges gives the contract's result."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((5, 6, 7)) * 300).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    s = (rng.random(6) + 0.1).astype(np.float32)
    dt = TYPES[name][0]
    zp = np.zeros(6, dt) if name not in ("int8", "int16", "int32") else np.arange(6).astype(dt)
    code = QTYPES[name].onnx
    y = np.empty(x.shape, dt)
    cuts = [0, 1, 7, 8, 41, 42, 43, 100, 209, 210]
    for a, b in zip(cuts, cuts[1:] + [x.size], strict=True):
        rc = LIB.extql_quantize_range(code, F32, F32, ptr(x), ptr(s), ptr(zp), ptr(y), 6, 7, 0,
                                      a, b, 0)
        assert rc == 0
    expected = quantize(x, s, zp, 1)
    assert_same_bits(y, expected, name)
    back = np.empty(x.shape, np.float32)
    for a, b in zip(cuts, cuts[1:] + [x.size], strict=True):
        rc = LIB.extql_dequantize_range(code, F32, ptr(expected), ptr(s), ptr(zp), ptr(back),
                                        6, 7, 0, a, b, 0)
        assert rc == 0
    assert_same_bits(back, dequantize(expected, s, zp, 1), name)


@pytest.mark.parametrize("name", ["uint8", "int32", "bfloat16"])
@pytest.mark.parametrize("nthreads", [0, 1, 2, 4])
def test_whole_tensor_threads_and_null_zero_point(name, nthreads):
    """The Python extension's loops over whole tensors (OpenMP) cut the
    tensor into ranges of the library's entry points."""
    n = 300_001
    x = (np.random.default_rng(10).standard_normal(n) * 1000).astype(np.float32)
    s = np.array([0.75], np.float32)
    dt = TYPES[name][0]
    code = QTYPES[name].onnx
    y = np.empty(n, dt)
    _kernels.quantize(code, F32, F32, x.view(np.uint8), s, None, y.view(np.uint8), n, 1, n,
                      nthreads)
    assert_same_bits(y, quantize(x, s, np.zeros(1, dt)), name)
    back = np.empty(n, np.float32)
    _kernels.dequantize(code, F32, y.view(np.uint8), s, None, back.view(np.uint8), n, 1, n,
                        nthreads)
    assert_same_bits(back, dequantize(y, s), name)


def test_unknown_type_is_an_error_code():
    x = np.zeros(8, np.float32)
    y = np.zeros(8, np.float32)
    s = np.ones(1, np.float32)
    for code in (0, 1, 7, 11, 13, 99, -3):
        assert LIB.extql_quantize_range(code, F32, F32, ptr(x), ptr(s), None, ptr(y), 1, 8, 0,
                                        0, 8, 0) == -1
        assert LIB.extql_dequantize_range(code, F32, ptr(x), ptr(s), None, ptr(y), 8, 1, 0, 0,
                                          8, 0) == -1
    for xtype, prec in ((7, F32), (F32, 7), (F32, 11)):
        assert LIB.extql_quantize_range(3, xtype, prec, ptr(x), ptr(s), None, ptr(y), 1, 8, 0,
                                        0, 8, 0) == -1
    assert LIB.extql_dequantize_range(3, 6, ptr(x), ptr(s), None, ptr(y), 1, 8, 0, 0, 8,
                                      0) == -1
    assert np.all(y == 0), "nothing may be written on error"


def _exported(path: str) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()}


@pytest.mark.skipif(sys.platform != "linux", reason="reads the ELF export table with nm")
def test_library_exports_exactly_the_list():
    """The library exports RegisterCustomOps, the ISA functions and every
    entry point of extql/_entrypoints.py, and nothing else (no copy of the
    kernels, no Python module part)."""
    names = {f"extql_{name}" for name, *_ in ENTRY_POINTS}
    names |= {"RegisterCustomOps", "extql_isa", "extql_isa_supported", "extql_isa_force",
              "extql_isa_name", "extql_quotient", "extql_quotient_force"}
    assert _exported(extql.get_library_path()) == names


def test_public_header_is_the_list():
    """The header shipped with the package is what the list gives."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_kernels
    finally:
        sys.path.pop(0)
    header = Path(extql.__file__).parent / "src" / "extql_kernels.h"
    spec = gen_kernels.load(ROOT / "extql" / "_entrypoints.py")
    assert header.read_text() == gen_kernels.public_header(spec)
    for name, *_ in ENTRY_POINTS:
        assert f" extql_{name}(" in header.read_text()


def test_isa_selection(kernel_isa):
    """The C functions and the Python ones agree on the variant; every name
    of the list is one the library knows."""
    assert _kernels.isa() == kernel_isa
    assert LIB.extql_isa_name(LIB.extql_isa()) is not None
    assert [name for name, _, _ in ISAS][0] == "baseline"
    assert "baseline" in _kernels.available_isas()
    assert set(_kernels.available_isas()) <= {name for name, _, _ in ISAS}
    with pytest.raises(ValueError, match="unknown instruction set"):
        _kernels.set_isa("sse9")
    assert LIB.extql_isa_force(99) == -1
    _kernels.set_isa(kernel_isa)


def test_each_isa_forces_every_variant_and_restores(kernel_isa, each_isa):
    """each_isa (conftest.py) forces every variant the CPU has, in turn, and
    gives back the variant that was forced before the loop."""
    seen = []
    for isa in each_isa():
        assert _kernels.isa() == isa
        assert LIB.extql_isa_name(LIB.extql_isa()).decode() == isa
        seen.append(isa)
    assert seen == _kernels.available_isas() or os.environ.get("EXTQL_TEST_ISAS")
    assert _kernels.isa() == kernel_isa
