# Quark's block formats, one element at a time: the constants, the
# parameter struct, the formulas of an element and the parameters of a block
# (docs/operators/bfp_quantize_dequantize.rst, mx_quantize_dequantize.rst).
# Included by kernels/blockfmt.pxi (the blocks, tiles and work items).
#
# The math, per block (E: a block's largest float32 exponent field):
#   - the division x / 2^k by a power of two is (x * p1) * p2 with exact
#     powers of two p1, p2 (blk_recip), or x times 2^-k built from exponent
#     bits: one rounding, as a float32 division, at multiply speed;
#   - the roundings are branch-free (blk_rmag): modes 0 and 1 on the
#     truncation through a 32-bit integer, mode 2 by adding and subtracting
#     2^23, so that every loop vectorises, the baseline (SSE2) build's too;
#   - to_bfp_prime's integer-mantissa rounding is the same rounding of
#     |x| / 2^k (the shifted-out bits are its fraction), capped at 2^m - 1.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint16_t
from libc.math cimport ldexp

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


# The checked attributes as the kernels take them: ExtqlBlockParams of the
# public header (extql/_entrypoints.py), whose kind is EXTQL_BLOCK_BFP,
# EXTQL_BLOCK_BFP_PRIME or EXTQL_BLOCK_MX.
ctypedef ExtqlBlockParams BlockParams


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
