"""One quantize or dequantize through one of extql's paths, for tests by behaviour.

A test of a behaviour is parametrised over the paths and calls
:func:`quantize_via` / :func:`dequantize_via` with the path, so that its body -- the
inputs, the expectation (tests/contract.py), the comparison -- is written once:

* :data:`NUMPY` -- the NumPy API (``extql.quantize_linear`` /
  ``extql.dequantize_linear``);
* :data:`LIBRARY` -- one node in onnxruntime with extql's custom-op library
  (tests/ortutil.py), at an optimisation level and a thread count, the scale
  and zero point as initializers or graph inputs, the Extended or the legacy
  name;
* :data:`FALLBACK` -- the same node with the fallback functions attached
  (``extql.attach_fallbacks``), in onnxruntime without the library, at an
  optimisation level and the model's ai.onnx ``opset``;
* :data:`FALLBACK_REFERENCE` -- that model in ``onnx.reference``, which runs
  the fallback functions.

Options of some paths only (``level``, ``threads``, ``params``, ``legacy``,
``zp_form``, ``opset``) are ignored by the others.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from contract import BF16
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from ortutil import DQ, LEVELS, Q, node_model, run, session
from packaging.version import Version

import extql
from extql import ort_io

NUMPY = "numpy"
LIBRARY = "library"
FALLBACK = "fallback"
FALLBACK_REFERENCE = "fallback-reference"
PATHS = (NUMPY, LIBRARY, FALLBACK, FALLBACK_REFERENCE)

#: onnxruntime's optimisation levels and their names in test ids.
LEVEL_IDS = dict(zip(["disabled", "basic", "extended", "all"], LEVELS, strict=True))
#: The layouts the library's cases use: an NCHW activation per tensor and per
#: channel, a blocked weight (x shape, axis, block size, granularity).
LIBRARY_LAYOUTS = [((2, 3, 5, 7), 1, 0, "tensor"), ((2, 3, 5, 7), 1, 0, "axis"),
                   ((4, 64), 1, 16, "blocked")]
#: The output types the library takes and Python can fetch here (float8
#: from onnxruntime 1.20, int4 from 1.21: tests/operators/test_subbyte.py).
LIBRARY_TYPES = (["int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16"]
                 + (["float8e4m3fn"] if ort_io.has_typed_ortvalues() else [])
                 + (["int4"] if Version(ort.__version__) >= Version("1.21") else []))

#: ONNX codes of the float types a ``precision`` / ``output_dtype`` names.
_CODES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
          BF16: TensorProto.BFLOAT16, np.dtype(np.float64): TensorProto.DOUBLE}


def _code(dtype: Any) -> int:
    return int(dtype) if isinstance(dtype, (int, np.integer)) else _CODES[np.dtype(dtype)]


def _run_node(path: str, op: str, x: np.ndarray, s, z, *, axis: int | None, block_size: int,
              attrs: dict, level, threads: int, params: str, legacy: bool, zp_form: str,
              opset: int | None) -> np.ndarray:
    if z is None and zp_form == "given":
        zp_form = "absent"
    model, feeds, dtype = node_model(op, x, s, z, axis=axis, block_size=block_size or None,
                                     params=params, legacy=legacy, attrs=attrs, zp_form=zp_form)
    if path == LIBRARY:
        (y,) = run(session(model, threads=threads, level=level), feeds, [dtype], [x.shape])
        return y
    if opset is not None:
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = opset
    model = extql.attach_fallbacks(model)
    if path == FALLBACK:
        (y,) = run(session(model, register=False, threads=threads, level=level), feeds,
                   [dtype], [x.shape])
        return y
    y = np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    # A bfloat16 output that the model widens for an onnxruntime that cannot
    # bind one (ortutil.bfloat16_io_fallback), narrowed back bit for bit.
    return y.astype(BF16) if np.dtype(dtype) == BF16 and y.dtype == np.float32 else y


def quantize_via(path: str, x, s, z=None, *, axis: int = 1, block_size: int = 0,
             precision: Any = None, saturate: bool | None = None, level=None,
             threads: int = 0, params: str = "const", legacy: bool = False,
             zp_form: str = "given", opset: int | None = None) -> np.ndarray:
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
    return _run_node(path, Q, np.asarray(x), np.asarray(s),
                     None if z is None else np.asarray(z), axis=axis, block_size=block_size,
                     attrs=attrs, level=level, threads=threads, params=params, legacy=legacy,
                     zp_form=zp_form, opset=opset)


def dequantize_via(path: str, x, s, z=None, *, axis: int = 1, block_size: int = 0,
               output_dtype: Any = None, level=None, threads: int = 0, params: str = "const",
               legacy: bool = False, zp_form: str = "given",
               opset: int | None = None) -> np.ndarray:
    """ExtendedDequantizeLinear of x through ``path``."""
    if path == NUMPY:
        return extql.dequantize_linear(x, s, z, axis=axis, block_size=block_size,
                                       output_dtype=output_dtype)
    attrs = {} if output_dtype is None else {"output_dtype": _code(output_dtype)}
    return _run_node(path, DQ, np.asarray(x), np.asarray(s),
                     None if z is None else np.asarray(z), axis=axis, block_size=block_size,
                     attrs=attrs, level=level, threads=threads, params=params, legacy=legacy,
                     zp_form=zp_form, opset=opset)
