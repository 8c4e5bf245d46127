/*
 * extql_primitives_avx2.h - the primitives' AVX2 bodies (with FMA and
 * F16C).
 * Included by extql_primitives.h only, which documents the primitives;
 * every body gives the same bits.
 */
#ifndef EXTQL_PRIMITIVES_AVX2_H
#define EXTQL_PRIMITIVES_AVX2_H

#include <immintrin.h>

/* The stores below stream (non-temporal) when asked and dst is 32-byte
   aligned; the kernels align their tiles' outputs when streaming, and call
   extql_store_fence() once a range is written. */
#define EXTQL_HAVE_STREAM 1
/* The width of the vectors the bodies load and store. */
#define EXTQL_VECTOR_BYTES 32

static inline int extql_can_stream(const void *dst, int stream) {
  return stream && ((uintptr_t)dst & 31u) == 0;
}
static inline void extql_put256(void *p, __m256i v, int stream) {
  if (stream)
    _mm256_stream_si256((__m256i *)p, v);
  else
    _mm256_storeu_si256((__m256i *)p, v);
}
static inline __m256i extql_get256(const int32_t *t) {
  return _mm256_loadu_si256((const __m256i *)t);
}
/* The lane order packing within 128-bit halves leaves, undone. */
#define EXTQL_UNPACK_ORDER _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)

static inline void extql_store_i8(int8_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32) {
    __m256i w0 = _mm256_packs_epi32(extql_get256(t + k), extql_get256(t + k + 8));
    __m256i w1 = _mm256_packs_epi32(extql_get256(t + k + 16), extql_get256(t + k + 24));
    extql_put256(dst + k, _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w0, w1),
                                                      EXTQL_UNPACK_ORDER), stream);
  }
  for (; k < n; k++) dst[k] = (int8_t)t[k];
}
static inline void extql_store_u8(uint8_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32) {
    __m256i w0 = _mm256_packs_epi32(extql_get256(t + k), extql_get256(t + k + 8));
    __m256i w1 = _mm256_packs_epi32(extql_get256(t + k + 16), extql_get256(t + k + 24));
    extql_put256(dst + k, _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w0, w1),
                                                      EXTQL_UNPACK_ORDER), stream);
  }
  for (; k < n; k++) dst[k] = (uint8_t)t[k];
}
static inline void extql_store_i16(int16_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_permute4x64_epi64(
        _mm256_packs_epi32(extql_get256(t + k), extql_get256(t + k + 8)), 0xD8), stream);
  for (; k < n; k++) dst[k] = (int16_t)t[k];
}
static inline void extql_store_u16(uint16_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_permute4x64_epi64(
        _mm256_packus_epi32(extql_get256(t + k), extql_get256(t + k + 8)), 0xD8), stream);
  for (; k < n; k++) dst[k] = (uint16_t)t[k];
}
/* 4-byte lanes, copied.  A vector loop, not memcpy: the library's memcpy
   of a few hundred bytes is a string instruction that costs more than the
   tile took to compute. */
static inline void extql_store_32(void *dst, const void *t, int64_t n, int stream) {
  int64_t k = 0;
  uint32_t *d = (uint32_t *)dst;
  const uint32_t *s = (const uint32_t *)t;
  stream = extql_can_stream(dst, stream);
  for (; k + 8 <= n; k += 8)
    extql_put256(d + k, _mm256_loadu_si256((const __m256i *)(s + k)), stream);
  for (; k < n; k++) d[k] = s[k];
}
static inline void extql_store_f16(uint16_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  const int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_set_m128i(_mm256_cvtps_ph(_mm256_loadu_ps(t + k + 8), rne),
                                           _mm256_cvtps_ph(_mm256_loadu_ps(t + k), rne)),
                 stream);
  for (; k < n; k++) dst[k] = extql_f32_to_f16(t[k]);
}

/* The bfloat16 conversion of extql_f32_to_bf16, 8 lanes. */
static inline __m256i extql_bf16_lanes(__m256 v) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  __m256 isnan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  __m256i u = _mm256_castps_si256(
      _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), qnan), isnan));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb),
                           16);
}
static inline void extql_store_bf16(uint16_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_permute4x64_epi64(
        _mm256_packus_epi32(extql_bf16_lanes(_mm256_loadu_ps(t + k)),
                            extql_bf16_lanes(_mm256_loadu_ps(t + k + 8))), 0xD8), stream);
  for (; k < n; k++) dst[k] = extql_f32_to_bf16(t[k]);
}

static inline void extql_load_i8(int32_t *t, const int8_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_si256((__m256i *)(t + k),
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + k))));
  for (; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u8(int32_t *t, const uint8_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_si256((__m256i *)(t + k),
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + k))));
  for (; k < n; k++) t[k] = src[k];
}
static inline void extql_load_i16(int32_t *t, const int16_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_si256((__m256i *)(t + k),
                        _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(src + k))));
  for (; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u16(int32_t *t, const uint16_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_si256((__m256i *)(t + k),
                        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + k))));
  for (; k < n; k++) t[k] = src[k];
}
static inline void extql_widen_f16(float *t, const uint16_t *src, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(t, stream);
  for (; k + 8 <= n; k += 8)
    extql_put256(t + k, _mm256_castps_si256(_mm256_cvtph_ps(
                            _mm_loadu_si128((const __m128i *)(src + k)))), stream);
  for (; k < n; k++) t[k] = extql_f16_to_f32(src[k]);
}
/* t[0, n) rounded to nearest even to float16 values, in place (a float32
   holds each exactly): from 65520 up +-inf, NaN stays NaN. */
static inline void extql_round_f16(float *t, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(t + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(t + k), 0)));
  for (; k < n; k++) t[k] = extql_f16_to_f32(extql_f32_to_f16(t[k]));
}
static inline void extql_widen_bf16(float *t, const uint16_t *src, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(t, stream);
  for (; k + 8 <= n; k += 8)
    extql_put256(t + k, _mm256_slli_epi32(_mm256_cvtepu16_epi32(
                                              _mm_loadu_si128((const __m128i *)(src + k))),
                                          16), stream);
  for (; k < n; k++) t[k] = extql_bits_f32((uint32_t)src[k] << 16);
}

/* float16 / bfloat16 quantize with the scale 1 and the zero point +0, a
   conversion (see the AVX-512 body). */
static inline __m256 extql_sat256(__m256 v, __m256 mx, __m256 nmx) {
  return _mm256_max_ps(nmx, _mm256_min_ps(mx, _mm256_add_ps(v, _mm256_setzero_ps())));
}
static inline void extql_cast_f16(uint16_t *dst, const float *x, int64_t n, int stream) {
  int64_t k = 0;
  const int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 mx = _mm256_set1_ps(65504.0f), nmx = _mm256_set1_ps(-65504.0f);
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16) {
    extql_prefetch(x + k, 64);
    extql_put256(dst + k, _mm256_set_m128i(
                              _mm256_cvtps_ph(extql_sat256(_mm256_loadu_ps(x + k + 8), mx, nmx), rne),
                              _mm256_cvtps_ph(extql_sat256(_mm256_loadu_ps(x + k), mx, nmx), rne)),
                 stream);
  }
  for (; k < n; k++) dst[k] = extql_f32_to_f16(extql_sat_value(x[k], 65504.0f));
}
static inline void extql_cast_bf16(uint16_t *dst, const float *x, int64_t n, int stream) {
  int64_t k = 0;
  const __m256 mx = _mm256_castsi256_ps(_mm256_set1_epi32(0x7F7F0000));
  const __m256 nmx = _mm256_castsi256_ps(_mm256_set1_epi32((int)0xFF7F0000u));
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16) {
    extql_prefetch(x + k, 64);
    extql_put256(dst + k, _mm256_permute4x64_epi64(
        _mm256_packus_epi32(extql_bf16_lanes(extql_sat256(_mm256_loadu_ps(x + k), mx, nmx)),
                            extql_bf16_lanes(extql_sat256(_mm256_loadu_ps(x + k + 8), mx, nmx))),
        0xD8), stream);
  }
  for (; k < n; k++)
    dst[k] = extql_f32_to_bf16(extql_sat_value(x[k], extql_bits_f32(0x7F7F0000u)));
}

/* p[0, n) = v. */
static inline void extql_fill_32(void *p, uint32_t v, int64_t n) {
  const __m256i vv = _mm256_set1_epi32((int)v);
  uint32_t *q = (uint32_t *)p;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_si256((__m256i *)(q + k), vv);
  for (; k < n; k++) q[k] = v;
}

/* 32 bytes from src (any alignment) to dst (32-byte aligned), streamed. */
static inline void extql_stream32(void *dst, const void *src) {
  _mm256_stream_si256((__m256i *)dst, _mm256_loadu_si256((const __m256i *)src));
}
static inline void extql_store_fence(void) { _mm_sfence(); }

/* The 32-bit quantize with the zero point 0 from a tile of quotients (see
   the AVX-512 body).  int32: CVTPS2DQ rounds in the current rounding mode
   (to nearest even) and gives INT32_MIN for NaN and out of range; lanes at
   or above 2^31 are set to INT32_MAX.  uint32: v raised to at least 0
   (MAXPS returns its second operand, 0, for NaN) and rounded; from 2^31 on
   converted as r - 2^32 (exact), whose int32 bits are r's; from 2^32 on all
   ones. */
static inline __m256i extql_wide_i32(__m256 v) {
  __m256 big = _mm256_cmp_ps(v, _mm256_set1_ps(2147483648.0f), _CMP_GE_OQ);
  return _mm256_blendv_epi8(_mm256_cvtps_epi32(v), _mm256_set1_epi32(INT32_MAX),
                            _mm256_castps_si256(big));
}
static inline __m256i extql_wide_u32(__m256 v) {
  const __m256 two31 = _mm256_set1_ps(2147483648.0f), two32 = _mm256_set1_ps(4294967296.0f);
  __m256 r = _mm256_round_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _MM_FROUND_CUR_DIRECTION);
  __m256 high = _mm256_and_ps(_mm256_cmp_ps(r, two31, _CMP_GE_OQ), two32);
  __m256i y = _mm256_cvttps_epi32(_mm256_sub_ps(r, high));
  return _mm256_or_si256(y, _mm256_castps_si256(_mm256_cmp_ps(r, two32, _CMP_GE_OQ)));
}
static inline void extql_store_wide_i32(int32_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 8 <= n; k += 8) extql_put256(dst + k, extql_wide_i32(_mm256_loadu_ps(t + k)), stream);
  for (; k < n; k++) dst[k] = extql_wide_i32_one(t[k]);
}
static inline void extql_store_wide_u32(uint32_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 8 <= n; k += 8) extql_put256(dst + k, extql_wide_u32(_mm256_loadu_ps(t + k)), stream);
  for (; k < n; k++) dst[k] = extql_wide_u32_one(t[k]);
}

#endif /* EXTQL_PRIMITIVES_AVX2_H */
