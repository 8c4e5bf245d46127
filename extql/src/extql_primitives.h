/*
 * extql_primitives.h - the few operations of the kernels that a C compiler
 * does not produce well from a plain loop.  Included by _kernels.pyx only.
 *
 * The quantize / dequantize formula lives in _kernels.pyx, written once per
 * element; its tile loops are plain C loops that the compiler vectorises in
 * each instruction-set variant (setup.py compiles the kernels for the
 * baseline and for AVX2/FMA/F16C).  What is left here moves a tile of 32-bit
 * lanes to or from memory:
 *
 *   - narrowing stores (int32 lanes -> int8 / uint8 / int16 / uint16, float32
 *     -> float16) and widening loads (the reverse): GCC and Clang vectorise
 *     these plain loops poorly (element by element inserts and extracts);
 *     packing instructions do 32 lanes in a few operations;
 *   - non-temporal ("streaming") stores, which no plain C store produces: an
 *     output larger than the caches is then written without the read of
 *     every line before it is written;
 *   - a software prefetch of the input (the hardware prefetchers stop at
 *     page boundaries);
 *   - the float16 and bfloat16 conversions (round to nearest even, NaN kept):
 *     F16C instructions or packing, else exact bit manipulation; the
 *     compiler's own loop of the bit manipulation is slower than the
 *     formula around it.  The same for rounding a float32 to a float16
 *     value in place (a quotient in float16 precision): two F16C
 *     instructions, where the compiler's loop of the bit manipulation ran a
 *     float16 quantize at half the speed.
 *
 * Each primitive has a plain C body (the baseline, and any compiler or CPU
 * without the intrinsics) and an AVX2/F16C body; both give the same bits.
 * docs/development.rst ("Kernels: the formula and its primitives") has the
 * measurements that keep each one here.
 */
#ifndef EXTQL_PRIMITIVES_H
#define EXTQL_PRIMITIVES_H

#include <stdint.h>
#include <string.h>

/* Elements per tile: the kernels compute a tile into 32-bit lanes, then
   store it.  A multiple of 32, so that a tile of any element size is a whole
   number of 32-byte vectors. */
#define EXTQL_TILE 128
/* How far ahead of the element being read the input is prefetched. */
#define EXTQL_PREFETCH_BYTES 2048
/* 1 when the 8- and 16-bit quantize takes the quotient x / s by the
   reciprocal and a correction step (quotient_fma: fused multiply-adds)
   instead of the division: the copies with FMA, where it takes 0.61-0.70x
   (AVX-512) and 0.86x (AVX2) the division's time in the caches.  The
   32-bit quantize divides (with it, 1.16x / 1.43x). */
#ifndef EXTQL_FMA_QUOTIENT /* (-DEXTQL_FMA_QUOTIENT=0/1: measurements) */
#if defined(__FMA__)
#define EXTQL_FMA_QUOTIENT 1
#else
#define EXTQL_FMA_QUOTIENT 0
#endif
#endif

static inline uint32_t extql_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float extql_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* float32 -> float16 bits, round to nearest even, as IEEE conversion:
   beyond the largest float16 (from 65520 up) +-inf, NaN stays NaN.
   Branch-free, so that a loop of it vectorises. */
static inline uint16_t extql_f32_to_f16(float v) {
  uint32_t u = extql_f32_bits(v);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  /* Normal: re-bias the exponent (127 -> 15), round at bit 13 to even. */
  uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
  /* Subnormal (|v| < 2^-14): adding 0.5 (ulp 2^-24) rounds the mantissa. */
  uint32_t sub = extql_f32_bits(extql_bits_f32(a) + 0.5f) - 0x3F000000u;
  /* NaN stays NaN: quiet bit set, top payload bits kept (as NumPy does). */
  uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu);
  uint32_t h = a < 0x38800000u ? sub : normal;
  /* From 2^16 up the re-biased exponent leaves float16's range: inf (below
     2^16 the rounding itself carries 65520 and above to inf). */
  h = a >= 0x47800000u ? 0x7C00u : h;
  h = a > 0x7F800000u ? nan : h;
  return (uint16_t)(h | sign);
}

/* float16 bits -> float32, exact (subnormals, inf and NaN included). */
static inline float extql_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t em = ((uint32_t)h & 0x7FFFu) << 13;
  uint32_t exp = em & 0x0F800000u;
  /* Normal: re-bias the exponent (15 -> 127); inf / NaN: to 255. */
  uint32_t normal = em + 0x38000000u;
  uint32_t sub;
  normal = exp == 0x0F800000u ? normal + 0x38000000u : normal;
  /* Subnormal or zero: let the FPU normalise m * 2^-24. */
  sub = extql_f32_bits(extql_bits_f32(em + 0x38800000u) - extql_bits_f32(0x38800000u));
  return extql_bits_f32((exp == 0 ? sub : normal) | sign);
}

/* float32 -> bfloat16 bits, round to nearest even; NaN -> sign | 0x7FC0 (the
   canonical quiet NaN, as ml_dtypes gives).  A NaN is first made
   sign | 0x7FC00000, which the rounding maps to sign | 0x7FC0. */
static inline uint16_t extql_f32_to_bf16(float v) {
  uint32_t u = extql_f32_bits(v);
  u = v != v ? (u & 0x80000000u) | 0x7FC00000u : u;
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* x + 0 saturated to [-mx, mx], NaN kept: the float16 / bfloat16 formula
   for the scale 1 and the zero point +0 (extql_cast_f16 / _bf16). */
static inline float extql_sat_value(float x, float mx) {
  float v = x + 0.0f;
  v = mx < v ? mx : v;
  return -mx > v ? -mx : v;
}

/* Round to nearest, ties to even, in the default rounding mode.  With
   SSE4.1 (the AVX2 variant) rintf is one instruction and vectorises; on the
   baseline (SSE2) GCC expands it element by element with a branch, which
   keeps the loop scalar, so there it is the branch-free 2^23 trick: below
   2^23 adding and subtracting 2^23 leaves the integer part rounded, from
   2^23 up every float is an integer. */
static inline float extql_rint(float v) {
#if defined(__SSE4_1__) || defined(__aarch64__)
  return __builtin_rintf(v);
#else
  uint32_t u = extql_f32_bits(v);
  float a = extql_bits_f32(u & 0x7FFFFFFFu);
  float r = (a + 8388608.0f) - 8388608.0f;
  r = extql_bits_f32(extql_f32_bits(r) | (u & 0x80000000u));
  return a < 8388608.0f ? r : v; /* NaN fails the test and stays */
#endif
}

/* v, with the compiler no longer knowing its value.  For the constants of
   a formula (the largest float16 value, say): knowing them, GCC rewrites a
   saturation's two selects into compares and blends instead of one min and
   one max.  An empty asm statement, so it costs nothing. */
static inline float extql_opaque(float v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}

#if defined(__GNUC__)
#define EXTQL_PREFETCH_LINE(p) __builtin_prefetch((p), 0, 3)
#else
#define EXTQL_PREFETCH_LINE(p) ((void)(p))
#endif

/* Prefetch the input EXTQL_PREFETCH_BYTES ahead of [p, p + bytes), one
   request per 64-byte line.  A prefetch never faults, so reaching past the
   end of the input is harmless. */
static inline void extql_prefetch(const void *p, int64_t bytes) {
  const char *q = (const char *)p + EXTQL_PREFETCH_BYTES;
  for (int64_t o = 0; o < bytes; o += 64) EXTQL_PREFETCH_LINE(q + o);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
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
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_inserti64x4(
                              _mm512_castsi256_si512(_mm512_cvtps_ph(
                                  extql_sat512(_mm512_loadu_ps(x + k), mx, nmx), rne)),
                              _mm512_cvtps_ph(extql_sat512(_mm512_loadu_ps(x + k + 16), mx, nmx),
                                              rne), 1),
                 stream);
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
  for (; k + 32 <= n; k += 32)
    extql_put512(dst + k, _mm512_permutex2var_epi16(
                              extql_bf16_lanes(extql_sat512(_mm512_loadu_ps(x + k), mx, nmx)),
                              EXTQL_HIGH_WORDS,
                              extql_bf16_lanes(extql_sat512(_mm512_loadu_ps(x + k + 16), mx, nmx))),
                 stream);
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

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* The stores below stream (non-temporal) when asked and dst is 32-byte
   aligned; the kernels align their tiles' outputs when streaming, and call
   extql_store_fence() once a range is written. */
#define EXTQL_HAVE_STREAM 1

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
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_set_m128i(
                              _mm256_cvtps_ph(extql_sat256(_mm256_loadu_ps(x + k + 8), mx, nmx), rne),
                              _mm256_cvtps_ph(extql_sat256(_mm256_loadu_ps(x + k), mx, nmx), rne)),
                 stream);
  for (; k < n; k++) dst[k] = extql_f32_to_f16(extql_sat_value(x[k], 65504.0f));
}
static inline void extql_cast_bf16(uint16_t *dst, const float *x, int64_t n, int stream) {
  int64_t k = 0;
  const __m256 mx = _mm256_castsi256_ps(_mm256_set1_epi32(0x7F7F0000));
  const __m256 nmx = _mm256_castsi256_ps(_mm256_set1_epi32((int)0xFF7F0000u));
  stream = extql_can_stream(dst, stream);
  for (; k + 16 <= n; k += 16)
    extql_put256(dst + k, _mm256_permute4x64_epi64(
        _mm256_packus_epi32(extql_bf16_lanes(extql_sat256(_mm256_loadu_ps(x + k), mx, nmx)),
                            extql_bf16_lanes(extql_sat256(_mm256_loadu_ps(x + k + 8), mx, nmx))),
        0xD8), stream);
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

#else /* plain C: the compiler's own loops; no streaming stores */

#define EXTQL_HAVE_STREAM 0

static inline void extql_store_i8(int8_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (int8_t)t[k];
}
static inline void extql_store_u8(uint8_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (uint8_t)t[k];
}
static inline void extql_store_i16(int16_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (int16_t)t[k];
}
static inline void extql_store_u16(uint16_t *dst, const int32_t *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = (uint16_t)t[k];
}
static inline void extql_store_32(void *dst, const void *t, int64_t n, int stream) {
  (void)stream;
  memcpy(dst, t, (size_t)n * 4);
}
static inline void extql_store_f16(uint16_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_f16(t[k]);
}
static inline void extql_store_bf16(uint16_t *dst, const float *t, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_bf16(t[k]);
}
static inline void extql_load_i8(int32_t *t, const int8_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u8(int32_t *t, const uint8_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_i16(int32_t *t, const int16_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_load_u16(int32_t *t, const uint16_t *src, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = src[k];
}
static inline void extql_widen_f16(float *t, const uint16_t *src, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) t[k] = extql_f16_to_f32(src[k]);
}
static inline void extql_widen_bf16(float *t, const uint16_t *src, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) t[k] = extql_bits_f32((uint32_t)src[k] << 16);
}
static inline void extql_cast_f16(uint16_t *dst, const float *x, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++) dst[k] = extql_f32_to_f16(extql_sat_value(x[k], 65504.0f));
}
static inline void extql_cast_bf16(uint16_t *dst, const float *x, int64_t n, int stream) {
  (void)stream;
  for (int64_t k = 0; k < n; k++)
    dst[k] = extql_f32_to_bf16(extql_sat_value(x[k], extql_bits_f32(0x7F7F0000u)));
}
static inline void extql_round_f16(float *t, int64_t n) {
  for (int64_t k = 0; k < n; k++) t[k] = extql_f16_to_f32(extql_f32_to_f16(t[k]));
}
static inline void extql_fill_32(void *p, uint32_t v, int64_t n) {
  for (int64_t k = 0; k < n; k++) ((uint32_t *)p)[k] = v;
}
static inline void extql_stream32(void *dst, const void *src) { memcpy(dst, src, 32); }
static inline void extql_store_fence(void) {}

#endif

/* The widening loads of a tile: the widening conversions, never streamed. */
static inline void extql_load_f16(float *t, const uint16_t *src, int64_t n) {
  extql_widen_f16(t, src, n, 0);
}
static inline void extql_load_bf16(float *t, const uint16_t *src, int64_t n) {
  extql_widen_bf16(t, src, n, 0);
}

#endif /* EXTQL_PRIMITIVES_H */
