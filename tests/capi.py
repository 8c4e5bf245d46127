"""The kernels' C entry points through ctypes, declared from the one list of them.

``extql/_entrypoints.py`` writes each entry point once; the public header the
library is built with is generated from it, and so are the ctypes declarations
here, so that a test calls the library as a C caller does without spelling a
signature again.  ``LIB`` is extql's onnxruntime library (``libextql_ort``),
the file C hosts load.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np

import extql
from extql._entrypoints import ENTRY_POINTS

#: C parameter types to ctypes (every pointer is passed as an address).
_SCALARS = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float, "void": None}

LIB = ctypes.CDLL(extql.get_library_path())


def _ctype(decl: str):
    if "*" in decl:
        return ctypes.c_void_p
    words = re.sub(r"\bconst\b", "", decl).split()
    return _SCALARS[words[0]]


for _name, _per_isa, _ret, _params, _doc in ENTRY_POINTS:
    _fn = getattr(LIB, f"extql_{_name}")
    _fn.restype = _ctype(_ret)
    _fn.argtypes = [_ctype(p) for p in _params]

# The instruction-set functions of the header (not entry points of the list).
LIB.extql_isa_name.restype = ctypes.c_char_p
LIB.extql_isa_name.argtypes = [ctypes.c_int]
for _fn in (LIB.extql_isa_supported, LIB.extql_isa_force):
    _fn.argtypes = [ctypes.c_int]

#: The flags of the range functions (src/extql_kernels.h).
STREAM, UNPACKED, NO_SATURATE = 1, 2, 4


def ptr(a: np.ndarray | None) -> int | None:
    """The address of an array's data (None for None: a NULL pointer)."""
    return None if a is None else a.ctypes.data
