# cython: language_level=3, boundscheck=False, wraparound=False
# cython: cdivision=True, initializedcheck=False, nonecheck=False
"""The quantize / dequantize kernels: the one implementation of the math.

Every path of extql (the NumPy API, the onnxruntime custom op) ends here.
Inputs are validated by the caller; the kernels take dense buffers, a type
code (ONNX's TensorProto numbering) and the [outer, D, inner] view of the
tensor.  The element loops are written over one fused type so that each of
the eight quantized types gets its own specialised, vectorisable loop.

The C entry points (``extql_*``, declared in ``src/extql_kernels.h``) use no
Python object and no module state, so the onnxruntime shim can call them
from its own threads without the module ever having been imported.  For
that reason every constant below is a C macro, not a Cython global (Cython
globals are only set when the module is imported).
"""

from libc.stdint cimport (
    int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
)
from cython.parallel cimport prange
from libc.string cimport memcpy
from libc.stdlib cimport free, malloc

cdef extern from "extql_kernels.h":
    enum:
        EXTQL_UINT8
        EXTQL_INT8
        EXTQL_UINT16
        EXTQL_INT16
        EXTQL_INT32
        EXTQL_FLOAT16
        EXTQL_UINT32
        EXTQL_BFLOAT16
        EXTQL_STREAM
    int64_t STREAM_MIN_BYTES "EXTQL_STREAM_MIN_BYTES"
    int stream_flags "EXTQL_STREAM_FLAGS"(int64_t out_bytes) noexcept nogil

cdef extern from "extql_split.h":
    # The thread split (one policy with the onnxruntime ops').
    int split_threads_for "extql_threads_for"(int64_t n, int threads) noexcept nogil
    int64_t chunk_for "extql_chunk_for"(int64_t n, int threads) noexcept nogil

cdef extern from "extql_types.h":
    # The type table (extql/_typetable.py, generated into C): element sizes
    # and the integer types' saturation bounds, as doubles.
    int qtype_size "extql_qtype_size"(int code) noexcept nogil
    const double INT8_LO "EXTQL_INT8_LO"
    const double INT8_HI "EXTQL_INT8_HI"
    const double UINT8_LO "EXTQL_UINT8_LO"
    const double UINT8_HI "EXTQL_UINT8_HI"
    const double INT16_LO "EXTQL_INT16_LO"
    const double INT16_HI "EXTQL_INT16_HI"
    const double UINT16_LO "EXTQL_UINT16_LO"
    const double UINT16_HI "EXTQL_UINT16_HI"
    const double INT32_LO "EXTQL_INT32_LO"
    const double INT32_HI "EXTQL_INT32_HI"
    const double UINT32_LO "EXTQL_UINT32_LO"
    const double UINT32_HI "EXTQL_UINT32_HI"

cdef extern from *:
    """
    #include <string.h>
    #include <stdlib.h>
    #ifdef _OPENMP
    #include <omp.h>
    #define EXTQL_HAVE_OPENMP 1
    static int extql_cores(void) { return omp_get_num_procs(); }
    #else
    #define EXTQL_HAVE_OPENMP 0
    static int extql_cores(void) { return 1; }
    #endif

    /* The two 16-bit float types, as distinct C types for the fused type. */
    typedef struct { uint16_t bits; } extql_float16_t;
    typedef struct { uint16_t bits; } extql_bfloat16_t;

    static inline uint32_t extql_f32_bits(float f) {
        uint32_t u; memcpy(&u, &f, sizeof u); return u;
    }
    static inline float extql_bits_f32(uint32_t u) {
        float f; memcpy(&f, &u, sizeof f); return f;
    }

    /* Float constants must be float literals: a double literal would turn
       the float arithmetic around it into double arithmetic. */
    /* x + 1.5*2^k - 1.5*2^k rounds |x| <= 2^(k-1) to an integer, ties to
       even, in the default rounding mode (the sum's ulp is 1). */
    #define EXTQL_MAGIC23 12582912.0f
    #define EXTQL_MAGIC52 6755399441055744.0
    #define EXTQL_HALF 0.5f                  /* ulp 2^-24: float16 subnormals */
    /* The largest finite float16 / bfloat16 values (the type table). */
    #define EXTQL_F16_MAX ((float)EXTQL_FLOAT16_HI)
    #define EXTQL_BF16_MAX ((float)EXTQL_BFLOAT16_HI)

    /* Thread count: 0 means not chosen yet (see extql_get_num_threads). */
    static int extql_threads_setting = 0;
    """
    ctypedef struct float16_t "extql_float16_t":
        uint16_t bits
    ctypedef struct bfloat16_t "extql_bfloat16_t":
        uint16_t bits
    uint32_t f32_bits "extql_f32_bits"(float f) noexcept nogil
    float bits_f32 "extql_bits_f32"(uint32_t u) noexcept nogil
    const float MAGIC23 "EXTQL_MAGIC23"
    const double MAGIC52 "EXTQL_MAGIC52"
    const float HALF "EXTQL_HALF"
    const float F16_MAX "EXTQL_F16_MAX"
    const float BF16_MAX "EXTQL_BF16_MAX"
    const int HAVE_OPENMP "EXTQL_HAVE_OPENMP"
    int extql_cores() noexcept nogil
    int threads_setting "extql_threads_setting"

cdef extern from "extql_isa.h":
    bint use_avx2 "EXTQL_USE_AVX2"() noexcept nogil
    int isa_supported "extql_isa_supported"(int isa) noexcept nogil
    int ISA_BASELINE "EXTQL_ISA_BASELINE"
    int ISA_AVX2 "EXTQL_ISA_AVX2"
    int isa_current "extql_isa_current"() noexcept nogil
    int isa_force "extql_isa_force"(int isa) noexcept nogil
    int quantize_range_ex_avx2 "extql_quantize_range_ex_avx2"(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil
    int dequantize_range_ex_avx2 "extql_dequantize_range_ex_avx2"(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil

cdef extern from "extql_avx2.h":
    # The longest step of the "cols" loops, the longest axis whose scale
    # and zero point are extended periodically (on the stack), and the
    # runs short enough to be walked with per-element scales.
    enum:
        COLS_STEP "EXTQL_COLS_STEP"
        COLS_EXT_MAX "EXTQL_COLS_EXT_MAX"
        SHORT_RUN "EXTQL_SHORT_RUN"
        PERIOD_MAX "EXTQL_PERIOD_MAX"
    # The AVX2 copy's element loops (0 and no-ops in the baseline copy);
    # each returns how many leading elements it wrote.  stream: write with
    # non-temporal stores (outputs larger than the caches).
    const bint AVX2_LOOPS "EXTQL_AVX2_LOOPS"
    void store_fence "EXTQL_STORE_FENCE"() noexcept nogil
    int64_t q_block_int8 "extql_avx2_q_block_int8"(
        const float *x, int8_t *y, int64_t n, float s, int8_t zp,
        int stream) noexcept nogil
    int64_t q_cols_int8 "extql_avx2_q_cols_int8"(
        const float *x, int8_t *y, int64_t n, const float *s,
        const int8_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_int8 "extql_avx2_dq_block_int8"(
        const int8_t *x, float *y, int64_t n, float s, int8_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_int8 "extql_avx2_dq_cols_int8"(
        const int8_t *x, float *y, int64_t n, const float *s,
        const int8_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_uint8 "extql_avx2_q_block_uint8"(
        const float *x, uint8_t *y, int64_t n, float s, uint8_t zp,
        int stream) noexcept nogil
    int64_t q_cols_uint8 "extql_avx2_q_cols_uint8"(
        const float *x, uint8_t *y, int64_t n, const float *s,
        const uint8_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_uint8 "extql_avx2_dq_block_uint8"(
        const uint8_t *x, float *y, int64_t n, float s, uint8_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_uint8 "extql_avx2_dq_cols_uint8"(
        const uint8_t *x, float *y, int64_t n, const float *s,
        const uint8_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_int16 "extql_avx2_q_block_int16"(
        const float *x, int16_t *y, int64_t n, float s, int16_t zp,
        int stream) noexcept nogil
    int64_t q_cols_int16 "extql_avx2_q_cols_int16"(
        const float *x, int16_t *y, int64_t n, const float *s,
        const int16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_int16 "extql_avx2_dq_block_int16"(
        const int16_t *x, float *y, int64_t n, float s, int16_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_int16 "extql_avx2_dq_cols_int16"(
        const int16_t *x, float *y, int64_t n, const float *s,
        const int16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_uint16 "extql_avx2_q_block_uint16"(
        const float *x, uint16_t *y, int64_t n, float s, uint16_t zp,
        int stream) noexcept nogil
    int64_t q_cols_uint16 "extql_avx2_q_cols_uint16"(
        const float *x, uint16_t *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_uint16 "extql_avx2_dq_block_uint16"(
        const uint16_t *x, float *y, int64_t n, float s, uint16_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_uint16 "extql_avx2_dq_cols_uint16"(
        const uint16_t *x, float *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_int32 "extql_avx2_q_block_int32"(
        const float *x, int32_t *y, int64_t n, float s, int32_t zp,
        int stream) noexcept nogil
    int64_t q_cols_int32 "extql_avx2_q_cols_int32"(
        const float *x, int32_t *y, int64_t n, const float *s,
        const int32_t *zp, int64_t D, int64_t c0, const float *fl,
        const float *fh, int stream) noexcept nogil
    int64_t dq_block_int32 "extql_avx2_dq_block_int32"(
        const int32_t *x, float *y, int64_t n, float s, int32_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_int32 "extql_avx2_dq_cols_int32"(
        const int32_t *x, float *y, int64_t n, const float *s,
        const int32_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_uint32 "extql_avx2_q_block_uint32"(
        const float *x, uint32_t *y, int64_t n, float s, uint32_t zp,
        int stream) noexcept nogil
    int64_t q_cols_uint32 "extql_avx2_q_cols_uint32"(
        const float *x, uint32_t *y, int64_t n, const float *s,
        const uint32_t *zp, int64_t D, int64_t c0, const float *fl,
        const float *fh, int stream) noexcept nogil
    int64_t dq_block_uint32 "extql_avx2_dq_block_uint32"(
        const uint32_t *x, float *y, int64_t n, float s, uint32_t zp,
        int stream) noexcept nogil
    int64_t dq_cols_uint32 "extql_avx2_dq_cols_uint32"(
        const uint32_t *x, float *y, int64_t n, const float *s,
        const uint32_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_f16 "extql_avx2_q_block_f16"(
        const float *x, uint16_t *y, int64_t n, float s, float zf,
        int stream) noexcept nogil
    int64_t q_cols_f16 "extql_avx2_q_cols_f16"(
        const float *x, uint16_t *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_f16 "extql_avx2_dq_block_f16"(
        const uint16_t *x, float *y, int64_t n, float s, float zf,
        int stream) noexcept nogil
    int64_t dq_cols_f16 "extql_avx2_dq_cols_f16"(
        const uint16_t *x, float *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t q_block_bf16 "extql_avx2_q_block_bf16"(
        const float *x, uint16_t *y, int64_t n, float s, float zf,
        int stream) noexcept nogil
    int64_t q_cols_bf16 "extql_avx2_q_cols_bf16"(
        const float *x, uint16_t *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    int64_t dq_block_bf16 "extql_avx2_dq_block_bf16"(
        const uint16_t *x, float *y, int64_t n, float s, float zf,
        int stream) noexcept nogil
    int64_t dq_cols_bf16 "extql_avx2_dq_cols_bf16"(
        const uint16_t *x, float *y, int64_t n, const float *s,
        const uint16_t *zp, int64_t D, int64_t c0,
        int stream) noexcept nogil
    float f32_toward "extql_f32_toward"(double d, int up) noexcept nogil
    void stream32 "extql_avx2_stream32"(void *dst,
                                        const void *src) noexcept nogil
    # p[0, n) = v for 1-, 2- and 4-byte elements; the AVX2 copy may write up
    # to 31 bytes past n (the windows have COLS_STEP elements of slack).
    void fill_8 "extql_avx2_fill_8"(void *p, uint8_t v, int64_t n) noexcept nogil
    void fill_16 "extql_avx2_fill_16"(void *p, uint16_t v,
                                      int64_t n) noexcept nogil
    void fill_32 "extql_avx2_fill_32"(void *p, uint32_t v,
                                      int64_t n) noexcept nogil

cdef extern from "<stdlib.h>" nogil:
    char *getenv(const char *name)
    long strtol(const char *s, char **end, int base)


ctypedef fused qtype_t:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    float16_t
    bfloat16_t


# ---------------------------------------------------------------------------
# Scalar conversions (inlined into the loops; branch-free selects only)
# ---------------------------------------------------------------------------

cdef inline uint16_t float_to_half_bits(float v) noexcept nogil:
    """float32 -> float16 bits, round to nearest even; |v| <= 65504 or NaN."""
    cdef uint32_t u = f32_bits(v)
    cdef uint32_t sign = (u >> 16) & 0x8000u
    cdef uint32_t a = u & 0x7FFFFFFFu
    # Normal: re-bias the exponent (127 -> 15), round at bit 13 to even.
    cdef uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13
    # Subnormal (|v| < 2^-14): adding 0.5 (ulp 2^-24) rounds the mantissa.
    cdef uint32_t sub = f32_bits(bits_f32(a) + HALF) - 0x3F000000u
    # NaN stays NaN: quiet bit set, top payload bits kept (as NumPy does).
    cdef uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu)
    cdef uint32_t h = sub if a < 0x38800000u else normal
    h = nan if a > 0x7F800000u else h
    return <uint16_t>(h | sign)


cdef inline float half_bits_to_float(uint16_t h) noexcept nogil:
    """float16 bits -> float32, exact (subnormals, inf and NaN included)."""
    cdef uint32_t sign = (<uint32_t>h & 0x8000u) << 16
    cdef uint32_t em = (<uint32_t>h & 0x7FFFu) << 13
    cdef uint32_t exp = em & 0x0F800000u
    # Normal: re-bias the exponent (15 -> 127); inf/NaN: to 255.
    cdef uint32_t normal = em + 0x38000000u
    normal = normal + 0x38000000u if exp == 0x0F800000u else normal
    # Subnormal or zero: let the FPU normalise m * 2^-24.
    cdef uint32_t sub = f32_bits(
        bits_f32(em + 0x38800000u) - bits_f32(0x38800000u))
    cdef uint32_t a = sub if exp == 0 else normal
    return bits_f32(a | sign)


cdef inline uint16_t float_to_bfloat16_bits(float v) noexcept nogil:
    """float32 -> bfloat16 bits, round to nearest even; NaN -> sign | 0x7FC0
    (the canonical quiet NaN, as ml_dtypes gives)."""
    cdef uint32_t u = f32_bits(v)
    # Arithmetic shifts keep the result in int16's range, which SSE2 can
    # pack; the low 16 bits are the same as with logical shifts.
    cdef int32_t r = <int32_t>(u + 0x7FFFu + ((u >> 16) & 1u)) >> 16
    cdef int32_t nan = ((<int32_t>u >> 16) & ~0x7FFF) | 0x7FC0  # sign | 0x7FC0
    return <uint16_t><int16_t>(nan if (u & 0x7FFFFFFFu) > 0x7F800000u else r)


cdef inline float bfloat16_bits_to_float(uint16_t b) noexcept nogil:
    return bits_f32(<uint32_t>b << 16)


cdef inline float zero_point_as_float(qtype_t zp) noexcept nogil:
    if qtype_t is float16_t:
        return half_bits_to_float(zp.bits)
    elif qtype_t is bfloat16_t:
        return bfloat16_bits_to_float(zp.bits)
    else:
        return <float>zp


cdef inline qtype_t zero_of(qtype_t *like) noexcept nogil:
    """The zero point 0 of the type (used when no zero point is given)."""
    cdef qtype_t z
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        z.bits = 0
    else:
        z = 0
    return z


# ---------------------------------------------------------------------------
# One element
# ---------------------------------------------------------------------------

cdef inline qtype_t quantize_one(float x, float s, qtype_t zp) noexcept nogil:
    """y = saturate(round_half_even(x / s) + zp), per the contract."""
    cdef float v = x / s
    cdef float zf, flo, fhi
    cdef double zd, d, lo, hi
    cdef qtype_t y
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        v = v + zero_point_as_float(zp)
        if qtype_t is float16_t:
            v = F16_MAX if v > F16_MAX else v       # NaN compares false: stays
            v = -F16_MAX if v < -F16_MAX else v
            y.bits = float_to_half_bits(v)
        else:
            v = BF16_MAX if v > BF16_MAX else v
            v = -BF16_MAX if v < -BF16_MAX else v
            y.bits = float_to_bfloat16_bits(v)
        return y
    elif qtype_t is int32_t or qtype_t is uint32_t:
        # In double: clamp x / s to [lo - zp, hi - zp] (NaN fails the first
        # comparison and becomes the lower bound), round to even, add zp.
        # The bounds are integers, so the rounded value stays inside them,
        # and every step is exact in double.
        zd = <double>zp
        if qtype_t is int32_t:
            lo = INT32_LO - zd
            hi = INT32_HI - zd
        else:
            lo = UINT32_LO - zd
            hi = UINT32_HI - zd
        d = <double>v
        d = d if d > lo else lo
        d = d if d < hi else hi
        d = ((d + MAGIC52) - MAGIC52) + zd
        if qtype_t is int32_t:
            return <int32_t>d
        else:
            # Convert through int32 (vectorisable) by shifting the range.
            return <uint32_t>(<int32_t>(d - 2147483648.0)) ^ 0x80000000u
    else:
        # The same in float32, exact for the 8- and 16-bit ranges.
        zf = <float>zp
        if qtype_t is int8_t:
            flo = <float>INT8_LO - zf
            fhi = <float>INT8_HI - zf
        elif qtype_t is uint8_t:
            flo = <float>UINT8_LO - zf
            fhi = <float>UINT8_HI - zf
        elif qtype_t is int16_t:
            flo = <float>INT16_LO - zf
            fhi = <float>INT16_HI - zf
        else:
            flo = <float>UINT16_LO - zf
            fhi = <float>UINT16_HI - zf
        v = v if v > flo else flo
        v = v if v < fhi else fhi
        v = ((v + MAGIC23) - MAGIC23) + zf
        if qtype_t is uint16_t:
            # Through int16 (SSE2 packs signed words) by shifting the range.
            return <uint16_t>(<int16_t><int32_t>(v - <float>32768)) ^ 0x8000u
        else:
            return <qtype_t><int32_t>v


cdef inline float dequantize_one(qtype_t x, float s, qtype_t zp) noexcept nogil:
    """y = float32(x - zp) * s: the difference exact, then one rounding."""
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        return (zero_point_as_float(x) - zero_point_as_float(zp)) * s
    elif qtype_t is int32_t or qtype_t is uint32_t:
        # |x - zp| < 2^33 is exact in double; the cast rounds once to float.
        return <float>(<double>x - <double>zp) * s
    else:
        return <float>(<int32_t>x - <int32_t>zp) * s


# ---------------------------------------------------------------------------
# Runs of elements: one scale (a block) or one scale per element (columns)
# ---------------------------------------------------------------------------

cdef void quantize_block(const float *x, qtype_t *y, Py_ssize_t n, float s,
                         qtype_t zp, int stream) noexcept nogil:
    cdef Py_ssize_t i, i0 = 0
    if AVX2_LOOPS:
        if qtype_t is int8_t:
            i0 = q_block_int8(x, y, n, s, zp, stream)
        elif qtype_t is uint8_t:
            i0 = q_block_uint8(x, y, n, s, zp, stream)
        elif qtype_t is int16_t:
            i0 = q_block_int16(x, y, n, s, zp, stream)
        elif qtype_t is uint16_t:
            i0 = q_block_uint16(x, y, n, s, zp, stream)
        elif qtype_t is int32_t:
            i0 = q_block_int32(x, y, n, s, zp, stream)
        elif qtype_t is uint32_t:
            i0 = q_block_uint32(x, y, n, s, zp, stream)
        elif qtype_t is float16_t:
            i0 = q_block_f16(x, <uint16_t *>y, n, s, zero_point_as_float(zp), stream)
        else:
            i0 = q_block_bf16(x, <uint16_t *>y, n, s, zero_point_as_float(zp), stream)
    for i in range(i0, n):
        y[i] = quantize_one(x[i], s, zp)


cdef void quantize_columns(const float *x, qtype_t *y, Py_ssize_t n,
                           const float *s, const qtype_t *zp, int64_t D,
                           int64_t c0, const float *fl, const float *fh,
                           int stream) noexcept nogil:
    """Element i uses channel (c0 + i) % D: s[c], zp[c] (zp NULL: zero).
    When the run wraps around D, s and zp hold D + COLS_STEP entries,
    extended periodically (the vector loops read a whole step from c).
    32-bit types: fl, fh (or NULL) are the channels' float bounds."""
    cdef Py_ssize_t i, i0 = 0
    cdef int64_t c
    cdef qtype_t zero = zero_of(y)
    if AVX2_LOOPS:
        if qtype_t is int8_t:
            i0 = q_cols_int8(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is uint8_t:
            i0 = q_cols_uint8(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is int16_t:
            i0 = q_cols_int16(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is uint16_t:
            i0 = q_cols_uint16(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is int32_t:
            i0 = q_cols_int32(x, y, n, s, zp, D, c0, fl, fh, stream)
        elif qtype_t is uint32_t:
            i0 = q_cols_uint32(x, y, n, s, zp, D, c0, fl, fh, stream)
        elif qtype_t is float16_t:
            i0 = q_cols_f16(x, <uint16_t *>y, n, s, <const uint16_t *>zp, D,
                            c0, stream)
        else:
            i0 = q_cols_bf16(x, <uint16_t *>y, n, s, <const uint16_t *>zp, D,
                             c0, stream)
    if c0 + n <= D:
        # No wrap (a run within one row): plain indexing, which the compiler
        # vectorises (the baseline variant's whole loop).
        if zp == NULL:
            for i in range(i0, n):
                y[i] = quantize_one(x[i], s[c0 + i], zero)
        else:
            for i in range(i0, n):
                y[i] = quantize_one(x[i], s[c0 + i], zp[c0 + i])
        return
    c = (c0 + i0) % D
    for i in range(i0, n):
        y[i] = quantize_one(x[i], s[c], zero if zp == NULL else zp[c])
        c += 1
        if c == D:
            c = 0


cdef void dequantize_block(const qtype_t *x, float *y, Py_ssize_t n, float s,
                           qtype_t zp, int stream) noexcept nogil:
    cdef Py_ssize_t i, i0 = 0
    if AVX2_LOOPS:
        if qtype_t is int8_t:
            i0 = dq_block_int8(x, y, n, s, zp, stream)
        elif qtype_t is uint8_t:
            i0 = dq_block_uint8(x, y, n, s, zp, stream)
        elif qtype_t is int16_t:
            i0 = dq_block_int16(x, y, n, s, zp, stream)
        elif qtype_t is uint16_t:
            i0 = dq_block_uint16(x, y, n, s, zp, stream)
        elif qtype_t is int32_t:
            i0 = dq_block_int32(x, y, n, s, zp, stream)
        elif qtype_t is uint32_t:
            i0 = dq_block_uint32(x, y, n, s, zp, stream)
        elif qtype_t is float16_t:
            i0 = dq_block_f16(<const uint16_t *>x, y, n, s,
                              zero_point_as_float(zp), stream)
        else:
            i0 = dq_block_bf16(<const uint16_t *>x, y, n, s,
                               zero_point_as_float(zp), stream)
    for i in range(i0, n):
        y[i] = dequantize_one(x[i], s, zp)


cdef void dequantize_columns(const qtype_t *x, float *y, Py_ssize_t n,
                             const float *s, const qtype_t *zp, int64_t D,
                             int64_t c0, int stream) noexcept nogil:
    """As quantize_columns."""
    cdef Py_ssize_t i, i0 = 0
    cdef int64_t c
    cdef qtype_t zero = zero_of(<qtype_t *>x)
    if AVX2_LOOPS:
        if qtype_t is int8_t:
            i0 = dq_cols_int8(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is uint8_t:
            i0 = dq_cols_uint8(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is int16_t:
            i0 = dq_cols_int16(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is uint16_t:
            i0 = dq_cols_uint16(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is int32_t:
            i0 = dq_cols_int32(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is uint32_t:
            i0 = dq_cols_uint32(x, y, n, s, zp, D, c0, stream)
        elif qtype_t is float16_t:
            i0 = dq_cols_f16(<const uint16_t *>x, y, n, s,
                             <const uint16_t *>zp, D, c0, stream)
        else:
            i0 = dq_cols_bf16(<const uint16_t *>x, y, n, s,
                              <const uint16_t *>zp, D, c0, stream)
    if c0 + n <= D:
        if zp == NULL:
            for i in range(i0, n):
                y[i] = dequantize_one(x[i], s[c0 + i], zero)
        else:
            for i in range(i0, n):
                y[i] = dequantize_one(x[i], s[c0 + i], zp[c0 + i])
        return
    c = (c0 + i0) % D
    for i in range(i0, n):
        y[i] = dequantize_one(x[i], s[c], zero if zp == NULL else zp[c])
        c += 1
        if c == D:
            c = 0


cdef inline void wide_bounds(const qtype_t *z_ext, bint have_zp, float *fl,
                             float *fh, int64_t D) noexcept nogil:
    """The float bounds of round(x / s) for each channel of a 32-bit
    quantize (see extql_w32_bounds): lo - zp rounded up, hi - zp down."""
    cdef int64_t k
    cdef double zd, lo, hi
    if qtype_t is int32_t:
        lo, hi = INT32_LO, INT32_HI
    else:
        lo, hi = UINT32_LO, UINT32_HI
    for k in range(D):
        if qtype_t is int32_t or qtype_t is uint32_t:
            zd = <double>z_ext[k] if have_zp else 0.0
        else:
            zd = 0.0
        fl[k] = f32_toward(lo - zd, 1)
        fh[k] = f32_toward(hi - zd, 0)
    for k in range(D, D + COLS_STEP):
        fl[k] = fl[k - D]
        fh[k] = fh[k - D]


cdef inline void extend(const float *scale, const qtype_t *zp, float *s_ext,
                        qtype_t *z_ext, int64_t D) noexcept nogil:
    """s_ext[k] = scale[k % D], z_ext[k] = zp[k % D] for k < D + COLS_STEP."""
    cdef int64_t k
    memcpy(s_ext, scale, D * sizeof(float))
    for k in range(D, D + COLS_STEP):
        s_ext[k] = s_ext[k - D]
    if zp != NULL:
        memcpy(z_ext, zp, D * sizeof(qtype_t))
        for k in range(D, D + COLS_STEP):
            z_ext[k] = z_ext[k - D]


cdef inline void expand_runs(const float *scale, const qtype_t *zp,
                             float *s_ext, qtype_t *z_ext, float *fl,
                             float *fh, int64_t D, int64_t inner, int64_t d,
                             int64_t off, int64_t w) noexcept nogil:
    """The scale and zero point of each of w elements, element j at s_ext[j]
    and z_ext[j] (zp NULL: z_ext untouched), starting at channel d, offset
    off in its run of inner elements.  The arrays need COLS_STEP elements of
    slack past w (the fills may write that far).  fl, fh (32-bit quantize, else NULL):
    each element's float bounds, as wide_bounds gives them per channel."""
    cdef int64_t j = 0, run
    cdef float sv, lv = 0, hv = 0
    cdef qtype_t zv
    cdef double zd, lo = 0, hi = 0
    if qtype_t is int32_t:
        lo, hi = INT32_LO, INT32_HI
    elif qtype_t is uint32_t:
        lo, hi = UINT32_LO, UINT32_HI
    while j < w:
        run = inner - off if inner - off < w - j else w - j
        sv = scale[d]
        fill_32(s_ext + j, f32_bits(sv), run)
        if zp != NULL:
            zv = zp[d]
            if sizeof(qtype_t) == 1:
                fill_8(z_ext + j, (<uint8_t *>&zv)[0], run)
            elif sizeof(qtype_t) == 2:
                fill_16(z_ext + j, (<uint16_t *>&zv)[0], run)
            else:
                fill_32(z_ext + j, (<uint32_t *>&zv)[0], run)
        if qtype_t is int32_t or qtype_t is uint32_t:
            if fl != NULL:
                zd = <double>zp[d] if zp != NULL else 0.0
                lv = f32_toward(lo - zd, 1)
                hv = f32_toward(hi - zd, 0)
                fill_32(fl + j, f32_bits(lv), run)
                fill_32(fh + j, f32_bits(hv), run)
        j += run
        off = 0
        d += 1
        if d == D:
            d = 0


cdef bint quantize_period(const float *x, const float *scale,
                          const qtype_t *zp, qtype_t *y, int64_t D,
                          int64_t inner, int64_t start, int64_t stop,
                          int stream) noexcept nogil:
    """Short runs along a middle axis, when the range holds at least one
    period of P = D * inner elements and P <= PERIOD_MAX: the scale and zero
    point expanded per element over one period (on the heap, extended by
    COLS_STEP), then the whole range in one "cols" pass.  False (nothing
    done) when that does not apply or the allocation fails."""
    cdef int64_t P = D * inner, m
    cdef char *buf
    cdef float *ps
    cdef qtype_t *pz
    cdef float *pfl = NULL
    cdef float *pfh = NULL
    if P > PERIOD_MAX or P > stop - start:
        return False
    m = P + 2 * COLS_STEP
    if qtype_t is int32_t or qtype_t is uint32_t:
        buf = <char *>malloc(m * (3 * sizeof(float) + sizeof(qtype_t)))
    else:
        buf = <char *>malloc(m * (sizeof(float) + sizeof(qtype_t)))
    if buf == NULL:
        return False
    ps = <float *>buf
    pz = <qtype_t *>(ps + m)
    if qtype_t is int32_t or qtype_t is uint32_t:
        pfl = <float *>(pz + m)
        pfh = pfl + m
    expand_runs(scale, zp, ps, pz, pfl, pfh, D, inner, 0, 0, P + COLS_STEP)
    quantize_columns(x + start, y + start, stop - start, ps,
                     pz if zp != NULL else NULL, P, start % P, pfl, pfh,
                     stream)
    free(buf)
    return True


cdef bint dequantize_period(const qtype_t *x, const float *scale,
                            const qtype_t *zp, float *y, int64_t D,
                            int64_t inner, int64_t start, int64_t stop,
                            int stream) noexcept nogil:
    """As quantize_period."""
    cdef int64_t P = D * inner, m
    cdef char *buf
    cdef float *ps
    cdef qtype_t *pz
    if P > PERIOD_MAX or P > stop - start:
        return False
    m = P + 2 * COLS_STEP
    buf = <char *>malloc(m * (sizeof(float) + sizeof(qtype_t)))
    if buf == NULL:
        return False
    ps = <float *>buf
    pz = <qtype_t *>(ps + m)
    expand_runs(scale, zp, ps, pz, NULL, NULL, D, inner, 0, 0, P + COLS_STEP)
    dequantize_columns(x + start, y + start, stop - start, ps,
                       pz if zp != NULL else NULL, P, start % P, stream)
    free(buf)
    return True


cdef void quantize_runs_stream(const float *x, const float *scale,
                               const qtype_t *zp, qtype_t *y, int64_t D,
                               int64_t inner, int64_t start,
                               int64_t stop) noexcept nogil:
    """Runs of inner elements sharing a channel, written with streaming
    stores only (y aligned to its element size): the vector loop on each
    run's part that starts and ends on a 32-byte boundary of the output, and
    the 32-byte groups that straddle two runs element by element into a
    buffer, then streamed.  Only the range's first and last partial groups
    get plain stores.  (Run by run, every run boundary would leave a cache
    line written partly with plain and partly with streaming stores, which
    costs the line a read and a flush.)"""
    cdef int64_t G = 32 // sizeof(qtype_t)
    cdef int64_t i = start, row, d, off, nvec, lim
    cdef qtype_t zero = zero_of(y)
    cdef qtype_t tmp[32]
    cdef float s_g[32 + COLS_STEP]
    cdef qtype_t z_g[32 + COLS_STEP]
    row = i // inner
    d = row % D
    off = i - row * inner
    lim = ((32 - ((<size_t>(y + i)) & 31)) & 31) // sizeof(qtype_t)
    while i < stop:
        if lim > 0 or i + G > stop:
            # The range's unaligned first and last elements: plain stores.
            if lim == 0:
                lim = stop - i
            y[i] = quantize_one(x[i], scale[d], zero if zp == NULL else zp[d])
            i += 1
            lim -= 1
            off += 1
        else:
            nvec = inner - off if inner - off < stop - i else stop - i
            nvec = nvec & ~(<int64_t>(COLS_STEP - 1))
            if nvec > 0:
                quantize_block(x + i, y + i, nvec, scale[d],
                               zero if zp == NULL else zp[d], 1)
                i += nvec
                off += nvec
            else:
                # The group's scales per element, so the vector loop does it.
                expand_runs(scale, zp, s_g, z_g, NULL, NULL, D, inner, d, off,
                            G)
                quantize_columns(x + i, tmp, G, s_g,
                                 z_g if zp != NULL else NULL, G, 0, NULL,
                                 NULL, 0)
                stream32(y + i, tmp)
                i += G
                off += G
                while off >= inner:
                    off -= inner
                    d = d + 1 if d + 1 < D else 0
        if off == inner:
            off = 0
            d = d + 1 if d + 1 < D else 0


cdef void dequantize_runs_stream(const qtype_t *x, const float *scale,
                                 const qtype_t *zp, float *y, int64_t D,
                                 int64_t inner, int64_t start,
                                 int64_t stop) noexcept nogil:
    """As quantize_runs_stream."""
    cdef int64_t G = 8
    cdef int64_t i = start, row, d, off, k, nvec, lim
    cdef qtype_t zero = zero_of(<qtype_t *>x)
    cdef float tmp[8]
    row = i // inner
    d = row % D
    off = i - row * inner
    lim = ((32 - ((<size_t>(y + i)) & 31)) & 31) // sizeof(float)
    while i < stop:
        if lim > 0 or i + G > stop:
            if lim == 0:
                lim = stop - i
            y[i] = dequantize_one(x[i], scale[d], zero if zp == NULL else zp[d])
            i += 1
            lim -= 1
            off += 1
        else:
            nvec = inner - off if inner - off < stop - i else stop - i
            nvec = nvec & ~(<int64_t>15)
            if nvec > 0:
                dequantize_block(x + i, y + i, nvec, scale[d],
                                 zero if zp == NULL else zp[d], 1)
                i += nvec
                off += nvec
            else:
                for k in range(G):
                    tmp[k] = dequantize_one(x[i + k], scale[d],
                                            zero if zp == NULL else zp[d])
                    off += 1
                    if off == inner:
                        off = 0
                        d = d + 1 if d + 1 < D else 0
                stream32(y + i, tmp)
                i += G
        if off == inner:
            off = 0
            d = d + 1 if d + 1 < D else 0


# ---------------------------------------------------------------------------
# Ranges of the flat tensor, walked as runs that share a scale
# ---------------------------------------------------------------------------

cdef void quantize_range(const float *x, const float *scale,
                         const qtype_t *zp, qtype_t *y, int64_t D,
                         int64_t inner, int64_t start,
                         int64_t stop, int stream) noexcept nogil:
    cdef int64_t i = start, run, row, d, off, w, ph
    cdef qtype_t zero = zero_of(y)
    cdef float s_ext[COLS_EXT_MAX + COLS_STEP]
    cdef qtype_t z_ext[COLS_EXT_MAX + COLS_STEP]
    cdef float fl_ext[COLS_EXT_MAX + COLS_STEP]
    cdef float fh_ext[COLS_EXT_MAX + COLS_STEP]
    cdef float *fl = NULL
    cdef float *fh = NULL
    if inner == 1 and D > 1:
        # The channel changes every element (axis = last).
        if AVX2_LOOPS and D <= COLS_EXT_MAX and stop - start >= 2 * D:
            # One pass over the range, with the scale and zero point
            # extended periodically so that a vector step can cross the end
            # of a row.
            extend(scale, zp, s_ext, z_ext, D)
            if qtype_t is int32_t or qtype_t is uint32_t:
                fl, fh = fl_ext, fh_ext
                wide_bounds(z_ext, zp != NULL, fl, fh, D)
            quantize_columns(x + start, y + start, stop - start, s_ext,
                             z_ext if zp != NULL else NULL, D, start % D,
                             fl, fh, stream)
        else:
            # Runs along D.
            while i < stop:
                d = i % D
                run = D - d if D - d < stop - i else stop - i
                quantize_columns(x + i, y + i, run, scale + d,
                                 zp + d if zp != NULL else zp, D - d, 0,
                                 NULL, NULL, stream)
                i += run
    elif (AVX2_LOOPS and D > 1 and inner < SHORT_RUN
          and quantize_period(x, scale, zp, y, D, inner, start, stop,
                              stream)):
        # Short runs (a middle axis of small extent, as NCHW activations
        # with a small H * W), in one pass over a period.
        pass
    elif (AVX2_LOOPS and stream and D > 1 and inner >= 16
          and (<size_t>y) % sizeof(qtype_t) == 0):
        quantize_runs_stream(x, scale, zp, y, D, inner, start, stop)
    elif AVX2_LOOPS and D > 1 and inner < SHORT_RUN:
        # Short runs where neither applies: windows of up to COLS_EXT_MAX
        # elements, each with its scale and zero point expanded per element,
        # so that the vector loop crosses run boundaries (run by run, every
        # run would end with scalar code).  Windows end where the output is
        # 64-byte aligned, so that a streaming store never shares a cache
        # line with a plain one except at the range's ends.
        row = i // inner
        d = row % D
        off = i - row * inner
        if qtype_t is int32_t or qtype_t is uint32_t:
            fl, fh = fl_ext, fh_ext
        ph = ((<size_t>y) & 63) // sizeof(qtype_t)
        while i < stop:
            w = COLS_EXT_MAX - (i + ph) % COLS_EXT_MAX
            w = w if w < stop - i else stop - i
            expand_runs(scale, zp, s_ext, z_ext, fl, fh, D, inner, d, off, w)
            quantize_columns(x + i, y + i, w, s_ext,
                             z_ext if zp != NULL else NULL, w, 0, fl, fh,
                             stream)
            i += w
            off += w
            d = (d + off // inner) % D
            off = off % inner
    else:
        # Runs of inner elements that share a channel; only the first run's
        # channel and offset need a division.
        row = i // inner
        d = row % D
        off = i - row * inner
        while i < stop:
            run = inner - off if inner - off < stop - i else stop - i
            quantize_block(x + i, y + i, run, scale[d],
                           zero if zp == NULL else zp[d], stream)
            i += run
            off = 0
            d += 1
            if d == D:
                d = 0
    if stream:
        store_fence()


cdef void dequantize_range(const qtype_t *x, const float *scale,
                           const qtype_t *zp, float *y, int64_t D,
                           int64_t inner, int64_t start,
                           int64_t stop, int stream) noexcept nogil:
    cdef int64_t i = start, run, row, d, off, w, ph
    cdef qtype_t zero = zero_of(<qtype_t *>x)
    cdef float s_ext[COLS_EXT_MAX + COLS_STEP]
    cdef qtype_t z_ext[COLS_EXT_MAX + COLS_STEP]
    if inner == 1 and D > 1:
        if AVX2_LOOPS and D <= COLS_EXT_MAX and stop - start >= 2 * D:
            extend(scale, zp, s_ext, z_ext, D)
            dequantize_columns(x + start, y + start, stop - start, s_ext,
                               z_ext if zp != NULL else NULL, D, start % D,
                               stream)
        else:
            while i < stop:
                d = i % D
                run = D - d if D - d < stop - i else stop - i
                dequantize_columns(x + i, y + i, run, scale + d,
                                   zp + d if zp != NULL else zp, D - d, 0,
                                   stream)
                i += run
    elif (AVX2_LOOPS and D > 1 and inner < SHORT_RUN
          and dequantize_period(x, scale, zp, y, D, inner, start, stop,
                                stream)):
        pass
    elif (AVX2_LOOPS and stream and D > 1 and inner >= 16
          and (<size_t>y) % sizeof(float) == 0):
        dequantize_runs_stream(x, scale, zp, y, D, inner, start, stop)
    elif AVX2_LOOPS and D > 1 and inner < SHORT_RUN:
        # Short runs: windows with per-element scales, as in quantize_range.
        row = i // inner
        d = row % D
        off = i - row * inner
        ph = ((<size_t>y) & 63) // sizeof(float)
        while i < stop:
            w = COLS_EXT_MAX - (i + ph) % COLS_EXT_MAX
            w = w if w < stop - i else stop - i
            expand_runs(scale, zp, s_ext, z_ext, NULL, NULL, D, inner, d, off,
                        w)
            dequantize_columns(x + i, y + i, w, s_ext,
                               z_ext if zp != NULL else NULL, w, 0, stream)
            i += w
            off += w
            d = (d + off // inner) % D
            off = off % inner
    else:
        row = i // inner
        d = row % D
        off = i - row * inner
        while i < stop:
            run = inner - off if inner - off < stop - i else stop - i
            dequantize_block(x + i, y + i, run, scale[d],
                             zero if zp == NULL else zp[d], stream)
            i += run
            off = 0
            d += 1
            if d == D:
                d = 0
    if stream:
        store_fence()


# ---------------------------------------------------------------------------
# C entry points (src/extql_kernels.h)
# ---------------------------------------------------------------------------

cdef public int extql_quantize_range_ex(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil:
    cdef int st = 1 if flags & EXTQL_STREAM else 0
    if use_avx2():
        return quantize_range_ex_avx2(qtype, x, scale, zero_point, y, D,
                                      inner, start, stop, flags)
    if qtype == EXTQL_INT8:
        quantize_range(x, scale, <const int8_t *>zero_point, <int8_t *>y,
                       D, inner, start, stop, st)
    elif qtype == EXTQL_UINT8:
        quantize_range(x, scale, <const uint8_t *>zero_point, <uint8_t *>y,
                       D, inner, start, stop, st)
    elif qtype == EXTQL_INT16:
        quantize_range(x, scale, <const int16_t *>zero_point, <int16_t *>y,
                       D, inner, start, stop, st)
    elif qtype == EXTQL_UINT16:
        quantize_range(x, scale, <const uint16_t *>zero_point,
                       <uint16_t *>y, D, inner, start, stop, st)
    elif qtype == EXTQL_INT32:
        quantize_range(x, scale, <const int32_t *>zero_point, <int32_t *>y,
                       D, inner, start, stop, st)
    elif qtype == EXTQL_UINT32:
        quantize_range(x, scale, <const uint32_t *>zero_point,
                       <uint32_t *>y, D, inner, start, stop, st)
    elif qtype == EXTQL_FLOAT16:
        quantize_range(x, scale, <const float16_t *>zero_point,
                       <float16_t *>y, D, inner, start, stop, st)
    elif qtype == EXTQL_BFLOAT16:
        quantize_range(x, scale, <const bfloat16_t *>zero_point,
                       <bfloat16_t *>y, D, inner, start, stop, st)
    else:
        return -1
    return 0


cdef public int extql_dequantize_range_ex(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil:
    cdef int st = 1 if flags & EXTQL_STREAM else 0
    if use_avx2():
        return dequantize_range_ex_avx2(qtype, x, scale, zero_point, y, D,
                                        inner, start, stop, flags)
    if qtype == EXTQL_INT8:
        dequantize_range(<const int8_t *>x, scale,
                         <const int8_t *>zero_point, y, D, inner, start, stop,
                         st)
    elif qtype == EXTQL_UINT8:
        dequantize_range(<const uint8_t *>x, scale,
                         <const uint8_t *>zero_point, y, D, inner, start, stop,
                         st)
    elif qtype == EXTQL_INT16:
        dequantize_range(<const int16_t *>x, scale,
                         <const int16_t *>zero_point, y, D, inner, start, stop,
                         st)
    elif qtype == EXTQL_UINT16:
        dequantize_range(<const uint16_t *>x, scale,
                         <const uint16_t *>zero_point, y, D, inner, start,
                         stop, st)
    elif qtype == EXTQL_INT32:
        dequantize_range(<const int32_t *>x, scale,
                         <const int32_t *>zero_point, y, D, inner, start, stop,
                         st)
    elif qtype == EXTQL_UINT32:
        dequantize_range(<const uint32_t *>x, scale,
                         <const uint32_t *>zero_point, y, D, inner, start,
                         stop, st)
    elif qtype == EXTQL_FLOAT16:
        dequantize_range(<const float16_t *>x, scale,
                         <const float16_t *>zero_point, y, D, inner, start,
                         stop, st)
    elif qtype == EXTQL_BFLOAT16:
        dequantize_range(<const bfloat16_t *>x, scale,
                         <const bfloat16_t *>zero_point, y, D, inner, start,
                         stop, st)
    else:
        return -1
    return 0


cdef public int extql_quantize_range(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t D, int64_t inner, int64_t start,
        int64_t stop) noexcept nogil:
    return extql_quantize_range_ex(qtype, x, scale, zero_point, y, D, inner,
                                   start, stop, 0)


cdef public int extql_dequantize_range(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t D, int64_t inner, int64_t start,
        int64_t stop) noexcept nogil:
    return extql_dequantize_range_ex(qtype, x, scale, zero_point, y, D, inner,
                                     start, stop, 0)


# ---------------------------------------------------------------------------
cdef inline bint known_type(int qtype) noexcept nogil:
    return qtype_size(qtype) != 0


cdef inline int threads_for(int64_t n, int nthreads) noexcept nogil:
    """How many threads to use on n elements (extql_split.h; 1 without OpenMP)."""
    if nthreads <= 0:
        nthreads = extql_get_num_threads()
    if not HAVE_OPENMP:
        return 1
    return split_threads_for(n, nthreads)


cdef inline int64_t type_size(int qtype) noexcept nogil:
    return qtype_size(qtype)


cdef public int extql_quantize(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t n, int64_t D, int64_t inner,
        int nthreads) noexcept nogil:
    cdef int64_t t, chunk
    cdef int nt, flags
    if not known_type(qtype):
        return -1
    flags = stream_flags(n * type_size(qtype))
    nt = threads_for(n, nthreads)
    if nt == 1:
        return extql_quantize_range_ex(qtype, x, scale, zero_point, y, D,
                                       inner, 0, n, flags)
    chunk = chunk_for(n, nt)
    for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        extql_quantize_range_ex(qtype, x, scale, zero_point, y, D, inner,
                                t * chunk, min(n, (t + 1) * chunk), flags)
    return 0


cdef public int extql_dequantize(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t n, int64_t D, int64_t inner,
        int nthreads) noexcept nogil:
    cdef int64_t t, chunk
    cdef int nt, flags
    if not known_type(qtype):
        return -1
    flags = stream_flags(n * 4)
    nt = threads_for(n, nthreads)
    if nt == 1:
        return extql_dequantize_range_ex(qtype, x, scale, zero_point, y, D,
                                         inner, 0, n, flags)
    chunk = chunk_for(n, nt)
    for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        extql_dequantize_range_ex(qtype, x, scale, zero_point, y, D, inner,
                                  t * chunk, min(n, (t + 1) * chunk), flags)
    return 0


cdef public int extql_get_num_threads() noexcept nogil:
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


cdef public void extql_set_num_threads(int n) noexcept nogil:
    global threads_setting
    threads_setting = n if n > 0 else 0


cdef public int extql_have_openmp() noexcept nogil:
    return HAVE_OPENMP


# ---------------------------------------------------------------------------
# Python entry points: validated, contiguous arrays from extql.numpy_api
# ---------------------------------------------------------------------------

def quantize(int qtype, const float[::1] x, const float[::1] scale,
             const uint8_t[::1] zero_point, uint8_t[::1] y, int64_t D,
             int64_t inner, int nthreads=0):
    """Quantize the float32 buffer ``x`` into the byte buffer ``y``.

    ``zero_point`` and ``y`` are byte views of arrays of the element type
    ``qtype``; ``zero_point`` may be None.  Called by extql.numpy_api, which
    has checked every length; the GIL is released for the whole loop.
    """
    cdef int64_t n = x.shape[0]
    cdef const float *xp = &x[0] if n > 0 else NULL
    cdef const void *zp = NULL
    cdef void *yp = &y[0] if n > 0 else NULL
    cdef int rc
    if n == 0:
        return
    if zero_point is not None and zero_point.shape[0] > 0:
        zp = &zero_point[0]
    with nogil:
        rc = extql_quantize(qtype, xp, &scale[0], zp, yp, n, D, inner,
                            nthreads)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown element type {qtype}")


def dequantize(int qtype, const uint8_t[::1] x, const float[::1] scale,
               const uint8_t[::1] zero_point, float[::1] y, int64_t D,
               int64_t inner, int nthreads=0):
    """Dequantize the byte buffer ``x`` (element type ``qtype``) into ``y``."""
    cdef int64_t n = y.shape[0]
    cdef const void *xp = NULL
    cdef const void *zp = NULL
    cdef float *yp = NULL
    cdef int rc
    if n == 0:
        return
    xp = &x[0]
    yp = &y[0]
    if zero_point is not None and zero_point.shape[0] > 0:
        zp = &zero_point[0]
    with nogil:
        rc = extql_dequantize(qtype, xp, &scale[0], zp, yp, n, D, inner,
                              nthreads)
    if rc != 0:
        raise TypeError(f"extql kernel: unknown element type {qtype}")


def stream_min_bytes():
    """Outputs of at least this many bytes are written with non-temporal
    stores (EXTQL_STREAM_MIN_BYTES)."""
    return STREAM_MIN_BYTES


def get_num_threads():
    """The number of threads the kernels use by default."""
    return extql_get_num_threads()


def set_num_threads(int n):
    """Set the default thread count (n <= 0: back to the default)."""
    extql_set_num_threads(n)


def have_openmp():
    """True when the kernels were compiled with OpenMP."""
    return bool(HAVE_OPENMP)


def cores():
    """The number of cores available to the process (1 without OpenMP)."""
    return extql_cores()


_ISA_NAMES = {ISA_BASELINE: "baseline", ISA_AVX2: "avx2"}


def isa():
    """The instruction-set variant the kernels run: "baseline" or "avx2"."""
    return _ISA_NAMES[isa_current()]


def available_isas():
    """The variants this build and this CPU can run, baseline first."""
    return [name for code, name in _ISA_NAMES.items() if isa_supported(code)]


def set_isa(name=None):
    """Run the kernels on one variant (None: choose automatically).

    For tests and benchmarks; raises ValueError for a variant this build or
    CPU cannot run.  Not thread-safe against kernels running at the time.
    """
    cdef int code
    if name is None:
        isa_force(-1)
        return
    codes = {v: k for k, v in _ISA_NAMES.items()}
    if name not in codes:
        raise ValueError(f"extql: unknown instruction set {name!r}; "
                         f"choose from {sorted(codes)}")
    code = codes[name]
    if isa_force(code) != 0:
        raise ValueError(f"extql: instruction set {name!r} is not available "
                         "in this build or on this CPU")
