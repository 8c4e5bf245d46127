"""The NumPy API of every operator, one module per operator family.

* :mod:`extql.api.linear` -- ExtendedQuantizeLinear / ExtendedDequantizeLinear
  (:func:`quantize_linear`, :func:`dequantize_linear`) and the kernels' thread
  count;
* :mod:`extql.api.blocks` -- Quark's block formats (:func:`bfp_quantize_dequantize`,
  :func:`mx_quantize_dequantize`);
* :mod:`extql.api.dpu` -- Quark's DPU emulation (:func:`extended_instance_normalization`);
* :mod:`extql.api.lstm` -- Quark's DPU emulation of an LSTM (:func:`extended_lstm`);
* :mod:`extql.api.out` -- the ``out=`` argument they share.

Each module validates its arguments (with the rules of :mod:`extql.rules`)
and dispatches on dtypes in Python, then calls the compiled kernels with
validated buffers.  ``extql`` re-exports every public function here.
"""

from __future__ import annotations

from .blocks import bfp_quantize_dequantize, mx_quantize_dequantize
from .dpu import extended_instance_normalization
from .linear import dequantize_linear, get_num_threads, quantize_linear, set_num_threads
from .lstm import extended_lstm

__all__ = [
    "quantize_linear",
    "dequantize_linear",
    "bfp_quantize_dequantize",
    "mx_quantize_dequantize",
    "extended_instance_normalization",
    "extended_lstm",
    "set_num_threads",
    "get_num_threads",
]
