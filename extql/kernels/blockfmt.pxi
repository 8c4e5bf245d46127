# Quark's block formats: BFPQuantizeDequantize and MXQuantizeDequantize.
#
# The math of docs/operators/bfp_quantize_dequantize.rst and
# mx_quantize_dequantize.rst, written once: C functions over raw pointers
# (noexcept nogil, no Python object, no module global), so that the Python
# extension and the Python-free onnxruntime library call the same code.
#
# The tensor is seen as [outer, D, inner] with the blocks running along D:
# block b of a line holds rows [b * block, min(D, (b + 1) * block)); the last
# block of a line is short (Quark pads it with zeros, which never change a
# block's largest exponent, so the padding is simply left out).  A work item
# is one block-row: for inner == 1 a contiguous run of at most `block`
# elements, for inner > 1 the block's rows times `inner` columns, walked
# column-wise so that the inner loops run over contiguous columns and
# vectorise.  blockfmt_range(start, stop) does work items [start, stop), so
# that a thread pool can split a tensor between threads.
#
# Every element is computed in float32: float16 x is widened exactly, the
# result rounded back to nearest even.  x and y may be the same buffer: a
# work item reads all of its elements before it writes any.
#
# What the including unit provides (extql/_kernels.pyx declares the same
# names): float16_t (a struct of uint16_t bits), and from
# src/extql_primitives.h f32_bits, bits_f32, load_f16, store_f16.
#
# The math, per block (E: a block's largest float32 exponent field):
#   - the division x / 2^k by a power of two is (x * p1) * p2 with exact
#     powers of two p1, p2 (blk_recip): one rounding, as a float32 division,
#     at multiply speed;
#   - the roundings are branch-free (blk_rmag), on the truncation through a
#     32-bit integer, so that the baseline (SSE2) build vectorises them too;
#   - to_bfp_prime's integer-mantissa rounding is the same rounding of
#     |x| / 2^k (the shifted-out bits are the fraction), capped at 2^m - 1.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint16_t
from libc.math cimport ldexp
from libc.stdlib cimport malloc, free

cdef extern from *:
    """
    /* Float constants must be float literals: a double literal would turn
       the float arithmetic around it into double arithmetic. */
    #define EXTQL_BLK_HALF 0.5f
    #define EXTQL_BLK_ONE 1.0f
    #define EXTQL_BLK_TWO23 8388608.0f
    #define EXTQL_BLK_64 64.0f
    #define EXTQL_BLK_INV64 0.015625f
    #define EXTQL_BLK_128 128.0f
    #define EXTQL_BLK_M128 -128.0f
    #define EXTQL_BLK_127 127.0f
    #define EXTQL_BLK_ZERO 0.0f
    #define EXTQL_BLK_SIGN 0x80000000u
    #define EXTQL_BLK_ABS 0x7FFFFFFFu
    #define EXTQL_BLK_EXP 0x7F800000u
    #define EXTQL_BLK_NAN 0x7FFFFFFFu
    /* All ones, as a value the compiler does not know (see blk_load): an
       empty asm statement, so it costs nothing. */
    static inline uint32_t extql_blk_keep(void) {
      uint32_t v = 0xFFFFFFFFu;
    #if defined(__GNUC__)
      __asm__("" : "+r"(v));
    #endif
      return v;
    }
    """
    const float BLK_HALF "EXTQL_BLK_HALF"
    const float BLK_ONE "EXTQL_BLK_ONE"
    const float BLK_TWO23 "EXTQL_BLK_TWO23"
    const float BLK_64 "EXTQL_BLK_64"
    const float BLK_INV64 "EXTQL_BLK_INV64"
    const float BLK_128 "EXTQL_BLK_128"
    const float BLK_M128 "EXTQL_BLK_M128"
    const float BLK_127 "EXTQL_BLK_127"
    const float BLK_ZERO "EXTQL_BLK_ZERO"
    const uint32_t BLK_SIGN "EXTQL_BLK_SIGN"
    const uint32_t BLK_ABS "EXTQL_BLK_ABS"
    const uint32_t BLK_EXP "EXTQL_BLK_EXP"
    const uint32_t BLK_NAN "EXTQL_BLK_NAN"
    uint32_t blk_keep "extql_blk_keep"() noexcept nogil


cdef enum:
    # The operation (BlockParams.kind): extql/block_rules.py's codes.
    BLK_BFP = 0
    BLK_BFP_PRIME = 1
    BLK_MX = 2
    # ONNX codes of the element types of x.
    BLK_FLOAT32 = 1
    BLK_FLOAT16 = 10
    # Elements per tile of contiguous blocks (inner == 1; a larger block is
    # one tile of its own, on the heap), and columns per chunk (inner > 1).
    BLK_TILE = 1024
    BLK_COLS = 256
    # Fewer columns than this (inner > 1) are transposed into contiguous
    # blocks (blk_cols_narrow).
    BLK_NARROW = 16
    # Return codes.
    BLK_OK = 0
    BLK_BAD_TYPE = -1
    BLK_NO_MEMORY = -2


cdef struct BlockParams:
    # The checked attributes (extql/block_rules.py), as the kernels take them.
    int kind            # BLK_BFP, BLK_BFP_PRIME or BLK_MX
    int64_t block       # block_size >= 1
    int rounding        # rounding_mode: 0, 1 or 2
    int mbits           # bit_width - 9 (to_bfp 1..23, to_bfp_prime 0..24); MX: the element's
    int bfloat_first    # BFP: convert_to_bfloat_before_bfp != 0
    int compiler        # to_bfp: use_compiler_version_cpu_kernel != 0
    int64_t sub_block   # to_bfp_prime: sub_block_size (divides block)
    int shift_bits      # to_bfp_prime: sub_block_shift_bits (0..31)
    int ebits           # MX: the element's exponent bits (0: int8)
    int emax            # MX: the element's emax
    float largest       # MX: the element's largest magnitude


ctypedef fused blk_t:
    float
    float16_t


# ---------------------------------------------------------------------------
# One element

cdef inline uint32_t blk_field(float v) noexcept nogil:
    """The biased exponent field of v (0 for zeros and subnormals)."""
    return (f32_bits(v) >> 23) & 0xFF


cdef inline uint32_t blk_field_finite(float v) noexcept nogil:
    """The exponent field, with inf and NaN (255) counted as 0."""
    cdef uint32_t e = (f32_bits(v) >> 23) & 0xFF
    return e & (0u - <uint32_t>(e != 255))


cdef inline float blk_pow2(int k) noexcept nogil:
    """2^k as a float32, for k in [-149, 127] (subnormal below -126)."""
    if k >= -126:
        return bits_f32(<uint32_t>(k + 127) << 23)
    return bits_f32((<uint32_t>1) << (k + 149))


cdef inline void blk_recip(int k, float *p1, float *p2) noexcept nogil:
    """p1, p2 with (x * p1) * p2 == x / 2^k rounded once, k in [-149, 127]:
    the first product is exact (a scaling up, which cannot overflow: a block
    whose step is below 2^-126 holds values below 2^-100), the second rounds
    once.  2^-k itself is no float32 below k = -127."""
    if k >= -126:
        p1[0] = BLK_ONE
        p2[0] = blk_pow2(-k)
    else:
        p1[0] = blk_pow2(64)
        p2[0] = blk_pow2(-k - 64)


cdef inline float blk_rmag(float a, int mode, uint32_t neg) noexcept nogil:
    """a >= 0 (or inf / NaN, returned as they are) rounded to an integer: up
    from above half, down below; a tie up for mode 0, up unless ``neg`` for
    mode 1 (half toward +inf on the signed value), to even for mode 2.

    Below 2^23 (from there up every float32 is an integer): modes 0 and 1
    truncate through an int32 and compare the fraction a - trunc(a), which
    is exact, with 1/2; mode 2 adds and subtracts 2^23, which rounds to
    nearest even.  Written with masks, not branches: every loop of it
    vectorises."""
    cdef uint32_t small = 0u - <uint32_t>(a < BLK_TWO23)
    cdef int32_t ti
    cdef float t, d, r
    cdef uint32_t up
    if mode == 2:
        r = (a + BLK_TWO23) - BLK_TWO23
    else:
        ti = <int32_t>bits_f32(f32_bits(a) & small)
        t = <float>ti
        d = a - t
        if mode == 0:
            up = <uint32_t>(d >= BLK_HALF)
        else:
            up = <uint32_t>(d > BLK_HALF) | (<uint32_t>(d == BLK_HALF) & <uint32_t>(neg == 0))
        r = t + bits_f32(f32_bits(BLK_ONE) & (0u - up))
    return bits_f32((f32_bits(r) & small) | (f32_bits(a) & ~small))


cdef inline float blk_round(float q, int mode) noexcept nogil:
    """R(q) of the rounding modes: 0 half away from zero, 1 half toward +inf,
    2 half to even; a zero result keeps q's sign for modes 0 and 1, and is +0
    for mode 2 unless q is -0 (Quark computes mode 2 as floor(q) + 1)."""
    cdef uint32_t u = f32_bits(q)
    cdef uint32_t sign = u & BLK_SIGN
    cdef float a = bits_f32(u & BLK_ABS)
    cdef float r = blk_rmag(a, mode, sign)
    if mode == 2:
        sign &= 0u - (<uint32_t>(r != BLK_ZERO) | <uint32_t>(a == BLK_ZERO))
    return bits_f32(f32_bits(r) | sign)


cdef inline float blk_bf16(float x) noexcept nogil:
    """x rounded to bfloat16 precision by Quark's rule (add the carry of
    round-to-nearest-even on the low 16 bits, clear them; the largest
    finite values carry into inf); a NaN stays the NaN it is."""
    cdef uint32_t u = f32_bits(x)
    cdef uint32_t r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u
    return x if (u & BLK_ABS) > BLK_EXP else bits_f32(r)


cdef inline float bfp_elem(float x, float p1, float p2, float s, float lo, float hi,
                           int mode) noexcept nogil:
    """to_bfp: clamp(R(x / s) * s, lo, hi) as Quark's std::max(lo,
    std::min(v, hi)); inf and NaN pass through."""
    cdef float v = blk_round((x * p1) * p2, mode) * s
    v = hi if hi < v else v
    v = v if lo < v else lo
    return x if (f32_bits(x) & BLK_EXP) == BLK_EXP else v


cdef inline int bfp_bumps(float x, float p1, float p2, uint32_t E, int mode) noexcept nogil:
    """The compiler-version kernel's test: an element of the block's largest
    exponent whose R(x / s) is >= 128 or < -128."""
    cdef float r = blk_round((x * p1) * p2, mode)
    return (blk_field(x) == E) & ((r >= BLK_128) | (r < BLK_M128))


cdef inline float prime_elem(float x, float p1, float p2, float p, float rmax, int mode,
                             uint32_t nanmask) noexcept nogil:
    """to_bfp_prime: r = the integer mantissa of |x| at the step p of its
    sub-block, rounded per mode (a tie of mode 1 down for negative x), kept
    at 2^m - 1 when it would round past it; subnormals flush to 0;
    y = sign(x) * r * p.  nanmask (all ones or 0): the block holds an inf or
    NaN, every element is the NaN 0x7FFFFFFF."""
    cdef uint32_t u = f32_bits(x)
    cdef float r = blk_rmag((bits_f32(u & BLK_ABS) * p1) * p2, mode, u & BLK_SIGN)
    r = rmax if rmax < r else r
    r = bits_f32(f32_bits(r) & (0u - <uint32_t>((u & BLK_EXP) != 0)))
    cdef uint32_t y = f32_bits(r * p) | (u & BLK_SIGN)
    return bits_f32((y & ~nanmask) | (BLK_NAN & nanmask))


cdef inline float prime_elem_fast(float x, uint32_t kb, float rmax, int mode) noexcept nogil:
    """prime_elem where the step 2^k is a normal float32 with a normal
    reciprocal (k in [-126, 126]), given as kb = k + 127: both built from
    their exponent bits, per element, so that a loop over sub-blocks of
    different shifts vectorises."""
    cdef uint32_t u = f32_bits(x)
    cdef float r = blk_rmag(bits_f32(u & BLK_ABS) * bits_f32((254u - kb) << 23), mode,
                            u & BLK_SIGN)
    r = rmax if rmax < r else r
    r = bits_f32(f32_bits(r) & (0u - <uint32_t>((u & BLK_EXP) != 0)))
    return bits_f32(f32_bits(r * bits_f32(kb << 23)) | (u & BLK_SIGN))


cdef inline float mx_float_elem(float x, float p1, float p2, float X, uint32_t emin,
                                uint32_t mbits, float largest) noexcept nogil:
    """MX float elements: v = x / X rounded to nearest even on the element's
    grid (``emin``: the biased float32 exponent of its smallest normal;
    subnormal steps below it), saturated at ``largest``; a zero is +0;
    y = X * element.  The rounding adds and subtracts C = 2^(step + 23),
    whose ulp is the step.  inf and NaN pass through."""
    cdef uint32_t u = f32_bits((x * p1) * p2)
    cdef float a = bits_f32(u & BLK_ABS)
    cdef uint32_t e = (u >> 23) & 0xFF
    e = e if e > emin else emin
    cdef float c = bits_f32((e - mbits + 23) << 23)
    cdef float r = (a + c) - c
    r = largest if largest < r else r
    cdef float el = bits_f32(f32_bits(r) | (u & BLK_SIGN & (0u - <uint32_t>(r != BLK_ZERO))))
    return x if (f32_bits(x) & BLK_EXP) == BLK_EXP else X * el


cdef inline float mx_int_elem(float x, float p1, float p2, float X, int mode) noexcept nogil:
    """MX int8: k = clamp(R(x / X * 64), -128, 127), y = X * (k * 2^-6); inf
    and NaN pass through."""
    cdef float k = blk_round(((x * p1) * p2) * BLK_64, mode)
    k = BLK_127 if BLK_127 < k else k
    k = k if BLK_M128 < k else BLK_M128
    return x if (f32_bits(x) & BLK_EXP) == BLK_EXP else X * (k * BLK_INV64)


# ---------------------------------------------------------------------------
# The parameters of a block (or a sub-block, a column of a block-row)

cdef inline void bfp_params(int E, int m, float *p1, float *p2, float *s, float *lo,
                            float *hi) noexcept nogil:
    """to_bfp: the step s = 2^(E - 126 - m) and the bound M = (2^m - 1) * s
    (exact: at most 23 significant bits)."""
    cdef int k = E - 126 - m
    s[0] = blk_pow2(k)
    blk_recip(k, p1, p2)
    hi[0] = s[0] * <float>((1 << m) - 1)
    lo[0] = -hi[0]


cdef inline void bfp_compiler_params(int E, int m, int bump, float *p1, float *p2, float *s,
                                     float *lo, float *hi) noexcept nogil:
    """The compiler-version kernel: the step doubled when the block bumps;
    the bounds 2^(E - 127) * (2^m - 1) and -2^(E - 127) * 2^m of the bumped
    exponent, rounded from double to float32 (inf beyond its range) as
    Quark does."""
    cdef int k = E - 126 - m + bump
    s[0] = blk_pow2(k)
    blk_recip(k, p1, p2)
    hi[0] = <float>ldexp(<double>((1 << m) - 1), E - 127 + bump)
    lo[0] = <float>(-ldexp(1.0, E - 127 + bump + m))


cdef inline void prime_params(int E, int Ej, int cap, int m, float *p1, float *p2,
                              float *p) noexcept nogil:
    """to_bfp_prime, a sub-block: shift = min(E - Ej, cap), the step
    p = 2^(E - 127 - shift + 1 - m).  A step beyond float32's range
    (2^128 for m = 0, below 2^-149 for a sub-block of zeros and subnormals
    with m = 24) only ever multiplies a mantissa of 0: it is clamped to
    [-149, 127]."""
    cdef int shift = E - Ej if E - Ej < cap else cap
    cdef int k = E - 127 - shift + 1 - m
    k = -149 if k < -149 else (127 if k > 127 else k)
    p[0] = blk_pow2(k)
    blk_recip(k, p1, p2)


cdef inline void mx_params(int E, int emax, float *p1, float *p2, float *X) noexcept nogil:
    """MX: the scale X = 2^(E - 127 - emax), not clamped to E8M0's range."""
    cdef int k = E - 127 - emax
    X[0] = blk_pow2(k)
    blk_recip(k, p1, p2)


cdef inline int blk_shift_cap(const BlockParams *p) noexcept nogil:
    """The largest sub-block shift, 2^bits - 1 (no shift exceeds 254)."""
    return 255 if p.shift_bits >= 8 else (1 << p.shift_bits) - 1


cdef inline uint32_t mx_emin(const BlockParams *p) noexcept nogil:
    """The biased float32 exponent of the MX element's smallest normal,
    2 - 2^(ebits - 1)."""
    return <uint32_t>(127 + 2 - (1 << (p.ebits - 1)))


# ---------------------------------------------------------------------------
# A contiguous block (inner == 1): xf[0, n) -> yf[0, n) in float32

cdef inline void bfp_run(const float *xf, float *yf, int64_t n, float p1, float p2, float s,
                         float lo, float hi, int mode) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        yf[i] = bfp_elem(xf[i], p1, p2, s, lo, hi, mode)


cdef inline void bfp_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                           int mode) noexcept nogil:
    cdef uint32_t E = 0, e
    cdef int64_t i
    cdef int bump = 0
    cdef float p1, p2, s, lo, hi
    for i in range(n):
        e = blk_field_finite(xf[i])
        E = e if e > E else E
    if p.compiler:
        bfp_params(E, p.mbits, &p1, &p2, &s, &lo, &hi)
        for i in range(n):
            bump |= bfp_bumps(xf[i], p1, p2, E, mode)
        bfp_compiler_params(E, p.mbits, bump, &p1, &p2, &s, &lo, &hi)
    else:
        bfp_params(E, p.mbits, &p1, &p2, &s, &lo, &hi)
    bfp_run(xf, yf, n, p1, p2, s, lo, hi, mode)


cdef inline void prime_run_fast(const BlockParams *p, const float *xf, float *yf, int64_t n,
                                uint32_t E, int cap, float rmax, int mode) noexcept nogil:
    """prime_block's sub-blocks when every step 2^k is normal, and so is its
    reciprocal (k in [-126, 126]): the steps' exponents per element, for
    BLK_COLS elements (whole sub-blocks) at a time, then one vector loop."""
    cdef uint32_t kb[BLK_COLS]
    cdef int64_t S = p.sub_block
    cdef int64_t per = (BLK_COLS // S) * S
    cdef int64_t c0 = 0, cn, i, j, jn
    cdef uint32_t Ej, e, shift, k0b = E + 1 - <uint32_t>p.mbits
    while c0 < n:
        cn = c0 + per if c0 + per < n else n
        j = c0
        while j < cn:
            jn = j + S if j + S < cn else cn
            Ej = 0
            for i in range(j, jn):
                e = blk_field(xf[i])
                Ej = e if e > Ej else Ej
            shift = E - Ej if E - Ej < <uint32_t>cap else <uint32_t>cap
            for i in range(j, jn):
                kb[i - c0] = k0b - shift
            j = jn
        for i in range(c0, cn):
            yf[i] = prime_elem_fast(xf[i], kb[i - c0], rmax, mode)
        c0 = cn


cdef inline void prime_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                             int mode) noexcept nogil:
    cdef uint32_t E = 0, Ej, e
    cdef int64_t i, j, jn
    cdef int cap = blk_shift_cap(p)
    cdef int capE
    cdef float p1, p2, step
    cdef float rmax = <float>((1 << p.mbits) - 1)
    for i in range(n):
        e = blk_field(xf[i])
        E = e if e > E else E
    if E == 255:
        for i in range(n):
            yf[i] = bits_f32(BLK_NAN)
        return
    if E == 0:
        # Zeros and subnormals only: every element flushes to a zero of its sign.
        for i in range(n):
            yf[i] = bits_f32(f32_bits(xf[i]) & BLK_SIGN)
        return
    capE = cap if cap < <int>E else <int>E
    if (<int>E - 126 - p.mbits - capE >= -126 and <int>E - 126 - p.mbits <= 126
            and p.sub_block <= BLK_COLS):
        prime_run_fast(p, xf, yf, n, E, cap, rmax, mode)
        return
    j = 0
    while j < n:
        jn = j + p.sub_block if j + p.sub_block < n else n
        Ej = 0
        for i in range(j, jn):
            e = blk_field(xf[i])
            Ej = e if e > Ej else Ej
        prime_params(E, Ej, cap, p.mbits, &p1, &p2, &step)
        for i in range(j, jn):
            yf[i] = prime_elem(xf[i], p1, p2, step, rmax, mode, 0)
        j = jn


cdef inline void mx_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                          int mode) noexcept nogil:
    cdef uint32_t E = 0, e
    cdef int64_t i
    cdef float p1, p2, X
    cdef uint32_t emin
    for i in range(n):
        e = blk_field_finite(xf[i])
        E = e if e > E else E
    mx_params(E, p.emax, &p1, &p2, &X)
    if p.ebits == 0:
        for i in range(n):
            yf[i] = mx_int_elem(xf[i], p1, p2, X, mode)
    else:
        emin = mx_emin(p)
        for i in range(n):
            yf[i] = mx_float_elem(xf[i], p1, p2, X, emin, p.mbits, p.largest)


cdef inline void blk_block_mode(const BlockParams *p, const float *xf, float *yf, int64_t n,
                                int mode) noexcept nogil:
    if p.kind == BLK_BFP:
        bfp_block(p, xf, yf, n, mode)
    elif p.kind == BLK_BFP_PRIME:
        prime_block(p, xf, yf, n, mode)
    else:
        mx_block(p, xf, yf, n, mode)


cdef inline void blk_block_len(const BlockParams *p, const float *xf, float *yf, int64_t n
                               ) noexcept nogil:
    """One block, with the rounding mode a constant of each copy."""
    if p.rounding == 0:
        blk_block_mode(p, xf, yf, n, 0)
    elif p.rounding == 1:
        blk_block_mode(p, xf, yf, n, 1)
    else:
        blk_block_mode(p, xf, yf, n, 2)


cdef void blk_block(const BlockParams *p, const float *xf, float *yf, int64_t n) noexcept nogil:
    blk_block_len(p, xf, yf, n)


# ---------------------------------------------------------------------------
# A tile of contiguous blocks at once (to_bfp and MX): the block exponent
# expanded per element, then one vector loop over the tile whose steps are
# built from exponent bits.  That holds where a block's step and its
# reciprocal are normal float32 values; the other blocks (all zeros or
# subnormals, or a step beyond 2^126) are done again by blk_block.

cdef inline bint tile_fast_exponent(const BlockParams *p, uint32_t E) noexcept nogil:
    """Whether blk_tile_apply computes a block of exponent E exactly: its
    step's biased exponent (to_bfp E + 1 - m, MX E - emax) in [1, 253]."""
    cdef int kb = <int>E + 1 - p.mbits if p.kind == BLK_BFP else <int>E - p.emax
    return 1 <= kb <= 253


cdef inline void tile_apply_mode(const BlockParams *p, const float *xf, float *yf,
                                 const uint32_t *ke, int64_t n, int mode) noexcept nogil:
    cdef int64_t i
    cdef uint32_t kb, emin
    cdef float s, mmax = <float>((1 << p.mbits) - 1)
    if p.kind == BLK_BFP:
        for i in range(n):
            kb = ke[i] + 1 - <uint32_t>p.mbits
            s = bits_f32(kb << 23)
            yf[i] = bfp_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE, s, -(s * mmax),
                             s * mmax, mode)
    elif p.ebits == 0:
        for i in range(n):
            kb = ke[i] - <uint32_t>p.emax
            yf[i] = mx_int_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE,
                                bits_f32(kb << 23), mode)
    else:
        emin = mx_emin(p)
        for i in range(n):
            kb = ke[i] - <uint32_t>p.emax
            yf[i] = mx_float_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE,
                                  bits_f32(kb << 23), emin, p.mbits, p.largest)


cdef void blk_tile_fast(const BlockParams *p, const float *xf, float *yf, int64_t n,
                        int64_t D, int64_t bb, int64_t nb) noexcept nogil:
    """The blocks of a tile of n <= BLK_TILE elements, the first being block
    bb of its line (nb per line of D)."""
    cdef uint32_t ke[BLK_TILE]
    cdef int64_t B = p.block
    cdef int64_t off = 0, ln, i, b0 = bb
    cdef uint32_t E, e
    cdef bint slow = 0
    while off < n:
        ln = D - bb * B if D - bb * B < B else B
        E = 0
        for i in range(off, off + ln):
            e = blk_field_finite(xf[i])
            E = e if e > E else E
        for i in range(off, off + ln):
            ke[i] = E
        slow |= not tile_fast_exponent(p, E)
        off += ln
        bb += 1
        if bb == nb:
            bb = 0
    if p.rounding == 0:
        tile_apply_mode(p, xf, yf, ke, n, 0)
    elif p.rounding == 1:
        tile_apply_mode(p, xf, yf, ke, n, 1)
    else:
        tile_apply_mode(p, xf, yf, ke, n, 2)
    if not slow:
        return
    off = 0
    bb = b0
    while off < n:
        ln = D - bb * B if D - bb * B < B else B
        if not tile_fast_exponent(p, ke[off]):
            blk_block(p, xf + off, yf + off, ln)
        off += ln
        bb += 1
        if bb == nb:
            bb = 0


# ---------------------------------------------------------------------------
# Moving elements between x / y and float32 buffers

cdef inline void blk_load(const blk_t *x, float *xf, int64_t n, int bfloat_first) noexcept nogil:
    """x[0, n) as float32 into xf (bfloat16-rounded when asked).  The float32
    copy goes through a mask the compiler cannot see through: a plain copy
    loop becomes a string instruction, whose start-up costs more than a
    short row takes."""
    cdef int64_t i
    cdef uint32_t keep = blk_keep()
    if blk_t is float:
        if bfloat_first:
            for i in range(n):
                xf[i] = blk_bf16(x[i])
        else:
            for i in range(n):
                xf[i] = bits_f32(f32_bits(x[i]) & keep)
    else:
        load_f16(xf, <const uint16_t *>x, n)
        if bfloat_first:
            for i in range(n):
                xf[i] = blk_bf16(xf[i])


cdef inline void blk_store(const float *yf, blk_t *y, int64_t n) noexcept nogil:
    """yf[0, n) into y (rounded to float16 for a float16 y); the float32 copy
    as blk_load's."""
    cdef int64_t i
    cdef uint32_t keep = blk_keep()
    if blk_t is float:
        for i in range(n):
            y[i] = bits_f32(f32_bits(yf[i]) & keep)
    else:
        store_f16(<uint16_t *>y, yf, n, 0)


# ---------------------------------------------------------------------------
# Work items

cdef int blk_rows(const BlockParams *p, const blk_t *x, blk_t *y, int64_t D, int64_t start,
                  int64_t stop) noexcept nogil:
    """inner == 1: blocks [start, stop) of the lines of D elements, gathered
    into tiles of whole blocks."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xs[BLK_TILE]
    cdef float ys[BLK_TILE]
    cdef float *xf = xs
    cdef float *yf = ys
    cdef int64_t cap = BLK_TILE
    cdef int64_t w = start, o, b, e0, n, off, ln, bb
    if B > BLK_TILE:
        xf = <float *>malloc(<size_t>(2 * B) * sizeof(float))
        if xf == NULL:
            return BLK_NO_MEMORY
        yf = xf + B
        cap = B
    while w < stop:
        o = w // nb
        b = w - o * nb
        e0 = o * D + b * B
        # Whole blocks while they fit the tile (always at least one).
        n = 0
        bb = b
        while w < stop:
            ln = D - bb * B if D - bb * B < B else B
            if n + ln > cap:
                break
            n += ln
            w += 1
            bb += 1
            if bb == nb:
                bb = 0
        blk_load(x + e0, xf, n, p.bfloat_first)
        if n <= BLK_TILE and (p.kind == BLK_MX or (p.kind == BLK_BFP and not p.compiler)):
            blk_tile_fast(p, xf, yf, n, D, b, nb)
            blk_store(yf, y + e0, n)
            continue
        off = 0
        bb = b
        while off < n:
            ln = D - bb * B if D - bb * B < B else B
            blk_block(p, xf + off, yf + off, ln)
            off += ln
            bb += 1
            if bb == nb:
                bb = 0
        blk_store(yf, y + e0, n)
    if xf != xs:
        free(xf)
    return BLK_OK


cdef inline void cols_apply_bfp(const blk_t *x, blk_t *y, int64_t rows, int64_t inner,
                                int64_t W, int bfloat_first, float *xf, float *yf,
                                const float *p1, const float *p2, const float *s,
                                const float *lo, const float *hi, int mode) noexcept nogil:
    cdef int64_t r, c
    for r in range(rows):
        blk_load(x + r * inner, xf, W, bfloat_first)
        for c in range(W):
            yf[c] = bfp_elem(xf[c], p1[c], p2[c], s[c], lo[c], hi[c], mode)
        blk_store(yf, y + r * inner, W)


cdef inline void cols_bfp(const BlockParams *p, const blk_t *x, blk_t *y, int64_t rows,
                          int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                          int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float s[BLK_COLS]
    cdef float lo[BLK_COLS]
    cdef float hi[BLK_COLS]
    cdef int bump[BLK_COLS]
    cdef int64_t r, c
    for c in range(W):
        bfp_params(E[c], p.mbits, &p1[c], &p2[c], &s[c], &lo[c], &hi[c])
    if p.compiler:
        for c in range(W):
            bump[c] = 0
        for r in range(rows):
            blk_load(x + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                bump[c] |= bfp_bumps(xf[c], p1[c], p2[c], E[c], mode)
        for c in range(W):
            bfp_compiler_params(E[c], p.mbits, bump[c], &p1[c], &p2[c], &s[c], &lo[c],
                                &hi[c])
    cols_apply_bfp(x, y, rows, inner, W, p.bfloat_first, xf, yf, p1, p2, s, lo, hi, mode)


cdef inline void cols_prime(const BlockParams *p, const blk_t *x, blk_t *y, int64_t rows,
                            int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                            int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float step[BLK_COLS]
    cdef uint32_t nanmask[BLK_COLS]
    cdef uint32_t Ej[BLK_COLS]
    cdef int cap = blk_shift_cap(p)
    cdef float rmax = <float>((1 << p.mbits) - 1)
    cdef int64_t r, c, j = 0, jn
    cdef uint32_t e
    for c in range(W):
        nanmask[c] = 0u - <uint32_t>(E[c] == 255)
    while j < rows:
        jn = j + p.sub_block if j + p.sub_block < rows else rows
        for c in range(W):
            Ej[c] = 0
        for r in range(j, jn):
            blk_load(x + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                e = blk_field(xf[c])
                Ej[c] = e if e > Ej[c] else Ej[c]
        for c in range(W):
            prime_params(E[c], Ej[c], cap, p.mbits, &p1[c], &p2[c], &step[c])
        for r in range(j, jn):
            blk_load(x + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                yf[c] = prime_elem(xf[c], p1[c], p2[c], step[c], rmax, mode, nanmask[c])
            blk_store(yf, y + r * inner, W)
        j = jn


cdef inline void cols_mx(const BlockParams *p, const blk_t *x, blk_t *y, int64_t rows,
                         int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                         int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float X[BLK_COLS]
    cdef int64_t r, c
    cdef uint32_t emin
    for c in range(W):
        mx_params(E[c], p.emax, &p1[c], &p2[c], &X[c])
    if p.ebits == 0:
        for r in range(rows):
            blk_load(x + r * inner, xf, W, 0)
            for c in range(W):
                yf[c] = mx_int_elem(xf[c], p1[c], p2[c], X[c], mode)
            blk_store(yf, y + r * inner, W)
    else:
        emin = mx_emin(p)
        for r in range(rows):
            blk_load(x + r * inner, xf, W, 0)
            for c in range(W):
                yf[c] = mx_float_elem(xf[c], p1[c], p2[c], X[c], emin, p.mbits, p.largest)
            blk_store(yf, y + r * inner, W)


cdef inline void cols_mode(const BlockParams *p, const blk_t *x, blk_t *y, int64_t rows,
                           int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                           int mode) noexcept nogil:
    if p.kind == BLK_BFP:
        cols_bfp(p, x, y, rows, inner, W, xf, yf, E, mode)
    elif p.kind == BLK_BFP_PRIME:
        cols_prime(p, x, y, rows, inner, W, xf, yf, E, mode)
    else:
        cols_mx(p, x, y, rows, inner, W, xf, yf, E, mode)


cdef int blk_cols(const BlockParams *p, const blk_t *x, blk_t *y, int64_t D, int64_t inner,
                  int64_t start, int64_t stop) noexcept nogil:
    """inner > 1: block-rows [start, stop), each in chunks of up to BLK_COLS
    columns: the columns' largest exponents over the block's rows, their
    parameters, then the rows."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xf[BLK_COLS]
    cdef float yf[BLK_COLS]
    cdef uint32_t E[BLK_COLS]
    cdef int64_t w, o, b, rows, c0, W, r, c
    cdef uint32_t e
    cdef const blk_t *xb
    cdef blk_t *yb
    for w in range(start, stop):
        o = w // nb
        b = w - o * nb
        rows = D - b * B if D - b * B < B else B
        c0 = 0
        while c0 < inner:
            W = inner - c0 if inner - c0 < BLK_COLS else BLK_COLS
            xb = x + (o * D + b * B) * inner + c0
            yb = y + (o * D + b * B) * inner + c0
            for c in range(W):
                E[c] = 0
            for r in range(rows):
                blk_load(xb + r * inner, xf, W, p.bfloat_first)
                if p.kind == BLK_BFP_PRIME:
                    for c in range(W):
                        e = blk_field(xf[c])
                        E[c] = e if e > E[c] else E[c]
                else:
                    for c in range(W):
                        e = blk_field_finite(xf[c])
                        E[c] = e if e > E[c] else E[c]
            if p.rounding == 0:
                cols_mode(p, xb, yb, rows, inner, W, xf, yf, E, 0)
            elif p.rounding == 1:
                cols_mode(p, xb, yb, rows, inner, W, xf, yf, E, 1)
            else:
                cols_mode(p, xb, yb, rows, inner, W, xf, yf, E, 2)
            c0 += W
    return BLK_OK


cdef int blk_cols_narrow(const BlockParams *p, const blk_t *x, blk_t *y, int64_t D,
                         int64_t inner, int64_t start, int64_t stop) noexcept nogil:
    """inner < BLK_NARROW with block * inner <= BLK_TILE (a convolution's
    3x3 weights along axis 1, say): each block-row turned into a tile of
    ``inner`` contiguous blocks -- column c's block at c * rows -- done as
    contiguous blocks are, and turned back.  Column-wise, rows this short
    would spend more on each row's set-up than on its elements."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xf[BLK_TILE]
    cdef float yf[BLK_TILE]
    cdef float row[BLK_NARROW]
    cdef int64_t w, o, b, rows, r, c, c0
    cdef const blk_t *xb
    cdef blk_t *yb
    cdef bint fast = p.kind == BLK_MX or (p.kind == BLK_BFP and not p.compiler)
    for w in range(start, stop):
        o = w // nb
        b = w - o * nb
        rows = D - b * B if D - b * B < B else B
        xb = x + (o * D + b * B) * inner
        yb = y + (o * D + b * B) * inner
        for r in range(rows):
            blk_load(xb + r * inner, row, inner, p.bfloat_first)
            for c in range(inner):
                xf[c * rows + r] = row[c]
        if fast:
            blk_tile_fast(p, xf, yf, rows * inner, rows, 0, 1)
        else:
            c0 = 0
            while c0 < rows * inner:
                blk_block(p, xf + c0, yf + c0, rows)
                c0 += rows
        for r in range(rows):
            for c in range(inner):
                row[c] = yf[c * rows + r]
            blk_store(row, yb + r * inner, inner)
    return BLK_OK


cdef int blk_typed_range(const BlockParams *p, const blk_t *x, blk_t *y, int64_t outer,
                         int64_t D, int64_t inner, int64_t start, int64_t stop) noexcept nogil:
    cdef float v
    if outer * D * inner == 1:
        # One element passes through (after the bfloat16 pre-rounding).
        if start < stop:
            blk_load(x, &v, 1, p.bfloat_first)
            blk_store(&v, y, 1)
        return BLK_OK
    if inner == 1:
        return blk_rows(p, x, y, D, start, stop)
    if inner < BLK_NARROW and p.block * inner <= BLK_TILE:
        return blk_cols_narrow(p, x, y, D, inner, start, stop)
    return blk_cols(p, x, y, D, inner, start, stop)


# ---------------------------------------------------------------------------
# Entry points

cdef int64_t blockfmt_items(const BlockParams *p, int64_t outer, int64_t D,
                            int64_t inner) noexcept nogil:
    """The number of work items of a tensor seen as [outer, D, inner]: one
    per block-row, outer * ceil(D / block) (0 for an empty tensor)."""
    if outer <= 0 or D <= 0 or inner <= 0:
        return 0
    return outer * ((D + p.block - 1) // p.block)


cdef int64_t blockfmt_item_size(const BlockParams *p, int64_t inner) noexcept nogil:
    """Elements per work item (at most): what a thread split weighs."""
    return p.block * inner


cdef int blockfmt_range(const BlockParams *p, int xtype, const void *x, void *y,
                        int64_t outer, int64_t D, int64_t inner, int64_t start,
                        int64_t stop) noexcept nogil:
    """Work items [start, stop) of BFPQuantizeDequantize / MXQuantizeDequantize
    (``p``: the checked attributes) on x of ONNX type ``xtype`` (1 float32,
    10 float16), seen as [outer, D, inner] with the blocks along D, into y of
    the same type and shape (y may be x).  A tensor of one element is copied
    (bfloat16-rounded first when p.bfloat_first).  Returns 0, BLK_BAD_TYPE
    for another type, BLK_NO_MEMORY when a block longer than BLK_TILE
    elements (inner == 1) finds no memory for its buffer."""
    if xtype == BLK_FLOAT32:
        return blk_typed_range(p, <const float *>x, <float *>y, outer, D, inner, start, stop)
    if xtype == BLK_FLOAT16:
        return blk_typed_range(p, <const float16_t *>x, <float16_t *>y, outer, D, inner,
                               start, stop)
    return BLK_BAD_TYPE
