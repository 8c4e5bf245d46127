# cython: language_level=3, boundscheck=False, wraparound=False
# cython: cdivision=True, initializedcheck=False, nonecheck=False
"""The block-format kernels (kernels/blockfmt.pxi) as a Python extension.

A temporary module of its own until the kernels join the per-instruction-set
dispatch unit and ``_kernels.pyx``.  A thin binding: the declarations the
.pxi takes from its including unit, a thread split over its work items
(OpenMP, extql_split.h's policy), and one Python entry point that takes the
checked attributes as numbers (the NumPy API, extql/block_formats.py, fills
them from extql/block_rules.py).
"""

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t
from cython.parallel cimport prange

cdef extern from "extql_primitives.h":
    uint32_t f32_bits "extql_f32_bits"(float f) noexcept nogil
    float bits_f32 "extql_bits_f32"(uint32_t u) noexcept nogil
    void load_f16 "extql_load_f16"(float *t, const uint16_t *src,
                                   int64_t n) noexcept nogil
    void store_f16 "extql_store_f16"(uint16_t *dst, const float *t, int64_t n,
                                     int stream) noexcept nogil

cdef extern from "extql_split.h":
    int split_threads_for "extql_threads_for"(int64_t n, int threads) noexcept nogil
    int64_t chunk_for "extql_chunk_for"(int64_t n, int threads) noexcept nogil

cdef extern from *:
    """
    #ifdef _OPENMP
    #define EXTQL_BLK_HAVE_OPENMP 1
    #else
    #define EXTQL_BLK_HAVE_OPENMP 0
    #endif
    typedef struct { uint16_t bits; } extql_float16_t;
    """
    ctypedef struct float16_t "extql_float16_t":
        uint16_t bits
    const int HAVE_OPENMP "EXTQL_BLK_HAVE_OPENMP"

include "kernels/blockfmt.pxi"


cdef int blockfmt_run(const BlockParams *p, int xtype, const void *x, void *y,
                      int64_t outer, int64_t D, int64_t inner,
                      int nthreads) noexcept nogil:
    """The whole tensor, its work items split between up to nthreads threads."""
    cdef int64_t items = blockfmt_items(p, outer, D, inner)
    cdef int64_t n = outer * D * inner
    cdef int64_t per, nchunks, t
    cdef int nt = split_threads_for(n, nthreads) if HAVE_OPENMP else 1
    cdef int bad = 0
    if items == 0:
        return 0
    if nt <= 1 or items == 1:
        return blockfmt_range(p, xtype, x, y, outer, D, inner, 0, items)
    per = chunk_for(n, nt) // blockfmt_item_size(p, inner)
    per = per if per > 1 else 1
    nchunks = (items + per - 1) // per
    for t in prange(nchunks, schedule="dynamic", chunksize=1, num_threads=nt):
        bad += blockfmt_range(p, xtype, x, y, outer, D, inner, t * per,
                              min(items, (t + 1) * per)) != 0
    return -1 if bad else 0


def block_quantize_dequantize(int kind, int64_t block, int rounding, int mbits,
                              int bfloat_first, int compiler, int64_t sub_block,
                              int shift_bits, int ebits, int emax, float largest,
                              int xtype, const uint8_t[::1] x, uint8_t[::1] y,
                              int64_t outer, int64_t D, int64_t inner, int nthreads,
                              splits=None):
    """Run the kernel on x's bytes (ONNX type xtype, [outer, D, inner]) into
    y's (y may be x's memory).  The attributes must have been checked.

    ``splits`` (tests): work-item boundaries [0, s1, ..., items]; the range
    entry point then runs on each range in turn, on this thread, as a thread
    pool would cut the tensor.  Returns the number of work items."""
    cdef BlockParams p
    cdef int rc = 0
    cdef const void *xp
    cdef void *yp
    cdef int64_t a, b, items
    p.kind = kind
    p.block = block
    p.rounding = rounding
    p.mbits = mbits
    p.bfloat_first = bfloat_first
    p.compiler = compiler
    p.sub_block = sub_block
    p.shift_bits = shift_bits
    p.ebits = ebits
    p.emax = emax
    p.largest = largest
    items = blockfmt_items(&p, outer, D, inner)
    if outer * D * inner == 0:
        return items
    xp = &x[0]
    yp = &y[0]
    if splits is not None:
        bounds = [int(v) for v in splits]
        for a, b in zip(bounds[:-1], bounds[1:]):
            rc |= blockfmt_range(&p, xtype, xp, yp, outer, D, inner, a, b)
    else:
        with nogil:
            rc = blockfmt_run(&p, xtype, xp, yp, outer, D, inner, nthreads)
    if rc != 0:
        raise MemoryError("block formats: the kernel failed (no memory for a block buffer, "
                          "or an unknown type)")
    return items
