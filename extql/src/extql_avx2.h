/*
 * extql_avx2.h - the AVX2/FMA/F16C element loops of the kernels.
 *
 * Included by _kernels.pyx.  In the AVX2 copy of the kernels (compiled with
 * -mavx2 -mfma -mf16c, see extql_isa.h and setup.py) these functions do the
 * bulk of every run of elements, 8 lanes at a time; the Cython code does the
 * remainder (fewer than one step) with the scalar formula.  In the baseline
 * copy EXTQL_AVX2_LOOPS is 0 and every function is a macro that processes
 * nothing, so the scalar code does it all.
 *
 * Every function here computes exactly what the scalar code in _kernels.pyx
 * computes, operation for operation (the tests run both copies against the
 * contract, tests/test_vector_paths.py at every lane position):
 *
 *   quantize, 8/16-bit:  v = x / s (one IEEE division, never a reciprocal);
 *       v clamped to [lo - zp, hi - zp] (NaN -> lo - zp); rounded to nearest
 *       even; + zp (exact: small integers); converted.
 *   quantize, 32-bit:    the same clamp / round / + zp in double (exact).
 *   quantize, float16 / bfloat16:  v = x / s + zp; saturated to the largest
 *       finite value (NaN kept); rounded to nearest even into the type.
 *   dequantize:  (x - zp) exact (int32, or double for 32-bit types; float32
 *       for float16 / bfloat16), one rounding to float32, times s.
 *
 * Operand order follows the scalar code, so that a NaN input keeps the same
 * payload (x86 returns the first operand's NaN; MAXPS / MINPS return the
 * second operand when one is NaN, which is how a NaN becomes the lower
 * bound, or stays NaN for the float types).
 *
 * Each function returns how many leading elements it wrote (a multiple of
 * its step, at most n).  "block" functions take one scale and zero point;
 * "cols" functions one per element (per-axis quantization along the last
 * axis), zp may be NULL (zero point 0).
 */
#ifndef EXTQL_AVX2_H
#define EXTQL_AVX2_H

#include <stdint.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define EXTQL_AVX2_LOOPS 1

#define EXTQL_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ------------------------------------------------------------------------ */
/* Loads and stores                                                          */
/* ------------------------------------------------------------------------ */

/* 8 elements widened to int32 lanes. */
static inline __m256i extql_ld8_i8(const int8_t *p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
static inline __m256i extql_ld8_u8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
static inline __m256i extql_ld8_i16(const int16_t *p) {
  return _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256i extql_ld8_u16(const uint16_t *p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* 32 int32 lanes (values in range) -> 32 bytes, in order. */
static inline void extql_st32_int8(int8_t *p, __m256i a, __m256i b, __m256i c, __m256i d) {
  __m256i r = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)p, r);
}
static inline void extql_st32_uint8(uint8_t *p, __m256i a, __m256i b, __m256i c, __m256i d) {
  /* 0..255 fits int16: signed packing to words, then unsigned to bytes. */
  __m256i r = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)p, r);
}
/* 16 int32 lanes -> 16 words, in order. */
static inline void extql_st16_int16(int16_t *p, __m256i a, __m256i b) {
  _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
}
static inline void extql_st16_uint16(uint16_t *p, __m256i a, __m256i b) {
  _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
}

/* int32 / uint32 lanes as doubles (exact), low and high halves. */
static inline __m256d extql_lo_pd_i32(__m256i v) {
  return _mm256_cvtepi32_pd(_mm256_castsi256_si128(v));
}
static inline __m256d extql_hi_pd_i32(__m256i v) {
  return _mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1));
}
static inline __m256i extql_flip(__m256i v) {
  return _mm256_xor_si256(v, _mm256_set1_epi32((int)0x80000000u));
}
static inline __m256d extql_lo_pd_u32(__m256i v) {
  return _mm256_add_pd(extql_lo_pd_i32(extql_flip(v)), _mm256_set1_pd(2147483648.0));
}
static inline __m256d extql_hi_pd_u32(__m256i v) {
  return _mm256_add_pd(extql_hi_pd_i32(extql_flip(v)), _mm256_set1_pd(2147483648.0));
}

/* ------------------------------------------------------------------------ */
/* Quantize: the per-lane steps                                              */
/* ------------------------------------------------------------------------ */

/* 8/16-bit: v = x / s already; flo = lo - zp, fhi = hi - zp, zf = zp. */
static inline __m256i extql_q_small(__m256 v, __m256 flo, __m256 fhi, __m256 zf) {
  v = _mm256_max_ps(v, flo); /* v > flo ? v : flo -- NaN gives flo */
  v = _mm256_min_ps(v, fhi); /* v < fhi ? v : fhi */
  v = _mm256_round_ps(v, EXTQL_RNE);
  return _mm256_cvtps_epi32(_mm256_add_ps(v, zf)); /* an integer: exact */
}

/* 32-bit, 4 lanes in double: clamp to [lo, hi] = range - zp (NaN -> lo),
   round to even, + zp. */
static inline __m256d extql_q_wide(__m256d d, __m256d lo, __m256d hi, __m256d zd) {
  d = _mm256_max_pd(d, lo);
  d = _mm256_min_pd(d, hi);
  return _mm256_add_pd(_mm256_round_pd(d, EXTQL_RNE), zd);
}

/* float16 / bfloat16: saturate v = x / s + zp to [-max, max], NaN kept. */
static inline __m256 extql_q_sat(__m256 v, __m256 max, __m256 nmax) {
  v = _mm256_min_ps(max, v);  /* max < v ? max : v -- NaN stays */
  return _mm256_max_ps(nmax, v); /* nmax > v ? nmax : v */
}

/* bfloat16 bits of 8 saturated floats (round to nearest even; NaN ->
   sign | 0x7FC0), as int32 lanes holding 0..0xFFFF. */
static inline __m256i extql_bf16_bits(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  __m256i nan = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                                _mm256_set1_epi32(0x7FC0));
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                     _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), nan, isnan);
}

/* ------------------------------------------------------------------------ */
/* Quantize: 8/16-bit integers                                               */
/* ------------------------------------------------------------------------ */

#define EXTQL_Q_SMALL_8(T, LO, HI, LD8)                                                     \
  static inline int64_t extql_avx2_q_block_##T(const float *x, T##_t *y, int64_t n, float s, \
                                               T##_t zp) {                                  \
    const __m256 vs = _mm256_set1_ps(s), zf = _mm256_set1_ps((float)zp);                   \
    const __m256 flo = _mm256_set1_ps((float)(LO) - (float)zp);                             \
    const __m256 fhi = _mm256_set1_ps((float)(HI) - (float)zp);                             \
    int64_t i = 0;                                                                          \
    for (; i + 32 <= n; i += 32) {                                                          \
      __m256i a = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), flo, fhi, zf);   \
      __m256i b = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), vs), flo, fhi, zf); \
      __m256i c = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i + 16), vs), flo, fhi, zf); \
      __m256i d = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i + 24), vs), flo, fhi, zf); \
      extql_st32_##T(y + i, a, b, c, d);                                                    \
    }                                                                                       \
    return i;                                                                               \
  }                                                                                         \
  static inline __m256i extql_q_col8_##T(const float *x, const float *s, const T##_t *zp) { \
    __m256 zf = zp ? _mm256_cvtepi32_ps(LD8(zp)) : _mm256_setzero_ps();                     \
    __m256 flo = _mm256_sub_ps(_mm256_set1_ps((float)(LO)), zf);                            \
    __m256 fhi = _mm256_sub_ps(_mm256_set1_ps((float)(HI)), zf);                            \
    return extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), flo, fhi, zf); \
  }                                                                                         \
  static inline int64_t extql_avx2_q_cols_##T(const float *x, T##_t *y, int64_t n,          \
                                              const float *s, const T##_t *zp) {            \
    int64_t i = 0;                                                                          \
    for (; i + 32 <= n; i += 32) {                                                          \
      const T##_t *z = zp ? zp + i : 0;                                                     \
      __m256i a = extql_q_col8_##T(x + i, s + i, z);                                        \
      __m256i b = extql_q_col8_##T(x + i + 8, s + i + 8, z ? z + 8 : 0);                    \
      __m256i c = extql_q_col8_##T(x + i + 16, s + i + 16, z ? z + 16 : 0);                 \
      __m256i d = extql_q_col8_##T(x + i + 24, s + i + 24, z ? z + 24 : 0);                 \
      extql_st32_##T(y + i, a, b, c, d);                                                    \
    }                                                                                       \
    return i;                                                                               \
  }

#define EXTQL_Q_SMALL_16(T, LO, HI, LD8)                                                    \
  static inline int64_t extql_avx2_q_block_##T(const float *x, T##_t *y, int64_t n, float s, \
                                               T##_t zp) {                                  \
    const __m256 vs = _mm256_set1_ps(s), zf = _mm256_set1_ps((float)zp);                   \
    const __m256 flo = _mm256_set1_ps((float)(LO) - (float)zp);                             \
    const __m256 fhi = _mm256_set1_ps((float)(HI) - (float)zp);                             \
    int64_t i = 0;                                                                          \
    for (; i + 16 <= n; i += 16) {                                                          \
      __m256i a = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), flo, fhi, zf);   \
      __m256i b = extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), vs), flo, fhi, zf); \
      extql_st16_##T(y + i, a, b);                                                          \
    }                                                                                       \
    return i;                                                                               \
  }                                                                                         \
  static inline __m256i extql_q_col8_##T(const float *x, const float *s, const T##_t *zp) { \
    __m256 zf = zp ? _mm256_cvtepi32_ps(LD8(zp)) : _mm256_setzero_ps();                     \
    __m256 flo = _mm256_sub_ps(_mm256_set1_ps((float)(LO)), zf);                            \
    __m256 fhi = _mm256_sub_ps(_mm256_set1_ps((float)(HI)), zf);                            \
    return extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), flo, fhi, zf); \
  }                                                                                         \
  static inline int64_t extql_avx2_q_cols_##T(const float *x, T##_t *y, int64_t n,          \
                                              const float *s, const T##_t *zp) {            \
    int64_t i = 0;                                                                          \
    for (; i + 16 <= n; i += 16) {                                                          \
      __m256i a = extql_q_col8_##T(x + i, s + i, zp ? zp + i : 0);                          \
      __m256i b = extql_q_col8_##T(x + i + 8, s + i + 8, zp ? zp + i + 8 : 0);              \
      extql_st16_##T(y + i, a, b);                                                          \
    }                                                                                       \
    return i;                                                                               \
  }

EXTQL_Q_SMALL_8(int8, -128, 127, extql_ld8_i8)
EXTQL_Q_SMALL_8(uint8, 0, 255, extql_ld8_u8)
EXTQL_Q_SMALL_16(int16, -32768, 32767, extql_ld8_i16)
EXTQL_Q_SMALL_16(uint16, 0, 65535, extql_ld8_u16)

/* ------------------------------------------------------------------------ */
/* Quantize: 32-bit integers (in double)                                     */
/* ------------------------------------------------------------------------ */

/* 8 lanes of v = x / s, zero points as doubles (two halves) -> int32 lanes;
   uint32 goes through int32 by shifting the range (as the scalar code). */
static inline __m256i extql_q_i32_8(__m256 v, __m256d zlo, __m256d zhi) {
  const __m256d lo = _mm256_set1_pd(-2147483648.0), hi = _mm256_set1_pd(2147483647.0);
  __m256d d0 = extql_q_wide(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_sub_pd(lo, zlo),
                            _mm256_sub_pd(hi, zlo), zlo);
  __m256d d1 = extql_q_wide(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), _mm256_sub_pd(lo, zhi),
                            _mm256_sub_pd(hi, zhi), zhi);
  return _mm256_set_m128i(_mm256_cvtpd_epi32(d1), _mm256_cvtpd_epi32(d0));
}
static inline __m256i extql_q_u32_8(__m256 v, __m256d zlo, __m256d zhi) {
  const __m256d lo = _mm256_setzero_pd(), hi = _mm256_set1_pd(4294967295.0);
  const __m256d shift = _mm256_set1_pd(2147483648.0);
  __m256d d0 = extql_q_wide(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_sub_pd(lo, zlo),
                            _mm256_sub_pd(hi, zlo), zlo);
  __m256d d1 = extql_q_wide(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), _mm256_sub_pd(lo, zhi),
                            _mm256_sub_pd(hi, zhi), zhi);
  __m256i r = _mm256_set_m128i(_mm256_cvtpd_epi32(_mm256_sub_pd(d1, shift)),
                               _mm256_cvtpd_epi32(_mm256_sub_pd(d0, shift)));
  return extql_flip(r);
}

#define EXTQL_Q_WIDE(T, STEP, TOPD_LO, TOPD_HI)                                               \
  static inline int64_t extql_avx2_q_block_##T(const float *x, T##_t *y, int64_t n, float s, \
                                               T##_t zp) {                                  \
    const __m256 vs = _mm256_set1_ps(s);                                                     \
    const __m256d zd = _mm256_set1_pd((double)zp);                                           \
    int64_t i = 0;                                                                          \
    for (; i + 16 <= n; i += 16) {                                                          \
      __m256i a = STEP(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), zd, zd);                  \
      __m256i b = STEP(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), vs), zd, zd);              \
      _mm256_storeu_si256((__m256i *)(y + i), a);                                           \
      _mm256_storeu_si256((__m256i *)(y + i + 8), b);                                       \
    }                                                                                       \
    return i;                                                                               \
  }                                                                                         \
  static inline int64_t extql_avx2_q_cols_##T(const float *x, T##_t *y, int64_t n,          \
                                              const float *s, const T##_t *zp) {            \
    int64_t i = 0;                                                                          \
    for (; i + 8 <= n; i += 8) {                                                            \
      __m256d zlo = _mm256_setzero_pd(), zhi = _mm256_setzero_pd();                         \
      __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(s + i));             \
      if (zp) {                                                                             \
        __m256i z = _mm256_loadu_si256((const __m256i *)(zp + i));                          \
        zlo = TOPD_LO(z);                                                                   \
        zhi = TOPD_HI(z);                                                                   \
      }                                                                                     \
      _mm256_storeu_si256((__m256i *)(y + i), STEP(v, zlo, zhi));                           \
    }                                                                                       \
    return i;                                                                               \
  }

EXTQL_Q_WIDE(int32, extql_q_i32_8, extql_lo_pd_i32, extql_hi_pd_i32)
EXTQL_Q_WIDE(uint32, extql_q_u32_8, extql_lo_pd_u32, extql_hi_pd_u32)

/* ------------------------------------------------------------------------ */
/* Quantize: float16 / bfloat16 (bits in uint16_t)                           */
/* ------------------------------------------------------------------------ */

static inline __m128i extql_q_f16_8(__m256 v) {
  v = extql_q_sat(v, _mm256_set1_ps(65504.0f), _mm256_set1_ps(-65504.0f));
  return _mm256_cvtps_ph(v, EXTQL_RNE);
}
static inline __m256i extql_q_bf16_8(__m256 v) {
  return extql_bf16_bits(
      extql_q_sat(v, _mm256_set1_ps(3.38953139e38f), _mm256_set1_ps(-3.38953139e38f)));
}
static inline __m256 extql_f16_zf(const uint16_t *zp) {
  return zp ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)zp)) : _mm256_setzero_ps();
}
static inline __m256 extql_bf16_zf(const uint16_t *zp) {
  return zp ? _mm256_castsi256_ps(_mm256_slli_epi32(extql_ld8_u16(zp), 16))
            : _mm256_setzero_ps();
}

static inline int64_t extql_avx2_q_block_f16(const float *x, uint16_t *y, int64_t n, float s,
                                             float zf) {
  const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(zf);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i a = extql_q_f16_8(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), vz));
    __m128i b = extql_q_f16_8(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), vs), vz));
    _mm256_storeu_si256((__m256i *)(y + i), _mm256_set_m128i(b, a));
  }
  return i;
}
static inline int64_t extql_avx2_q_cols_f16(const float *x, uint16_t *y, int64_t n,
                                            const float *s, const uint16_t *zp) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(s + i));
    v = _mm256_add_ps(v, extql_f16_zf(zp ? zp + i : 0));
    _mm_storeu_si128((__m128i *)(y + i), extql_q_f16_8(v));
  }
  return i;
}
static inline int64_t extql_avx2_q_block_bf16(const float *x, uint16_t *y, int64_t n, float s,
                                              float zf) {
  const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(zf);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = extql_q_bf16_8(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), vz));
    __m256i b = extql_q_bf16_8(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), vs), vz));
    extql_st16_uint16(y + i, a, b);
  }
  return i;
}
static inline int64_t extql_avx2_q_cols_bf16(const float *x, uint16_t *y, int64_t n,
                                             const float *s, const uint16_t *zp) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 v0 = _mm256_div_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(s + i));
    __m256 v1 = _mm256_div_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(s + i + 8));
    v0 = _mm256_add_ps(v0, extql_bf16_zf(zp ? zp + i : 0));
    v1 = _mm256_add_ps(v1, extql_bf16_zf(zp ? zp + i + 8 : 0));
    extql_st16_uint16(y + i, extql_q_bf16_8(v0), extql_q_bf16_8(v1));
  }
  return i;
}

/* ------------------------------------------------------------------------ */
/* Dequantize                                                                */
/* ------------------------------------------------------------------------ */

/* 8/16-bit: (x - zp) in int32 (exact), to float (exact: |x - zp| < 2^17),
   times s. */
#define EXTQL_DQ_SMALL(T, LD8)                                                               \
  static inline int64_t extql_avx2_dq_block_##T(const T##_t *x, float *y, int64_t n, float s, \
                                                T##_t zp) {                                  \
    const __m256 vs = _mm256_set1_ps(s);                                                     \
    const __m256i vz = _mm256_set1_epi32((int32_t)zp);                                       \
    int64_t i = 0;                                                                           \
    for (; i + 16 <= n; i += 16) {                                                           \
      __m256 a = _mm256_cvtepi32_ps(_mm256_sub_epi32(LD8(x + i), vz));                       \
      __m256 b = _mm256_cvtepi32_ps(_mm256_sub_epi32(LD8(x + i + 8), vz));                   \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(a, vs));                                         \
      _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(b, vs));                                     \
    }                                                                                        \
    return i;                                                                                \
  }                                                                                          \
  static inline int64_t extql_avx2_dq_cols_##T(const T##_t *x, float *y, int64_t n,          \
                                               const float *s, const T##_t *zp) {            \
    int64_t i = 0;                                                                           \
    for (; i + 8 <= n; i += 8) {                                                             \
      __m256i d = LD8(x + i);                                                                \
      if (zp) d = _mm256_sub_epi32(d, LD8(zp + i));                                          \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_loadu_ps(s + i))); \
    }                                                                                        \
    return i;                                                                                \
  }

EXTQL_DQ_SMALL(int8, extql_ld8_i8)
EXTQL_DQ_SMALL(uint8, extql_ld8_u8)
EXTQL_DQ_SMALL(int16, extql_ld8_i16)
EXTQL_DQ_SMALL(uint16, extql_ld8_u16)

/* 32-bit: (double(x) - double(zp)) exact, one rounding to float, times s. */
static inline __m256 extql_dq_wide(__m256d x0, __m256d x1, __m256d z0, __m256d z1) {
  __m128 a = _mm256_cvtpd_ps(_mm256_sub_pd(x0, z0));
  __m128 b = _mm256_cvtpd_ps(_mm256_sub_pd(x1, z1));
  return _mm256_set_m128(b, a);
}

#define EXTQL_DQ_WIDE(T, TOPD_LO, TOPD_HI)                                                   \
  static inline int64_t extql_avx2_dq_block_##T(const T##_t *x, float *y, int64_t n, float s, \
                                                T##_t zp) {                                  \
    const __m256 vs = _mm256_set1_ps(s);                                                     \
    const __m256d zd = _mm256_set1_pd((double)zp);                                           \
    int64_t i = 0;                                                                           \
    for (; i + 8 <= n; i += 8) {                                                             \
      __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));                              \
      __m256 d = extql_dq_wide(TOPD_LO(v), TOPD_HI(v), zd, zd);                              \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(d, vs));                                         \
    }                                                                                        \
    return i;                                                                                \
  }                                                                                          \
  static inline int64_t extql_avx2_dq_cols_##T(const T##_t *x, float *y, int64_t n,          \
                                               const float *s, const T##_t *zp) {            \
    int64_t i = 0;                                                                           \
    for (; i + 8 <= n; i += 8) {                                                             \
      __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));                              \
      __m256d z0 = _mm256_setzero_pd(), z1 = _mm256_setzero_pd();                            \
      if (zp) {                                                                              \
        __m256i z = _mm256_loadu_si256((const __m256i *)(zp + i));                           \
        z0 = TOPD_LO(z);                                                                     \
        z1 = TOPD_HI(z);                                                                     \
      }                                                                                      \
      __m256 d = extql_dq_wide(TOPD_LO(v), TOPD_HI(v), z0, z1);                              \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(d, _mm256_loadu_ps(s + i)));                     \
    }                                                                                        \
    return i;                                                                                \
  }

EXTQL_DQ_WIDE(int32, extql_lo_pd_i32, extql_hi_pd_i32)
EXTQL_DQ_WIDE(uint32, extql_lo_pd_u32, extql_hi_pd_u32)

/* float16 / bfloat16: (float(x) - float(zp)) * s in float32. */
static inline __m256 extql_ld8_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256 extql_ld8_bf16(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(extql_ld8_u16(p), 16));
}

#define EXTQL_DQ_HALF(T, LD8)                                                                \
  static inline int64_t extql_avx2_dq_block_##T(const uint16_t *x, float *y, int64_t n,       \
                                                float s, float zf) {                         \
    const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(zf);                           \
    int64_t i = 0;                                                                           \
    for (; i + 16 <= n; i += 16) {                                                           \
      __m256 a = _mm256_sub_ps(LD8(x + i), vz);                                              \
      __m256 b = _mm256_sub_ps(LD8(x + i + 8), vz);                                          \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(a, vs));                                         \
      _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(b, vs));                                     \
    }                                                                                        \
    return i;                                                                                \
  }                                                                                          \
  static inline int64_t extql_avx2_dq_cols_##T(const uint16_t *x, float *y, int64_t n,        \
                                               const float *s, const uint16_t *zp) {         \
    int64_t i = 0;                                                                           \
    for (; i + 8 <= n; i += 8) {                                                             \
      __m256 d = LD8(x + i);                                                                 \
      if (zp) d = _mm256_sub_ps(d, LD8(zp + i));                                             \
      else d = _mm256_sub_ps(d, _mm256_setzero_ps());                                        \
      _mm256_storeu_ps(y + i, _mm256_mul_ps(d, _mm256_loadu_ps(s + i)));                     \
    }                                                                                        \
    return i;                                                                                \
  }

EXTQL_DQ_HALF(f16, extql_ld8_f16)
EXTQL_DQ_HALF(bf16, extql_ld8_bf16)

#else /* not the AVX2 copy: nothing is done here */

#define EXTQL_AVX2_LOOPS 0
#define EXTQL_AVX2_NOTHING(...) ((int64_t)0)
#define extql_avx2_q_block_int8 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_uint8 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_int16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_uint16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_int32 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_uint32 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_f16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_block_bf16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_int8 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_uint8 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_int16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_uint16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_int32 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_uint32 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_f16 EXTQL_AVX2_NOTHING
#define extql_avx2_q_cols_bf16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_int8 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_uint8 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_int16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_uint16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_int32 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_uint32 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_f16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_block_bf16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_int8 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_uint8 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_int16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_uint16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_int32 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_uint32 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_f16 EXTQL_AVX2_NOTHING
#define extql_avx2_dq_cols_bf16 EXTQL_AVX2_NOTHING

#endif

#endif /* EXTQL_AVX2_H */
