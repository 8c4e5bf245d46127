"""One quantize or dequantize through one of extql's paths, for tests by behaviour.

A test of a behaviour is parametrised over the paths and calls
:func:`quantize_via` / :func:`dequantize_via` with the path, so that its body -- the
inputs, the expectation (tests/contract.py), the comparison -- is written once:

* :data:`NUMPY` -- the NumPy API (``extql.quantize_linear`` /
  ``extql.dequantize_linear``);
* :data:`LIBRARY` -- one node in onnxruntime with extql's custom-op library
  (tests/ortutil.py), at an optimisation level and a thread count, the scale
  and zero point as initializers or graph inputs, the Extended or the legacy
  name.

Options of one path only (``level``, ``threads``, ``params``, ``legacy``,
``zp_form``) are ignored by the others.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from contract import BF16
from onnx import TensorProto
from ortutil import DQ, Q, node_model, run, session

import extql

NUMPY = "numpy"
LIBRARY = "library"
PATHS = (NUMPY, LIBRARY)

#: ONNX codes of the float types a ``precision`` / ``output_dtype`` names.
_CODES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
          BF16: TensorProto.BFLOAT16, np.dtype(np.float64): TensorProto.DOUBLE}


def _code(dtype: Any) -> int:
    return int(dtype) if isinstance(dtype, (int, np.integer)) else _CODES[np.dtype(dtype)]


def _run_node(op: str, x: np.ndarray, s, z, *, axis: int | None, block_size: int,
              attrs: dict, level, threads: int, params: str, legacy: bool,
              zp_form: str) -> np.ndarray:
    if z is None and zp_form == "given":
        zp_form = "absent"
    model, feeds, dtype = node_model(op, x, s, z, axis=axis, block_size=block_size or None,
                                     params=params, legacy=legacy, attrs=attrs, zp_form=zp_form)
    (y,) = run(session(model, threads=threads, level=level), feeds, [dtype], [x.shape])
    return y


def quantize_via(path: str, x, s, z=None, *, axis: int = 1, block_size: int = 0,
             precision: Any = None, saturate: bool | None = None, level=None,
             threads: int = 0, params: str = "const", legacy: bool = False,
             zp_form: str = "given") -> np.ndarray:
    """ExtendedQuantizeLinear of x through ``path``."""
    if path == NUMPY:
        kw = {} if saturate is None else {"saturate": saturate}
        return extql.quantize_linear(x, s, z, axis=axis, block_size=block_size,
                                     precision=precision, **kw)
    attrs: dict[str, int] = {}
    if precision is not None:
        attrs["precision"] = _code(precision)
    if saturate is not None:
        attrs["saturate"] = int(saturate)
    return _run_node(Q, np.asarray(x), np.asarray(s), None if z is None else np.asarray(z),
                     axis=axis, block_size=block_size, attrs=attrs, level=level,
                     threads=threads, params=params, legacy=legacy, zp_form=zp_form)


def dequantize_via(path: str, x, s, z=None, *, axis: int = 1, block_size: int = 0,
               output_dtype: Any = None, level=None, threads: int = 0, params: str = "const",
               legacy: bool = False, zp_form: str = "given") -> np.ndarray:
    """ExtendedDequantizeLinear of x through ``path``."""
    if path == NUMPY:
        return extql.dequantize_linear(x, s, z, axis=axis, block_size=block_size,
                                       output_dtype=output_dtype)
    attrs = {} if output_dtype is None else {"output_dtype": _code(output_dtype)}
    return _run_node(DQ, np.asarray(x), np.asarray(s), None if z is None else np.asarray(z),
                     axis=axis, block_size=block_size, attrs=attrs, level=level,
                     threads=threads, params=params, legacy=legacy, zp_form=zp_form)
