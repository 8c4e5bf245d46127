# cython: language_level=3, boundscheck=False, wraparound=False
# cython: cdivision=True, initializedcheck=False, nonecheck=False
"""The quantize / dequantize kernels: the one implementation of the math.

Every path of extql (the NumPy API, the onnxruntime custom op) ends here.
Inputs are validated by the caller; the kernels take dense buffers, a type
code (ONNX's TensorProto numbering) and the [outer, D, inner] view of the
tensor.

How the file is laid out:

* The formula, once per element and direction ("One element"): plain
  branch-free C that the compiler vectorises.  The functions are written
  over one fused type, so each of the eight quantized types gets its own
  specialised loops.
* Tiles: up to TILE elements computed by a loop of the formula into 32-bit
  lanes, then moved to or from memory by the primitives of
  ``src/extql_primitives.h`` (packing stores, widening loads, streaming
  stores, the float16 / bfloat16 conversions) -- the only code here the
  compiler is not trusted to produce.
* Drivers that walk a range of the flat tensor in tiles: one scale for a
  run of elements, or a scale (and zero point) per element where the
  channel changes faster than a tile (per axis with short runs or along
  the last axis, blocked quantization).

The build compiles this one source per instruction set (setup.py,
src/extql_isa.h); the variants give the same bits.

The C entry points (``extql_*``, declared in ``src/extql_kernels.h``) use no
Python object and no module state, so the onnxruntime shim can call them
from its own threads without the module ever having been imported.  For
that reason every constant below is a C constant, not a Cython global
(Cython globals are only set when the module is imported).
"""

from libc.stdint cimport (
    int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
)
from cython.parallel cimport prange
from libc.string cimport memcpy, memcmp
from libc.math cimport nearbyint
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
        EXTQL_UNPACKED
        EXTQL_NO_SATURATE
        EXTQL_FLOAT32
    int64_t STREAM_MIN_BYTES "EXTQL_STREAM_MIN_BYTES"
    int stream_flags "EXTQL_STREAM_FLAGS"(int64_t out_bytes) noexcept nogil

cdef extern from "extql_split.h":
    # The thread split (one policy with the onnxruntime ops').
    int split_threads_for "extql_threads_for"(int64_t n, int threads) noexcept nogil
    int64_t chunk_for "extql_chunk_for"(int64_t n, int threads) noexcept nogil

cdef extern from "extql_types.h":
    # The type table (extql/_typetable.py, generated into C): element sizes
    # and the saturation bounds, as doubles.
    int qtype_size "extql_qtype_size"(int code) noexcept nogil
    int subbyte_of "extql_subbyte"(int code, int *bits, int *lo,
                                   int *hi) noexcept nogil
    ctypedef struct SmallFloat "ExtqlSmallFloat":
        int bits, ebits, mbits, bias, kind
        float maxv
    int smallfloat_of "extql_smallfloat"(int code, SmallFloat *f) noexcept nogil
    enum:
        SF_FN "EXTQL_SF_FN"
        SF_FNUZ "EXTQL_SF_FNUZ"
        SF_IEEE "EXTQL_SF_IEEE"
        SF_NONE "EXTQL_SF_NONE"
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
    const double FLOAT16_HI "EXTQL_FLOAT16_HI"
    const double BFLOAT16_HI "EXTQL_BFLOAT16_HI"

cdef extern from "extql_primitives.h":
    enum:
        TILE "EXTQL_TILE"
        HAVE_STREAM "EXTQL_HAVE_STREAM"
    uint32_t f32_bits "extql_f32_bits"(float f) noexcept nogil
    float bits_f32 "extql_bits_f32"(uint32_t u) noexcept nogil
    float f16_to_f32 "extql_f16_to_f32"(uint16_t h) noexcept nogil
    float rint "extql_rint"(float v) noexcept nogil
    float rint_small "extql_rint_small"(float v) noexcept nogil
    float opaque "extql_opaque"(float v) noexcept nogil
    void prefetch "extql_prefetch"(const void *p, int64_t nbytes) noexcept nogil
    void store_i8 "extql_store_i8"(int8_t *dst, const int32_t *t, int64_t n,
                                   int stream) noexcept nogil
    void store_u8 "extql_store_u8"(uint8_t *dst, const int32_t *t, int64_t n,
                                   int stream) noexcept nogil
    void store_i16 "extql_store_i16"(int16_t *dst, const int32_t *t,
                                     int64_t n, int stream) noexcept nogil
    void store_u16 "extql_store_u16"(uint16_t *dst, const int32_t *t,
                                     int64_t n, int stream) noexcept nogil
    void store_32 "extql_store_32"(void *dst, const void *t, int64_t n,
                                   int stream) noexcept nogil
    void store_f16 "extql_store_f16"(uint16_t *dst, const float *t, int64_t n,
                                     int stream) noexcept nogil
    void store_bf16 "extql_store_bf16"(uint16_t *dst, const float *t,
                                       int64_t n, int stream) noexcept nogil
    void load_i8 "extql_load_i8"(int32_t *t, const int8_t *src,
                                 int64_t n) noexcept nogil
    void load_u8 "extql_load_u8"(int32_t *t, const uint8_t *src,
                                 int64_t n) noexcept nogil
    void load_i16 "extql_load_i16"(int32_t *t, const int16_t *src,
                                   int64_t n) noexcept nogil
    void load_u16 "extql_load_u16"(int32_t *t, const uint16_t *src,
                                   int64_t n) noexcept nogil
    void load_f16 "extql_load_f16"(float *t, const uint16_t *src,
                                   int64_t n) noexcept nogil
    void load_bf16 "extql_load_bf16"(float *t, const uint16_t *src,
                                     int64_t n) noexcept nogil
    void round_f16 "extql_round_f16"(float *t, int64_t n) noexcept nogil
    void fill_32 "extql_fill_32"(void *p, uint32_t v, int64_t n) noexcept nogil
    void stream32 "extql_stream32"(void *dst, const void *src) noexcept nogil
    void store_fence "extql_store_fence"() noexcept nogil

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

    /* The two 16-bit float types, as distinct C types for the fused type. */
    typedef struct { uint16_t bits; } extql_float16_t;
    typedef struct { uint16_t bits; } extql_bfloat16_t;

    /* Float constants must be float literals: a double literal would turn
       the float arithmetic around it into double arithmetic. */
    #define EXTQL_TWO31 2147483648.0f
    #define EXTQL_TWO32 4294967296.0f
    #include <math.h>
    #define EXTQL_INF INFINITY

    /* Thread count: 0 means not chosen yet (see extql_get_num_threads). */
    static int extql_threads_setting = 0;
    """
    ctypedef struct float16_t "extql_float16_t":
        uint16_t bits
    ctypedef struct bfloat16_t "extql_bfloat16_t":
        uint16_t bits
    const float TWO31 "EXTQL_TWO31"
    const float TWO32 "EXTQL_TWO32"
    const float INF "EXTQL_INF"
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
    int quantize_typed_range_ex_avx2 "extql_quantize_typed_range_ex_avx2"(
        int qtype, int xtype, int prec, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags) noexcept nogil
    int dequantize_typed_range_ex_avx2 "extql_dequantize_typed_range_ex_avx2"(
        int qtype, int ytype, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags) noexcept nogil
    int quotients_f64_avx2 "extql_quotients_f64_avx2"(
        int qtype, int xtype, int stype, const void *x, const void *scale,
        const void *zero_point, float *v, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop) noexcept nogil

cdef extern from "<stdlib.h>" nogil:
    char *getenv(const char *name)
    long strtol(const char *s, char **end, int base)


cdef enum:
    # Per-axis quantization whose runs (the elements sharing a channel:
    # the product of the dimensions after the axis) are shorter than
    # SHORT_RUN is walked with a scale per element, in windows of up to
    # WINDOW elements or, when the range holds a whole period of D * inner
    # <= PERIOD_MAX elements, over that period expanded once.
    WINDOW = 1024
    # The most arrays of per-element constants (cols_arrays).
    COLS_ARRAYS = 4
    SHORT_RUN = 64
    PERIOD_MAX = 1 << 17
    # Where a tile's results go: straight into the output, through the
    # tile (the input and output overlap, as an in-place 32-bit call), or
    # through the tile with streaming stores (an output larger than the
    # caches).
    OUT_DIRECT = 0
    OUT_TILE = 1
    OUT_STREAM = 2


# The quantized side: the eight types, and float32 -- the carrier of the
# float8 / float4 types, not a quantized type of its own: quantize gives
# x / s + zp unsaturated and unrounded, dequantize takes float32 x.
ctypedef fused qtype_t:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    float16_t
    bfloat16_t
    float

# The floating-point side: dequantize's y.
ctypedef fused ftype_t:
    float
    float16_t
    bfloat16_t

# Quantize's x: the three float types and int32 (converted to float32 by
# widen_x, after which it is a float32 x).
ctypedef fused xtype_t:
    float
    float16_t
    bfloat16_t
    int32_t


# ---------------------------------------------------------------------------
# One element: the formula (per the contract in docs/numerics.rst)
# ---------------------------------------------------------------------------

cdef inline int32_t quantize_int(float v, float flo, float fhi,
                                 float zf) noexcept nogil:
    """8/16-bit: v = x / s clamped to [lo - zp, hi - zp] (NaN fails the first
    test and becomes lo - zp), rounded to nearest even, + zp.  Every step is
    exact in float32 for these ranges."""
    v = v if v > flo else flo
    v = v if v < fhi else fhi
    return <int32_t>(rint_small(v) + zf)


cdef inline uint32_t quantize_wide(float v, float fl, float fh, uint32_t zi,
                                   uint32_t lo, uint32_t hi) noexcept nogil:
    """32-bit: r = round_half_even(v); lo when r < lo - zp (or NaN), hi when
    r > hi - zp, else r + zp -- exactly, in float32.

    fl and fh are lo - zp rounded up and hi - zp rounded down to floats, so
    r >= fl exactly when r >= lo - zp.  In range r + zp is a 32-bit value,
    computed modulo 2^32: r is brought into [-2^31, 2^31) by adding or
    subtracting 2^32 (exact), converted, and zp added with wraparound."""
    cdef float r = rint(v)
    cdef bint below = not (r >= fl)
    cdef bint above = r > fh
    cdef uint32_t y
    r = r if r > fl else fl          # keeps the conversion below defined
    r = r if r < fh else fh
    r = r - (TWO32 if r >= TWO31 else 0)
    r = r + (TWO32 if r < -TWO31 else 0)
    y = <uint32_t><int32_t>r + zi
    y = lo if below else y
    return hi if above else y


cdef inline float saturate_float(float v, float mx) noexcept nogil:
    """float16 / bfloat16: v = x / s + zp saturated to [-mx, mx]; NaN stays
    (it fails both tests)."""
    v = mx if mx < v else v
    return -mx if -mx > v else v


cdef inline float round_bf16(float v) noexcept nogil:
    """v rounded to nearest even to a bfloat16 value (a float32 holds every
    one exactly): the rounding of a division in bfloat16 (the float32
    quotient of two bfloat16 numbers, rounded once more, is the correctly
    rounded one: float32 has more than twice bfloat16's precision plus two
    bits).  The same exponent range as float32, so only the 16 low bits go;
    overflow carries into +-inf by itself; NaN stays NaN.  (float16's
    rounding is the primitive round_f16.)"""
    cdef uint32_t u = f32_bits(v)
    cdef uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u
    return bits_f32(u if (u & 0x7FFFFFFFu) > 0x7F800000u else r)


cdef inline float dequantize_narrow(int32_t x, int32_t z, float s) noexcept nogil:
    """8/16-bit: (x - zp) is exact in int32 and as a float; one rounding."""
    return <float>(x - z) * s


cdef inline float dequantize_float(float x, float z, float s) noexcept nogil:
    """float16 / bfloat16: x and zp widened exactly; (x - zp) * s."""
    return (x - z) * s


cdef inline float dequantize_carrier(float x, float z, float s) noexcept nogil:
    """The small floats through float32: (x - zp) * s, a zero point of 0
    (either sign, as no zero point) leaving x as it is, -0 included."""
    return (x if z == 0 else x - z) * s


cdef inline float dequantize_wide(double x, double z, float s) noexcept nogil:
    """32-bit: x - zp is exact in double (|x - zp| < 2^33), rounded once to
    float32, times s."""
    return <float>(x - z) * s


cdef inline float dequantize_wide_int(uint32_t x, uint32_t z,
                                      float s) noexcept nogil:
    """dequantize_wide when x - zp fits int32 (difference_overflows is
    false): the wrapped difference is then the exact one."""
    return <float><int32_t>(x - z) * s


cdef inline int difference_overflows(qtype_t x, uint32_t z) noexcept nogil:
    """1 when the 32-bit x - zp leaves int32's range.  int32: x and zp differ
    in sign and the wrapped difference's sign is not x's; uint32: the
    difference's int32 sign is not the borrow (x < zp)."""
    cdef uint32_t d
    if qtype_t is int32_t:
        d = <uint32_t>x - z
        return <int>((((<uint32_t>x) ^ z) & ((<uint32_t>x) ^ d)) >> 31)
    elif qtype_t is uint32_t:
        d = x - z
        return <int>(x < z) ^ <int>(d >> 31)
    else:
        return 0


# ---------------------------------------------------------------------------
# A channel's constants
# ---------------------------------------------------------------------------

cdef struct Chan:
    float s          # the scale
    float r          # 1 / s where that is exact (s a power of two), else 0
    float zf         # the zero point as a float (exact for every type)
    int32_t zi       # as int32: the value (8/16-bit) or the bits (32-bit)
    double zd        # as a double (32-bit dequantize's exact path)
    float flo, fhi   # 8/16-bit quantize: lo - zp, hi - zp
    float fl, fh     # 32-bit quantize: lo - zp up, hi - zp down, to floats


cdef inline float lower_bound(qtype_t *like) noexcept nogil:
    if qtype_t is int8_t:
        return <float>INT8_LO
    elif qtype_t is uint8_t:
        return <float>UINT8_LO
    elif qtype_t is int16_t:
        return <float>INT16_LO
    elif qtype_t is uint16_t:
        return <float>UINT16_LO
    else:
        return 0


cdef inline float upper_bound(qtype_t *like) noexcept nogil:
    if qtype_t is int8_t:
        return <float>INT8_HI
    elif qtype_t is uint8_t:
        return <float>UINT8_HI
    elif qtype_t is int16_t:
        return <float>INT16_HI
    elif qtype_t is uint16_t:
        return <float>UINT16_HI
    elif qtype_t is float16_t:
        return <float>FLOAT16_HI
    elif qtype_t is bfloat16_t:
        return <float>BFLOAT16_HI
    elif qtype_t is float:
        return INF
    else:
        return 0


cdef inline uint32_t wide_lo(qtype_t *like) noexcept nogil:
    """The 32-bit types' lower bound, as bits."""
    return 0x80000000u if qtype_t is int32_t else 0u


cdef inline uint32_t wide_hi(qtype_t *like) noexcept nogil:
    return 0x7FFFFFFFu if qtype_t is int32_t else 0xFFFFFFFFu


cdef inline bint is_wide(qtype_t *like) noexcept nogil:
    return qtype_t is int32_t or qtype_t is uint32_t


cdef inline bint is_float(qtype_t *like) noexcept nogil:
    return qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float


cdef inline qtype_t zero_of(qtype_t *like) noexcept nogil:
    """The zero point 0 of the type (used when no zero point is given).
    The float32 carrier's is -0: quantize adds it, and v + (-0) is v for
    every v, -0 included (dequantize_carrier takes it as no zero point)."""
    cdef qtype_t z
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        z.bits = 0
    elif qtype_t is float:
        z = bits_f32(0x80000000u)
    else:
        z = 0
    return z


cdef inline float zero_float(qtype_t z) noexcept nogil:
    if qtype_t is float16_t:
        return f16_to_f32(z.bits)
    elif qtype_t is bfloat16_t:
        return bits_f32(<uint32_t>z.bits << 16)
    else:
        return <float>z


cdef inline int32_t zero_bits(qtype_t z) noexcept nogil:
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        return 0
    else:
        return <int32_t>z


cdef inline double zero_double(qtype_t z) noexcept nogil:
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        return 0
    else:
        return <double>z


cdef inline float f32_toward(double d, bint up) noexcept nogil:
    """d (an integer of magnitude below 2^33) rounded to a float up (toward
    +inf) or down."""
    cdef float f = <float>d
    cdef uint32_t u
    if ((<double>f >= d) if up else (<double>f <= d)):
        return f
    u = f32_bits(f)          # one ulp toward +inf (up) or -inf; f != 0 here
    u = u + 1 if (f > 0) == up else u - 1
    return bits_f32(u)


cdef inline float exact_reciprocal(float s) noexcept nogil:
    """1 / s when s is a power of two (normal or subnormal, either sign) whose
    reciprocal is finite -- then x * (1 / s) is the same correctly rounded
    number as x / s for every x --, else 0."""
    cdef uint32_t u = f32_bits(s) & 0x7FFFFFFFu
    cdef float r
    if u == 0 or u >= 0x7F800000u:
        return 0
    if ((u & 0x7FFFFFu) != 0) if (u >> 23) != 0 else ((u & (u - 1)) != 0):
        return 0
    r = 1.0 / s
    return 0 if (f32_bits(r) & 0x7FFFFFFFu) >= 0x7F800000u else r


cdef inline void zero_into(Chan *c, qtype_t z) noexcept nogil:
    """The zero point's fields of c."""
    cdef double zd = zero_double(z)
    c.zf = zero_float(z)
    c.zi = zero_bits(z)
    c.zd = zd
    c.flo = lower_bound(&z) - c.zf
    c.fhi = upper_bound(&z) - c.zf
    if qtype_t is int32_t:
        c.fl = f32_toward(INT32_LO - zd, 1)
        c.fh = f32_toward(INT32_HI - zd, 0)
    elif qtype_t is uint32_t:
        c.fl = f32_toward(UINT32_LO - zd, 1)
        c.fh = f32_toward(UINT32_HI - zd, 0)
    else:
        c.fl = 0
        c.fh = 0


cdef inline void chan_of(Chan *c, const float *scale, const qtype_t *zp,
                         int64_t d) noexcept nogil:
    """Channel d's constants (zp NULL: zero point 0)."""
    c.s = scale[d]
    c.r = exact_reciprocal(c.s)
    zero_into(c, zero_of(<qtype_t *>zp) if zp == NULL else zp[d])


# ---------------------------------------------------------------------------
# Per-element constants: a scale (and zero point) per element of a window
# ---------------------------------------------------------------------------

cdef struct Cols:
    # Entry k holds the constants of one element; arrays of the entries a
    # window or period needs.  perz: zero points per entry, in the forms
    # the formula of the type and direction uses (zf: float; zi: int32;
    # fl, fh: 32-bit quantize's bounds); else every entry's zero point is
    # z0's.
    float *s
    float *zf
    int32_t *zi
    float *fl
    float *fh
    bint perz
    Chan z0


cdef inline int64_t cols_arrays(qtype_t *like, bint perz,
                                bint quantize) noexcept nogil:
    """How many arrays of entries cols_layout lays out."""
    if not perz:
        return 1
    if (qtype_t is int32_t or qtype_t is uint32_t) and quantize:
        return 4
    return 2


cdef inline void cols_layout(Cols *cl, float *buf, int64_t m, bint perz,
                             qtype_t *like, bint quantize) noexcept nogil:
    """Point cl's arrays at buf (room for cols_arrays(...) * m floats): s
    always, and when perz the zero point arrays the formula reads."""
    cl.s = buf
    cl.perz = perz
    cl.zf = cl.fl = cl.fh = NULL
    cl.zi = NULL
    if not perz:
        return
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        cl.zf = buf + m
    elif qtype_t is int32_t or qtype_t is uint32_t:
        cl.zi = <int32_t *>(buf + m)
        if quantize:
            cl.fl = buf + 2 * m
            cl.fh = buf + 3 * m
    elif quantize:
        cl.zf = buf + m
    else:
        cl.zi = <int32_t *>(buf + m)


cdef inline void cols_fill(Cols *cl, int64_t j, const Chan *c,
                           int64_t n) noexcept nogil:
    """Entries [j, j + n) get channel c's constants."""
    fill_32(cl.s + j, f32_bits(c.s), n)
    if cl.zf != NULL:
        fill_32(cl.zf + j, f32_bits(c.zf), n)
    if cl.zi != NULL:
        fill_32(cl.zi + j, <uint32_t>c.zi, n)
    if cl.fl != NULL:
        fill_32(cl.fl + j, f32_bits(c.fl), n)
        fill_32(cl.fh + j, f32_bits(c.fh), n)


cdef inline void cols_extend(Cols *cl, int64_t P, int64_t n) noexcept nogil:
    """Entries [P, P + n) repeat [0, n) periodically (entry k = entry k - P),
    so that a tile starting at any entry below P reads TILE valid ones."""
    cdef int64_t k
    for k in range(P, P + n):
        cl.s[k] = cl.s[k - P]
    if cl.zf != NULL:
        for k in range(P, P + n):
            cl.zf[k] = cl.zf[k - P]
    if cl.zi != NULL:
        for k in range(P, P + n):
            cl.zi[k] = cl.zi[k - P]
    if cl.fl != NULL:
        for k in range(P, P + n):
            cl.fl[k] = cl.fl[k - P]
            cl.fh[k] = cl.fh[k - P]


cdef inline bint uniform_zero(const qtype_t *zp, int64_t d, int64_t count,
                              int64_t D) noexcept nogil:
    """True when channels d, d + 1, ... (count of them, modulo D) have one
    zero point (or zp is NULL), so per-element zero points are not needed."""
    cdef int64_t _, c
    if zp == NULL:
        return True
    if count >= D:
        d, count = 0, D
    c = d
    for _ in range(count):
        if memcmp(&zp[c], &zp[d], sizeof(qtype_t)) != 0:
            return False
        c += 1
        if c == D:
            c = 0
    return True


cdef inline void cols_init(Cols *cl, float *buf, int64_t m,
                           const qtype_t *zp, int64_t d, bint perz,
                           bint quantize) noexcept nogil:
    """Lay out cl over buf (m entries), its zero point z0 channel d's."""
    cols_layout(cl, buf, m, perz, <qtype_t *>zp, quantize)
    zero_into(&cl.z0, zero_of(<qtype_t *>zp) if zp == NULL else zp[d])


cdef inline void convert_channels(Cols *cl, int64_t j, const float *scale,
                                  const qtype_t *zp, int64_t d,
                                  int64_t n) noexcept nogil:
    """Entries [j, j + n) get channels d .. d + n - 1 (one element each:
    per-axis along the last axis)."""
    cdef int64_t k
    cdef Chan c
    memcpy(cl.s + j, scale + d, n * sizeof(float))
    if cl.perz:
        for k in range(n):
            zero_into(&c, zp[d + k])
            if cl.zf != NULL:
                cl.zf[j + k] = c.zf
            if cl.zi != NULL:
                cl.zi[j + k] = c.zi
            if cl.fl != NULL:
                cl.fl[j + k] = c.fl
                cl.fh[j + k] = c.fh


cdef inline void expand_runs(Cols *cl, int64_t j, const float *scale,
                             const qtype_t *zp, int64_t D, int64_t inner,
                             int64_t d, int64_t off, int64_t w) noexcept nogil:
    """Entries [j, j + w) get the constants of w consecutive elements that
    start at channel d, offset off in its run of inner elements."""
    cdef int64_t run
    cdef Chan c
    while w > 0:
        run = inner - off if inner - off < w else w
        chan_of(&c, scale, zp, d)
        cols_fill(cl, j, &c, run)
        j += run
        w -= run
        off = 0
        d = d + 1 if d + 1 < D else 0


cdef inline int64_t next_entry(int64_t k, int64_t m, int64_t P) noexcept nogil:
    """Entry k + m of a period of P entries."""
    k += m
    if k >= P:
        k -= P
        if k >= P:
            k = k % P
    return k


# ---------------------------------------------------------------------------
# Tiles: up to TILE elements, the formula's loop, then a primitive's store
# ---------------------------------------------------------------------------

cdef inline void store_tile(qtype_t *y, int32_t *ti, float *tf, int64_t n,
                            int stream) noexcept nogil:
    """The quantized tile into y: ti holds the integer types' values, tf the
    float ones (float16 / bfloat16: saturated, not yet rounded)."""
    if qtype_t is int8_t:
        store_i8(y, ti, n, stream)
    elif qtype_t is uint8_t:
        store_u8(y, ti, n, stream)
    elif qtype_t is int16_t:
        store_i16(y, ti, n, stream)
    elif qtype_t is uint16_t:
        store_u16(y, ti, n, stream)
    elif qtype_t is float16_t:
        store_f16(<uint16_t *>y, tf, n, stream)
    elif qtype_t is bfloat16_t:
        store_bf16(<uint16_t *>y, tf, n, stream)
    elif qtype_t is float:
        store_32(y, tf, n, stream)
    else:
        store_32(y, ti, n, stream)


cdef inline void load_tile(const qtype_t *x, int32_t *ti, float *tf,
                           int64_t n) noexcept nogil:
    """The 8/16-bit or float16 elements of x widened into ti or tf."""
    if qtype_t is int8_t:
        load_i8(ti, x, n)
    elif qtype_t is uint8_t:
        load_u8(ti, x, n)
    elif qtype_t is int16_t:
        load_i16(ti, x, n)
    elif qtype_t is uint16_t or qtype_t is bfloat16_t:
        load_u16(ti, <const uint16_t *>x, n)
    elif qtype_t is float16_t:
        load_f16(tf, <const uint16_t *>x, n)


cdef inline const float *widen_x(const xtype_t *x, float *xw,
                                 int64_t n) noexcept nogil:
    """x as float32: x itself, or its elements converted into xw --
    float16 / bfloat16 widened exactly, int32 rounded to nearest even (as
    ONNX's Cast to float does)."""
    cdef const float *w = xw
    cdef int64_t j
    if xtype_t is float16_t:
        load_f16(xw, <const uint16_t *>x, n)
    elif xtype_t is bfloat16_t:
        load_bf16(xw, <const uint16_t *>x, n)
    elif xtype_t is int32_t:
        n = n if n < TILE else TILE  # (always; it tells the compiler xw's bound)
        for j in range(n):
            xw[j] = <float>x[j]
    else:
        w = x
    return w


cdef inline const float *quotients(const float *xs, float *xw, int64_t n,
                                   const float *s, bint per, int prec,
                                   bint round_x) noexcept nogil:
    """The quotients x / s in the precision prec (float16 or bfloat16) into
    xw: x rounded to prec (round_x: it is not a value of prec already),
    divided in float32 by the scale (already a value of prec: the callers
    round the scales), rounded to prec.  per: a scale per element (s[j]),
    else s[0] for all.  One loop per case, so that each vectorises."""
    cdef int64_t j
    cdef float s0 = s[0]
    n = n if n < TILE else TILE  # (always; it tells the compiler xw's bound)
    if prec == EXTQL_FLOAT16:
        if round_x:
            if xs != xw:
                memcpy(xw, xs, n * sizeof(float))
            round_f16(xw, n)
            xs = xw
        if per:
            for j in range(n):
                xw[j] = xs[j] / s[j]
        else:
            for j in range(n):
                xw[j] = xs[j] / s0
        round_f16(xw, n)
    elif per and round_x:
        for j in range(n):
            xw[j] = round_bf16(round_bf16(xs[j]) / s[j])
    elif per:
        for j in range(n):
            xw[j] = round_bf16(xs[j] / s[j])
    elif round_x:
        for j in range(n):
            xw[j] = round_bf16(round_bf16(xs[j]) / s0)
    else:
        for j in range(n):
            xw[j] = round_bf16(xs[j] / s0)
    return xw


cdef inline bint rounds_x(xtype_t *like, int prec) noexcept nogil:
    """Whether x of this type must be rounded to prec before the division
    (it is not a value of prec already)."""
    if xtype_t is float16_t:
        return prec == EXTQL_BFLOAT16
    elif xtype_t is bfloat16_t:
        return prec == EXTQL_FLOAT16
    else:
        return prec != 0


cdef inline void quantize_tile(const xtype_t *xin, qtype_t *y, int64_t n,
                               const Chan *c, bint mul, int out, int prec) noexcept nogil:
    """Quantize n <= TILE elements with one channel's constants; mul: divide
    by multiplying with the exact reciprocal.  prec 0: the quotient is the
    float32 one, else it is rounded to float16 / bfloat16 (prec) first, and
    the formula then divides the quotients by 1 (exact).  (Two calls of the
    loop, so that each keeps its constants: mul changed at run time would
    make the loop compute both the division and the multiply.)"""
    cdef float xw[TILE]
    cdef Chan one
    cdef const float *x = widen_x(xin, xw, n)
    if prec == 0:
        quantize_tile_f32(x, y, n, c, mul, out)
    else:
        x = quotients(x, xw, n, &c.s, 0, prec, rounds_x(<xtype_t *>xin, prec))
        one = c[0]
        one.s = 1
        one.r = 1
        quantize_tile_f32(x, y, n, &one, 1, out)


cdef inline void quantize_tile_f32(const float *x, qtype_t *y, int64_t n,
                                   const Chan *c, bint mul, int out) noexcept nogil:
    """quantize_tile's loop over float32 x."""
    cdef int32_t ti[TILE]
    cdef float tf[TILE]
    cdef int64_t j
    cdef float s = c.s, r = c.r, zf = c.zf, flo = c.flo, fhi = c.fhi
    cdef float fl = c.fl, fh = c.fh, mx = opaque(upper_bound(y))
    cdef uint32_t zi = <uint32_t>c.zi, lo = wide_lo(y), hi = wide_hi(y)
    if qtype_t is int32_t or qtype_t is uint32_t:
        if out == OUT_DIRECT:
            for j in range(n):
                y[j] = <qtype_t>quantize_wide(x[j] * r if mul else x[j] / s,
                                              fl, fh, zi, lo, hi)
            return
        for j in range(n):
            ti[j] = <int32_t>quantize_wide(x[j] * r if mul else x[j] / s,
                                           fl, fh, zi, lo, hi)
    elif qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        for j in range(n):
            tf[j] = saturate_float((x[j] * r if mul else x[j] / s) + zf, mx)
    else:
        for j in range(n):
            ti[j] = quantize_int(x[j] * r if mul else x[j] / s, flo, fhi, zf)
    store_tile(y, ti, tf, n, out == OUT_STREAM)


cdef inline void quantize_tile_cols(const xtype_t *xin, qtype_t *y, int64_t n,
                                    const Cols *cl, int64_t k, bint perz,
                                    int out, int prec) noexcept nogil:
    """Quantize n <= TILE elements, element j with entry k + j of cl (prec:
    as quantize_tile)."""
    cdef int32_t ti[TILE]
    cdef float tf[TILE]
    cdef float xw[TILE]
    cdef float ones[TILE]
    cdef int64_t j
    cdef const float *s = cl.s + k
    cdef const float *x = widen_x(xin, xw, n)
    if prec != 0:
        x = quotients(x, xw, n, s, 1, prec, rounds_x(<xtype_t *>xin, prec))
        fill_32(ones, f32_bits(1), n)
        s = ones
    cdef const float *zfs = cl.zf + k if perz else NULL
    cdef const int32_t *zis = cl.zi + k if perz else NULL
    cdef const float *fls = cl.fl + k if perz else NULL
    cdef const float *fhs = cl.fh + k if perz else NULL
    cdef float zf = cl.z0.zf, fl = cl.z0.fl, fh = cl.z0.fh
    cdef float mx = opaque(upper_bound(y)), lof = lower_bound(y)
    cdef uint32_t zi = <uint32_t>cl.z0.zi, lo = wide_lo(y), hi = wide_hi(y)
    if qtype_t is int32_t or qtype_t is uint32_t:
        if out == OUT_DIRECT:
            if perz:
                for j in range(n):
                    y[j] = <qtype_t>quantize_wide(x[j] / s[j], fls[j], fhs[j],
                                                  <uint32_t>zis[j], lo, hi)
            else:
                for j in range(n):
                    y[j] = <qtype_t>quantize_wide(x[j] / s[j], fl, fh, zi,
                                                  lo, hi)
            return
        if perz:
            for j in range(n):
                ti[j] = <int32_t>quantize_wide(x[j] / s[j], fls[j], fhs[j],
                                               <uint32_t>zis[j], lo, hi)
        else:
            for j in range(n):
                ti[j] = <int32_t>quantize_wide(x[j] / s[j], fl, fh, zi, lo, hi)
    elif qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        if perz:
            for j in range(n):
                tf[j] = saturate_float(x[j] / s[j] + zfs[j], mx)
        else:
            for j in range(n):
                tf[j] = saturate_float(x[j] / s[j] + zf, mx)
    else:
        if perz:
            for j in range(n):
                ti[j] = quantize_int(x[j] / s[j], lof - zfs[j], mx - zfs[j],
                                     zfs[j])
        else:
            for j in range(n):
                ti[j] = quantize_int(x[j] / s[j], lof - zf, mx - zf, zf)
    store_tile(y, ti, tf, n, out == OUT_STREAM)


cdef inline float *direct(ftype_t *y, float *tf, int out) noexcept nogil:
    """Where a dequantize tile computes: straight into a float32 y
    (OUT_DIRECT), else into tf for store_y."""
    if ftype_t is float:
        return y if out == OUT_DIRECT else tf
    else:
        return tf


cdef inline void store_y(ftype_t *y, const float *tf, int64_t n,
                         int out) noexcept nogil:
    """The dequantized tile tf into y: float32 unless computed in place
    (direct), float16 / bfloat16 rounded to nearest even (overflow to
    +-inf, NaN stays NaN)."""
    if ftype_t is float:
        if out != OUT_DIRECT:
            store_32(y, tf, n, out == OUT_STREAM)
    elif ftype_t is float16_t:
        store_f16(<uint16_t *>y, tf, n, out == OUT_STREAM)
    else:
        store_bf16(<uint16_t *>y, tf, n, out == OUT_STREAM)


cdef inline void dequantize_tile(const qtype_t *x, ftype_t *y, int64_t n,
                                 const Chan *c, int out) noexcept nogil:
    """Dequantize n <= TILE elements with one channel's constants."""
    cdef int32_t ti[TILE]
    cdef float tf[TILE]
    cdef float *dst = direct(y, tf, out)
    cdef int64_t j
    cdef int ovf = 0
    cdef float s = c.s, zf = c.zf
    cdef int32_t zi = c.zi
    cdef double zd = c.zd
    if qtype_t is int32_t or qtype_t is uint32_t:
        # In int32, then again in double if some difference overflowed
        # (x and y do not overlap here: out_mode).
        for j in range(n):
            ovf |= difference_overflows(x[j], <uint32_t>zi)
            dst[j] = dequantize_wide_int(<uint32_t>x[j], <uint32_t>zi, s)
        if ovf:
            for j in range(n):
                dst[j] = dequantize_wide(<double>x[j], zd, s)
    else:
        load_tile(x, ti, tf, n)
        if qtype_t is float:
            for j in range(n):
                dst[j] = dequantize_carrier(x[j], zf, s)
        elif qtype_t is float16_t:
            for j in range(n):
                dst[j] = dequantize_float(tf[j], zf, s)
        elif qtype_t is bfloat16_t:
            for j in range(n):
                dst[j] = dequantize_float(bits_f32(<uint32_t>ti[j] << 16), zf, s)
        else:
            for j in range(n):
                dst[j] = dequantize_narrow(ti[j], zi, s)
    store_y(y, tf, n, out)


cdef inline void dequantize_tile_cols(const qtype_t *x, ftype_t *y, int64_t n,
                                      const Cols *cl, int64_t k, bint perz,
                                      int out) noexcept nogil:
    """Dequantize n <= TILE elements, element j with entry k + j of cl."""
    cdef int32_t ti[TILE]
    cdef float tf[TILE]
    cdef float *dst = direct(y, tf, out)
    cdef int64_t j
    cdef int ovf = 0
    cdef const float *s = cl.s + k
    cdef const float *zfs = cl.zf + k if perz else NULL
    cdef const int32_t *zis = cl.zi + k if perz else NULL
    cdef float zf = cl.z0.zf
    cdef int32_t zi = cl.z0.zi
    cdef double zd = cl.z0.zd
    if qtype_t is int32_t or qtype_t is uint32_t:
        if perz:
            for j in range(n):
                ovf |= difference_overflows(x[j], <uint32_t>zis[j])
                dst[j] = dequantize_wide_int(<uint32_t>x[j], <uint32_t>zis[j],
                                             s[j])
        else:
            for j in range(n):
                ovf |= difference_overflows(x[j], <uint32_t>zi)
                dst[j] = dequantize_wide_int(<uint32_t>x[j], <uint32_t>zi,
                                             s[j])
        if ovf:
            for j in range(n):
                if perz:
                    zd = (<double><int32_t>zis[j] if qtype_t is int32_t
                          else <double><uint32_t>zis[j])
                dst[j] = dequantize_wide(<double>x[j], zd, s[j])
    else:
        load_tile(x, ti, tf, n)
        if qtype_t is float:
            if perz:
                for j in range(n):
                    dst[j] = dequantize_carrier(x[j], zfs[j], s[j])
            else:
                for j in range(n):
                    dst[j] = dequantize_carrier(x[j], zf, s[j])
        elif qtype_t is float16_t:
            if perz:
                for j in range(n):
                    dst[j] = dequantize_float(tf[j], zfs[j], s[j])
            else:
                for j in range(n):
                    dst[j] = dequantize_float(tf[j], zf, s[j])
        elif qtype_t is bfloat16_t:
            if perz:
                for j in range(n):
                    dst[j] = dequantize_float(bits_f32(<uint32_t>ti[j] << 16),
                                              zfs[j], s[j])
            else:
                for j in range(n):
                    dst[j] = dequantize_float(bits_f32(<uint32_t>ti[j] << 16),
                                              zf, s[j])
        else:
            if perz:
                for j in range(n):
                    dst[j] = dequantize_narrow(ti[j], zis[j], s[j])
            else:
                for j in range(n):
                    dst[j] = dequantize_narrow(ti[j], zi, s[j])
    store_y(y, tf, n, out)


# ---------------------------------------------------------------------------
# Runs of elements: one channel (a block) or constants per element (columns)
# ---------------------------------------------------------------------------

cdef inline int64_t stream_head(const void *y, int64_t size,
                                int64_t n) noexcept nogil:
    """How many leading elements to write with plain stores before the
    output is 32-byte aligned for streaming (at most n)."""
    cdef int64_t h = <int64_t>(((32 - ((<size_t>y) & 31)) & 31) // size)
    return h if h < n else n


cdef inline int64_t quantize_tiles(const xtype_t *x, qtype_t *y, int64_t i,
                                   int64_t n, const Chan *c, bint mul,
                                   int out, int prec) noexcept nogil:
    """Whole tiles from element i; returns where they end."""
    while i + TILE <= n:
        prefetch(x + i, TILE * sizeof(xtype_t))
        quantize_tile(x + i, y + i, TILE, c, mul, out, prec)
        i += TILE
    return i


cdef void quantize_block(const xtype_t *x, qtype_t *y, int64_t n,
                         const Chan *c, int out, int prec) noexcept nogil:
    """n elements with one channel's constants."""
    cdef int64_t i = 0
    if out == OUT_STREAM:
        i = stream_head(y, sizeof(qtype_t), n)
        if i > 0:
            quantize_tile(x, y, i, c, 0, OUT_TILE, prec)
    # One loop per constant, so that each tile loop is compiled for it.
    if c.r != 0:
        if out == OUT_STREAM:
            i = quantize_tiles(x, y, i, n, c, 1, OUT_STREAM, prec)
        elif out == OUT_TILE:
            i = quantize_tiles(x, y, i, n, c, 1, OUT_TILE, prec)
        else:
            i = quantize_tiles(x, y, i, n, c, 1, OUT_DIRECT, prec)
    else:
        if out == OUT_STREAM:
            i = quantize_tiles(x, y, i, n, c, 0, OUT_STREAM, prec)
        elif out == OUT_TILE:
            i = quantize_tiles(x, y, i, n, c, 0, OUT_TILE, prec)
        else:
            i = quantize_tiles(x, y, i, n, c, 0, OUT_DIRECT, prec)
    if i < n:
        quantize_tile(x + i, y + i, n - i, c, c.r != 0, out, prec)


cdef inline int64_t quantize_tiles_cols(const xtype_t *x, qtype_t *y, int64_t i,
                                        int64_t n, const Cols *cl, int64_t *k,
                                        int64_t P, bint perz,
                                        int out, int prec) noexcept nogil:
    while i + TILE <= n:
        prefetch(x + i, TILE * sizeof(xtype_t))
        quantize_tile_cols(x + i, y + i, TILE, cl, k[0], perz, out, prec)
        k[0] = next_entry(k[0], TILE, P)
        i += TILE
    return i


cdef void quantize_columns(const xtype_t *x, qtype_t *y, int64_t n,
                           const Cols *cl, int64_t P, int64_t k0,
                           int out, int prec) noexcept nogil:
    """n elements, element i with entry (k0 + i) % P of cl; when the
    elements wrap around P, cl holds P + TILE entries (cols_extend)."""
    cdef int64_t i = 0, k = k0
    if out == OUT_STREAM:
        i = stream_head(y, sizeof(qtype_t), n)
        if i > 0:
            quantize_tile_cols(x, y, i, cl, k, cl.perz, OUT_TILE, prec)
            k = next_entry(k, i, P)
    if cl.perz:
        if out == OUT_STREAM:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_STREAM, prec)
        elif out == OUT_TILE:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_TILE, prec)
        else:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_DIRECT, prec)
    else:
        if out == OUT_STREAM:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_STREAM, prec)
        elif out == OUT_TILE:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_TILE, prec)
        else:
            i = quantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_DIRECT, prec)
    if i < n:
        quantize_tile_cols(x + i, y + i, n - i, cl, k, cl.perz, out, prec)


cdef inline int64_t dequantize_tiles(const qtype_t *x, ftype_t *y, int64_t i,
                                     int64_t n, const Chan *c,
                                     int out) noexcept nogil:
    while i + TILE <= n:
        prefetch(x + i, TILE * sizeof(qtype_t))
        dequantize_tile(x + i, y + i, TILE, c, out)
        i += TILE
    return i


cdef void dequantize_block(const qtype_t *x, ftype_t *y, int64_t n,
                           const Chan *c, int out) noexcept nogil:
    """n elements with one channel's constants."""
    cdef int64_t i = 0
    if out == OUT_STREAM:
        i = stream_head(y, sizeof(ftype_t), n)
        if i > 0:
            dequantize_tile(x, y, i, c, OUT_TILE)
        i = dequantize_tiles(x, y, i, n, c, OUT_STREAM)
    elif out == OUT_TILE:
        i = dequantize_tiles(x, y, i, n, c, OUT_TILE)
    else:
        i = dequantize_tiles(x, y, i, n, c, OUT_DIRECT)
    if i < n:
        dequantize_tile(x + i, y + i, n - i, c, out)


cdef inline int64_t dequantize_tiles_cols(const qtype_t *x, ftype_t *y,
                                          int64_t i, int64_t n,
                                          const Cols *cl, int64_t *k,
                                          int64_t P, bint perz,
                                          int out) noexcept nogil:
    while i + TILE <= n:
        prefetch(x + i, TILE * sizeof(qtype_t))
        dequantize_tile_cols(x + i, y + i, TILE, cl, k[0], perz, out)
        k[0] = next_entry(k[0], TILE, P)
        i += TILE
    return i


cdef void dequantize_columns(const qtype_t *x, ftype_t *y, int64_t n,
                             const Cols *cl, int64_t P, int64_t k0,
                             int out) noexcept nogil:
    """As quantize_columns."""
    cdef int64_t i = 0, k = k0
    if out == OUT_STREAM:
        i = stream_head(y, sizeof(ftype_t), n)
        if i > 0:
            dequantize_tile_cols(x, y, i, cl, k, cl.perz, OUT_TILE)
            k = next_entry(k, i, P)
    if cl.perz:
        if out == OUT_STREAM:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_STREAM)
        elif out == OUT_TILE:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_TILE)
        else:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 1, OUT_DIRECT)
    else:
        if out == OUT_STREAM:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_STREAM)
        elif out == OUT_TILE:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_TILE)
        else:
            i = dequantize_tiles_cols(x, y, i, n, cl, &k, P, 0, OUT_DIRECT)
    if i < n:
        dequantize_tile_cols(x + i, y + i, n - i, cl, k, cl.perz, out)


# ---------------------------------------------------------------------------
# Ranges of the flat tensor
# ---------------------------------------------------------------------------

cdef inline int out_mode(const void *x, int64_t xsize, void *y, int64_t ysize,
                         int64_t start, int64_t stop,
                         int stream) noexcept nogil:
    """Where the tiles' results go: streamed (asked for, supported, and y
    aligned to its element size), through the tile when the input and
    output overlap (in place), else straight into the output."""
    cdef size_t x0 = <size_t>x + start * xsize, x1 = <size_t>x + stop * xsize
    cdef size_t y0 = <size_t>y + start * ysize, y1 = <size_t>y + stop * ysize
    if stream and HAVE_STREAM and (<size_t>y) % ysize == 0:
        return OUT_STREAM
    if x0 < y1 and y0 < x1:
        return OUT_TILE
    return OUT_DIRECT


cdef inline int64_t channels_touched(int64_t D, int64_t inner, int64_t start,
                                     int64_t stop) noexcept nogil:
    """How many channels elements [start, stop) use (at most D)."""
    cdef int64_t rows = (stop - 1) // inner - start // inner + 1
    return rows if rows < D else D


cdef void quantize_runs_stream(const xtype_t *x, const float *scale,
                               const qtype_t *zp, qtype_t *y, int64_t D,
                               int64_t inner, int64_t start,
                               int64_t stop, int prec) noexcept nogil:
    """Runs of inner elements sharing a channel, written with streaming
    stores only: each run's part that starts and ends on a 32-byte boundary
    of the output as a block, and the 32-byte groups that straddle two runs
    through per-element constants into a buffer, then streamed.  Only the
    range's first and last partial groups get plain stores.  (Run by run,
    every run boundary would leave a cache line written partly with plain
    and partly with streaming stores, which costs the line a read and a
    flush.)"""
    cdef int64_t G = 32 // sizeof(qtype_t)
    cdef int64_t i = start, d, off, m, nvec
    cdef qtype_t tmp[TILE]
    cdef float buf[COLS_ARRAYS * TILE]
    cdef Cols cl
    cdef Chan c
    d = (i // inner) % D
    off = i % inner
    m = stream_head(y + i, sizeof(qtype_t), stop - i)
    while i < stop:
        nvec = inner - off if inner - off < stop - i else stop - i
        nvec = nvec - nvec % G
        if m == 0 and nvec > 0:
            chan_of(&c, scale, zp, d)
            quantize_block(x + i, y + i, nvec, &c, OUT_STREAM, prec)
        else:
            # A group that straddles runs, or the range's ragged ends.
            if m == 0:
                m = G if G < stop - i else stop - i
            cols_init(&cl, buf, TILE, zp, d,
                      not uniform_zero(zp, d, 2, D), 1)
            expand_runs(&cl, 0, scale, zp, D, inner, d, off, m)
            quantize_columns(x + i, tmp, m, &cl, m, 0, OUT_TILE, prec)
            if m == G:
                stream32(y + i, tmp)
            else:
                memcpy(y + i, tmp, m * sizeof(qtype_t))
            nvec = m
            m = 0
        i += nvec
        off += nvec
        if off >= inner:
            d = (d + off // inner) % D
            off = off % inner


cdef void dequantize_runs_stream(const qtype_t *x, const float *scale,
                                 const qtype_t *zp, ftype_t *y, int64_t D,
                                 int64_t inner, int64_t start,
                                 int64_t stop) noexcept nogil:
    """As quantize_runs_stream."""
    cdef int64_t G = 32 // sizeof(ftype_t)
    cdef int64_t i = start, d, off, m, nvec
    cdef ftype_t tmp[TILE]
    cdef float buf[COLS_ARRAYS * TILE]
    cdef Cols cl
    cdef Chan c
    d = (i // inner) % D
    off = i % inner
    m = stream_head(y + i, sizeof(ftype_t), stop - i)
    while i < stop:
        nvec = inner - off if inner - off < stop - i else stop - i
        nvec = nvec - nvec % G
        if m == 0 and nvec > 0:
            chan_of(&c, scale, zp, d)
            dequantize_block(x + i, y + i, nvec, &c, OUT_STREAM)
        else:
            if m == 0:
                m = G if G < stop - i else stop - i
            cols_init(&cl, buf, TILE, zp, d,
                      not uniform_zero(zp, d, 2, D), 0)
            expand_runs(&cl, 0, scale, zp, D, inner, d, off, m)
            dequantize_columns(x + i, tmp, m, &cl, m, 0, OUT_TILE)
            if m == G:
                stream32(y + i, tmp)
            else:
                memcpy(y + i, tmp, m * sizeof(ftype_t))
            nvec = m
            m = 0
        i += nvec
        off += nvec
        if off >= inner:
            d = (d + off // inner) % D
            off = off % inner


cdef bint quantize_period(const xtype_t *x, const float *scale,
                          const qtype_t *zp, qtype_t *y, int64_t D,
                          int64_t inner, int64_t start, int64_t stop,
                          int out, int prec) noexcept nogil:
    """Short runs, when the range holds a whole period of P = D * inner <=
    PERIOD_MAX elements: the constants expanded per element over one period
    (on the heap), then one pass.  False (nothing done) when the allocation
    fails."""
    cdef int64_t P = D * inner
    cdef bint perz = not uniform_zero(zp, 0, D, D)
    cdef float *heap = <float *>malloc(
        cols_arrays(<qtype_t *>zp, perz, 1) * (P + TILE) * sizeof(float))
    cdef Cols cl
    if heap == NULL:
        return False
    cols_init(&cl, heap, P + TILE, zp, 0, perz, 1)
    expand_runs(&cl, 0, scale, zp, D, inner, 0, 0, P)
    cols_extend(&cl, P, TILE)
    quantize_columns(x + start, y + start, stop - start, &cl, P, start % P, out, prec)
    free(heap)
    return True


cdef void quantize_range(const xtype_t *x, const float *scale,
                         const qtype_t *zp, qtype_t *y, int64_t D,
                         int64_t inner, int64_t start,
                         int64_t stop, int stream, int prec) noexcept nogil:
    """Quantize elements [start, stop) of the [outer, D, inner] tensor, per
    tensor (D 1) or per axis (element i of channel (i // inner) % D);
    stream: write with streaming stores where the variant has them."""
    cdef int64_t i = start, run, d, off, w
    cdef int out = out_mode(x, sizeof(xtype_t), y, sizeof(qtype_t), start,
                            stop, stream)
    cdef float buf[COLS_ARRAYS * (WINDOW + TILE)]
    cdef Cols cl
    cdef Chan c
    if D == 1 or inner >= SHORT_RUN:
        if out == OUT_STREAM and D > 1:
            quantize_runs_stream(x, scale, zp, y, D, inner, start, stop, prec)
        else:
            # Runs of inner elements that share a channel.
            d = (i // inner) % D
            off = i % inner
            while i < stop:
                run = inner - off if inner - off < stop - i else stop - i
                chan_of(&c, scale, zp, d)
                quantize_block(x + i, y + i, run, &c, out, prec)
                i += run
                off = 0
                d = d + 1 if d + 1 < D else 0
    elif inner == 1 and D <= WINDOW:
        # The channel changes every element (axis = last): one pass, with
        # the channels extended periodically so a tile can cross a row end.
        cols_init(&cl, buf, WINDOW + TILE, zp, 0,
                  not uniform_zero(zp, 0, D, D), 1)
        convert_channels(&cl, 0, scale, zp, 0, D)
        cols_extend(&cl, D, TILE)
        quantize_columns(x + i, y + i, stop - i, &cl, D, i % D, out, prec)
    elif not (inner > 1 and D * inner <= PERIOD_MAX
              and D * inner <= stop - start
              and quantize_period(x, scale, zp, y, D, inner, start, stop, out, prec)):
        # Windows of up to WINDOW elements, each with its constants per
        # element: short runs over a long period, or rows too long to
        # extend (a window then stays within a row).
        d = (i // inner) % D
        off = i % inner
        cols_init(&cl, buf, WINDOW, zp, d, not uniform_zero(
            zp, d, channels_touched(D, inner, start, stop), D), 1)
        while i < stop:
            w = WINDOW if WINDOW < stop - i else stop - i
            if inner == 1:
                w = w if w < D - d else D - d
                convert_channels(&cl, 0, scale, zp, d, w)
            else:
                expand_runs(&cl, 0, scale, zp, D, inner, d, off, w)
            quantize_columns(x + i, y + i, w, &cl, w, 0, out, prec)
            i += w
            off += w
            d = (d + off // inner) % D
            off = off % inner
    if out == OUT_STREAM:
        store_fence()


cdef bint dequantize_period(const qtype_t *x, const float *scale,
                            const qtype_t *zp, ftype_t *y, int64_t D,
                            int64_t inner, int64_t start, int64_t stop,
                            int out) noexcept nogil:
    """As quantize_period."""
    cdef int64_t P = D * inner
    cdef bint perz = not uniform_zero(zp, 0, D, D)
    cdef float *heap = <float *>malloc(
        cols_arrays(<qtype_t *>zp, perz, 0) * (P + TILE) * sizeof(float))
    cdef Cols cl
    if heap == NULL:
        return False
    cols_init(&cl, heap, P + TILE, zp, 0, perz, 0)
    expand_runs(&cl, 0, scale, zp, D, inner, 0, 0, P)
    cols_extend(&cl, P, TILE)
    dequantize_columns(x + start, y + start, stop - start, &cl, P, start % P, out)
    free(heap)
    return True


cdef void dequantize_range(const qtype_t *x, const float *scale,
                           const qtype_t *zp, ftype_t *y, int64_t D,
                           int64_t inner, int64_t start,
                           int64_t stop, int stream) noexcept nogil:
    """As quantize_range."""
    cdef int64_t i = start, run, d, off, w
    cdef int out = out_mode(x, sizeof(qtype_t), y, sizeof(ftype_t), start,
                            stop, stream)
    cdef float buf[COLS_ARRAYS * (WINDOW + TILE)]
    cdef Cols cl
    cdef Chan c
    if D == 1 or inner >= SHORT_RUN:
        if out == OUT_STREAM and D > 1:
            dequantize_runs_stream(x, scale, zp, y, D, inner, start, stop)
        else:
            # Runs of inner elements that share a channel.
            d = (i // inner) % D
            off = i % inner
            while i < stop:
                run = inner - off if inner - off < stop - i else stop - i
                chan_of(&c, scale, zp, d)
                dequantize_block(x + i, y + i, run, &c, out)
                i += run
                off = 0
                d = d + 1 if d + 1 < D else 0
    elif inner == 1 and D <= WINDOW:
        cols_init(&cl, buf, WINDOW + TILE, zp, 0,
                  not uniform_zero(zp, 0, D, D), 0)
        convert_channels(&cl, 0, scale, zp, 0, D)
        cols_extend(&cl, D, TILE)
        dequantize_columns(x + i, y + i, stop - i, &cl, D, i % D, out)
    elif not (inner > 1 and D * inner <= PERIOD_MAX
              and D * inner <= stop - start
              and dequantize_period(x, scale, zp, y, D, inner, start, stop, out)):
        d = (i // inner) % D
        off = i % inner
        cols_init(&cl, buf, WINDOW, zp, d, not uniform_zero(
            zp, d, channels_touched(D, inner, start, stop), D), 0)
        while i < stop:
            w = WINDOW if WINDOW < stop - i else stop - i
            if inner == 1:
                w = w if w < D - d else D - d
                convert_channels(&cl, 0, scale, zp, d, w)
            else:
                expand_runs(&cl, 0, scale, zp, D, inner, d, off, w)
            dequantize_columns(x + i, y + i, w, &cl, w, 0, out)
            i += w
            off += w
            d = (d + off // inner) % D
            off = off % inner
    if out == OUT_STREAM:
        store_fence()


cdef inline void block_row(Cols *cl, float *buf, const float *scale,
                           const qtype_t *zp, int64_t b, int64_t inner,
                           int64_t k, int64_t w, bint quantize) noexcept nogil:
    """cl's entries [0, w) get entries k .. k + w - 1 of block row b (the
    row of inner scales and zero points that block b of the rows uses)."""
    cdef const float *srow = scale + b * inner
    cdef const qtype_t *zrow = zp + b * inner if zp != NULL else NULL
    cols_init(cl, buf, w, zrow, k, not uniform_zero(zrow, k, w, inner),
              quantize)
    convert_channels(cl, 0, srow, zrow, k, w)


cdef inline void expand_blocks(Cols *cl, float *buf, const float *scale,
                               const qtype_t *zp, int64_t D, int64_t B,
                               int64_t i, int64_t w,
                               bint quantize) noexcept nogil:
    """cl over buf gets the constants of elements [i, i + w) of a tensor
    blocked along its last axis (inner 1): element i of row i // D uses
    block (i // D) * ceil(D / B) + (i % D) // B."""
    cdef int64_t Db = (D + B - 1) // B
    cdef int64_t j = 0, d = i % D, pos = d % B, b = (i // D) * Db + d // B, run
    cdef int64_t last = ((i + w - 1) // D) * Db + ((i + w - 1) % D) // B
    cdef Chan c
    cols_init(cl, buf, w, zp, b, not uniform_zero(zp, b, last - b + 1, last + 1),
              quantize)
    while j < w:
        # The run of the element's block (pos: its offset in the block).
        run = B - pos if B - pos < D - d else D - d
        run = run if run < w - j else w - j
        if cl.perz:
            chan_of(&c, scale, zp, b)
            cols_fill(cl, j, &c, run)
        else:
            # One zero point (cl.z0): only the scales, each repeated.
            fill_32(cl.s + j, f32_bits(scale[b]), run)
        j += run
        d += run
        pos += run
        if pos == B or d == D:
            b += 1
            pos = 0
            d = 0 if d == D else d


cdef inline void tile_blocks(Cols *tc, const float *scale, const qtype_t *zp,
                             int64_t b0, int shift) noexcept nogil:
    """tc's TILE entries get the constants of TILE elements blocked along
    the last axis in aligned blocks of 1 << shift: entry j of block
    b0 + (j >> shift).  Each block's value is read once into a local and
    stored 1 << shift times (a loop of stores the compiler vectorises)."""
    cdef int64_t k, j, m = 1 << shift
    cdef float *ts = tc.s
    cdef float *tz = tc.zf
    cdef int32_t *ti = tc.zi
    cdef float v, vz
    cdef int32_t vi
    for k in range(TILE >> shift):
        v = scale[b0 + k]
        for j in range(m):
            ts[k * m + j] = v
    if tz != NULL:
        for k in range(TILE >> shift):
            vz = zero_float(zp[b0 + k])
            for j in range(m):
                tz[k * m + j] = vz
    if ti != NULL:
        for k in range(TILE >> shift):
            vi = zero_bits(zp[b0 + k])
            for j in range(m):
                ti[k * m + j] = vi


cdef inline int64_t quantize_tiles_blocks(const xtype_t *x, const float *scale,
                                          const qtype_t *zp, qtype_t *y,
                                          int64_t i, int64_t stop, Cols *tc,
                                          int shift, bint perz,
                                          int out, int prec) noexcept nogil:
    """Whole tiles from element i (a multiple of TILE), blocked along the
    last axis in aligned blocks of 1 << shift elements (<= TILE)."""
    while i + TILE <= stop:
        prefetch(x + i, TILE * sizeof(xtype_t))
        tile_blocks(tc, scale, zp, i >> shift, shift)
        quantize_tile_cols(x + i, y + i, TILE, tc, 0, perz, out, prec)
        i += TILE
    return i


cdef inline int64_t dequantize_tiles_blocks(const qtype_t *x,
                                            const float *scale,
                                            const qtype_t *zp, ftype_t *y,
                                            int64_t i, int64_t stop, Cols *tc,
                                            int shift, bint perz,
                                            int out) noexcept nogil:
    """As quantize_tiles_blocks."""
    while i + TILE <= stop:
        prefetch(x + i, TILE * sizeof(qtype_t))
        tile_blocks(tc, scale, zp, i >> shift, shift)
        dequantize_tile_cols(x + i, y + i, TILE, tc, 0, perz, out)
        i += TILE
    return i


cdef inline int block_shift(int64_t D, int64_t inner, int64_t B) noexcept nogil:
    """log2(B) when the blocks are aligned in the flat tensor (last axis, B a
    power of two from 8 to TILE dividing D): element e is in block e >> it.
    Else 0."""
    cdef int shift
    if inner != 1 or D % B != 0:
        return 0
    for shift in range(3, 8):
        if B == (1 << shift) and B <= TILE:
            return shift
    return 0


cdef void quantize_blocked(const xtype_t *x, const float *scale,
                           const qtype_t *zp, qtype_t *y, int64_t D,
                           int64_t inner, int64_t B, int64_t start,
                           int64_t stop, int stream, int prec) noexcept nogil:
    """Blocked quantization of [outer, D, inner] along D in blocks of B: the
    scale and zero point have the shape [outer, ceil(D / B), inner], and
    element (o, d, i) uses entry (o, d // B, i).

    Along the last axis (inner 1) a block is a run of B elements: aligned
    power-of-two blocks (B from 8 to TILE dividing D) tile by tile with the
    block scales read in place, other long runs one by one, other short
    ones in windows of per-element constants.  Otherwise
    the B rows of a block share their row of inner constants, converted once
    per block (on the heap when the row is longer than a window; in windows
    of the row if that allocation fails)."""
    cdef int64_t Db = (D + B - 1) // B
    cdef int64_t i = start, r, d, off, n, w, b, cached = -1
    cdef int out = out_mode(x, sizeof(xtype_t), y, sizeof(qtype_t), start,
                            stop, stream)
    cdef float buf[COLS_ARRAYS * WINDOW]
    cdef float *row = buf
    cdef float *heap = NULL
    cdef Cols cl
    cdef Chan c
    cdef int shift = block_shift(D, inner, B)
    cdef bint perz
    cdef int64_t i0
    cdef float tbuf[COLS_ARRAYS * TILE]
    cdef Cols tc
    if shift != 0 and stop - start >= 2 * TILE:
        # Aligned power-of-two blocks along the last axis: whole tiles take
        # the block scales straight from the scale tensor; the range's
        # ragged ends go the general way.
        perz = not uniform_zero(zp, start >> shift,
                                ((stop - 1) >> shift) - (start >> shift) + 1,
                                ((stop - 1) >> shift) + 1)
        if not (perz and is_wide(<qtype_t *>zp)):
            cols_init(&tc, tbuf, TILE, zp, start >> shift, perz, 1)
            i0 = (start + TILE - 1) // TILE * TILE
            quantize_blocked(x, scale, zp, y, D, inner, B, start, i0, stream, prec)
            if shift == 3:
                i0 = quantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 3, perz, out, prec)
            elif shift == 4:
                i0 = quantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 4, perz, out, prec)
            elif shift == 5:
                i0 = quantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 5, perz, out, prec)
            elif shift == 6:
                i0 = quantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 6, perz, out, prec)
            else:
                i0 = quantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 7, perz, out, prec)
            if out == OUT_STREAM:
                store_fence()
            quantize_blocked(x, scale, zp, y, D, inner, B, i0, stop, stream, prec)
            return
    if inner > WINDOW:
        heap = <float *>malloc(COLS_ARRAYS * inner * sizeof(float))
        row = heap if heap != NULL else buf
    while i < stop:
        r = i // inner
        d = r % D
        b = (r // D) * Db + d // B
        if inner == 1 and B < SHORT_RUN:
            w = WINDOW if WINDOW < stop - i else stop - i
            expand_blocks(&cl, buf, scale, zp, D, B, i, w, 1)
            quantize_columns(x + i, y + i, w, &cl, w, 0, out, prec)
            i += w
        elif inner == 1:
            n = B - d % B if B - d % B < D - d else D - d
            n = n if n < stop - i else stop - i
            chan_of(&c, scale, zp, b)
            quantize_block(x + i, y + i, n, &c, out, prec)
            i += n
        elif inner <= WINDOW or heap != NULL:
            off = i - r * inner
            n = inner - off if inner - off < stop - i else stop - i
            if b != cached:
                block_row(&cl, row, scale, zp, b, inner, 0, inner, 1)
                cached = b
            quantize_columns(x + i, y + i, n, &cl, inner, off, out, prec)
            i += n
        else:
            off = i - r * inner
            n = inner - off if inner - off < stop - i else stop - i
            w = WINDOW if WINDOW < n else n
            block_row(&cl, buf, scale, zp, b, inner, off, w, 1)
            quantize_columns(x + i, y + i, w, &cl, w, 0, out, prec)
            i += w
    free(heap)
    if out == OUT_STREAM:
        store_fence()


cdef void dequantize_blocked(const qtype_t *x, const float *scale,
                             const qtype_t *zp, ftype_t *y, int64_t D,
                             int64_t inner, int64_t B, int64_t start,
                             int64_t stop, int stream) noexcept nogil:
    """As quantize_blocked."""
    cdef int64_t Db = (D + B - 1) // B
    cdef int64_t i = start, r, d, off, n, w, b, cached = -1
    cdef int out = out_mode(x, sizeof(qtype_t), y, sizeof(ftype_t), start,
                            stop, stream)
    cdef float buf[COLS_ARRAYS * WINDOW]
    cdef float *row = buf
    cdef float *heap = NULL
    cdef Cols cl
    cdef Chan c
    cdef int shift = block_shift(D, inner, B)
    cdef bint perz
    cdef int64_t i0
    cdef float tbuf[COLS_ARRAYS * TILE]
    cdef Cols tc
    if shift != 0 and stop - start >= 2 * TILE:
        # Aligned power-of-two blocks along the last axis: whole tiles take
        # the block scales straight from the scale tensor; the range's
        # ragged ends go the general way.
        perz = not uniform_zero(zp, start >> shift,
                                ((stop - 1) >> shift) - (start >> shift) + 1,
                                ((stop - 1) >> shift) + 1)
        if not (perz and is_wide(<qtype_t *>zp)):
            cols_init(&tc, tbuf, TILE, zp, start >> shift, perz, 0)
            i0 = (start + TILE - 1) // TILE * TILE
            dequantize_blocked(x, scale, zp, y, D, inner, B, start, i0, stream)
            if shift == 3:
                i0 = dequantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 3, perz, out)
            elif shift == 4:
                i0 = dequantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 4, perz, out)
            elif shift == 5:
                i0 = dequantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 5, perz, out)
            elif shift == 6:
                i0 = dequantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 6, perz, out)
            else:
                i0 = dequantize_tiles_blocks(x, scale, zp, y, i0, stop, &tc, 7, perz, out)
            if out == OUT_STREAM:
                store_fence()
            dequantize_blocked(x, scale, zp, y, D, inner, B, i0, stop, stream)
            return
    if inner > WINDOW:
        heap = <float *>malloc(COLS_ARRAYS * inner * sizeof(float))
        row = heap if heap != NULL else buf
    while i < stop:
        r = i // inner
        d = r % D
        b = (r // D) * Db + d // B
        if inner == 1 and B < SHORT_RUN:
            w = WINDOW if WINDOW < stop - i else stop - i
            expand_blocks(&cl, buf, scale, zp, D, B, i, w, 0)
            dequantize_columns(x + i, y + i, w, &cl, w, 0, out)
            i += w
        elif inner == 1:
            n = B - d % B if B - d % B < D - d else D - d
            n = n if n < stop - i else stop - i
            chan_of(&c, scale, zp, b)
            dequantize_block(x + i, y + i, n, &c, out)
            i += n
        elif inner <= WINDOW or heap != NULL:
            off = i - r * inner
            n = inner - off if inner - off < stop - i else stop - i
            if b != cached:
                block_row(&cl, row, scale, zp, b, inner, 0, inner, 0)
                cached = b
            dequantize_columns(x + i, y + i, n, &cl, inner, off, out)
            i += n
        else:
            off = i - r * inner
            n = inner - off if inner - off < stop - i else stop - i
            w = WINDOW if WINDOW < n else n
            block_row(&cl, buf, scale, zp, b, inner, off, w, 0)
            dequantize_columns(x + i, y + i, w, &cl, w, 0, out)
            i += w
    free(heap)
    if out == OUT_STREAM:
        store_fence()


cdef inline void quantize_any(const xtype_t *x, const float *scale,
                              const qtype_t *zp, qtype_t *y, int64_t D,
                              int64_t inner, int64_t block, int64_t start,
                              int64_t stop, int stream, int prec) noexcept nogil:
    """Per tensor or per axis (block 0), else blocked."""
    if block > 0:
        quantize_blocked(x, scale, zp, y, D, inner, block, start, stop, stream, prec)
    else:
        quantize_range(x, scale, zp, y, D, inner, start, stop, stream, prec)


cdef inline void dequantize_any(const qtype_t *x, const float *scale,
                                const qtype_t *zp, ftype_t *y, int64_t D,
                                int64_t inner, int64_t block, int64_t start,
                                int64_t stop, int stream) noexcept nogil:
    if block > 0:
        dequantize_blocked(x, scale, zp, y, D, inner, block, start, stop,
                           stream)
    else:
        dequantize_range(x, scale, zp, y, D, inner, start, stop, stream)


# ---------------------------------------------------------------------------
# Sub-byte types: int4 / uint4 / int2 / uint2 through the 8-bit type
# ---------------------------------------------------------------------------
#
# A sub-byte quantize is the quantize to the 8-bit type of the same
# signedness (the carrier), clamped again to the narrow range: the carrier's
# result is clamp(round(x / s) + zp, lo8, hi8) (NaN: lo8), and as the
# narrow range and its zero point lie inside the carrier's, clamping that to
# [lo, hi] gives clamp(round(x / s) + zp, lo, hi) (NaN: lo) -- the narrow
# type's formula.  A dequantize widens the elements exactly into the carrier
# first.  Both go through a buffer of SUB_CHUNK carrier elements on the
# stack, so the drivers above run unchanged.  In memory the elements are
# packed 8 // bits per byte, element k of a byte in its bits [k * bits,
# (k + 1) * bits) (ONNX's layout), or with EXTQL_UNPACKED one per byte in
# the low bits (ml_dtypes' layout).  The zero point is always given as
# carrier elements (extql_unpack).

cdef enum:
    SUB_CHUNK = 8192

ctypedef fused byte_t:
    int8_t
    uint8_t


cdef inline byte_t clamp_byte(byte_t v, byte_t lo, byte_t hi) noexcept nogil:
    v = v if v > lo else lo
    return v if v < hi else hi


cdef inline void pack_values(const byte_t *v, uint8_t *dst, int64_t m,
                             int bits, int per, int lo,
                             int hi) noexcept nogil:
    """m carrier elements clamped to [lo, hi] and packed per to a byte (the
    last byte's unused high bits 0)."""
    cdef int64_t j, k, full = m // per
    cdef byte_t bl = <byte_t>lo, bh = <byte_t>hi
    cdef uint8_t mask = <uint8_t>((1 << bits) - 1), acc
    if per == 1:
        for j in range(m):
            dst[j] = <uint8_t>clamp_byte(v[j], bl, bh) & mask
        return
    if per == 2:
        for j in range(full):
            dst[j] = ((<uint8_t>clamp_byte(v[2 * j], bl, bh) & 15)
                      | ((<uint8_t>clamp_byte(v[2 * j + 1], bl, bh) & 15) << 4))
    else:
        for j in range(full):
            dst[j] = ((<uint8_t>clamp_byte(v[4 * j], bl, bh) & 3)
                      | ((<uint8_t>clamp_byte(v[4 * j + 1], bl, bh) & 3) << 2)
                      | ((<uint8_t>clamp_byte(v[4 * j + 2], bl, bh) & 3) << 4)
                      | ((<uint8_t>clamp_byte(v[4 * j + 3], bl, bh) & 3) << 6))
    if m > full * per:
        acc = 0
        for k in range(m - full * per):
            acc |= (<uint8_t>clamp_byte(v[full * per + k], bl, bh) & mask) << (k * bits)
        dst[full] = acc


cdef inline byte_t field(uint8_t b, int k, int bits, byte_t *like) noexcept nogil:
    """Element k of the byte b (bits wide), sign-extended for int8_t: moved
    to the top of the byte, then shifted down arithmetically or not."""
    cdef uint8_t top = <uint8_t>(b << (8 - bits - k * bits))
    if byte_t is int8_t:
        return <int8_t>(<int8_t>top >> (8 - bits))
    else:
        return <uint8_t>(top >> (8 - bits))


cdef inline void unpack_values(const uint8_t *src, byte_t *v, int64_t m,
                               int bits, int per) noexcept nogil:
    """m elements packed per to a byte into carrier elements."""
    cdef int64_t j, k, full = m // per
    if per == 1:
        for j in range(m):
            v[j] = field(src[j], 0, bits, v)
        return
    if per == 2:
        for j in range(full):
            v[2 * j] = field(src[j], 0, 4, v)
            v[2 * j + 1] = field(src[j], 1, 4, v)
    else:
        for j in range(full):
            v[4 * j] = field(src[j], 0, 2, v)
            v[4 * j + 1] = field(src[j], 1, 2, v)
            v[4 * j + 2] = field(src[j], 2, 2, v)
            v[4 * j + 3] = field(src[j], 3, 2, v)
    for k in range(m - full * per):
        v[full * per + k] = field(src[full], <int>k, bits, v)


cdef inline void *based_at(void *buf, int64_t offset) noexcept nogil:
    """A pointer p with p + offset bytes == buf: the drivers index their
    output (or input) by the element's place in the tensor, and the buffer
    holds the elements from element i on (offset = i * the element size).
    (As an address computation, since buf - offset may lie outside any
    object.)"""
    return <void *>(<size_t>buf - <size_t>offset)


cdef int quantize_subbyte(int qtype, const xtype_t *x, const float *scale,
                          const void *zp, void *y, int64_t D, int64_t inner,
                          int64_t block, int64_t start, int64_t stop,
                          int prec, bint unpacked) noexcept nogil:
    """Quantize elements [start, stop) to a sub-byte type (start a multiple
    of the elements per byte; stop too unless it is the tensor's end)."""
    cdef int bits, lo, hi, per
    cdef int64_t i = start, e
    cdef int8_t buf[SUB_CHUNK]
    cdef uint8_t *out = <uint8_t *>y
    if not subbyte_of(qtype, &bits, &lo, &hi):
        return -1
    per = 1 if unpacked else 8 // bits
    if start % per != 0:
        return -1
    while i < stop:
        # Passes end on multiples of SUB_CHUNK, so that they stay aligned
        # to the tiles.
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        if lo < 0:
            quantize_any(x, scale, <const int8_t *>zp,
                         <int8_t *>based_at(buf, i), D, inner, block, i, e,
                         0, prec)
            pack_values(<const int8_t *>buf, out + i // per, e - i, bits, per,
                        lo, hi)
        else:
            quantize_any(x, scale, <const uint8_t *>zp,
                         <uint8_t *>based_at(buf, i), D, inner, block, i, e,
                         0, prec)
            pack_values(<const uint8_t *>buf, out + i // per, e - i, bits,
                        per, lo, hi)
        i = e
    return 0


cdef int dequantize_subbyte(int qtype, const void *x, const float *scale,
                            const void *zp, ftype_t *y, int64_t D,
                            int64_t inner, int64_t block, int64_t start,
                            int64_t stop, int st, bint unpacked) noexcept nogil:
    """Dequantize elements [start, stop) of a sub-byte type (start a
    multiple of the elements per byte)."""
    cdef int bits, lo, hi, per
    cdef int64_t i = start, e
    cdef int8_t buf[SUB_CHUNK]
    cdef const uint8_t *src = <const uint8_t *>x
    if not subbyte_of(qtype, &bits, &lo, &hi):
        return -1
    per = 1 if unpacked else 8 // bits
    if start % per != 0:
        return -1
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        if lo < 0:
            unpack_values(src + i // per, <int8_t *>buf, e - i, bits, per)
            dequantize_any(<const int8_t *>based_at(buf, i), scale,
                           <const int8_t *>zp, y, D, inner, block, i, e, st)
        else:
            unpack_values(src + i // per, <uint8_t *>buf, e - i, bits, per)
            dequantize_any(<const uint8_t *>based_at(buf, i), scale,
                           <const uint8_t *>zp, y, D, inner, block, i, e, st)
        i = e
    return 0


# ---------------------------------------------------------------------------
# Small floats: float8 (four types) and float4e2m1 through float32
# ---------------------------------------------------------------------------
#
# A quantize to a small float computes v = x / s + zp in float32 with the
# drivers above (the float32 carrier: no saturation, no rounding; float8
# takes no zero point, as the official implementations do), then rounds v
# once, to nearest even, into the small type: with saturate, a magnitude
# beyond the largest finite value (infinity included) becomes that value;
# without, it becomes infinity where the type has one (float8e5m2) and NaN
# where it does not.  NaN stays NaN; float4e2m1, which has none and always
# saturates, takes NaN to the zero of the other sign (as ml_dtypes, and so
# ONNX's reference, convert it).  The one rounding is from float32: through
# float16 first would round twice (a value just above a float8 tie would
# land on the tie).  A dequantize widens the elements exactly into float32
# first.  float4e2m1 is packed two per byte, as int4.

cdef inline float pow2(int e) noexcept nogil:
    """2^e for -126 <= e <= 127, exactly."""
    return bits_f32(<uint32_t>(e + 127) << 23)


cdef inline uint8_t to_small(float v, const SmallFloat *t,
                             bint sat) noexcept nogil:
    """v rounded to nearest even into the small float type t: its code."""
    cdef uint32_t u = f32_bits(v)
    cdef uint8_t sign = <uint8_t>((u >> 31) << (t.bits - 1))
    cdef uint32_t au = u & 0x7FFFFFFFu
    cdef float a = bits_f32(au), q, ulp
    cdef int e, emin = 1 - t.bias
    cdef uint32_t mant, field
    if au > 0x7F800000u:  # NaN
        if t.kind == SF_FNUZ:
            return 0x80
        if t.kind == SF_NONE:
            return sign ^ <uint8_t>(1 << (t.bits - 1))
        return sign | <uint8_t>((1 << (t.bits - 1)) - 1 if t.kind == SF_FN
                                else 0x7E)
    if au < 0x7F800000u:
        # The spacing of the type at a: that of a's binade, or the subnormal
        # one below the smallest normal exponent; a / ulp is exact, and
        # rint rounds it to nearest even.
        e = <int>(au >> 23) - 127
        e = e if e > emin else emin
        ulp = pow2(e - t.mbits)
        q = rint(a / ulp) * ulp
    else:
        q = a  # infinity
    if q > t.maxv:
        if sat or t.kind == SF_NONE:
            q = t.maxv
        elif t.kind == SF_IEEE:
            return sign | 0x7C
        elif t.kind == SF_FNUZ:
            return 0x80
        else:
            return sign | <uint8_t>((1 << (t.bits - 1)) - 1)
    if q == 0:
        return 0 if t.kind == SF_FNUZ else sign
    e = <int>(f32_bits(q) >> 23) - 127
    if e < emin:
        # Subnormal: the exponent field 0, the mantissa the count of ulps.
        return sign | <uint8_t>(<uint32_t>(q / pow2(emin - t.mbits)))
    mant = (f32_bits(q) >> (23 - t.mbits)) & ((1u << t.mbits) - 1)
    field = <uint32_t>(e + t.bias)
    return sign | <uint8_t>((field << t.mbits) | mant)


cdef inline float from_small(uint8_t b, const SmallFloat *t) noexcept nogil:
    """The value of the code b of the small float type t, exactly."""
    cdef int top = t.bits - 1
    cdef uint32_t sign = <uint32_t>((b >> top) & 1) << 31
    cdef uint32_t mag = b & ((1u << top) - 1)
    cdef uint32_t field = mag >> t.mbits, mant = mag & ((1u << t.mbits) - 1)
    cdef uint32_t emax_field = (1u << t.ebits) - 1
    if t.kind == SF_FNUZ and b == 0x80:
        return bits_f32(0x7FC00000u)
    if t.kind == SF_FN and mag == (1u << top) - 1:
        return bits_f32(sign | 0x7FC00000u)
    if t.kind == SF_IEEE and field == emax_field:
        return bits_f32(sign | (0x7F800000u if mant == 0 else 0x7FC00000u))
    if field == 0:
        return bits_f32(sign | f32_bits(<float>mant * pow2(1 - t.bias - t.mbits)))
    return bits_f32(sign | (<uint32_t>(<int>field - t.bias + 127) << 23)
                    | (mant << (23 - t.mbits)))


cdef void to_small_codes(const float *v, uint8_t *dst, int64_t n,
                         const SmallFloat *t, bint sat) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        dst[j] = to_small(v[j], t, sat)


cdef void from_small_codes(const uint8_t *src, float *v, int64_t n,
                           const SmallFloat *t) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        v[j] = from_small(src[j], t)


cdef inline void small_table(float *table, const SmallFloat *t) noexcept nogil:
    """The value of every code of t (256 or 16 of them): dequantize looks
    its elements up instead of decoding each."""
    cdef int b
    for b in range(1 << t.bits):
        table[b] = from_small(<uint8_t>b, t)


cdef void lookup_codes(const uint8_t *src, float *v, int64_t n,
                       const float *table) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        v[j] = table[src[j]]


cdef int quantize_smallfloat(int qtype, const xtype_t *x, const float *scale,
                             const void *zp, void *y, int64_t D, int64_t inner,
                             int64_t block, int64_t start, int64_t stop,
                             int prec, bint unpacked, bint sat) noexcept nogil:
    """Quantize elements [start, stop) to a small float type (float4e2m1
    packed: start a multiple of 2; the zero point as float32)."""
    cdef SmallFloat t
    cdef int per
    cdef int64_t i = start, e
    cdef float buf[SUB_CHUNK]
    cdef uint8_t codes[SUB_CHUNK]
    cdef uint8_t *out = <uint8_t *>y
    if not smallfloat_of(qtype, &t):
        return -1
    per = 1 if unpacked else 8 // t.bits
    if start % per != 0:
        return -1
    if t.bits == 8:
        # float8 takes no zero point (onnxruntime's and ONNX's reference
        # QuantizeLinear ignore it): v = x / s, -0 included.
        zp = NULL
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        quantize_any(x, scale, <const float *>zp,
                     <float *>based_at(buf, i * <int64_t>sizeof(float)), D, inner,
                     block, i, e, 0, prec)
        if per == 1:
            to_small_codes(buf, out + i, e - i, &t, sat)
        else:
            to_small_codes(buf, codes, e - i, &t, sat)
            pack_values(<const uint8_t *>codes, out + i // per, e - i, t.bits,
                        per, 0, (1 << t.bits) - 1)
        i = e
    return 0


cdef int dequantize_smallfloat(int qtype, const void *x, const float *scale,
                               const void *zp, ftype_t *y, int64_t D,
                               int64_t inner, int64_t block, int64_t start,
                               int64_t stop, int st, bint unpacked) noexcept nogil:
    """Dequantize elements [start, stop) of a small float type."""
    cdef SmallFloat t
    cdef int per
    cdef int64_t i = start, e
    cdef float buf[SUB_CHUNK]
    cdef float table[256]
    cdef uint8_t codes[SUB_CHUNK]
    cdef const uint8_t *src = <const uint8_t *>x
    if not smallfloat_of(qtype, &t):
        return -1
    per = 1 if unpacked else 8 // t.bits
    if start % per != 0:
        return -1
    small_table(table, &t)
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        if per == 1:
            lookup_codes(src + i, buf, e - i, table)
        else:
            unpack_values(src + i // per, <uint8_t *>codes, e - i, t.bits, per)
            lookup_codes(codes, buf, e - i, table)
        dequantize_any(<const float *>based_at(buf, i * <int64_t>sizeof(float)),
                       scale, <const float *>zp, y, D, inner, block, i, e, st)
        i = e
    return 0


# ---------------------------------------------------------------------------
# C entry points (src/extql_kernels.h)
# ---------------------------------------------------------------------------

cdef inline int quantize_to(int qtype, const xtype_t *x, const float *scale,
                            const void *zp, void *y, int64_t D, int64_t inner,
                            int64_t block, int64_t start, int64_t stop,
                            int st, int prec, bint unpacked,
                            bint sat) noexcept nogil:
    """quantize_any with y and the zero point of the type qtype (a sub-byte
    type or float4e2m1: packed, or one per byte when unpacked; sat: the
    small floats saturate)."""
    cdef int bits, lo, hi
    if qtype == EXTQL_INT8:
        quantize_any(x, scale, <const int8_t *>zp, <int8_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_UINT8:
        quantize_any(x, scale, <const uint8_t *>zp, <uint8_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_INT16:
        quantize_any(x, scale, <const int16_t *>zp, <int16_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_UINT16:
        quantize_any(x, scale, <const uint16_t *>zp, <uint16_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_INT32:
        quantize_any(x, scale, <const int32_t *>zp, <int32_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_UINT32:
        quantize_any(x, scale, <const uint32_t *>zp, <uint32_t *>y, D, inner,
                     block, start, stop, st, prec)
    elif qtype == EXTQL_FLOAT16:
        quantize_any(x, scale, <const float16_t *>zp, <float16_t *>y, D,
                     inner, block, start, stop, st, prec)
    elif qtype == EXTQL_BFLOAT16:
        quantize_any(x, scale, <const bfloat16_t *>zp, <bfloat16_t *>y, D,
                     inner, block, start, stop, st, prec)
    elif subbyte_of(qtype, &bits, &lo, &hi):
        return quantize_subbyte(qtype, x, scale, zp, y, D, inner, block,
                                start, stop, prec, unpacked)
    else:
        return quantize_smallfloat(qtype, x, scale, zp, y, D, inner, block,
                                   start, stop, prec, unpacked, sat)
    return 0


cdef inline int dequantize_to(int qtype, const void *x, const float *scale,
                              const void *zp, ftype_t *y, int64_t D,
                              int64_t inner, int64_t block, int64_t start,
                              int64_t stop, int st, bint unpacked) noexcept nogil:
    """dequantize_any with x and the zero point of the type qtype (a
    sub-byte type or float4e2m1: packed, or one per byte when unpacked)."""
    cdef int bits, lo, hi
    if qtype == EXTQL_INT8:
        dequantize_any(<const int8_t *>x, scale, <const int8_t *>zp, y, D,
                       inner, block, start, stop, st)
    elif qtype == EXTQL_UINT8:
        dequantize_any(<const uint8_t *>x, scale, <const uint8_t *>zp, y, D,
                       inner, block, start, stop, st)
    elif qtype == EXTQL_INT16:
        dequantize_any(<const int16_t *>x, scale, <const int16_t *>zp, y, D,
                       inner, block, start, stop, st)
    elif qtype == EXTQL_UINT16:
        dequantize_any(<const uint16_t *>x, scale, <const uint16_t *>zp, y,
                       D, inner, block, start, stop, st)
    elif qtype == EXTQL_INT32:
        dequantize_any(<const int32_t *>x, scale, <const int32_t *>zp, y, D,
                       inner, block, start, stop, st)
    elif qtype == EXTQL_UINT32:
        dequantize_any(<const uint32_t *>x, scale, <const uint32_t *>zp, y,
                       D, inner, block, start, stop, st)
    elif qtype == EXTQL_FLOAT16:
        dequantize_any(<const float16_t *>x, scale, <const float16_t *>zp, y,
                       D, inner, block, start, stop, st)
    elif qtype == EXTQL_BFLOAT16:
        dequantize_any(<const bfloat16_t *>x, scale, <const bfloat16_t *>zp,
                       y, D, inner, block, start, stop, st)
    elif subbyte_of(qtype, &bits, &lo, &hi):
        return dequantize_subbyte(qtype, x, scale, zp, y, D, inner, block,
                                  start, stop, st, unpacked)
    else:
        return dequantize_smallfloat(qtype, x, scale, zp, y, D, inner, block,
                                     start, stop, st, unpacked)
    return 0


cdef inline int prec_code(int prec) noexcept nogil:
    """The rounding of the quotient: 0 (float32, none), EXTQL_FLOAT16 or
    EXTQL_BFLOAT16; -1 for a code that is none of the three."""
    if prec == EXTQL_FLOAT32:
        return 0
    if prec == EXTQL_FLOAT16 or prec == EXTQL_BFLOAT16:
        return prec
    return -1


cdef public int extql_quantize_typed_range_ex(
        int qtype, int xtype, int prec, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags) noexcept nogil:
    cdef int st = 1 if flags & EXTQL_STREAM else 0
    cdef bint up = (flags & EXTQL_UNPACKED) != 0
    cdef bint sat = (flags & EXTQL_NO_SATURATE) == 0
    cdef int p
    if use_avx2():
        return quantize_typed_range_ex_avx2(qtype, xtype, prec, x, scale,
                                            zero_point, y, D, inner, block,
                                            start, stop, flags)
    p = prec_code(prec)
    if p < 0:
        return -1
    if xtype == EXTQL_FLOAT32:
        return quantize_to(qtype, <const float *>x, scale, zero_point, y, D,
                           inner, block, start, stop, st, p, up, sat)
    if xtype == EXTQL_FLOAT16:
        return quantize_to(qtype, <const float16_t *>x, scale, zero_point, y,
                           D, inner, block, start, stop, st, p, up, sat)
    if xtype == EXTQL_BFLOAT16:
        return quantize_to(qtype, <const bfloat16_t *>x, scale, zero_point, y,
                           D, inner, block, start, stop, st, p, up, sat)
    if xtype == EXTQL_INT32:
        return quantize_to(qtype, <const int32_t *>x, scale, zero_point, y,
                           D, inner, block, start, stop, st, p, up, sat)
    return -1


cdef public int extql_quantize_range_ex(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil:
    return extql_quantize_typed_range_ex(qtype, EXTQL_FLOAT32, EXTQL_FLOAT32,
                                         x, scale, zero_point, y, D, inner, 0,
                                         start, stop, flags)


cdef public int extql_dequantize_typed_range_ex(
        int qtype, int ytype, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags) noexcept nogil:
    cdef int st = 1 if flags & EXTQL_STREAM else 0
    cdef bint up = (flags & EXTQL_UNPACKED) != 0
    if use_avx2():
        return dequantize_typed_range_ex_avx2(qtype, ytype, x, scale,
                                              zero_point, y, D, inner, block,
                                              start, stop, flags)
    if ytype == EXTQL_FLOAT32:
        return dequantize_to(qtype, x, scale, zero_point, <float *>y, D,
                             inner, block, start, stop, st, up)
    if ytype == EXTQL_FLOAT16:
        return dequantize_to(qtype, x, scale, zero_point, <float16_t *>y, D,
                             inner, block, start, stop, st, up)
    if ytype == EXTQL_BFLOAT16:
        return dequantize_to(qtype, x, scale, zero_point, <bfloat16_t *>y, D,
                             inner, block, start, stop, st, up)
    return -1


cdef public int extql_dequantize_range_ex(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
        int flags) noexcept nogil:
    return extql_dequantize_typed_range_ex(qtype, EXTQL_FLOAT32, x, scale,
                                           zero_point, y, D, inner, 0, start,
                                           stop, flags)


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
    cdef int bits, lo, hi
    cdef SmallFloat t
    return (qtype_size(qtype) != 0 or subbyte_of(qtype, &bits, &lo, &hi)
            or smallfloat_of(qtype, &t))


cdef inline int threads_for(int64_t n, int nthreads) noexcept nogil:
    """How many threads to use on n elements (extql_split.h; 1 without OpenMP)."""
    if nthreads <= 0:
        nthreads = extql_get_num_threads()
    if not HAVE_OPENMP:
        return 1
    return split_threads_for(n, nthreads)


cdef inline int64_t type_size(int qtype) noexcept nogil:
    return qtype_size(qtype)


cdef inline int64_t x_size(int xtype) noexcept nogil:
    """Bytes of an element of quantize's x (0: not one of its four types)."""
    return 4 if xtype == EXTQL_INT32 else float_size(xtype)


cdef inline int64_t float_size(int ftype) noexcept nogil:
    """Bytes of an element of the float side (0: not one of the three)."""
    if ftype == EXTQL_FLOAT32:
        return 4
    if ftype == EXTQL_FLOAT16 or ftype == EXTQL_BFLOAT16:
        return 2
    return 0


cdef public int extql_quantize_typed(
        int qtype, int xtype, int prec, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t n, int64_t D, int64_t inner,
        int64_t block, int nthreads, int flags) noexcept nogil:
    cdef int64_t t, chunk
    cdef int nt
    if not known_type(qtype) or x_size(xtype) == 0 or prec_code(prec) < 0:
        return -1
    # (Packed and small float outputs are never streamed: type_size is 0.)
    flags = ((flags & (EXTQL_UNPACKED | EXTQL_NO_SATURATE))
             | stream_flags(n * type_size(qtype)))
    nt = threads_for(n, nthreads)
    if nt == 1:
        return extql_quantize_typed_range_ex(
            qtype, xtype, prec, x, scale, zero_point, y, D, inner, block, 0, n,
            flags)
    chunk = chunk_for(n, nt)
    for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        extql_quantize_typed_range_ex(
            qtype, xtype, prec, x, scale, zero_point, y, D, inner, block,
            t * chunk, min(n, (t + 1) * chunk), flags)
    return 0


cdef public int extql_quantize(
        int qtype, const float *x, const float *scale, const void *zero_point,
        void *y, int64_t n, int64_t D, int64_t inner,
        int nthreads) noexcept nogil:
    return extql_quantize_typed(qtype, EXTQL_FLOAT32, EXTQL_FLOAT32, x, scale,
                                zero_point, y, n, D, inner, 0, nthreads, 0)


cdef public int extql_dequantize_typed(
        int qtype, int ytype, const void *x, const float *scale,
        const void *zero_point, void *y, int64_t n, int64_t D, int64_t inner,
        int64_t block, int nthreads, int flags) noexcept nogil:
    cdef int64_t t, chunk
    cdef int nt
    if not known_type(qtype) or float_size(ytype) == 0:
        return -1
    flags = (flags & EXTQL_UNPACKED) | stream_flags(n * float_size(ytype))
    nt = threads_for(n, nthreads)
    if nt == 1:
        return extql_dequantize_typed_range_ex(
            qtype, ytype, x, scale, zero_point, y, D, inner, block, 0, n, flags)
    chunk = chunk_for(n, nt)
    for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                    num_threads=nt):
        extql_dequantize_typed_range_ex(
            qtype, ytype, x, scale, zero_point, y, D, inner, block, t * chunk,
            min(n, (t + 1) * chunk), flags)
    return 0


cdef public int extql_dequantize(
        int qtype, const void *x, const float *scale, const void *zero_point,
        float *y, int64_t n, int64_t D, int64_t inner,
        int nthreads) noexcept nogil:
    return extql_dequantize_typed(qtype, EXTQL_FLOAT32, x, scale, zero_point,
                                  y, n, D, inner, 0, nthreads, 0)


cdef public int extql_convert_scales(int stype, int prec, const void *src,
                                     float *dst, int64_t n) noexcept nogil:
    """n scales of the type stype (float32, float16, bfloat16, or int32:
    rounded to nearest even, as an int32 x is) as float32, rounded to prec
    when that is float16 / bfloat16 (a quantize divides by the scale in that
    precision).  -1 for an unknown code."""
    cdef int64_t i, k, m
    cdef int p = prec_code(prec)
    if p < 0 or x_size(stype) == 0:
        return -1
    i = 0
    while i < n:
        m = TILE if TILE < n - i else n - i
        if stype == EXTQL_FLOAT32:
            memcpy(dst + i, <const float *>src + i, m * sizeof(float))
        elif stype == EXTQL_INT32:
            for k in range(i, i + m):
                dst[k] = <float>(<const int32_t *>src)[k]
        elif stype == EXTQL_FLOAT16:
            load_f16(dst + i, <const uint16_t *>src + i, m)
        else:
            load_bf16(dst + i, <const uint16_t *>src + i, m)
        if p == EXTQL_FLOAT16:
            round_f16(dst + i, m)
        elif p == EXTQL_BFLOAT16:
            for k in range(i, i + m):
                dst[k] = round_bf16(dst[k])
        i += m
    return 0


# ---------------------------------------------------------------------------
# Precision float64 (the default for an int32 scale): a first stage takes the
# quotient in float64 and rounds what the formula needs of it once to
# float32; the float32 formula then runs with a scale of 1.
# ---------------------------------------------------------------------------

cdef enum:
    # What the float64 stage does with the quotient q, by output type.
    F64_ROUND = 0      # integer types: rint(q)
    F64_PLAIN = 1      # float8: q (it takes no zero point)
    F64_ZERO = 2       # float16, bfloat16, float4e2m1: q + zp


cdef inline int f64_kind(int qtype) noexcept nogil:
    cdef SmallFloat t
    if qtype == EXTQL_FLOAT16 or qtype == EXTQL_BFLOAT16:
        return F64_ZERO
    if smallfloat_of(qtype, &t):
        return F64_PLAIN if t.bits == 8 else F64_ZERO
    return F64_ROUND


cdef inline double zero_f64(int qtype, const void *zp, int64_t c) noexcept nogil:
    """Zero point c of a float type in the form the kernels take it (float16 /
    bfloat16 bits, float4e2m1 as float32) as a double; NULL: +0."""
    cdef float f
    if zp == NULL:
        return 0.0
    if qtype == EXTQL_FLOAT16:
        load_f16(&f, <const uint16_t *>zp + c, 1)
        return f
    if qtype == EXTQL_BFLOAT16:
        return bits_f32(<uint32_t>(<const uint16_t *>zp)[c] << 16)
    return (<const float *>zp)[c]


cdef inline double scale_f64(const void *scale, bint wide, int64_t c) noexcept nogil:
    """Scale c (int32 when wide, else float32) as a double, exactly."""
    if wide:
        return (<const int32_t *>scale)[c]
    return (<const float *>scale)[c]


cdef inline void quotients_f64_tile(const double *xd, float *v, int64_t n,
                                    const void *scale, bint wide, bint per,
                                    int64_t c, double z, const void *zp,
                                    int qtype, int kind) noexcept nogil:
    """v[j] for n <= TILE elements whose x (as doubles) is xd: the scale c
    for all (per 0; its zero point z), or scale / zero point c + j (per 1).
    One loop per case, so that each vectorises."""
    cdef int64_t j
    cdef double s = scale_f64(scale, wide, c)
    n = n if n < TILE else TILE  # (always; it tells the compiler the bound)
    if per:
        if kind == F64_ROUND:
            for j in range(n):
                v[j] = <float>nearbyint(xd[j] / scale_f64(scale, wide, c + j))
        elif kind == F64_PLAIN:
            for j in range(n):
                v[j] = <float>(xd[j] / scale_f64(scale, wide, c + j))
        else:
            for j in range(n):
                v[j] = <float>(xd[j] / scale_f64(scale, wide, c + j)
                               + zero_f64(qtype, zp, c + j))
    elif kind == F64_ROUND:
        for j in range(n):
            v[j] = <float>nearbyint(xd[j] / s)
    elif kind == F64_PLAIN:
        for j in range(n):
            v[j] = <float>(xd[j] / s)
    else:
        for j in range(n):
            v[j] = <float>(xd[j] / s + z)


cdef inline void widen_f64(const xtype_t *x, double *xd, int64_t n) noexcept nogil:
    """n <= TILE elements of quantize's x as doubles (exactly: every value of
    the four types is one)."""
    cdef float xw[TILE]
    cdef const float *w
    cdef int64_t j
    n = n if n < TILE else TILE
    if xtype_t is int32_t:
        for j in range(n):
            xd[j] = x[j]
    else:
        w = widen_x(x, xw, n)
        for j in range(n):
            xd[j] = w[j]


cdef void quotients_f64(const xtype_t *x, const void *scale, bint wide,
                        const void *zp, int qtype, float *v, int64_t D,
                        int64_t inner, int64_t block, int64_t start,
                        int64_t stop) noexcept nogil:
    """extql_quotients_f64 for one type of x: the range in runs of one row
    (the elements sharing the scale's index up to the innermost one), each
    in tiles."""
    cdef double xd[TILE]
    cdef int kind = f64_kind(qtype)
    cdef int64_t i = start, e, row, d, nb, c, m
    cdef bint per = block > 0
    cdef double z
    nb = (D + block - 1) // block if per else D
    while i < stop:
        row = i // inner
        e = (row + 1) * inner
        e = e if e < stop else stop
        d = row % D
        # The scale of element j: entry d (per tensor / per axis), or entry
        # (outer, d / block, j - row * inner) of the blocked [outer, nb, inner].
        c = (((row // D) * nb + d // block) * inner - row * inner) if per else d
        z = 0.0 if per or kind != F64_ZERO else zero_f64(qtype, zp, c)
        while i < e:
            m = e - i if e - i < TILE else TILE
            widen_f64(x + i, xd, m)
            quotients_f64_tile(xd, v + i, m, scale, wide, per, c + i if per else c,
                               z, zp, qtype, kind)
            i += m


cdef public int extql_quotients_f64(
        int qtype, int xtype, int stype, const void *x, const void *scale,
        const void *zero_point, float *v, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop) noexcept nogil:
    """The float64 stage for elements [start, stop) into v[start:stop): q =
    x / s in float64 (x and the scale -- float32 or int32: stype -- are
    exact there), rounded to an integer (integer outputs) or added to the
    zero point (float16, bfloat16, float4e2m1; float8 takes none), then
    rounded once to float32.  Layout as extql_quantize_typed_range_ex."""
    cdef bint wide = stype == EXTQL_INT32
    if use_avx2():
        return quotients_f64_avx2(qtype, xtype, stype, x, scale, zero_point, v,
                                  D, inner, block, start, stop)
    if (stype != EXTQL_FLOAT32 and not wide) or x_size(xtype) == 0:
        return -1
    if not known_type(qtype) or D <= 0 or inner <= 0:
        return -1
    if xtype == EXTQL_FLOAT32:
        quotients_f64(<const float *>x, scale, wide, zero_point, qtype, v, D,
                      inner, block, start, stop)
    elif xtype == EXTQL_INT32:
        quotients_f64(<const int32_t *>x, scale, wide, zero_point, qtype, v, D,
                      inner, block, start, stop)
    elif xtype == EXTQL_FLOAT16:
        quotients_f64(<const float16_t *>x, scale, wide, zero_point, qtype, v,
                      D, inner, block, start, stop)
    else:
        quotients_f64(<const bfloat16_t *>x, scale, wide, zero_point, qtype, v,
                      D, inner, block, start, stop)
    return 0


cdef public int extql_f64_params(int qtype, float *ones, void *zero2,
                                 int64_t count) noexcept nogil:
    """The float32 stage's parameters after extql_quotients_f64: count
    scales of 1 into ones and, for the types whose zero point the float64
    stage added (float16, bfloat16, float4e2m1), count zero points of -0 in
    the form the kernels take (x + -0 is x, -0 included) into zero2 (room
    for count float32).  Returns 1 when the float32 stage takes zero2, 0
    when it takes the operator's own zero point."""
    cdef int64_t c
    for c in range(count):
        ones[c] = 1
    if f64_kind(qtype) != F64_ZERO:
        return 0
    for c in range(count):
        if qtype == EXTQL_FLOAT16 or qtype == EXTQL_BFLOAT16:
            (<uint16_t *>zero2)[c] = 0x8000u
        else:
            (<float *>zero2)[c] = -0.0
    return 1


cdef public int extql_quantize_f64_range(
        int qtype, int xtype, int stype, const void *x, const void *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags,
        const float *ones, const void *zero2) noexcept nogil:
    """Quantize [start, stop) with the division in float64, window by
    window (so that the float32 values stay in the cache): the float64
    stage into a window buffer, then the float32 formula on it with the
    scales ``ones`` and zero points ``zero2`` (extql_f64_params: -0 or the
    operator's own).  The windows end at multiples of SUB_CHUNK, which keeps
    packed outputs' bytes whole."""
    cdef float buf[SUB_CHUNK]
    cdef const float *v
    cdef int64_t i = start, e
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        # (the stages index by the element's place in the tensor)
        v = <const float *>based_at(buf, i * <int64_t>sizeof(float))
        if extql_quotients_f64(qtype, xtype, stype, x, scale, zero_point,
                               <float *>v, D, inner, block, i, e) != 0:
            return -1
        if extql_quantize_typed_range_ex(qtype, EXTQL_FLOAT32, EXTQL_FLOAT32, v,
                                         ones, zero2, y, D, inner, block, i, e,
                                         flags) != 0:
            return -1
        i = e
    return 0


cdef public int extql_unpack(int qtype, const void *src, void *dst,
                             int64_t n) noexcept nogil:
    """n elements of a sub-byte or small float type as the kernels take its
    zero points: a sub-byte type's (packed) as int8 / uint8, a small
    float's (float4e2m1 packed) as float32.  -1 for another code."""
    cdef int bits, lo, hi, m
    cdef SmallFloat t
    cdef int64_t i
    cdef uint8_t codes[TILE]
    if subbyte_of(qtype, &bits, &lo, &hi):
        if lo < 0:
            unpack_values(<const uint8_t *>src, <int8_t *>dst, n, bits, 8 // bits)
        else:
            unpack_values(<const uint8_t *>src, <uint8_t *>dst, n, bits, 8 // bits)
        return 0
    if not smallfloat_of(qtype, &t):
        return -1
    if t.bits == 8:
        from_small_codes(<const uint8_t *>src, <float *>dst, n, &t)
        return 0
    i = 0
    while i < n:  # float4e2m1: two per byte, in tiles (i even)
        m = <int>(TILE if TILE < n - i else n - i)
        unpack_values(<const uint8_t *>src + i // 2, <uint8_t *>codes, m, 4, 2)
        from_small_codes(codes, <float *>dst + i, m, &t)
        i += m
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

UNPACKED = EXTQL_UNPACKED
NO_SATURATE = EXTQL_NO_SATURATE


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
    extql.numpy_api, which has checked every length; the GIL is released
    for the whole loop.
    """
    cdef const void *xp = NULL
    cdef const void *zp = NULL
    cdef void *yp = NULL
    cdef int rc
    if n == 0:
        return
    xp = &x[0]
    yp = &y[0]
    if zero_point is not None and zero_point.shape[0] > 0:
        zp = &zero_point[0]
    with nogil:
        rc = extql_quantize_typed(qtype, xtype, prec, xp, &scale[0], zp, yp, n,
                                  D, inner, block, nthreads, flags)
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
    cdef const void *zp = NULL
    cdef const void *z2
    cdef int rc = 0, nt
    cdef int64_t t, chunk, m = nscales if nscales > 0 else 1
    cdef float *ones
    cdef void *zero2
    if n == 0:
        return
    if zero_point is not None and zero_point.shape[0] > 0:
        zp = &zero_point[0]
    flags = (flags & (EXTQL_UNPACKED | EXTQL_NO_SATURATE)) | stream_flags(n * type_size(qtype))
    ones = <float *>malloc(m * sizeof(float))
    zero2 = malloc(m * sizeof(float))
    if ones == NULL or zero2 == NULL:
        free(ones)
        free(zero2)
        raise MemoryError("extql kernel: no memory for the float64 stage's parameters")
    with nogil:
        z2 = zero2 if extql_f64_params(qtype, ones, zero2, m) else zp
        nt = threads_for(n, nthreads)
        if nt == 1:
            rc = extql_quantize_f64_range(qtype, xtype, stype, &x[0], &scale[0], zp,
                                          &y[0], D, inner, block, 0, n, flags, ones, z2)
        else:
            chunk = chunk_for(n, nt)
            for t in prange((n + chunk - 1) // chunk, schedule="dynamic", chunksize=1,
                            num_threads=nt):
                rc |= extql_quantize_f64_range(qtype, xtype, stype, &x[0], &scale[0], zp,
                                               &y[0], D, inner, block, t * chunk,
                                               min(n, (t + 1) * chunk), flags,
                                               ones, z2) != 0
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
    cdef const void *xp = NULL
    cdef const void *zp = NULL
    cdef void *yp = NULL
    cdef int rc
    if n == 0:
        return
    xp = &x[0]
    yp = &y[0]
    if zero_point is not None and zero_point.shape[0] > 0:
        zp = &zero_point[0]
    with nogil:
        rc = extql_dequantize_typed(qtype, ytype, xp, &scale[0], zp, yp, n, D,
                                    inner, block, nthreads, flags)
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
