"""What a benchmark run measures: the options of ``extql bench`` as a config."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from extql.rules.types import QTYPES

Q, DQ = "Q", "DQ"
#: ``tensor``: scalar scale; ``axis0``: shape (256, n/256), axis 0;
#: ``axis1``: shape (n/256, 256), axis 1 (the channel changes every element);
#: ``nchw``: shape (1, 64, H, W), axis 1 (a middle axis, as in a convolution's
#: activations: the channel changes every H*W elements); ``nchw7`` /
#: ``nchw32`` / ``nchw56``: shape (N, 256, 7, 7) / (N, 256, 32, 32) /
#: (N, 64, 56, 56), axis 1 (runs of 49 / 1024 / 3136 elements), N the batch
#: that comes nearest the size.
GRANULARITIES = ("tensor", "axis0", "axis1", "nchw", "nchw7", "nchw32", "nchw56", "block32",
                 "block128")
DEFAULT_SIZES = (1 << 16, 1 << 18, 1 << 20, 1 << 24)
#: The float side of a row: quantize's x and scale, dequantize's scale and
#: output.
FLOATS = ("float32", "float16", "bfloat16")
TABLES = ("ort", "numpy", "fallback", "blocks", "dpu")
#: Every size must be a multiple of this (the longest quantized axis).
SIZE_QUANTUM = 256
#: The blocks table's rows: the configurations Quark writes, name ->
#: (operator, attributes).
BLOCK_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "bfp16": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp", "bit_width": 16,
                                        "block_size": 8, "rounding_mode": 0}),
    "mx9": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "bit_width": 16,
                                      "block_size": 16, "sub_block_size": 2,
                                      "sub_block_shift_bits": 1, "rounding_mode": 2}),
    "mx6": ("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "bit_width": 13,
                                      "block_size": 16, "sub_block_size": 2,
                                      "sub_block_shift_bits": 1, "rounding_mode": 2}),
    "mxint8": ("MXQuantizeDequantize", {"element_dtype": "int8", "block_size": 32,
                                        "rounding_mode": 2}),
    "mxfp8": ("MXQuantizeDequantize", {"element_dtype": "fp8_e4m3", "block_size": 32,
                                       "rounding_mode": 2}),
    "mxfp4": ("MXQuantizeDequantize", {"element_dtype": "fp4_e2m1", "block_size": 32,
                                       "rounding_mode": 2}),
}
#: The layouts (the onnxruntime table's granularities of these shapes) and
#: the axis the blocks run along: an NCHW activation along its channels, a
#: (n/256, 256) MatMul input along its last axis.
BLOCK_LAYOUTS: dict[str, int] = {"nchw": 1, "axis1": -1}


#: The dpu table's rows by default: names of extql_bench.dpu.DPU_SHAPES
#: (the instance norm on 1x64x56x56, 1x256x14x14 and 8x64x56x56; the LSTM at
#: Quark's size, sequence 80, input 64, hidden 128, at batch 1 and 8).
DPU_ROWS = ("in-1x64x56x56", "in-1x256x14x14", "in-8x64x56x56", "lstm-80x1", "lstm-80x8")


def parse_size(text: str) -> int:
    """``65536``, ``64K``, ``1M``, ``16M`` -> elements."""
    t = text.strip().upper()
    mult = 1
    if t.endswith("K"):
        mult, t = 1 << 10, t[:-1]
    elif t.endswith("M"):
        mult, t = 1 << 20, t[:-1]
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 65536, 64K, 16M)") from None
    if value < SIZE_QUANTUM or value % SIZE_QUANTUM:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a multiple of {SIZE_QUANTUM}")
    return value


def size_label(n: int) -> str:
    """16777216 -> ``16M``, 65536 -> ``64K``."""
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % (1 << 10) == 0:
        return f"{n >> 10}K"
    return str(n)


@dataclasses.dataclass
class BenchConfig:
    """What to measure (the command line's options)."""

    sizes: Sequence[int] = DEFAULT_SIZES
    threads: Sequence[int] = (1, 0)  # 0: all cores
    repeat: int = 15
    ops: Sequence[str] = (Q, DQ)
    types: Sequence[str] = tuple(QTYPES)
    granularities: Sequence[str] = GRANULARITIES
    floats: Sequence[str] = ("float32",)  # the onnxruntime table only
    tables: Sequence[str] = TABLES
    # The NumPy and fallback tables (slow anchors): fewer samples, per tensor.
    side_repeat: int = 5
    side_granularities: Sequence[str] = ("tensor",)
    min_sample: float = 2e-3  # seconds of samples per contender and round (timing.py)
    check: bool = True
    spin: bool = False  # onnxruntime's default thread-pool spinning
    progress: Callable[[str], None] | None = None
    # The blocks table: Quark's configurations and the layouts.
    blocks: Sequence[str] = tuple(BLOCK_CONFIGS)
    block_layouts: Sequence[str] = tuple(BLOCK_LAYOUTS)
    # The dpu table: names of extql_bench.dpu.DPU_SHAPES, or DpuShape rows.
    dpu: Sequence[Any] = DPU_ROWS
