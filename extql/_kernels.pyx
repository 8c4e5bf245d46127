# cython: language_level=3, boundscheck=False, wraparound=False
# cython: cdivision=True, initializedcheck=False, nonecheck=False
"""The kernels for Python: whole tensors on extql's own threads.

The math is in the kernels' dispatch unit (extql/kernels/), compiled once
per instruction set into extql's onnxruntime library (libextql_ort), whose C
entry points (src/extql_kernels.h) run elements [start, stop) of a tensor on
the copy the CPU supports.  This module, compiled once and linked against
that library, hands a whole tensor to them: cut into ranges for an OpenMP
team of extql's thread count (src/extql_split.h), the GIL released.  Its
functions take validated, contiguous byte buffers from extql.api.linear.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc
from cython.parallel cimport prange

include "extql_api.pxi"

cdef extern from "extql_types.h":
    int qtype_size "extql_qtype_size"(int code) noexcept nogil
    int subbyte_of "extql_subbyte"(int code, int *bits, int *lo,
                                   int *hi) noexcept nogil
    ctypedef struct SmallFloat "ExtqlSmallFloat":
        int bits
    int smallfloat_of "extql_smallfloat"(int code, SmallFloat *f) noexcept nogil

cdef extern from "extql_split.h":
    # The thread split (one policy with the onnxruntime ops').
    int split_threads_for "extql_threads_for"(int64_t n, int threads) noexcept nogil
    int64_t chunk_for "extql_chunk_for"(int64_t n, int threads) noexcept nogil

cdef extern from *:
    """
    #include <stdlib.h>
    #ifdef _OPENMP
    #include <omp.h>
    #define EXTQL_HAVE_OPENMP 1
    static int extql_cores(void) { return omp_get_num_procs(); }
    #else
    #define EXTQL_HAVE_OPENMP 0
    static int extql_cores(void) { return 1; }
    #endif
    /* Thread count: 0 means not chosen yet (see default_threads). */
    static int extql_threads_setting = 0;
    """
    const int HAVE_OPENMP "EXTQL_HAVE_OPENMP"
    int extql_cores() noexcept nogil
    int threads_setting "extql_threads_setting"

cdef extern from "<stdlib.h>" nogil:
    char *getenv(const char *name)
    long strtol(const char *s, char **end, int base)


UNPACKED = EXTQL_UNPACKED
NO_SATURATE = EXTQL_NO_SATURATE


cdef int default_threads() noexcept nogil:
    """extql_set_num_threads's setting, else EXTQL_NUM_THREADS, else the
    cores."""
    cdef char *env
    cdef long v
    cdef int n = threads_setting
    if n > 0:
        return n
    env = getenv("EXTQL_NUM_THREADS")
    if env != NULL:
        v = strtol(env, NULL, 10)
        if 0 < v <= 4096:
            return <int>v
    n = extql_cores()
    return n if n > 0 else 1


cdef inline int threads_for(int64_t n, int nthreads) noexcept nogil:
    """How many threads to use on n elements (1 without OpenMP)."""
    if nthreads <= 0:
        nthreads = default_threads()
    if not HAVE_OPENMP:
        return 1
    return split_threads_for(n, nthreads)


cdef inline int64_t out_size(int code) noexcept nogil:
    """Bytes of an element of the type code, for the choice of streaming
    stores (0 for the packed and small float types, never streamed)."""
    if code == EXTQL_FLOAT32:
        return 4
    return qtype_size(code)


cdef struct Call:
    # One call of a range function over a whole tensor.
    int kind            # 0 quantize, 1 dequantize, 2 quantize in float64
    int qtype, ftype, prec, stype
    const void *x
    const void *scale
    const void *zp
    void *y
    int64_t D, inner, block
    int flags
    const float *ones
    const void *zero2


cdef inline int run_range(const Call *c, int64_t start, int64_t stop) noexcept nogil:
    if c.kind == 0:
        return extql_quantize_range(c.qtype, c.ftype, c.prec, c.x, <const float *>c.scale,
                                    c.zp, c.y, c.D, c.inner, c.block, start, stop,
                                    c.flags)
    if c.kind == 1:
        return extql_dequantize_range(c.qtype, c.ftype, c.x, <const float *>c.scale, c.zp,
                                      c.y, c.D, c.inner, c.block, start, stop, c.flags)
    return extql_quantize_f64_range(c.qtype, c.ftype, c.stype, c.x, c.scale, c.zp, c.y,
                                    c.D, c.inner, c.block, start, stop, c.flags,
                                    c.ones, c.zero2)


cdef int run_whole(const Call *c, int64_t n, int nthreads) noexcept nogil:
    """The n elements of a call, in ranges handed out dynamically to the
    threads (tensors below the parallel minimum on the calling thread)."""
    cdef int64_t t, chunk
    cdef int nt = threads_for(n, nthreads), failed = 0
    if nt == 1:
        return run_range(c, 0, n)
    chunk = chunk_for(n, nt)
    for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        failed |= run_range(c, t * chunk, min(n, (t + 1) * chunk)) != 0
    return -1 if failed else 0


cdef inline const void *data_or_null(const uint8_t[::1] buf):
    return NULL if buf is None or buf.shape[0] == 0 else &buf[0]


cdef int call_of(Call *c, int kind, int qtype, int ftype, int prec, int stype,
                 const uint8_t[::1] x, const void *scale, const uint8_t[::1] zero_point,
                 uint8_t[::1] y, int64_t n, int64_t D, int64_t inner, int64_t block,
                 int flags) except -1:
    """Fill c for the whole tensor of n elements: the layout, and the flags
    the caller may set (UNPACKED; NO_SATURATE for quantize) plus streaming
    stores for an output as large as EXTQL_STREAM_MIN_BYTES."""
    c.kind, c.qtype, c.ftype, c.prec, c.stype = kind, qtype, ftype, prec, stype
    c.x, c.scale, c.zp, c.y = &x[0], scale, data_or_null(zero_point), &y[0]
    c.D, c.inner, c.block = D, inner, block
    c.flags = ((flags & (EXTQL_UNPACKED | (EXTQL_NO_SATURATE if kind != 1 else 0)))
               | EXTQL_STREAM_FLAGS(n * out_size(ftype if kind == 1 else qtype)))
    c.ones, c.zero2 = NULL, NULL
    return 0


def quantize(int qtype, int xtype, int prec, const uint8_t[::1] x,
             const float[::1] scale, const uint8_t[::1] zero_point,
             uint8_t[::1] y, int64_t n, int64_t D, int64_t inner,
             int nthreads=0, int64_t block=0, int flags=0):
    """Quantize the n elements of the byte buffer ``x`` (float32, float16,
    bfloat16 or int32: ``xtype``) into the byte buffer ``y`` (element type
    ``qtype``), the quotient in the precision ``prec``.

    ``zero_point`` is a byte view of an array of the type ``qtype``, or None;
    ``scale`` is float32, already rounded to ``prec`` (convert_scales).
    ``block`` > 0: blocked along D, the scale and zero point of shape
    [outer, ceil(D / block), inner].  A sub-byte ``qtype`` (int4, uint4,
    int2, uint2) writes y packed, or one element per byte with ``flags``
    UNPACKED, and takes its zero point as int8 / uint8 elements.  Called by
    extql.api.linear, which has checked every length; the GIL is released
    for the whole loop.
    """
    cdef Call c
    cdef int rc
    if n == 0:
        return
    call_of(&c, 0, qtype, xtype, prec, 0, x, &scale[0], zero_point, y, n, D, inner, block,
            flags)
    with nogil:
        rc = run_whole(&c, n, nthreads)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown element type {qtype}, {xtype} "
                        f"or precision {prec}")


def quantize_f64(int qtype, int xtype, int stype, const uint8_t[::1] x,
                 const uint8_t[::1] scale, const uint8_t[::1] zero_point,
                 uint8_t[::1] y, int64_t n, int64_t D, int64_t inner,
                 int64_t nscales, int nthreads=0, int64_t block=0, int flags=0):
    """Quantize as :func:`quantize` with the division in float64
    (extql_quantize_f64_range): ``scale`` is the byte view of ``nscales``
    float32 or int32 scales (``stype``), exact."""
    cdef Call c
    cdef int rc
    cdef int64_t m = nscales if nscales > 0 else 1
    cdef float *ones
    cdef void *zero2
    if n == 0:
        return
    ones = <float *>malloc(m * sizeof(float))
    zero2 = malloc(m * sizeof(float))
    if ones == NULL or zero2 == NULL:
        free(ones)
        free(zero2)
        raise MemoryError("extql kernel: no memory for the float64 stage's parameters")
    call_of(&c, 2, qtype, xtype, 0, stype, x, &scale[0], zero_point, y, n, D, inner, block,
            flags)
    c.ones = ones
    with nogil:
        c.zero2 = zero2 if extql_f64_params(qtype, ones, zero2, m) else c.zp
        rc = run_whole(&c, n, nthreads)
    free(ones)
    free(zero2)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown element type {qtype}, {xtype} "
                        f"or scale type {stype}")


def dequantize(int qtype, int ytype, const uint8_t[::1] x,
               const float[::1] scale, const uint8_t[::1] zero_point,
               uint8_t[::1] y, int64_t n, int64_t D, int64_t inner,
               int nthreads=0, int64_t block=0, int flags=0):
    """Dequantize the n elements of the byte buffer ``x`` (element type
    ``qtype``; sub-byte types as for quantize) into the byte buffer ``y``
    (float32, float16 or bfloat16: ``ytype``)."""
    cdef Call c
    cdef int rc
    if n == 0:
        return
    call_of(&c, 1, qtype, ytype, 0, 0, x, &scale[0], zero_point, y, n, D, inner, block,
            flags)
    with nogil:
        rc = run_whole(&c, n, nthreads)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown element type {qtype} or {ytype}")


def convert_scales(int stype, int prec, const uint8_t[::1] src,
                   float[::1] dst):
    """The scales in the byte buffer ``src`` (float32, float16, bfloat16 or
    int32: ``stype``) as float32 into ``dst``, rounded to ``prec``."""
    cdef int64_t n = dst.shape[0]
    cdef int rc
    if n == 0:
        return
    with nogil:
        rc = extql_convert_scales(stype, prec, &src[0], &dst[0], n)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown scale type {stype} or precision {prec}")


def unpack(int qtype, const uint8_t[::1] src, uint8_t[::1] dst, int64_t n):
    """The n elements of ``src`` (a sub-byte or small float type, as in an
    ONNX tensor) into ``dst`` as the kernels take zero points: int8 / uint8
    for the sub-byte types, float32 for the small floats."""
    cdef int bits, lo, hi
    cdef SmallFloat t
    cdef int64_t size
    if subbyte_of(qtype, &bits, &lo, &hi):
        size = 1
    elif smallfloat_of(qtype, &t):
        bits, size = t.bits, 4
    else:
        raise TypeError(f"extql kernel: {qtype} is neither a sub-byte nor a small float type")
    if src.shape[0] < (n * bits + 7) // 8 or dst.shape[0] < n * size:
        raise ValueError(f"extql kernel: a buffer is too small for {n} elements")
    if n == 0:
        return
    with nogil:
        extql_unpack(qtype, &src[0], &dst[0], n)


cdef int block_run(const ExtqlBlockParams *p, int xtype, const void *x, void *y,
                   int64_t outer, int64_t D, int64_t inner, int nthreads) noexcept nogil:
    """A block-format tensor's work items (one per block-row), split between
    up to nthreads threads in ranges of about the elements extql_split.h
    gives a thread."""
    cdef int64_t items = extql_block_items(p, outer, D, inner)
    cdef int64_t n = outer * D * inner
    cdef int64_t per, t
    cdef int nt = threads_for(n, nthreads), failed = 0
    if items == 0:
        return 0
    if nt <= 1 or items == 1:
        return extql_block_range(p, xtype, x, y, outer, D, inner, 0, items)
    per = chunk_for(n, nt) // extql_block_item_size(p, inner)
    per = per if per > 1 else 1
    for t in prange((items + per - 1) // per, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        failed |= extql_block_range(p, xtype, x, y, outer, D, inner, t * per,
                                    min(items, (t + 1) * per)) != 0
    return -1 if failed else 0


def block_quantize_dequantize(int kind, int64_t block, int rounding, int mbits,
                              int bfloat_first, int compiler, int64_t sub_block,
                              int shift_bits, int ebits, int emax, float largest,
                              int xtype, const uint8_t[::1] x, uint8_t[::1] y,
                              int64_t outer, int64_t D, int64_t inner, int nthreads=0,
                              splits=None):
    """BFPQuantizeDequantize / MXQuantizeDequantize on x's bytes (ONNX type
    xtype, [outer, D, inner] with the blocks along D) into y's (y may be x's
    memory).  The attributes (ExtqlBlockParams) must have been checked
    (extql.rules.blocks; extql.api.blocks fills them).

    ``splits`` (tests): work-item boundaries [0, s1, ..., items]; the range
    entry point then runs on each range in turn, on this thread, as a thread
    pool would cut the tensor.  Returns the number of work items."""
    cdef ExtqlBlockParams p
    cdef int rc = 0
    cdef int64_t a, b, items
    p.kind, p.block, p.rounding, p.mbits = kind, block, rounding, mbits
    p.bfloat_first, p.compiler = bfloat_first, compiler
    p.sub_block, p.shift_bits = sub_block, shift_bits
    p.ebits, p.emax, p.largest = ebits, emax, largest
    items = extql_block_items(&p, outer, D, inner)
    if outer * D * inner == 0:
        return items
    if splits is not None:
        bounds = [int(v) for v in splits]
        for a, b in zip(bounds[:-1], bounds[1:]):
            rc |= extql_block_range(&p, xtype, &x[0], &y[0], outer, D, inner, a, b)
    else:
        with nogil:
            rc = block_run(&p, xtype, &x[0], &y[0], outer, D, inner, nthreads)
    if rc != 0:
        raise MemoryError("block formats: the kernel failed (no memory for a block buffer, "
                          "or an unknown type)")
    return items


def dpu_instance_norm(const float[::1] x, const float[::1] scale, const float[::1] bias,
                      float[::1] y, int64_t C, int64_t S, float epsilon, int nthreads=0):
    """ExtendedInstanceNormalization on x's float32 elements ([N * C, S] in
    memory order) into y (another buffer): instances split statically, in
    groups of 16, between up to nthreads threads.  Inputs must have been checked
    (extql.api.dpu)."""
    cdef int64_t n = x.shape[0]
    cdef int64_t inst = n // S if S > 0 else 0
    cdef int64_t i
    cdef int nt = threads_for(n, nthreads)
    cdef const float *px
    cdef const float *pg
    cdef const float *pb
    cdef float *py
    if inst == 0 or C == 0:
        return
    px, pg, pb, py = &x[0], &scale[0], &bias[0], &y[0]
    with nogil:
        if nt <= 1 or inst == 1:
            extql_dpu_in_range(px, pg, pb, py, C, S, epsilon, 0, inst)
        else:
            # Groups of 16 instances: the kernel sums 16 instances' statistics
            # side by side (EXTQL_DPU_IN_LANES in extql/kernels/dpu_in.pxi).
            for i in prange((inst + 15) // 16, schedule="static", num_threads=nt):
                extql_dpu_in_range(px, pg, pb, py, C, S, epsilon, i * 16,
                                   min(i * 16 + 16, inst))


def stream_min_bytes():
    """Outputs of at least this many bytes are written with non-temporal
    stores (EXTQL_STREAM_MIN_BYTES)."""
    return EXTQL_STREAM_MIN_BYTES


def get_num_threads():
    """The number of threads the kernels use by default."""
    return default_threads()


def set_num_threads(int n):
    """Set the default thread count (n <= 0: back to the default)."""
    global threads_setting
    threads_setting = n if n > 0 else 0


def have_openmp():
    """True when the kernels were compiled with OpenMP."""
    return bool(HAVE_OPENMP)


def cores():
    """The number of cores available to the process (1 without OpenMP)."""
    return extql_cores()


def _isa_names():
    return {code: extql_isa_name(code).decode() for code in range(EXTQL_ISA_COUNT)}


def isa():
    """The instruction-set variant the kernels run: "baseline", "avx2", ..."""
    return extql_isa_name(extql_isa()).decode()


def available_isas():
    """The variants this build and this CPU can run, baseline first."""
    return [name for code, name in _isa_names().items() if extql_isa_supported(code)]


def set_isa(name=None):
    """Run the kernels on one variant (None: choose automatically).

    For tests and benchmarks; raises ValueError for a variant this build or
    CPU cannot run.  Not thread-safe against kernels running at the time.
    """
    if name is None:
        extql_isa_force(-1)
        return
    codes = {v: k for k, v in _isa_names().items()}
    if name not in codes:
        raise ValueError(f"extql: unknown instruction set {name!r}; "
                         f"choose from {sorted(codes)}")
    if extql_isa_force(codes[name]) != 0:
        raise ValueError(f"extql: instruction set {name!r} is not available "
                         "in this build or on this CPU")


def quotient():
    """How the AVX2 / AVX-512 quantize takes x / s: "division" (the division
    instruction) or "fma" (the reciprocal and fused multiply-add
    corrections); both give the division's bits, and the CPU decides which
    is faster (EXTQL_QUOTIENT overrides)."""
    return "division" if extql_quotient() else "fma"


def set_quotient(name=None):
    """Take the quotient by "division" or "fma" (None: as the CPU chooses).

    For tests and benchmarks; not thread-safe against kernels running at the
    time.
    """
    if name not in (None, "division", "fma"):
        raise ValueError(f"extql: unknown quotient method {name!r}; choose from "
                         "'division', 'fma'")
    extql_quotient_force(-1 if name is None else int(name == "division"))


# ---------------------------------------------------------------------------
# ExtendedLSTM

cdef int lstm_fill(ExtqlLstmParams *p, scales, zero_points, int64_t n_in, int64_t hidden,
                   int dirs, int reverse) except? -100:
    cdef float s[5]
    cdef int z[5]
    cdef int i
    for i in range(5):
        s[i] = scales[i]
        z[i] = zero_points[i]
    return extql_lstm_params(p, s, z, n_in, hidden, dirs, reverse)


_LSTM_PARAM_NAMES = ("qxf", "qhf", "qaf", "qbf", "qx", "ax", "qh", "ah", "qa", "xs", "qb",
                     "hs", "xw", "hr", "xwq", "hrq", "ohs", "ohz", "oh")


def lstm_params(scales, zero_points, int64_t n_in, int64_t hidden, int dirs=2,
                int reverse=0):
    """(code, parameters) of an ExtendedLSTM node: extql_lstm_params's return
    code (0, or an EXTQL_LSTM_BAD_* code: LSTM_CODES in extql/_entrypoints.py)
    and its fixed-point parameters as a dict.  ``scales`` / ``zero_points``:
    x, w, r, b, y (the zero points uint16 values)."""
    cdef ExtqlLstmParams p
    cdef int rc = lstm_fill(&p, scales, zero_points, n_in, hidden, dirs, reverse)
    d = <dict>p
    return rc, {k: d[k] for k in _LSTM_PARAM_NAMES}


def lstm_run(scales, zero_points, int64_t n_in, int64_t hidden, int dirs, int reverse,
             const float[::1] w, const float[::1] r, b, const float[::1] x, y, y_h, y_c,
             int64_t seq, int64_t batch, int layout, int nthreads=0, splits=None):
    """ExtendedLSTM on checked, contiguous float32 buffers (extql.api.lstm has
    checked every shape and attribute): W, R quantized once (b: B's buffer or
    None for zeros), then the batch elements x directions in parallel
    (statically split between up to ``nthreads`` threads), each over its whole
    sequence.  ``y``, ``y_h``, ``y_c``: float32 buffers of the outputs' sizes,
    or None.  ``splits`` (tests): work-item boundaries [0, s1, ..., items] run
    in turn on this thread, as a thread pool may cut the call."""
    cdef ExtqlLstmParams p
    cdef int rc = lstm_fill(&p, scales, zero_points, n_in, hidden, dirs, reverse)
    cdef const float[::1] bv
    cdef float[::1] yv, yhv, ycv
    cdef const float *bp = NULL
    cdef const float *xp = NULL
    cdef float *yp = NULL
    cdef float *yhp = NULL
    cdef float *ycp = NULL
    cdef void *prep
    cdef int64_t items, t, a, e
    cdef int nt, failed = 0
    if rc != 0:
        raise ValueError(f"ExtendedLSTM: the kernel refuses the parameters (code {rc})")
    if b is not None:
        bv = b
        bp = &bv[0]
    if x.shape[0] > 0:
        xp = &x[0]
    if y is not None and seq * batch > 0:
        yv = y
        yp = &yv[0]
    if y_h is not None and batch > 0:
        yhv = y_h
        yhp = &yhv[0]
    if y_c is not None and batch > 0:
        ycv = y_c
        ycp = &ycv[0]
    items = extql_lstm_items(&p, batch)
    if items == 0:
        return 0
    prep = malloc(extql_lstm_prepared_size(&p))
    if prep == NULL:
        raise MemoryError("ExtendedLSTM: no memory for the quantized weights")
    with nogil:
        failed = extql_lstm_prepare(&p, &w[0], &r[0], bp, prep) != 0
    if not failed and splits is not None:
        bounds = [int(v) for v in splits]
        for a, e in zip(bounds[:-1], bounds[1:]):
            failed |= extql_lstm_range(&p, prep, xp, yp, yhp, ycp,
                                       seq, batch, layout, a, e) != 0
    elif not failed:
        nt = nthreads if nthreads > 0 else default_threads()
        nt = nt if nt < items else <int>items
        if not HAVE_OPENMP or seq * p.hidden * (p.input + p.hidden) * items < 65536:
            nt = 1
        with nogil:
            if nt <= 1:
                failed = extql_lstm_range(&p, prep, xp, yp, yhp,
                                          ycp, seq, batch, layout, 0, items) != 0
            else:
                for t in prange(items, schedule="static", num_threads=nt):
                    failed |= extql_lstm_range(&p, prep, xp, yp,
                                               yhp, ycp, seq, batch, layout, t, t + 1) != 0
    free(prep)
    if failed:
        raise MemoryError("ExtendedLSTM: the kernel found no memory for its buffers")
    return items
