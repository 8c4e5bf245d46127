"""The block formats' table (``blocks``): extql's BFPQuantizeDequantize /
MXQuantizeDequantize nodes in onnxruntime, with the configurations Quark
writes, on an NCHW activation (blocks along the channels, axis 1) and a
MatMul input (blocks along the last axis), against the fallback model and
the copy kernel moving the same bytes (the copy library's BlockCopy:
``copy%``).

The anchor is the same one-node model through ``extql.inline_fallbacks``
(the node replaced by the standard ops of its fallback function) in a
session without the library, at the same thread count: what a deployment
without extql runs.  Quark's own library is measured against by
``benchmarks/block_formats.py`` (it needs PyTorch and amd-quark).  Each
output is checked against the NumPy API's bits and the fallback's (any NaN
equal to any NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from extql.rules.types import DOMAIN

from .config import BLOCK_CONFIGS, BLOCK_LAYOUTS, BenchConfig
from .data import Data, elements, shape
from .models import COPY_DOMAIN, Ort
from .runner import FALLBACK_ANCHOR, Result, fallback_exact, fallback_session, same_bits
from .timing import time_interleaved

#: The row's op column by operator.
_OP_LABEL = {"BFPQuantizeDequantize": "BFP", "MXQuantizeDequantize": "MX"}


def block_model(o: Ort, op: str, domain: str, attrs: dict[str, Any], layout: str) -> Any:
    """A one-node model x -> op -> y (float32) over an input of symbolic
    shape of the layout's rank, the blocks along the layout's axis."""
    h = o.helper
    dims = ["n", "c", "h", "w"] if layout == "nchw" else ["n", "c"]
    node = h.make_node(op, ["x"], ["y"], domain=domain,
                       **{**attrs, "axis": BLOCK_LAYOUTS[layout]})
    graph = h.make_graph([node], f"bench_{op}",
                         [h.make_tensor_value_info("x", o.TensorProto.FLOAT, dims)],
                         [h.make_tensor_value_info("y", o.TensorProto.FLOAT, dims)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21),
                                               h.make_opsetid(domain, 1)])
    model.ir_version = 10
    return model


def _exact(got: np.ndarray, x: np.ndarray, op: str, attrs: dict[str, Any], layout: str) -> str:
    import extql

    api = extql.bfp_quantize_dequantize if op.startswith("BFP") else (
        extql.mx_quantize_dequantize)
    want = api(x, **attrs, axis=BLOCK_LAYOUTS[layout])
    return "=api" if same_bits(got, want) else "MISMATCH vs the NumPy API"


def run_blocks_table(cfg: BenchConfig, data: Data, threads: list[int], copy_note: str | None,
                     emit: Callable[[Result], None]) -> None:
    """The blocks table's rows, each handed to emit: every configuration,
    layout, thread count (resolved) and size; copy_note: why the copy
    kernel is not measured (None: it is)."""
    o = Ort()
    for name in cfg.blocks:
        op, attrs = BLOCK_CONFIGS[name]
        for layout in cfg.block_layouts:
            for t in threads:
                model = block_model(o, op, DOMAIN, attrs, layout)
                ext_sess = o.session(model, t, "extql", cfg.spin)
                fb_sess, note = fallback_session(o, model, "inline_fallbacks", t, cfg.spin)
                copy_sess = None if copy_note else o.session(
                    block_model(o, "BlockCopy", COPY_DOMAIN,
                                {"block_size": attrs["block_size"]}, layout), t, "copy",
                    cfg.spin)
                for n in cfg.sizes:
                    x = data.x(elements(n, layout)).reshape(shape(n, layout))
                    y = np.empty_like(x)
                    ext = o.runner(ext_sess, x, y)
                    fb = o.runner(fb_sess, x, y) if fb_sess else None
                    funcs = [ext] + ([fb] if fb else []) + (
                        [o.runner(copy_sess, x, y)] if copy_sess else [])
                    exact = None
                    if cfg.check:
                        ext()
                        got = ext.output().copy()
                        exact = _exact(got, x, op, attrs, layout)
                        if fb and exact == "=api":
                            fb_exact = fallback_exact(got, fb, y, any_nan=True)
                            exact = "=api =fallback" if fb_exact == "=fallback" else fb_exact
                    times = time_interleaved(funcs, cfg.repeat, cfg.min_sample)
                    emit(Result("blocks", _OP_LABEL[op], name, layout, n, t, times[0],
                                anchor_name=FALLBACK_ANCHOR if fb else None,
                                anchor=times[1] if fb else None,
                                copy=times[-1] if copy_sess else None, exact=exact, note=note,
                                copy_note=copy_note))
                    del ext, fb, funcs
                del ext_sess, fb_sess, copy_sess
