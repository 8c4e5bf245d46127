# Quark's DPU instance norm (ExtendedInstanceNormalization /
# VitisInstanceNormalization; docs/operators/extended_instance_normalization.rst):
# bfloat16-precision rounding from the bits, sequential float32 statistics
# (the squares added in double), the DPU's msc32 variance and the C
# library's powf.  Every operation is one C float operation (the build has
# -ffp-contract=off: no fused multiply-add), in the order the page writes.

from libc.math cimport powf


cdef inline uint32_t dpu_bits(float v) noexcept nogil:
    cdef uint32_t u
    memcpy(&u, &v, 4)
    return u


cdef inline float dpu_float(uint32_t u) noexcept nogil:
    cdef float v
    memcpy(&v, &u, 4)
    return v


cdef inline float dpu_bf(float v) noexcept nogil:
    """bf(v): add 0x10000 when the low half is above 0x8000, or equal with
    bit 16 set; clear the low half (no NaN case).  Written as the carry of
    u + 0x7FFF + bit 16 out of the low half, which is that rule (the low
    half plus 0x7FFF + bit 16 reaches 0x10000 exactly when it is above
    0x8000, or 0x8000 with bit 16 set), in wrapping 32-bit arithmetic, with
    no comparison: five integer operations a lane."""
    cdef uint32_t u = dpu_bits(v)
    return dpu_float((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u)


cdef inline int dpu_expo(float v) noexcept nogil:
    return <int>((dpu_bits(v) >> 23) & 0xFFu)


cdef inline float dpu_rnd(float v, int m) noexcept nogil:
    """v onto the grid of exponent m: (v + X) - X, X = v's sign and exponent
    plus (m - E(v)) in the exponent field, in wrapping 32-bit arithmetic."""
    cdef uint32_t sh = <uint32_t>(m - dpu_expo(v))
    cdef float x = dpu_float((dpu_bits(v) & 0xFF800000u) + (sh << 23))
    cdef float s = v + x
    return s - x


cdef inline float dpu_mac32(float a, float b, float c) noexcept nogil:
    cdef float d = a * b
    cdef int m = dpu_expo(a) + dpu_expo(b) - 127
    if dpu_expo(c) > m:
        m = dpu_expo(c)
    return dpu_rnd(c, m) + dpu_rnd(d, m)


cdef inline float dpu_addmac32(float a, float b, float c, float d) noexcept nogil:
    cdef float e = a * b
    cdef int m = dpu_expo(a) + dpu_expo(b) - 127
    cdef float s
    if dpu_expo(c) > m:
        m = dpu_expo(c)
    if dpu_expo(d) > m:
        m = dpu_expo(d)
    s = dpu_rnd(c, m) + dpu_rnd(d, m)
    return s + dpu_rnd(e, m)


cdef float dpu_msc32(float a, float b, float c) noexcept nogil:
    """The DPU's c - a*b, a and -b each split into three bfloat16 parts."""
    cdef float a0 = dpu_bf(a)
    cdef float ar = a - a0
    cdef float a1 = dpu_bf(ar)
    cdef float a2 = dpu_bf(ar - a1)
    cdef float nb = -b
    cdef float b0 = dpu_bf(nb)
    cdef float br = nb - b0
    cdef float b1 = dpu_bf(br)
    cdef float b2 = dpu_bf(br - b1)
    cdef float terms = a2 * b2
    terms = dpu_mac32(a2, b1, terms)
    terms = dpu_mac32(a1, b2, terms)
    terms = dpu_mac32(a0, b2, terms)
    terms = dpu_mac32(a1, b1, terms)
    terms = dpu_mac32(a2, b0, terms)
    terms = dpu_mac32(a1, b0, terms)
    terms = dpu_mac32(a0, b1, terms)
    return dpu_addmac32(a0, b0, terms, c)


cdef extern from *:
    """
    /* The statistics of EXTQL_DPU_IN_LANES instances side by side: row j of
       `stage` holds element j of each instance (bfloat16 values); per lane,
       acc += v in float, sq = (float)((double)sq + (double)v * (double)v),
       element after element -- the scalar loop's operations, several lanes
       per instruction (IEEE round to nearest either way, no fused
       multiply-add: the same bits).

       With AVX2 the square sum of a block takes float32 operations where
       that is the same: v is a bfloat16 value (8 significant bits), so v * v
       (16 bits) is exact in float32 whenever |v| >= 2^-63 (a normal result)
       or v is 0, inf or NaN; then double(v) * double(v) is that float, and
       float(double(sq) + double(vv)) is float32's sq + vv (binary64 has more
       than 2 * 24 + 2 bits, so rounding the exact sum's binary64 rounding to
       binary32 is rounding it once: docs/development.rst, "The instance
       norm's sums").  The staging tells whether a block has those squares
       only (exact_squares); a block with any 0 < |v| < 2^-63 (whose square a
       float32 would round) takes the double steps. */
    #define EXTQL_DPU_IN_LANES 16
    #if defined(__AVX2__)
    #include <immintrin.h>
    static inline void extql_dpu_in_sums_f32(const float *stage, int64_t n, float *acc,
                                             float *sq) {
        __m256 a0 = _mm256_loadu_ps(acc), a1 = _mm256_loadu_ps(acc + 8);
        __m256 q0 = _mm256_loadu_ps(sq), q1 = _mm256_loadu_ps(sq + 8);
        for (int64_t j = 0; j < n; j++) {
            const float *r = stage + j * 16;
            __m256 v0 = _mm256_loadu_ps(r), v1 = _mm256_loadu_ps(r + 8);
            a0 = _mm256_add_ps(a0, v0);
            a1 = _mm256_add_ps(a1, v1);
            q0 = _mm256_add_ps(q0, _mm256_mul_ps(v0, v0));
            q1 = _mm256_add_ps(q1, _mm256_mul_ps(v1, v1));
        }
        _mm256_storeu_ps(acc, a0);
        _mm256_storeu_ps(acc + 8, a1);
        _mm256_storeu_ps(sq, q0);
        _mm256_storeu_ps(sq + 8, q1);
    }
    static inline void extql_dpu_in_sums(const float *stage, int64_t n, float *acc,
                                         float *sq, int exact_squares) {
        if (exact_squares) {
            extql_dpu_in_sums_f32(stage, n, acc, sq);
            return;
        }
        __m256 a0 = _mm256_loadu_ps(acc), a1 = _mm256_loadu_ps(acc + 8);
        __m256d s0 = _mm256_cvtps_pd(_mm_loadu_ps(sq));
        __m256d s1 = _mm256_cvtps_pd(_mm_loadu_ps(sq + 4));
        __m256d s2 = _mm256_cvtps_pd(_mm_loadu_ps(sq + 8));
        __m256d s3 = _mm256_cvtps_pd(_mm_loadu_ps(sq + 12));
        for (int64_t j = 0; j < n; j++) {
            const float *r = stage + j * 16;
            __m256 v0 = _mm256_loadu_ps(r), v1 = _mm256_loadu_ps(r + 8);
            __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v0));
            __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
            __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(v1));
            __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
            a0 = _mm256_add_ps(a0, v0);
            a1 = _mm256_add_ps(a1, v1);
            s0 = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_add_pd(s0, _mm256_mul_pd(d0, d0))));
            s1 = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_add_pd(s1, _mm256_mul_pd(d1, d1))));
            s2 = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_add_pd(s2, _mm256_mul_pd(d2, d2))));
            s3 = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_add_pd(s3, _mm256_mul_pd(d3, d3))));
        }
        _mm256_storeu_ps(acc, a0);
        _mm256_storeu_ps(acc + 8, a1);
        _mm_storeu_ps(sq, _mm256_cvtpd_ps(s0));
        _mm_storeu_ps(sq + 4, _mm256_cvtpd_ps(s1));
        _mm_storeu_ps(sq + 8, _mm256_cvtpd_ps(s2));
        _mm_storeu_ps(sq + 12, _mm256_cvtpd_ps(s3));
    }
    #elif defined(__SSE2__)
    #include <emmintrin.h>
    static inline void extql_dpu_in_sums(const float *stage, int64_t n, float *acc,
                                         float *sq, int exact_squares) {
        (void)exact_squares;
        __m128 a[4];
        __m128d s[8];
        for (int k = 0; k < 4; k++) {
            __m128 q = _mm_loadu_ps(sq + 4 * k);
            a[k] = _mm_loadu_ps(acc + 4 * k);
            s[2 * k] = _mm_cvtps_pd(q);
            s[2 * k + 1] = _mm_cvtps_pd(_mm_movehl_ps(q, q));
        }
        for (int64_t j = 0; j < n; j++) {
            const float *r = stage + j * 16;
            for (int k = 0; k < 4; k++) {
                __m128 v = _mm_loadu_ps(r + 4 * k);
                __m128d lo = _mm_cvtps_pd(v), hi = _mm_cvtps_pd(_mm_movehl_ps(v, v));
                a[k] = _mm_add_ps(a[k], v);
                s[2 * k] = _mm_cvtps_pd(_mm_cvtpd_ps(
                    _mm_add_pd(s[2 * k], _mm_mul_pd(lo, lo))));
                s[2 * k + 1] = _mm_cvtps_pd(_mm_cvtpd_ps(
                    _mm_add_pd(s[2 * k + 1], _mm_mul_pd(hi, hi))));
            }
        }
        for (int k = 0; k < 4; k++) {
            _mm_storeu_ps(acc + 4 * k, a[k]);
            _mm_storeu_ps(sq + 4 * k, _mm_movelh_ps(_mm_cvtpd_ps(s[2 * k]),
                                                    _mm_cvtpd_ps(s[2 * k + 1])));
        }
    }
    #else
    static inline void extql_dpu_in_sums(const float *stage, int64_t n, float *acc,
                                         float *sq, int exact_squares) {
        (void)exact_squares;
        for (int64_t j = 0; j < n; j++) {
            for (int k = 0; k < EXTQL_DPU_IN_LANES; k++) {
                float v = stage[j * EXTQL_DPU_IN_LANES + k];
                acc[k] = acc[k] + v;
                sq[k] = (float)((double)sq[k] + (double)v * (double)v);
            }
        }
    }
    #endif

    /* Row j of `stage` (EXTQL_DPU_IN_LANES wide) = bf of element j of each
       instance x + k * s, j < n: dpu_bf's carry rule.  With AVX2, 8 x 8
       blocks are rounded in vector lanes and transposed in registers; the
       last n % 8 elements, and every element without AVX2, one by one.
       Returns exact_squares for extql_dpu_in_sums: 1 when no staged value
       has 0 < |v| < 2^-63 (with AVX2; 0 without, whose sums take the double
       steps).  In the lanes that is (bits & 0x7FFF0000) + 0x7FFFFFFF, in
       wrapping int32, below (int32)0x9FFFFFFF: the magnitudes 1 ..
       0x1FFFFFFF wrap to the lowest values, 0 to the highest. */
    static inline float extql_dpu_bf1(float v) {
        uint32_t u;
        memcpy(&u, &v, 4);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        memcpy(&v, &u, 4);
        return v;
    }
    #if defined(__AVX2__)
    static inline __m256 extql_dpu_bf8(__m256 v) {
        __m256i u = _mm256_castps_si256(v);
        __m256i b = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        u = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), b);
        return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u)));
    }
    #endif
    #if defined(__AVX2__)
    static inline __m256i extql_dpu_tiny8(__m256 r) {
        __m256i m = _mm256_and_si256(_mm256_castps_si256(r), _mm256_set1_epi32(0x7FFF0000));
        return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)0x9FFFFFFFu),
                                  _mm256_add_epi32(m, _mm256_set1_epi32(0x7FFFFFFF)));
    }
    #endif
    static inline int extql_dpu_in_stage(const float *x, int64_t s, int64_t n,
                                         float *stage) {
        int64_t j = 0;
    #if defined(__AVX2__)
        __m256i tiny = _mm256_setzero_si256();
        for (; j + 8 <= n; j += 8) {
            for (int h = 0; h < EXTQL_DPU_IN_LANES; h += 8) {
                const float *b = x + h * s + j;
                __m256 r0 = extql_dpu_bf8(_mm256_loadu_ps(b));
                __m256 r1 = extql_dpu_bf8(_mm256_loadu_ps(b + s));
                __m256 r2 = extql_dpu_bf8(_mm256_loadu_ps(b + 2 * s));
                __m256 r3 = extql_dpu_bf8(_mm256_loadu_ps(b + 3 * s));
                __m256 r4 = extql_dpu_bf8(_mm256_loadu_ps(b + 4 * s));
                __m256 r5 = extql_dpu_bf8(_mm256_loadu_ps(b + 5 * s));
                __m256 r6 = extql_dpu_bf8(_mm256_loadu_ps(b + 6 * s));
                __m256 r7 = extql_dpu_bf8(_mm256_loadu_ps(b + 7 * s));
                tiny = _mm256_or_si256(tiny, _mm256_or_si256(
                    _mm256_or_si256(_mm256_or_si256(extql_dpu_tiny8(r0), extql_dpu_tiny8(r1)),
                                    _mm256_or_si256(extql_dpu_tiny8(r2), extql_dpu_tiny8(r3))),
                    _mm256_or_si256(_mm256_or_si256(extql_dpu_tiny8(r4), extql_dpu_tiny8(r5)),
                                    _mm256_or_si256(extql_dpu_tiny8(r6), extql_dpu_tiny8(r7)))));
                __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
                __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
                __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
                __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
                __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
                __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
                __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
                __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
                float *o = stage + j * EXTQL_DPU_IN_LANES + h;
                _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_storeu_ps(o + EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_storeu_ps(o + 2 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_storeu_ps(o + 3 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_storeu_ps(o + 4 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_storeu_ps(o + 5 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_storeu_ps(o + 6 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_storeu_ps(o + 7 * EXTQL_DPU_IN_LANES, _mm256_permute2f128_ps(u3, u7, 0x31));
            }
        }
        int exact = _mm256_testz_si256(tiny, tiny);
    #else
        int exact = 0;
    #endif
        for (; j < n; j++) {
            for (int k = 0; k < EXTQL_DPU_IN_LANES; k++) {
                float v = extql_dpu_bf1(x[k * s + j]);
                uint32_t m;
                memcpy(&m, &v, 4);
                m &= 0x7FFFFFFFu;
                exact = exact && !(m != 0 && m < 0x20000000u);
                stage[j * EXTQL_DPU_IN_LANES + k] = v;
            }
        }
        return exact;
    }

    /* The sums of n elements of EXTQL_DPU_IN_LANES instances (x + k * s),
       added to acc / sq: blocks of EXTQL_DPU_IN_BLOCK elements staged by
       extql_dpu_in_stage and summed by extql_dpu_in_sums.  With AVX-512 the
       staging goes through registers instead: 16 x 16 tiles (16 elements of
       each instance) are loaded, rounded and transposed, and each of their
       rows is added to the lanes' sums at once.  A tile's squares take
       float32 steps when none of its values has 0 < |v| < 2^-63 (the same
       bits, as above), the double steps otherwise; the last n % 16 elements
       are staged and take the double steps. */
    #define EXTQL_DPU_IN_BLOCK 128
    #if defined(__AVX512F__) && defined(__AVX512DQ__)
    /* dpu_bf's rule in 16 lanes: u + 0x8000 where bit 16 is set, u + 0x7FFF
       elsewhere (a test into a mask and a masked add), then the low half
       cleared. */
    static inline __m512 extql_dpu_bf16v(__m512 v) {
        __m512i u = _mm512_castps_si512(v);
        __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
        __m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF));
        r = _mm512_mask_add_epi32(r, odd, u, _mm512_set1_epi32(0x8000));
        return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u)));
    }
    /* o[c] = column c of the 16 x 16 tile whose row i is r[i]. */
    static inline void extql_dpu_tr16(const __m512 *r, __m512 *o) {
        __m512 t[16], u[16];
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        /* u[4 g + i], 128-bit lane L: column 4 L + i of rows 4 g .. 4 g + 3. */
        for (int g = 0; g < 4; g++) {
            const __m512 *tg = t + 4 * g;
            u[4 * g] = _mm512_shuffle_ps(tg[0], tg[2], 0x44);
            u[4 * g + 1] = _mm512_shuffle_ps(tg[0], tg[2], 0xEE);
            u[4 * g + 2] = _mm512_shuffle_ps(tg[1], tg[3], 0x44);
            u[4 * g + 3] = _mm512_shuffle_ps(tg[1], tg[3], 0xEE);
        }
        for (int i = 0; i < 4; i++) {
            __m512 v0 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
            __m512 w0 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xDD);
            __m512 v1 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
            __m512 w1 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xDD);
            o[i] = _mm512_shuffle_f32x4(v0, v1, 0x88);
            o[4 + i] = _mm512_shuffle_f32x4(w0, w1, 0x88);
            o[8 + i] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
            o[12 + i] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
        }
    }
    static inline void extql_dpu_sq_double(__m512 v, __m512d *s0, __m512d *s1) {
        __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d d1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
        *s0 = _mm512_cvtps_pd(_mm512_cvtpd_ps(_mm512_add_pd(*s0, _mm512_mul_pd(d0, d0))));
        *s1 = _mm512_cvtps_pd(_mm512_cvtpd_ps(_mm512_add_pd(*s1, _mm512_mul_pd(d1, d1))));
    }
    static inline void extql_dpu_in_block(const float *x, int64_t s, int64_t n, float *stage,
                                          float *acc, float *sq) {
        __m512 a = _mm512_loadu_ps(acc), q = _mm512_loadu_ps(sq);
        const __m512i top = _mm512_set1_epi32(0x1FFFFFFF);
        const __m512i mag = _mm512_set1_epi32(0x7FFFFFFF);
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            __m512 r[16], o[16];
            /* min over the rows of |bits| - 1 (unsigned): below 0x1FFFFFFF
               exactly when some 0 < |bits| < 0x20000000 (2^-63). */
            __m512i m = _mm512_set1_epi32(-1);
            for (int i = 0; i < 16; i++) {
                r[i] = extql_dpu_bf16v(_mm512_loadu_ps(x + i * s + j));
                __m512i b = _mm512_and_si512(_mm512_castps_si512(r[i]), mag);
                m = _mm512_min_epu32(m, _mm512_sub_epi32(b, _mm512_set1_epi32(1)));
            }
            extql_dpu_tr16(r, o);
            if (_mm512_cmplt_epu32_mask(m, top) == 0) {
                for (int c = 0; c < 16; c++) {
                    a = _mm512_add_ps(a, o[c]);
                    q = _mm512_add_ps(q, _mm512_mul_ps(o[c], o[c]));
                }
            } else {
                __m512d s0 = _mm512_cvtps_pd(_mm512_castps512_ps256(q));
                __m512d s1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(q, 1));
                for (int c = 0; c < 16; c++) {
                    a = _mm512_add_ps(a, o[c]);
                    extql_dpu_sq_double(o[c], &s0, &s1);
                }
                q = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(s0)),
                                       _mm512_cvtpd_ps(s1), 1);
            }
        }
        _mm512_storeu_ps(acc, a);
        _mm512_storeu_ps(sq, q);
        if (j < n) {
            extql_dpu_in_stage(x + j, s, n - j, stage);
            extql_dpu_in_sums(stage, n - j, acc, sq, 0);
        }
    }
    /* dpu_in_normalize's loop over elements [0, n) in 16 lanes (the last
       n % 16 under a mask): the same float operations, each bf by
       extql_dpu_bf16v. Returns n. */
    static inline int64_t extql_dpu_in_apply(const float *x, float *y, int64_t n, float r,
                                             float ms, float g, float b) {
        const __m512 vr = _mm512_set1_ps(r), vms = _mm512_set1_ps(ms);
        const __m512 vg = _mm512_set1_ps(g), vb = _mm512_set1_ps(b);
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 k = n - j >= 16 ? (__mmask16)0xFFFF
                                      : (__mmask16)((1u << (n - j)) - 1u);
            __m512 v = extql_dpu_bf16v(_mm512_maskz_loadu_ps(k, x + j));
            __m512 t = extql_dpu_bf16v(_mm512_sub_ps(extql_dpu_bf16v(_mm512_mul_ps(v, vr)),
                                                     vms));
            __m512 p = _mm512_mul_ps(vg, t);
            _mm512_mask_storeu_ps(y + j, k, extql_dpu_bf16v(_mm512_add_ps(p, vb)));
        }
        return n;
    }
    #else
    static inline int64_t extql_dpu_in_apply(const float *x, float *y, int64_t n, float r,
                                             float ms, float g, float b) {
        (void)x; (void)y; (void)n; (void)r; (void)ms; (void)g; (void)b;
        return 0;
    }
    static inline void extql_dpu_in_block(const float *x, int64_t s, int64_t n, float *stage,
                                          float *acc, float *sq) {
        for (int64_t j = 0; j < n; j += EXTQL_DPU_IN_BLOCK) {
            int64_t m = n - j < EXTQL_DPU_IN_BLOCK ? n - j : EXTQL_DPU_IN_BLOCK;
            int exact = extql_dpu_in_stage(x + j, s, m, stage);
            extql_dpu_in_sums(stage, m, acc, sq, exact);
        }
    }
    #endif
    """
    # Instances whose statistics are summed side by side (one per lane), and
    # the elements of each that are staged at a time.
    enum: DPU_IN_LANES "EXTQL_DPU_IN_LANES"
    enum: DPU_IN_BLOCK "EXTQL_DPU_IN_BLOCK"
    void dpu_in_block "extql_dpu_in_block"(const float *x, int64_t s, int64_t n,
                                           float *stage, float *acc,
                                           float *sq) noexcept nogil
    int64_t dpu_in_apply "extql_dpu_in_apply"(const float *x, float *y, int64_t n,
                                              float r, float ms, float g,
                                              float b) noexcept nogil


cdef inline void dpu_in_normalize(const float *x, float *y, int64_t s, float acc, float sq,
                                  float inv, float eps, float g, float b) noexcept nogil:
    """One instance of s elements from its sums (of bf(x), and of the
    squares): the mean, the msc32 variance, then every element."""
    cdef float mean, msq, var, r, ms, t, p
    cdef int64_t j
    mean = acc * inv
    msq = sq * inv
    var = dpu_msc32(mean, mean, msq)
    r = dpu_bf(powf(var + eps, <float>-0.5))
    ms = dpu_bf(dpu_bf(mean) * r)
    # every element with AVX-512 (in C), else this loop
    for j in range(dpu_in_apply(x, y, s, r, ms, g, b), s):
        t = dpu_bf(dpu_bf(dpu_bf(x[j]) * r) - ms)
        p = g * t
        y[j] = dpu_bf(p + b)


cdef inline void dpu_in_instance(const float *x, float *y, int64_t s, float inv, float eps,
                                 float g, float b) noexcept nogil:
    """One instance of s elements: statistics, then every element."""
    cdef float acc = 0.0, sq = 0.0, v
    cdef int64_t j
    for j in range(s):
        v = dpu_bf(x[j])
        acc = acc + v
        sq = <float>(<double>sq + <double>v * <double>v)
    dpu_in_normalize(x, y, s, acc, sq, inv, eps, g, b)


cdef void dpu_in_lanes(const float *x, float *y, int64_t s, float inv, float eps,
                       const float *gs, const float *bs) noexcept nogil:
    """DPU_IN_LANES consecutive instances (x + k * s) at once.  Each sum is
    the one dpu_in_instance makes (its own sequential order, element by
    element), but the instances' chains are interleaved, one per vector
    lane, so the additions do not wait on each other: each instance's bf(x)
    is transposed to element-major rows (staged in memory, or with AVX-512
    in registers), and each row is added to the lanes' sums at once."""
    cdef float stage[DPU_IN_BLOCK * DPU_IN_LANES]
    cdef float acc[DPU_IN_LANES]
    cdef float sq[DPU_IN_LANES]
    cdef int k
    for k in range(DPU_IN_LANES):
        acc[k] = 0.0
        sq[k] = 0.0
    dpu_in_block(x, s, s, stage, acc, sq)
    for k in range(DPU_IN_LANES):
        dpu_in_normalize(x + k * s, y + k * s, s, acc[k], sq[k], inv, eps, gs[k], bs[k])


cdef public int dpu_in_range "EXTQL_ISA_FN(extql_dpu_in_range)"(
        const float *x, const float *scale, const float *bias, float *y, int64_t C,
        int64_t S, float epsilon, int64_t start, int64_t stop) noexcept nogil:
    """Instances [start, stop) of x seen as [N * C, S] into y (not x's
    memory), γ = bf(scale[i % C]), β = bf(bias[i % C]).  Groups of
    DPU_IN_LANES instances go through dpu_in_lanes, the rest one by one
    (the same bits either way).  Returns 0."""
    cdef int64_t i
    cdef int k
    cdef float inv
    cdef float gs[DPU_IN_LANES]
    cdef float bs[DPU_IN_LANES]
    if S <= 0 or C <= 0:
        return 0
    inv = <float>(1.0 / <double>S)
    i = start
    while i + DPU_IN_LANES <= stop:
        for k in range(DPU_IN_LANES):
            gs[k] = dpu_bf(scale[(i + k) % C])
            bs[k] = dpu_bf(bias[(i + k) % C])
        dpu_in_lanes(x + i * S, y + i * S, S, inv, epsilon, gs, bs)
        i = i + DPU_IN_LANES
    while i < stop:
        dpu_in_instance(x + i * S, y + i * S, S, inv, epsilon, dpu_bf(scale[i % C]),
                        dpu_bf(bias[i % C]))
        i = i + 1
    return 0
