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
 *   - the 32-bit quantize with the zero point 0 from a tile of quotients
 *     (extql_store_wide_*): one rounding conversion per vector and a fix-up
 *     instead of the formula's rounding, compares and selects (with the
 *     quotient by quotient_fma, 0.45-0.7x the time in the caches).
 *
 * Each primitive has a plain C body (the baseline, and any compiler or CPU
 * without the intrinsics: extql_primitives_c.h), an AVX2/F16C body
 * (extql_primitives_avx2.h) and an AVX-512 body (extql_primitives_avx512.h),
 * all giving the same bits; this file picks the one the copy is compiled
 * for.  docs/development.rst ("Kernels: the formula and its primitives") has
 * the measurements that keep each one here.
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
/* 1 when the 8- and 16-bit quantize, and the 32-bit one with the zero
   point 0, take the quotient x / s by the reciprocal and a correction step
   (quotient_fma: fused multiply-adds) instead of the division: the copies
   with FMA, where it takes 0.61-0.70x (AVX-512) and 0.86x (AVX2) the
   division's time in the caches (docs/development.rst, "The division"). */
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

/* One element of the 32-bit quantize with the zero point 0 from its
   quotient v: r = rint(v); the type's bound below it (or for NaN), its bound
   above it, else r converted (uint32 through int32, which the compiler
   converts in vectors).  Branch-free, so that a loop of it vectorises: the
   plain C body of extql_store_wide_*, and the AVX2 body's tail. */
static inline int32_t extql_wide_i32_one(float v) {
  float r = extql_rint(v);
  float c = r >= -2147483648.0f ? (r < 2147483648.0f ? r : 0.0f) : 0.0f;
  int32_t y = (int32_t)c;
  y = r >= -2147483648.0f ? y : INT32_MIN;
  return r >= 2147483648.0f ? INT32_MAX : y;
}
static inline uint32_t extql_wide_u32_one(float v) {
  float r = extql_rint(v);
  float c = r >= 0.0f ? (r < 4294967296.0f ? r : 0.0f) : 0.0f;
  uint32_t y = (uint32_t)(int32_t)(c >= 2147483648.0f ? c - 4294967296.0f : c);
  y = r >= 0.0f ? y : 0u;
  return r >= 4294967296.0f ? UINT32_MAX : y;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "extql_primitives_avx512.h"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "extql_primitives_avx2.h"
#else
#include "extql_primitives_c.h"
#endif


/* The widening loads of a tile: the widening conversions, never streamed. */
static inline void extql_load_f16(float *t, const uint16_t *src, int64_t n) {
  extql_widen_f16(t, src, n, 0);
}
static inline void extql_load_bf16(float *t, const uint16_t *src, int64_t n) {
  extql_widen_bf16(t, src, n, 0);
}

#endif /* EXTQL_PRIMITIVES_H */
