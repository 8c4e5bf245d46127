"""The kernels' C entry points (src/extql_kernels.h), called as a C caller
would: through ctypes, which releases the GIL for the call."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from contract import TYPES, assert_same_bits, dequantize, quantize

from extql import _kernels
from extql.types import QTYPES

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

LIB = ctypes.CDLL(_kernels.__file__)
P = ctypes.c_void_p
I64 = ctypes.c_int64
LIB.extql_quantize_range.argtypes = [ctypes.c_int, P, P, P, P, I64, I64, I64, I64]
LIB.extql_dequantize_range.argtypes = [ctypes.c_int, P, P, P, P, I64, I64, I64, I64]
LIB.extql_quantize.argtypes = [ctypes.c_int, P, P, P, P, I64, I64, I64, ctypes.c_int]
LIB.extql_dequantize.argtypes = [ctypes.c_int, P, P, P, P, I64, I64, I64, ctypes.c_int]
for f in ("extql_quantize_range", "extql_dequantize_range", "extql_quantize", "extql_dequantize"):
    getattr(LIB, f).restype = ctypes.c_int


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


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
        rc = LIB.extql_quantize_range(code, _ptr(x), _ptr(s), _ptr(zp), _ptr(y), 6, 7, a, b)
        assert rc == 0
    expected = quantize(x, s, zp, 1)
    assert_same_bits(y, expected, name)
    back = np.empty(x.shape, np.float32)
    for a, b in zip(cuts, cuts[1:] + [x.size], strict=True):
        rc = LIB.extql_dequantize_range(
            code, _ptr(expected), _ptr(s), _ptr(zp), _ptr(back), 6, 7, a, b
        )
        assert rc == 0
    assert_same_bits(back, dequantize(expected, s, zp, 1), name)


@pytest.mark.parametrize("name", ["uint8", "int32", "bfloat16"])
@pytest.mark.parametrize("nthreads", [0, 1, 2, 4])
def test_whole_tensor_threads_and_null_zero_point(name, nthreads):
    n = 300_001
    x = (np.random.default_rng(10).standard_normal(n) * 1000).astype(np.float32)
    s = np.array([0.75], np.float32)
    dt = TYPES[name][0]
    code = QTYPES[name].onnx
    y = np.empty(n, dt)
    assert LIB.extql_quantize(code, _ptr(x), _ptr(s), None, _ptr(y), n, 1, n, nthreads) == 0
    assert_same_bits(y, quantize(x, s, np.zeros(1, dt)), name)
    back = np.empty(n, np.float32)
    assert LIB.extql_dequantize(code, _ptr(y), _ptr(s), None, _ptr(back), n, 1, n, nthreads) == 0
    assert_same_bits(back, dequantize(y, s), name)


def test_unknown_type_is_an_error_code():
    x = np.zeros(8, np.float32)
    y = np.zeros(8, np.float32)
    s = np.ones(1, np.float32)
    for code in (0, 1, 7, 11, 13, 99, -3):
        assert LIB.extql_quantize_range(code, _ptr(x), _ptr(s), None, _ptr(y), 1, 8, 0, 8) == -1
        assert LIB.extql_dequantize(code, _ptr(x), _ptr(s), None, _ptr(y), 8, 1, 8, 1) == -1
    assert np.all(y == 0), "nothing may be written on error"


def test_cython_callers_see_the_entry_points():
    # _kernels.pxd exports them for `cimport`; Cython publishes them here.
    for name in ("extql_quantize_range", "extql_dequantize_range", "extql_quantize",
                 "extql_dequantize", "extql_get_num_threads", "extql_set_num_threads"):
        assert name in _kernels.__pyx_capi__
    assert LIB.extql_get_num_threads() == _kernels.get_num_threads()
    assert LIB.extql_have_openmp() == int(_kernels.have_openmp())


def test_isa_selection(kernel_isa):
    assert _kernels.isa() == kernel_isa
    assert "baseline" in _kernels.available_isas()
    import pytest as _pytest

    with _pytest.raises(ValueError, match="unknown instruction set"):
        _kernels.set_isa("sse9")
    _kernels.set_isa(kernel_isa)
