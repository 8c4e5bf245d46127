# cython: language_level=3, boundscheck=False, wraparound=False
# cython: cdivision=True, initializedcheck=False, nonecheck=False
"""The kernels' dispatch unit: the one implementation of the math.

Every path of extql (the NumPy API, the onnxruntime custom op, the
standalone library) ends in the entry points defined here.  Inputs are
validated by the caller; the kernels take dense buffers, type codes (ONNX's
TensorProto numbering) and the [outer, D, inner] view of the tensor, and
work on a range [start, stop) of its elements, so that a caller splits the
work among its threads.

The build compiles this unit once per instruction set (baseline, AVX2,
AVX-512: setup.py, extql/_entrypoints.py) into C with no Python in it: every
entry point is named EXTQL_ISA_FN(name), which appends the instruction
set's name, and src/extql_dispatch.c calls the copy the CPU runs.  The
module's Python parts (its module object, its init function) are never
imported and are dropped by the linker.  So every constant below is a C
constant, never a Cython global (those are set only when a module is
imported).

How the unit is laid out, one file per concern:

* externs.pxi        the C side: type codes, the primitives' stores and loads
* traits.pxi.tp      per-type bounds, expanded from the type table
* formula.pxi        one element: the formula of each direction and type
* constants.pxi      a channel's constants and per-element constants
* tiles.pxi.tp       tiles: the formula's loops, one body per direction
* drivers.pxi.tp     ranges of the tensor in tiles, once for both directions
* subbyte.pxi        int4 / uint4 / int2 / uint2 through an 8-bit carrier
* smallfloat.pxi     float8 / float4e2m1 through float32
* entry.pxi.tp       type codes to typed drivers; the entry points
* float64.pxi        quantize with the division in float64
* blockfmt.pxi       Quark's block formats (BFP, MX), with blockfmt_elements.pxi
* dpu_in.pxi         Quark's DPU instance norm (ExtendedInstanceNormalization)

The .tp files are Tempita templates, expanded at build time (tools/tempita.py).
"""

include "externs.pxi"
include "traits.pxi"
include "formula.pxi"
include "constants.pxi"
include "tiles.pxi"
include "drivers.pxi"
include "subbyte.pxi"
include "smallfloat.pxi"
include "entry.pxi"
include "float64.pxi"
include "blockfmt.pxi"
include "dpu_in.pxi"
include "lstm.pxi"
