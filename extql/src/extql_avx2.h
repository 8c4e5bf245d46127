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
 * contract, tests/kernels/test_vector_paths.py at every lane position):
 *
 *   quantize, 8/16-bit:  v = x / s (one IEEE division; a multiply by 1 / s
 *       only where that is the same number: s a power of two, extql_div_by);
 *       v clamped to [lo - zp, hi - zp] (NaN -> lo - zp); rounded to nearest
 *       even; + zp (exact: small integers); converted.
 *   quantize, 32-bit:    the same clamp / round / + zp, exact: in float32
 *       with bounds rounded inwards and a wraparound add (extql_q_w32) where
 *       the bounds are known (one zero point, or the extended per-channel
 *       arrays), else in double.
 *   dequantize, 32-bit:  in int32 when no lane's x - zp overflows, else in
 *       double.
 *   quantize, float16 / bfloat16:  v = x / s + zp; saturated to the largest
 *       finite value (NaN kept); rounded to nearest even into the type.
 *   dequantize:  (x - zp) exact (int32, or double for 32-bit types; float32
 *       for float16 / bfloat16), one rounding to float32, times s.
 *
 * Large outputs are written with non-temporal stores (see EXTQL_RUN) and the
 * input is prefetched ahead (EXTQL_PREFETCH); neither changes a bit.
 *
 * Operand order follows the scalar code, so that a NaN input keeps the same
 * payload (x86 returns the first operand's NaN; MAXPS / MINPS return the
 * second operand when one is NaN, which is how a NaN becomes the lower
 * bound, or stays NaN for the float types).
 *
 * Each function returns how many leading elements it wrote (a multiple of
 * its step, at most n).  "block" functions take one scale and zero point;
 * "cols" functions one per element (per-axis quantization along the last
 * axis: element i uses channel (c0 + i) % D), zp may be NULL (zero point 0).
 */
#ifndef EXTQL_AVX2_H
#define EXTQL_AVX2_H

#include <stdint.h>
#include <string.h>

#include "extql_types.h"

/* The longest step of the "cols" loops (elements), and the longest axis for
   which the kernels extend the scale and zero point periodically (on the
   stack) to run per-axis quantization along the last axis in one pass. */
#define EXTQL_COLS_STEP 32
#define EXTQL_COLS_EXT_MAX 1024
/* Per-axis quantization along a middle axis whose runs (elements sharing a
   scale: the product of the dimensions after the axis) are shorter than this
   is walked in windows of EXTQL_COLS_EXT_MAX elements with the scale and zero
   point expanded per element (the "cols" loops) instead of run by run. */
#ifndef EXTQL_SHORT_RUN
#define EXTQL_SHORT_RUN 64
#endif
/* The longest period (axis length times run length) whose per-element scale
   and zero point the kernels expand once per range (on the heap). */
#define EXTQL_PERIOD_MAX (1 << 17)

/* d (an integer of magnitude below 2^33) rounded to a float up (toward
   +inf) or down: the bounds of the float32 path of the 32-bit quantize. */
static inline float extql_f32_toward(double d, int up) {
  float f = (float)d;
  uint32_t u;
  if (up ? (double)f >= d : (double)f <= d) return f;
  memcpy(&u, &f, sizeof u); /* one ulp toward +inf (up) or -inf; f != 0 here */
  u = ((f > 0) == (up != 0)) ? u + 1 : u - 1;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* 1 / s when s is a power of two (normal or subnormal, either sign) whose
   reciprocal is finite -- then the reciprocal is exact --, else 0. */
static inline float extql_exact_reciprocal(float s) {
  uint32_t u;
  float r;
  memcpy(&u, &s, sizeof u);
  u &= 0x7FFFFFFFu;
  if (u == 0 || u >= 0x7F800000u) return 0.0f;               /* zero, inf, NaN */
  if ((u >> 23) != 0 ? (u & 0x7FFFFFu) != 0 : (u & (u - 1)) != 0) return 0.0f;
  r = 1.0f / s;
  memcpy(&u, &r, sizeof u);
  return (u & 0x7FFFFFFFu) >= 0x7F800000u ? 0.0f : r;        /* 2^128 and up: inf */
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define EXTQL_AVX2_LOOPS 1

#define EXTQL_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* x / s with a block's one scale s.  When s is a power of two (Quark's
   power-of-two scales, the scale 1 of float16 / bfloat16 quantization), 1 / s
   is exact, and x * (1 / s) is the same correctly rounded number as x / s for
   every x: NaN (the same payload), infinities, zeros, overflow and
   subnormal results alike.  A multiply costs a fraction of a division, which
   bounds these loops when the data is in the caches. */
typedef struct {
  __m256 s, r;
  int mul;
} extql_div_t;
static inline extql_div_t extql_div_by(float s) {
  extql_div_t d;
  float r = extql_exact_reciprocal(s);
  d.s = _mm256_set1_ps(s);
  d.r = _mm256_set1_ps(r);
  d.mul = r != 0.0f;
  return d;
}
static inline __m256 extql_div(__m256 x, const extql_div_t *d) {
  return d->mul ? _mm256_mul_ps(x, d->r) : _mm256_div_ps(x, d->s);
}

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

static inline void extql_st256(void *p, __m256i v, int stream);

/* 32 int32 lanes (values in range) -> 32 bytes, in order. */
static inline void extql_st32_int8(int8_t *p, __m256i a, __m256i b, __m256i c, __m256i d,
                                   int stream) {
  __m256i r = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  extql_st256(p, _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
              stream);
}
static inline void extql_st32_uint8(uint8_t *p, __m256i a, __m256i b, __m256i c, __m256i d,
                                    int stream) {
  /* 0..255 fits int16: signed packing to words, then unsigned to bytes. */
  __m256i r = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  extql_st256(p, _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
              stream);
}
/* 16 int32 lanes -> 16 words, in order. */
static inline void extql_st16_int16(int16_t *p, __m256i a, __m256i b, int stream) {
  extql_st256(p, _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8), stream);
}
static inline void extql_st16_uint16(uint16_t *p, __m256i a, __m256i b, int stream) {
  extql_st256(p, _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8), stream);
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
   sign | 0x7FC0), as int32 lanes holding 0..0xFFFF.  A NaN is first made
   sign | 0x7FC00000, which the rounding maps to sign | 0x7FC0 (the scalar
   code selects that value after rounding instead: the same bits). */
static inline __m256i extql_bf16_bits(__m256 v) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  __m256 isnan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  __m256i u = _mm256_castps_si256(
      _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), qnan), isnan));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  return _mm256_srli_epi32(r, 16);
}

/* ------------------------------------------------------------------------ */
/* Stores and the loop driver                                                */
/* ------------------------------------------------------------------------ */

/* stream: non-temporal stores (the output bypasses the caches; for outputs
   larger than the caches, where it saves the read of every line before it
   is written).  They need 32-byte (16-byte for 128-bit) aligned addresses,
   which EXTQL_RUN arranges, and an EXTQL_STORE_FENCE() once the whole range
   is written (not after every run: a fence drains the write-combining
   buffers, which costs hundreds of cycles).  An output not aligned to its
   element size (possible only from a C caller) gets plain stores. */
#define EXTQL_STORE_FENCE() _mm_sfence()
static inline void extql_st256(void *p, __m256i v, int stream) {
  if (stream)
    _mm256_stream_si256((__m256i *)p, v);
  else
    _mm256_storeu_si256((__m256i *)p, v);
}
static inline void extql_st256_ps(float *p, __m256 v, int stream) {
  if (stream)
    _mm256_stream_ps(p, v);
  else
    _mm256_storeu_ps(p, v);
}
static inline void extql_st128(void *p, __m128i v, int stream) {
  if (stream)
    _mm_stream_si128((__m128i *)p, v);
  else
    _mm_storeu_si128((__m128i *)p, v);
}

/* The loop over [0, n) in steps of STEP elements; STEP_AT(i, st) does the
   step at element i with streaming stores if st.  When streaming, the
   output must be 32-byte aligned: steps from 0 with plain stores cover the
   elements before the first aligned one (some are computed twice, to the
   same values), and the loop starts there. */
/* Software prefetch of the input, EXTQL_PREFETCH_BYTES ahead, one
   instruction per 64-byte line a step reads (a step reading less than a line
   prefetches every step).  The hardware prefetchers stop at page
   boundaries; with this, 16M-element quantize runs 15-20% faster (measured
   with other work on the machine).  A prefetch never faults, so reaching
   past the end of the input is harmless. */
#define EXTQL_PREFETCH_BYTES 2048
#define EXTQL_PREFETCH(p, step_bytes)                                                   \
  do {                                                                                  \
    const char *pf_ = (const char *)(p) + EXTQL_PREFETCH_BYTES;                         \
    _mm_prefetch(pf_, _MM_HINT_T0);                                                     \
    if ((step_bytes) > 64) _mm_prefetch(pf_ + 64, _MM_HINT_T0);                         \
    if ((step_bytes) > 128) _mm_prefetch(pf_ + 128, _MM_HINT_T0);                       \
    if ((step_bytes) > 192) _mm_prefetch(pf_ + 192, _MM_HINT_T0);                       \
  } while (0)

#define EXTQL_RUN(STEP, STEP_AT)                                                  \
  do {                                                                            \
    if (stream) {                                                                 \
      int64_t head_ = (int64_t)(((32u - ((uintptr_t)y & 31u)) & 31u) / sizeof *y); \
      if (n < head_ + (STEP) || (uintptr_t)y % sizeof *y != 0) {                  \
        stream = 0;                                                               \
      } else if (head_) {                                                         \
        for (; i < head_; i += (STEP)) STEP_AT(i, 0);                             \
        i = head_;                                                                \
      }                                                                           \
    }                                                                             \
    if (stream) {                                                                 \
      for (; i + (STEP) <= n; i += (STEP)) {                                      \
        EXTQL_PREFETCH(x + i, (STEP) * sizeof *x);                                \
        STEP_AT(i, 1);                                                            \
      }                                                                           \
    } else {                                                                      \
      for (; i + (STEP) <= n; i += (STEP)) {                                      \
        EXTQL_PREFETCH(x + i, (STEP) * sizeof *x);                                \
        STEP_AT(i, 0);                                                            \
      }                                                                           \
    }                                                                             \
  } while (0)

/* The same for the "cols" functions (per-axis along the last axis): element
   i uses channel (c0 + i) % D, kept in c; STEP_AT(i, c, st).  The scale and
   zero point are read at [c, c + STEP) with c < D, so when the run wraps
   around D the caller passes them extended periodically to D + STEP
   entries (s[k] = s[k % D]). */
#define EXTQL_NEXT_C(c) \
  do {                   \
    (c) += STEP_;        \
    while ((c) >= D) (c) -= D; \
  } while (0)
#define EXTQL_RUN_COLS(STEP, STEP_AT)                                             \
  do {                                                                            \
    const int64_t STEP_ = (STEP);                                                 \
    int64_t c = c0;                                                               \
    if (stream) {                                                                 \
      int64_t head_ = (int64_t)(((32u - ((uintptr_t)y & 31u)) & 31u) / sizeof *y); \
      if (n < head_ + STEP_ || (uintptr_t)y % sizeof *y != 0) {                   \
        stream = 0;                                                               \
      } else if (head_) {                                                         \
        for (; i < head_; i += STEP_) {                                           \
          STEP_AT(i, c, 0);                                                       \
          EXTQL_NEXT_C(c);                                                        \
        }                                                                         \
        i = head_;                                                                \
        c = (c0 + head_) % D;                                                     \
      }                                                                           \
    }                                                                             \
    if (stream) {                                                                 \
      for (; i + STEP_ <= n; i += STEP_) {                                        \
        EXTQL_PREFETCH(x + i, STEP_ * sizeof *x);                                 \
        STEP_AT(i, c, 1);                                                         \
        EXTQL_NEXT_C(c);                                                          \
      }                                                                           \
    } else {                                                                      \
      for (; i + STEP_ <= n; i += STEP_) {                                        \
        EXTQL_PREFETCH(x + i, STEP_ * sizeof *x);                                 \
        STEP_AT(i, c, 0);                                                         \
        EXTQL_NEXT_C(c);                                                          \
      }                                                                           \
    }                                                                             \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Quantize: 8/16-bit integers                                               */
/* ------------------------------------------------------------------------ */

/* 32 (8-bit) or 16 (16-bit) elements from x to y.  Block: one scale vs and
   zero point (zf, flo = lo - zp, fhi = hi - zp).  Cols: per element. */
#define EXTQL_Q8(T, LO, HI, LD8, W)                                                          \
  static inline __m256i extql_qc8_##T(const float *x, const float *s, const T##_t *zp) {     \
    __m256 zf = zp ? _mm256_cvtepi32_ps(LD8(zp)) : _mm256_setzero_ps();                      \
    __m256 flo = _mm256_sub_ps(_mm256_set1_ps((float)(LO)), zf);                             \
    __m256 fhi = _mm256_sub_ps(_mm256_set1_ps((float)(HI)), zf);                             \
    return extql_q_small(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), flo, fhi, zf); \
  }                                                                                          \
  static inline int64_t extql_avx2_q_block_##T(const float *x, T##_t *y, int64_t n, float s,  \
                                               T##_t zp, int stream) {                       \
    const extql_div_t vs = extql_div_by(s);                                                  \
    const __m256 zf = _mm256_set1_ps((float)zp);                                             \
    const __m256 flo = _mm256_set1_ps((float)(LO) - (float)zp);                              \
    const __m256 fhi = _mm256_set1_ps((float)(HI) - (float)zp);                              \
    int64_t i = 0;                                                                           \
    EXTQL_RUN(W, EXTQL_QB_##W);                                                              \
    return i;                                                                                \
  }                                                                                          \
  static inline int64_t extql_avx2_q_cols_##T(const float *x, T##_t *y, int64_t n,           \
                                              const float *s, const T##_t *zp, int64_t D,    \
                                              int64_t c0, int stream) {                      \
    int64_t i = 0;                                                                           \
    EXTQL_RUN_COLS(W, EXTQL_QC_##W);                                                         \
    return i;                                                                                \
  }

#define EXTQL_QB1(k) extql_q_small(extql_div(_mm256_loadu_ps(x + i_ + (k)), &vs), flo, fhi, zf)
#define EXTQL_QC1(k) extql_qc8(x + i_ + (k), s + c_ + (k), zp ? zp + c_ + (k) : 0)
#define EXTQL_QB_32(I, ST)                                                                  \
  do {                                                                                      \
    int64_t i_ = (I);                                                                       \
    extql_st32(y + i_, EXTQL_QB1(0), EXTQL_QB1(8), EXTQL_QB1(16), EXTQL_QB1(24), ST);       \
  } while (0)
#define EXTQL_QC_32(I, C, ST)                                                               \
  do {                                                                                      \
    int64_t i_ = (I), c_ = (C);                                                             \
    extql_st32(y + i_, EXTQL_QC1(0), EXTQL_QC1(8), EXTQL_QC1(16), EXTQL_QC1(24), ST);       \
  } while (0)
#define EXTQL_QB_16(I, ST)                                                                  \
  do {                                                                                      \
    int64_t i_ = (I);                                                                       \
    extql_st16(y + i_, EXTQL_QB1(0), EXTQL_QB1(8), ST);                                     \
  } while (0)
#define EXTQL_QC_16(I, C, ST)                                                               \
  do {                                                                                      \
    int64_t i_ = (I), c_ = (C);                                                             \
    extql_st16(y + i_, EXTQL_QC1(0), EXTQL_QC1(8), ST);                                     \
  } while (0)

/* The per-type names the step macros use. */
#define extql_st32 extql_st32_int8
#define extql_st16 extql_st16_int16
#define extql_qc8 extql_qc8_int8
EXTQL_Q8(int8, EXTQL_INT8_LO, EXTQL_INT8_HI, extql_ld8_i8, 32)
#undef extql_st32
#undef extql_qc8
#define extql_st32 extql_st32_uint8
#define extql_qc8 extql_qc8_uint8
EXTQL_Q8(uint8, EXTQL_UINT8_LO, EXTQL_UINT8_HI, extql_ld8_u8, 32)
#undef extql_st16
#undef extql_qc8
#define extql_st16 extql_st16_int16
#define extql_qc8 extql_qc8_int16
EXTQL_Q8(int16, EXTQL_INT16_LO, EXTQL_INT16_HI, extql_ld8_i16, 16)
#undef extql_st16
#undef extql_qc8
#define extql_st16 extql_st16_uint16
#define extql_qc8 extql_qc8_uint16
EXTQL_Q8(uint16, EXTQL_UINT16_LO, EXTQL_UINT16_HI, extql_ld8_u16, 16)
#undef extql_st32
#undef extql_st16
#undef extql_qc8

/* ------------------------------------------------------------------------ */
/* Quantize: 32-bit integers (in double)                                     */
/* ------------------------------------------------------------------------ */

/* 8 lanes of v = x / s, zero points as doubles (two halves) -> int32 lanes;
   uint32 goes through int32 by shifting the range (as the scalar code). */
static inline __m256i extql_q_i32_8(__m256 v, __m256d zlo, __m256d zhi) {
  const __m256d lo = _mm256_set1_pd(EXTQL_INT32_LO), hi = _mm256_set1_pd(EXTQL_INT32_HI);
  __m256d d0 = extql_q_wide(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_sub_pd(lo, zlo),
                            _mm256_sub_pd(hi, zlo), zlo);
  __m256d d1 = extql_q_wide(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), _mm256_sub_pd(lo, zhi),
                            _mm256_sub_pd(hi, zhi), zhi);
  return _mm256_set_m128i(_mm256_cvtpd_epi32(d1), _mm256_cvtpd_epi32(d0));
}
static inline __m256i extql_q_u32_8(__m256 v, __m256d zlo, __m256d zhi) {
  const __m256d lo = _mm256_set1_pd(EXTQL_UINT32_LO), hi = _mm256_set1_pd(EXTQL_UINT32_HI);
  const __m256d shift = _mm256_set1_pd(2147483648.0);
  __m256d d0 = extql_q_wide(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_sub_pd(lo, zlo),
                            _mm256_sub_pd(hi, zlo), zlo);
  __m256d d1 = extql_q_wide(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), _mm256_sub_pd(lo, zhi),
                            _mm256_sub_pd(hi, zhi), zhi);
  __m256i r = _mm256_set_m128i(_mm256_cvtpd_epi32(_mm256_sub_pd(d1, shift)),
                               _mm256_cvtpd_epi32(_mm256_sub_pd(d0, shift)));
  return extql_flip(r);
}

/* One scale and zero point (the block functions): in float32, without the
   double conversions.  r = round(v) is an integer (or inf / NaN); with the
   integers L = lo - zp and H = hi - zp, the result is lo when r < L or r is
   NaN, hi when r > H, else r + zp, exactly.  For a float r, r >= L exactly
   when r >= fl = L rounded up to a float, and r <= H when r <= fh = H
   rounded down.  In range, |r| < 2^32 and r + zp is a 32-bit value, so it
   is computed modulo 2^32: r is first brought into [-2^31, 2^31) by adding
   or subtracting 2^32 (exact: Sterbenz), converted exactly, and zp added
   with wraparound. */
typedef struct {
  __m256 fl, fh;
  __m256i zp, lo, hi;
} extql_w32_t;

static inline extql_w32_t extql_w32_bounds(double lo, double hi, double zp, uint32_t zp_bits) {
  extql_w32_t b;
  b.fl = _mm256_set1_ps(extql_f32_toward(lo - zp, 1));
  b.fh = _mm256_set1_ps(extql_f32_toward(hi - zp, 0));
  b.zp = _mm256_set1_epi32((int)zp_bits);
  b.lo = _mm256_set1_epi32((int)(uint32_t)(int64_t)lo);
  b.hi = _mm256_set1_epi32((int)(uint32_t)(int64_t)hi);
  return b;
}
static inline __m256i extql_q_w32(__m256 v, const extql_w32_t *b) {
  const __m256 two31 = _mm256_set1_ps(2147483648.0f), mtwo31 = _mm256_set1_ps(-2147483648.0f);
  const __m256 two32 = _mm256_set1_ps(4294967296.0f);
  __m256 r = _mm256_round_ps(v, EXTQL_RNE);
  __m256 below = _mm256_cmp_ps(r, b->fl, _CMP_NGE_UQ); /* r < L, or NaN */
  __m256 above = _mm256_cmp_ps(r, b->fh, _CMP_GT_OQ);  /* r > H */
  __m256i y;
  r = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps(r, two31, _CMP_GE_OQ), two32));
  r = _mm256_add_ps(r, _mm256_and_ps(_mm256_cmp_ps(r, mtwo31, _CMP_LT_OQ), two32));
  y = _mm256_add_epi32(_mm256_cvtps_epi32(r), b->zp);
  y = _mm256_blendv_epi8(y, b->lo, _mm256_castps_si256(below));
  return _mm256_blendv_epi8(y, b->hi, _mm256_castps_si256(above));
}

#define EXTQL_QW(T, Q8, TOPD_LO, TOPD_HI, LO, HI)                                             \
  static inline __m256i extql_qc8_##T(const float *x, const float *s, const T##_t *zp) {     \
    __m256d zlo = _mm256_setzero_pd(), zhi = _mm256_setzero_pd();                            \
    if (zp) {                                                                                \
      __m256i z = _mm256_loadu_si256((const __m256i *)zp);                                   \
      zlo = TOPD_LO(z);                                                                      \
      zhi = TOPD_HI(z);                                                                      \
    }                                                                                        \
    return Q8(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), zlo, zhi);              \
  }                                                                                          \
  static inline int64_t extql_avx2_q_block_##T(const float *x, T##_t *y, int64_t n, float s,  \
                                               T##_t zp, int stream) {                       \
    const extql_div_t vs = extql_div_by(s);                                                  \
    const extql_w32_t b = extql_w32_bounds((LO), (HI), (double)zp, (uint32_t)zp);            \
    int64_t i = 0;                                                                           \
    EXTQL_RUN(8, EXTQL_QWB);                                                                 \
    return i;                                                                                \
  }                                                                                          \
  static inline __m256i extql_qcf8_##T(const float *x, const float *s, const T##_t *zp,      \
                                        const float *fl, const float *fh) {                  \
    extql_w32_t b;                                                                           \
    b.fl = _mm256_loadu_ps(fl);                                                              \
    b.fh = _mm256_loadu_ps(fh);                                                              \
    b.zp = zp ? _mm256_loadu_si256((const __m256i *)zp) : _mm256_setzero_si256();            \
    b.lo = _mm256_set1_epi32((int)(uint32_t)(int64_t)(LO));                                  \
    b.hi = _mm256_set1_epi32((int)(uint32_t)(int64_t)(HI));                                  \
    return extql_q_w32(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), &b);           \
  }                                                                                          \
  /* fl, fh (or NULL: the double path): the bounds of each channel, as     \
     extql_w32_bounds computes them, extended like s and zp. */            \
  static inline int64_t extql_avx2_q_cols_##T(const float *x, T##_t *y, int64_t n,           \
                                              const float *s, const T##_t *zp, int64_t D,    \
                                              int64_t c0, const float *fl, const float *fh,  \
                                              int stream) {                                  \
    int64_t i = 0;                                                                           \
    if (fl && fh)                                                                            \
      EXTQL_RUN_COLS(16, EXTQL_QWCF2);                                                       \
    else                                                                                     \
      EXTQL_RUN_COLS(16, EXTQL_QWC2_##T);                                                    \
    return i;                                                                                \
  }
#define EXTQL_QWB(I, ST) \
  extql_st256(y + (I), extql_q_w32(extql_div(_mm256_loadu_ps(x + (I)), &vs), &b), ST)
#define EXTQL_QWCF(I, C, ST) \
  extql_st256(y + (I), EXTQL_QCF8(x + (I), s + (C), zp ? zp + (C) : 0, fl + (C), fh + (C)), ST)
/* Two independent 8-lane steps (16 elements) a loop iteration. */
#define EXTQL_TWICE(STEP8, I, C, ST) \
  do {                               \
    int64_t i2_ = (I), c2_ = (C);    \
    STEP8(i2_, c2_, ST);             \
    STEP8(i2_ + 8, c2_ + 8, ST);     \
  } while (0)
#define EXTQL_QWCF2(I, C, ST) EXTQL_TWICE(EXTQL_QWCF, I, C, ST)
#define EXTQL_QWC2_int32(I, C, ST) EXTQL_TWICE(EXTQL_QWC_int32, I, C, ST)
#define EXTQL_QWC2_uint32(I, C, ST) EXTQL_TWICE(EXTQL_QWC_uint32, I, C, ST)
#define EXTQL_QWC_int32(I, C, ST) \
  extql_st256(y + (I), extql_qc8_int32(x + (I), s + (C), zp ? zp + (C) : 0), ST)
#define EXTQL_QWC_uint32(I, C, ST) \
  extql_st256(y + (I), extql_qc8_uint32(x + (I), s + (C), zp ? zp + (C) : 0), ST)

#define EXTQL_QCF8 extql_qcf8_int32
EXTQL_QW(int32, extql_q_i32_8, extql_lo_pd_i32, extql_hi_pd_i32, EXTQL_INT32_LO, EXTQL_INT32_HI)
#undef EXTQL_QCF8
#define EXTQL_QCF8 extql_qcf8_uint32
EXTQL_QW(uint32, extql_q_u32_8, extql_lo_pd_u32, extql_hi_pd_u32, EXTQL_UINT32_LO, EXTQL_UINT32_HI)
#undef EXTQL_QCF8

/* ------------------------------------------------------------------------ */
/* Quantize: float16 / bfloat16 (bits in uint16_t)                           */
/* ------------------------------------------------------------------------ */

static inline __m128i extql_q_f16_8(__m256 v) {
  v = extql_q_sat(v, _mm256_set1_ps((float)EXTQL_FLOAT16_HI), _mm256_set1_ps((float)EXTQL_FLOAT16_LO));
  return _mm256_cvtps_ph(v, EXTQL_RNE);
}
static inline __m256i extql_q_bf16_8(__m256 v) {
  return extql_bf16_bits(
      extql_q_sat(v, _mm256_set1_ps((float)EXTQL_BFLOAT16_HI), _mm256_set1_ps((float)EXTQL_BFLOAT16_LO)));
}
static inline __m256 extql_ld8_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256 extql_ld8_bf16(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(extql_ld8_u16(p), 16));
}
/* x / s + zp for 8 lanes; zp NULL: + 0 (as the scalar code adds zero). */
static inline __m256 extql_qc8_f16v(const float *x, const float *s, const uint16_t *zp) {
  __m256 z = zp ? extql_ld8_f16(zp) : _mm256_setzero_ps();
  return _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), z);
}
static inline __m256 extql_qc8_bf16v(const float *x, const float *s, const uint16_t *zp) {
  __m256 z = zp ? extql_ld8_bf16(zp) : _mm256_setzero_ps();
  return _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(s)), z);
}

#define EXTQL_QH_B(k) _mm256_add_ps(extql_div(_mm256_loadu_ps(x + i_ + (k)), &vs), vz)
#define EXTQL_QF16B(I, ST)                                                                   \
  do {                                                                                       \
    int64_t i_ = (I);                                                                        \
    extql_st256(y + i_, _mm256_set_m128i(extql_q_f16_8(EXTQL_QH_B(8)), extql_q_f16_8(EXTQL_QH_B(0))), \
                ST);                                                                         \
  } while (0)
#define EXTQL_QF16C(I, C, ST)                                                                \
  extql_st128(y + (I), extql_q_f16_8(extql_qc8_f16v(x + (I), s + (C), zp ? zp + (C) : 0)), ST)
#define EXTQL_QF16C2(I, C, ST) EXTQL_TWICE(EXTQL_QF16C, I, C, ST)
#define EXTQL_QBF16B(I, ST)                                                                  \
  do {                                                                                       \
    int64_t i_ = (I);                                                                        \
    extql_st16_uint16(y + i_, extql_q_bf16_8(EXTQL_QH_B(0)), extql_q_bf16_8(EXTQL_QH_B(8)), ST); \
  } while (0)
#define EXTQL_QBF16C(I, C, ST)                                                               \
  do {                                                                                       \
    int64_t i_ = (I), c_ = (C);                                                              \
    extql_st16_uint16(                                                                       \
        y + i_, extql_q_bf16_8(extql_qc8_bf16v(x + i_, s + c_, zp ? zp + c_ : 0)),           \
        extql_q_bf16_8(extql_qc8_bf16v(x + i_ + 8, s + c_ + 8, zp ? zp + c_ + 8 : 0)), ST);  \
  } while (0)

static inline int64_t extql_avx2_q_block_f16(const float *x, uint16_t *y, int64_t n, float s,
                                             float zf, int stream) {
  const extql_div_t vs = extql_div_by(s);
  const __m256 vz = _mm256_set1_ps(zf);
  int64_t i = 0;
  EXTQL_RUN(16, EXTQL_QF16B);
  return i;
}
static inline int64_t extql_avx2_q_cols_f16(const float *x, uint16_t *y, int64_t n,
                                            const float *s, const uint16_t *zp, int64_t D,
                                            int64_t c0, int stream) {
  int64_t i = 0;
  EXTQL_RUN_COLS(16, EXTQL_QF16C2);
  return i;
}
static inline int64_t extql_avx2_q_block_bf16(const float *x, uint16_t *y, int64_t n, float s,
                                              float zf, int stream) {
  const extql_div_t vs = extql_div_by(s);
  const __m256 vz = _mm256_set1_ps(zf);
  int64_t i = 0;
  EXTQL_RUN(16, EXTQL_QBF16B);
  return i;
}
static inline int64_t extql_avx2_q_cols_bf16(const float *x, uint16_t *y, int64_t n,
                                             const float *s, const uint16_t *zp, int64_t D,
                                             int64_t c0, int stream) {
  int64_t i = 0;
  EXTQL_RUN_COLS(16, EXTQL_QBF16C);
  return i;
}

/* ------------------------------------------------------------------------ */
/* Dequantize                                                                */
/* ------------------------------------------------------------------------ */

/* 8 lanes of x - zp as float32, per type: 8/16-bit in int32 (exact, and
   exact as a float: |x - zp| < 2^17); 32-bit in double (exact), rounded
   once to float; float16 / bfloat16 in float32. */
static inline __m256 extql_dw(__m256d x0, __m256d x1, __m256d z0, __m256d z1) {
  __m128 a = _mm256_cvtpd_ps(_mm256_sub_pd(x0, z0));
  __m128 b = _mm256_cvtpd_ps(_mm256_sub_pd(x1, z1));
  return _mm256_set_m128(b, a);
}
#define EXTQL_DSMALL(T, LD8)                                                                  \
  static inline __m256 extql_dd_##T(const T##_t *x, const T##_t *zp, __m256i vz) {           \
    __m256i d = LD8(x);                                                                      \
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(d, zp ? LD8(zp) : vz));                       \
  }
EXTQL_DSMALL(int8, extql_ld8_i8)
EXTQL_DSMALL(uint8, extql_ld8_u8)
EXTQL_DSMALL(int16, extql_ld8_i16)
EXTQL_DSMALL(uint16, extql_ld8_u16)
/* 32-bit: when no lane's x - zp leaves the int32 range, the int32
   difference is exact and its conversion is the one rounding to float; a
   step where some lane does goes through double.  int32: overflow when x
   and zp differ in sign and the difference's sign is not x's.  uint32: the
   difference fits when its int32 sign is the borrow (x < zp). */
static inline __m256 extql_dd_int32(const int32_t *x, const int32_t *zp, __m256i vz) {
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  __m256i v = _mm256_loadu_si256((const __m256i *)x);
  __m256i z = zp ? _mm256_loadu_si256((const __m256i *)zp) : vz;
  __m256i d = _mm256_sub_epi32(v, z);
  __m256i ovf = _mm256_and_si256(_mm256_xor_si256(v, z), _mm256_xor_si256(v, d));
  if (_mm256_testz_si256(ovf, sign)) return _mm256_cvtepi32_ps(d);
  return extql_dw(extql_lo_pd_i32(v), extql_hi_pd_i32(v), extql_lo_pd_i32(z), extql_hi_pd_i32(z));
}
static inline __m256 extql_dd_uint32(const uint32_t *x, const uint32_t *zp, __m256i vz) {
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  __m256i v = _mm256_loadu_si256((const __m256i *)x);
  __m256i z = zp ? _mm256_loadu_si256((const __m256i *)zp) : vz;
  __m256i d = _mm256_sub_epi32(v, z);
  __m256i borrow = _mm256_cmpgt_epi32(_mm256_xor_si256(z, sign), _mm256_xor_si256(v, sign));
  if (_mm256_testz_si256(_mm256_xor_si256(borrow, d), sign)) return _mm256_cvtepi32_ps(d);
  return extql_dw(extql_lo_pd_u32(v), extql_hi_pd_u32(v), extql_lo_pd_u32(z), extql_hi_pd_u32(z));
}
static inline __m256 extql_dd_f16(const uint16_t *x, const uint16_t *zp, __m256 vz) {
  return _mm256_sub_ps(extql_ld8_f16(x), zp ? extql_ld8_f16(zp) : vz);
}
static inline __m256 extql_dd_bf16(const uint16_t *x, const uint16_t *zp, __m256 vz) {
  return _mm256_sub_ps(extql_ld8_bf16(x), zp ? extql_ld8_bf16(zp) : vz);
}

/* 16 elements a step (two independent vectors); cols: scale and zero point
   per element (zp NULL: zero point 0, the block's vz). */
#define EXTQL_DB(I, ST)                                                                      \
  do {                                                                                       \
    int64_t i_ = (I);                                                                        \
    extql_st256_ps(y + i_, _mm256_mul_ps(EXTQL_DD(x + i_, 0, vz), vs), ST);                  \
    extql_st256_ps(y + i_ + 8, _mm256_mul_ps(EXTQL_DD(x + i_ + 8, 0, vz), vs), ST);          \
  } while (0)
#define EXTQL_DC(I, C, ST)                                                                   \
  extql_st256_ps(y + (I),                                                                    \
                 _mm256_mul_ps(EXTQL_DD(x + (I), zp ? zp + (C) : 0, vz), _mm256_loadu_ps(s + (C))), \
                 ST)

#define EXTQL_DC2(I, C, ST) EXTQL_TWICE(EXTQL_DC, I, C, ST)

#define EXTQL_DQ(T, ZT, VZ_OF)                                                                \
  static inline int64_t extql_avx2_dq_block_##T(const ZT *x, float *y, int64_t n, float s,    \
                                                ZT##_zp zp, int stream) {                    \
    const __m256 vs = _mm256_set1_ps(s);                                                     \
    const ZT##_vec vz = VZ_OF(zp);                                                           \
    int64_t i = 0;                                                                           \
    EXTQL_RUN(16, EXTQL_DB);                                                                 \
    return i;                                                                                \
  }                                                                                          \
  static inline int64_t extql_avx2_dq_cols_##T(const ZT *x, float *y, int64_t n,             \
                                               const float *s, const ZT *zp, int64_t D,      \
                                               int64_t c0, int stream) {                     \
    const ZT##_vec vz = VZ_OF(0);                                                            \
    int64_t i = 0;                                                                           \
    EXTQL_RUN_COLS(16, EXTQL_DC2);                                                           \
    return i;                                                                                \
  }

/* The zero point's scalar type in the block functions and its vector. */
typedef int8_t int8_t_zp;
typedef __m256i int8_t_vec;
typedef uint8_t uint8_t_zp;
typedef __m256i uint8_t_vec;
typedef int16_t int16_t_zp;
typedef __m256i int16_t_vec;
typedef uint16_t uint16_t_zp;
typedef __m256i uint16_t_vec;
typedef int32_t int32_t_zp;
typedef __m256i int32_t_vec;
typedef uint32_t uint32_t_zp;
typedef __m256i uint32_t_vec;
/* float16 / bfloat16: the block functions take the zero point as a float. */
typedef uint16_t extql_h16_t;
typedef float extql_h16_t_zp;
typedef __m256 extql_h16_t_vec;

#define EXTQL_VZ_I32(z) _mm256_set1_epi32((int32_t)(z))
#define EXTQL_VZ_PD(z) _mm256_set1_pd((double)(z))
#define EXTQL_VZ_PS(z) _mm256_set1_ps((float)(z))

#define EXTQL_DD extql_dd_int8
EXTQL_DQ(int8, int8_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_uint8
EXTQL_DQ(uint8, uint8_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_int16
EXTQL_DQ(int16, int16_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_uint16
EXTQL_DQ(uint16, uint16_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_int32
EXTQL_DQ(int32, int32_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_uint32
EXTQL_DQ(uint32, uint32_t, EXTQL_VZ_I32)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_f16
EXTQL_DQ(f16, extql_h16_t, EXTQL_VZ_PS)
#undef EXTQL_DD
#define EXTQL_DD extql_dd_bf16
EXTQL_DQ(bf16, extql_h16_t, EXTQL_VZ_PS)
#undef EXTQL_DD

/* ------------------------------------------------------------------------ */
/* Fills of the per-element scale / zero point windows (short runs)          */
/* ------------------------------------------------------------------------ */

/* p[0, n) = v, one 32-byte store at a time: up to 31 bytes past n are
   written too.  The windows have EXTQL_COLS_STEP elements of slack after
   their end, and a window is filled run after run, so the next run's fill
   overwrites the extra. */
static inline void extql_avx2_fill_32(void *p, uint32_t v, int64_t n) {
  const __m256i vv = _mm256_set1_epi32((int)v);
  for (int64_t k = 0; k < n; k += 8) _mm256_storeu_si256((__m256i *)((uint32_t *)p + k), vv);
}
static inline void extql_avx2_fill_16(void *p, uint16_t v, int64_t n) {
  const __m256i vv = _mm256_set1_epi16((short)v);
  for (int64_t k = 0; k < n; k += 16) _mm256_storeu_si256((__m256i *)((uint16_t *)p + k), vv);
}
static inline void extql_avx2_fill_8(void *p, uint8_t v, int64_t n) {
  const __m256i vv = _mm256_set1_epi8((char)v);
  for (int64_t k = 0; k < n; k += 32) _mm256_storeu_si256((__m256i *)((uint8_t *)p + k), vv);
}

/* 32 bytes from src (any alignment) to dst (32-byte aligned) with a
   non-temporal store: the groups of elements that straddle two runs of a
   streamed range, so that no cache line mixes plain and streaming stores. */
static inline void extql_avx2_stream32(void *dst, const void *src) {
  _mm256_stream_si256((__m256i *)dst, _mm256_loadu_si256((const __m256i *)src));
}

#else /* not the AVX2 copy: nothing is done here */

#define EXTQL_AVX2_LOOPS 0
#define EXTQL_STORE_FENCE() ((void)0)
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
static inline void extql_avx2_stream32(void *dst, const void *src) { memcpy(dst, src, 32); }
/* The fills as plain loops (exactly n elements). */
static inline void extql_avx2_fill_32(void *p, uint32_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) ((uint32_t *)p)[k] = v;
}
static inline void extql_avx2_fill_16(void *p, uint16_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) ((uint16_t *)p)[k] = v;
}
static inline void extql_avx2_fill_8(void *p, uint8_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) ((uint8_t *)p)[k] = v;
}

#endif

#endif /* EXTQL_AVX2_H */
