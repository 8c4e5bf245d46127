/*
 * extql_primitives_avx512.h - the primitives' AVX-512 bodies (F, BW, VL,
 * DQ, with AVX2, FMA and F16C).
 * Included by extql_primitives.h only, which documents the primitives;
 * every body gives the same bits.
 */
#ifndef EXTQL_PRIMITIVES_AVX512_H
#define EXTQL_PRIMITIVES_AVX512_H

#include <immintrin.h>

/* The AVX-512 bodies: the tile loops around them are compiled for 512-bit
   vectors, so the primitives read and write the tile 64 bytes at a time.  A
   tile written in 32-byte halves and read back in 64-byte vectors (or the
   reverse) cannot be forwarded from the store buffer: every read waits for
   the stores to reach the cache (dequantize with the AVX2 bodies took
   1.4-1.5x the AVX2 copy's time).  The ends of a tile are masked, not
   scalar.  Streaming stores stay 32 bytes wide, so the alignment the
   kernels give (32 bytes) is the one they need. */
#define EXTQL_HAVE_STREAM 1
/* The width of the vectors the bodies load and store. */
#define EXTQL_VECTOR_BYTES 64

static inline int extql_can_stream(const void *dst, int stream) {
  return stream && ((uintptr_t)dst & 31u) == 0;
}
static inline void extql_put256(void *p, __m256i v, int stream) {
  if (stream)
    _mm256_stream_si256((__m256i *)p, v);
  else
    _mm256_storeu_si256((__m256i *)p, v);
}
static inline void extql_put512(void *p, __m512i v, int stream) {
  if (stream) {
    _mm256_stream_si256((__m256i *)p, _mm512_castsi512_si256(v));
    _mm256_stream_si256((__m256i *)p + 1, _mm512_extracti64x4_epi64(v, 1));
  } else {
    _mm512_storeu_si512(p, v);
  }
}
static inline __m512i extql_get512(const void *t) { return _mm512_loadu_si512(t); }
/* The mask of the first m (<= 16) lanes. */
static inline __mmask16 extql_mask16(int64_t m) { return (__mmask16)((1u << m) - 1u); }

/* Packing works within 128-bit lanes: 64 int32 lanes packed to bytes leave
   dword 4L + j holding elements 4L..4L+3 of the j-th input vector; this
   index puts them back in order. */
#define EXTQL_BYTE_ORDER _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
/* The same for 32 lanes packed to 16 bits: qword 2L + j. */
#define EXTQL_WORD_ORDER _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7)

static inline void extql_store_i8(int8_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 64 <= n; k += 64) {
    __m512i w0 = _mm512_packs_epi32(extql_get512(t + k), extql_get512(t + k + 16));
    __m512i w1 = _mm512_packs_epi32(extql_get512(t + k + 32), extql_get512(t + k + 48));
    extql_put512(dst + k, _mm512_permutexvar_epi32(EXTQL_BYTE_ORDER, _mm512_packs_epi16(w0, w1)),
                 stream);
  }
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm512_mask_cvtsepi32_storeu_epi8(dst + k, m, _mm512_maskz_loadu_epi32(m, t + k));
  }
}
static inline void extql_store_u8(uint8_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 64 <= n; k += 64) {
    __m512i w0 = _mm512_packs_epi32(extql_get512(t + k), extql_get512(t + k + 16));
    __m512i w1 = _mm512_packs_epi32(extql_get512(t + k + 32), extql_get512(t + k + 48));
    extql_put512(dst + k, _mm512_permutexvar_epi32(EXTQL_BYTE_ORDER, _mm512_packus_epi16(w0, w1)),
                 stream);
  }
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm512_mask_cvtusepi32_storeu_epi8(dst + k, m, _mm512_maskz_loadu_epi32(m, t + k));
  }
}
static inline void extql_store_i16(int16_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_permutexvar_epi64(EXTQL_WORD_ORDER, _mm512_packs_epi32(
                                                       extql_get512(t + k), extql_get512(t + k + 16))),
                 stream);
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm512_mask_cvtsepi32_storeu_epi16(dst + k, m, _mm512_maskz_loadu_epi32(m, t + k));
  }
}
static inline void extql_store_u16(uint16_t *dst, const int32_t *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_permutexvar_epi64(EXTQL_WORD_ORDER, _mm512_packus_epi32(
                                                       extql_get512(t + k), extql_get512(t + k + 16))),
                 stream);
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    /* the lanes hold 0..65535: the unsigned saturation of int32 lanes
       treats them as unsigned, so it keeps them */
    _mm512_mask_cvtusepi32_storeu_epi16(dst + k, m, _mm512_maskz_loadu_epi32(m, t + k));
  }
}
/* 4-byte lanes, copied (a vector loop: see the AVX2 body). */
static inline void extql_store_32(void *dst, const void *t, int64_t n, int stream) {
  int64_t k = 0;
  uint32_t *d = (uint32_t *)dst;
  const uint32_t *s = (const uint32_t *)t;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16) extql_put512(d + k, extql_get512(s + k), stream);
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(d + k, m, _mm512_maskz_loadu_epi32(m, s + k));
  }
}
static inline void extql_store_f16(uint16_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  const int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_inserti64x4(
                              _mm512_castsi256_si512(_mm512_cvtps_ph(_mm512_loadu_ps(t + k), rne)),
                              _mm512_cvtps_ph(_mm512_loadu_ps(t + k + 16), rne), 1),
                 stream);
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm256_mask_storeu_epi16(dst + k, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, t + k), rne));
  }
}

/* The bfloat16 conversion of extql_f32_to_bf16, 16 lanes, into the high
   16 bits of each lane. */
static inline __m512i extql_bf16_lanes(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  /* NaN lanes: sign | 0x7FC00000 ((u & sign) | qnan, one ternary logic) */
  u = _mm512_mask_ternarylogic_epi32(u, nan, _mm512_set1_epi32((int)0x80000000u),
                                     _mm512_set1_epi32(0x7FC00000), 0xEA);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
}
/* Words 2i + 1 of a (i < 16), then of b: the high halves of 32 lanes. */
#define EXTQL_HIGH_WORDS                                                                   \
  _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015, \
                    0x001B0019, 0x001F001D, 0x00230021, 0x00270025, 0x002B0029, 0x002F002D, \
                    0x00330031, 0x00370035, 0x003B0039, 0x003F003D)
static inline void extql_store_bf16(uint16_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_permutex2var_epi16(extql_bf16_lanes(_mm512_loadu_ps(t + k)),
                                                    EXTQL_HIGH_WORDS,
                                                    extql_bf16_lanes(_mm512_loadu_ps(t + k + 16))),
                 stream);
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm512_mask_cvtepi32_storeu_epi16(
        dst + k, m, _mm512_srli_epi32(extql_bf16_lanes(_mm512_maskz_loadu_ps(m, t + k)), 16));
  }
}

/* float16 / bfloat16 quantize with the scale 1 and the zero point +0, a
   conversion: x + 0 (-0 becomes +0, as the formula's addition of the zero
   point makes it) saturated to the type's largest finite value (NaN
   stays), rounded to nearest even -- in one pass from x to y, without a
   tile. */
static inline __m512 extql_sat512(__m512 v, __m512 mx, __m512 nmx) {
  /* MIN/MAXPS return the second operand when one is NaN: v's NaN stays */
  return _mm512_max_ps(nmx, _mm512_min_ps(mx, _mm512_add_ps(v, _mm512_setzero_ps())));
}
static inline void extql_cast_f16(uint16_t *dst, const float *x, int64_t n, int stream) {
  int64_t k = 0;
  const int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 mx = _mm512_set1_ps(65504.0f), nmx = _mm512_set1_ps(-65504.0f);
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32) {
    extql_prefetch(x + k, 128);
    extql_put512(dst + k, _mm512_inserti64x4(
                              _mm512_castsi256_si512(_mm512_cvtps_ph(
                                  extql_sat512(_mm512_loadu_ps(x + k), mx, nmx), rne)),
                              _mm512_cvtps_ph(extql_sat512(_mm512_loadu_ps(x + k + 16), mx, nmx),
                                              rne), 1),
                 stream);
  }
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm256_mask_storeu_epi16(
        dst + k, m, _mm512_cvtps_ph(extql_sat512(_mm512_maskz_loadu_ps(m, x + k), mx, nmx), rne));
  }
}
static inline void extql_cast_bf16(uint16_t *dst, const float *x, int64_t n, int stream) {
  int64_t k = 0;
  const __m512 mx = _mm512_castsi512_ps(_mm512_set1_epi32(0x7F7F0000));
  const __m512 nmx = _mm512_castsi512_ps(_mm512_set1_epi32((int)0xFF7F0000u));
  stream = extql_can_stream(dst, stream);
  for (; k + 32 <= n; k += 32) {
    extql_prefetch(x + k, 128);
    extql_put512(dst + k, _mm512_permutex2var_epi16(
                              extql_bf16_lanes(extql_sat512(_mm512_loadu_ps(x + k), mx, nmx)),
                              EXTQL_HIGH_WORDS,
                              extql_bf16_lanes(extql_sat512(_mm512_loadu_ps(x + k + 16), mx, nmx))),
                 stream);
  }
  for (; k < n; k += 16) {
    __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : extql_mask16(n - k);
    _mm512_mask_cvtepi32_storeu_epi16(
        dst + k, m,
        _mm512_srli_epi32(extql_bf16_lanes(extql_sat512(_mm512_maskz_loadu_ps(m, x + k), mx, nmx)),
                          16));
  }
}

static inline void extql_load_i8(int32_t *t, const int8_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_si512(t + k, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + k))));
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(t + k, m, _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, src + k)));
  }
}
static inline void extql_load_u8(int32_t *t, const uint8_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_si512(t + k, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + k))));
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(t + k, m, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, src + k)));
  }
}
static inline void extql_load_i16(int32_t *t, const int16_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_si512(t + k,
                        _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(src + k))));
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(t + k, m, _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(m, src + k)));
  }
}
static inline void extql_load_u16(int32_t *t, const uint16_t *src, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_si512(t + k,
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + k))));
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(t + k, m, _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + k)));
  }
}
static inline void extql_widen_f16(float *t, const uint16_t *src, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(t, stream);
  for (; k + 16 <= n; k += 16)
    extql_put512(t + k, _mm512_castps_si512(_mm512_cvtph_ps(
                            _mm256_loadu_si256((const __m256i *)(src + k)))), stream);
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_ps(t + k, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + k)));
  }
}
/* t[0, n) rounded to nearest even to float16 values, in place (a float32
   holds each exactly): from 65520 up +-inf, NaN stays NaN. */
static inline void extql_round_f16(float *t, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_ps(t + k, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(t + k), 0)));
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_ps(t + k, m,
                          _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, t + k), 0)));
  }
}
static inline void extql_widen_bf16(float *t, const uint16_t *src, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(t, stream);
  for (; k + 16 <= n; k += 16)
    extql_put512(t + k, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                              (const __m256i *)(src + k))),
                                          16),
                 stream);
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(
        t + k, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + k)), 16));
  }
}

/* p[0, n) = v. */
static inline void extql_fill_32(void *p, uint32_t v, int64_t n) {
  const __m512i vv = _mm512_set1_epi32((int)v);
  uint32_t *q = (uint32_t *)p;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_si512(q + k, vv);
  if (k < n) _mm512_mask_storeu_epi32(q + k, extql_mask16(n - k), vv);
}

/* 32 bytes from src (any alignment) to dst (32-byte aligned), streamed. */
static inline void extql_stream32(void *dst, const void *src) {
  _mm256_stream_si256((__m256i *)dst, _mm256_loadu_si256((const __m256i *)src));
}
static inline void extql_store_fence(void) { _mm_sfence(); }

/* The 32-bit quantize with the zero point 0, from a tile of quotients t:
   round to nearest even and convert in one instruction per 16 lanes
   (VCVTPS2DQ / VCVTPS2UDQ with the rounding embedded), which gives the
   integer indefinite value where the rounded quotient is out of range or
   NaN.  int32: that value is INT32_MIN, the result for NaN and for every
   quotient below the range; lanes at or above 2^31 are set to INT32_MAX.
   uint32: the quotient first raised to at least 0 (MAXPS returns its
   second operand, 0, for NaN), so the indefinite value UINT32_MAX is left
   only for quotients of 2^32 and above.  The same values as the formula
   (quantize_wide with the zero point 0); the AVX2 body in 8 lanes. */
static inline __m512i extql_wide_i32(__m512 v) {
  __m512i r = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, _mm512_set1_ps(2147483648.0f), _CMP_GE_OQ),
                               _mm512_set1_epi32(INT32_MAX));
}
static inline __m512i extql_wide_u32(__m512 v) {
  return _mm512_cvt_roundps_epu32(_mm512_max_ps(v, _mm512_setzero_ps()),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void extql_store_wide_i32(int32_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16) extql_put512(dst + k, extql_wide_i32(_mm512_loadu_ps(t + k)), stream);
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(dst + k, m, extql_wide_i32(_mm512_maskz_loadu_ps(m, t + k)));
  }
}
static inline void extql_store_wide_u32(uint32_t *dst, const float *t, int64_t n, int stream) {
  int64_t k = 0;
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16) extql_put512(dst + k, extql_wide_u32(_mm512_loadu_ps(t + k)), stream);
  if (k < n) {
    __mmask16 m = extql_mask16(n - k);
    _mm512_mask_storeu_epi32(dst + k, m, extql_wide_u32(_mm512_maskz_loadu_ps(m, t + k)));
  }
}

#endif /* EXTQL_PRIMITIVES_AVX512_H */
