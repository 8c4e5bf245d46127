/*
 * copy_ops.c - the copy anchor of the benchmarks: a custom-op library that
 * registers
 *
 *   com.amd.quark.bench  QuantizeCopy, DequantizeCopy
 *
 * built by benchmarks/extql_bench/copy_library.py from this file and the
 * shim's own files (extql/src/ort_*.c but ort_library.c).  So the ops take
 * the same inputs, check them with the same code and split the work the same
 * way on the session's thread pool as extql's operators, but run the copy
 * below instead of the math: each element of x read and written to y with no
 * arithmetic (the low bytes of each float32 for quantize, each element
 * zero-extended to 32 bits for dequantize), moving exactly the bytes the
 * operator moves.  Its time is the memory-bandwidth limit the benchmark
 * measures extql against.  Not part of extql's product library.
 *
 * The copy runs the variant extql's kernels run (extql_bench_copy_set_isa):
 * the baseline, plain loops; or, on x86-64 with GCC or Clang, the same
 * loops compiled for AVX2 whose output, for an output of at least
 * EXTQL_STREAM_MIN_BYTES, is written with non-temporal stores, as the
 * kernels write it.
 */
#include <stdint.h>
#include <string.h>

#include "extql_kernels.h"
#include "ort_internal.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#define COPY_HAVE_AVX2 1
#include <immintrin.h>
#else
#define COPY_HAVE_AVX2 0
#endif

/* Convert elements [0, n) of src (in_size bytes each) into dst (out_size
 * bytes each); -1 for sizes that are not a quantize or dequantize. */
#define COPY_LOOPS                                                                        \
  int64_t i;                                                                              \
  if (in_size == 4 && out_size == 1) {                                                    \
    for (i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)((const uint32_t *)src)[i];    \
  } else if (in_size == 4 && out_size == 2) {                                             \
    for (i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)((const uint32_t *)src)[i];  \
  } else if (in_size == 4 && out_size == 4) {                                             \
    for (i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];            \
  } else if (in_size == 1 && out_size == 4) {                                             \
    for (i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint8_t *)src)[i];             \
  } else if (in_size == 2 && out_size == 4) {                                             \
    for (i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint16_t *)src)[i];            \
  } else {                                                                                \
    return -1;                                                                            \
  }                                                                                       \
  return 0;

static int copy_baseline(int in_size, int out_size, const void *src, void *dst, int64_t n) {
  COPY_LOOPS
}

#if COPY_HAVE_AVX2
__attribute__((target("avx2"))) static int copy_avx2(int in_size, int out_size,
                                                     const void *src, void *dst, int64_t n) {
  COPY_LOOPS
}

/* Elements per tile of the streaming copy: converted into a buffer in L1,
 * then written out with 32-byte non-temporal stores. */
#define TILE 2048

__attribute__((target("avx2"))) static int copy_avx2_stream(int in_size, int out_size,
                                                            const char *src, char *dst,
                                                            int64_t n) {
  __attribute__((aligned(32))) char tile[TILE * 4];
  int64_t head = 0, done, k, bytes;
  /* Up to the first 32-byte aligned output element: plain stores. */
  while (head < n && ((uintptr_t)(dst + head * out_size) & 31) != 0) head++;
  if (copy_avx2(in_size, out_size, src, dst, head) != 0) return -1;
  for (done = head; n - done >= TILE; done += TILE) {
    copy_avx2(in_size, out_size, src + done * in_size, tile, TILE);
    bytes = (int64_t)TILE * out_size;
    for (k = 0; k < bytes; k += 32)
      _mm256_stream_si256((__m256i *)(dst + done * out_size + k),
                          _mm256_load_si256((const __m256i *)(tile + k)));
  }
  copy_avx2(in_size, out_size, src + done * in_size, dst + done * out_size, n - done);
  _mm_sfence();
  return 0;
}
#endif

/* 1: the AVX2 copy, 0: the baseline; -1: not chosen yet. */
static int g_avx2 = -1;

static int use_avx2(void) {
#if COPY_HAVE_AVX2
  if (g_avx2 < 0) {
    __builtin_cpu_init();
    g_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  }
  return g_avx2;
#else
  return 0;
#endif
}

/* Choose the variant: 1 AVX2 (when the CPU has it), 0 baseline.  Returns
 * the variant now in use. */
EXTQL_EXPORT int extql_bench_copy_set_isa(int avx2) {
#if COPY_HAVE_AVX2
  __builtin_cpu_init();
  g_avx2 = avx2 && __builtin_cpu_supports("avx2") ? 1 : 0;
#else
  (void)avx2;
  g_avx2 = 0;
#endif
  return g_avx2;
}

/* The range function of the copy ops (see ExtqlRangeFn). */
static int copy_range(int kind, int qtype, const void *x, const float *scale,
                      const void *zero_point, void *y, int64_t D, int64_t inner, int64_t start,
                      int64_t stop, int64_t out_bytes) {
  int size = (int)extql_elem_size(qtype);
  int in_size = kind == OP_QUANTIZE ? 4 : size, out_size = kind == OP_QUANTIZE ? size : 4;
  const char *src = (const char *)x + start * in_size;
  char *dst = (char *)y + start * out_size;
  (void)scale;
  (void)zero_point;
  (void)D;
  (void)inner;
  if (stop <= start) return 0;
#if COPY_HAVE_AVX2
  if (use_avx2()) {
    if (EXTQL_STREAM_FLAGS(out_bytes) & EXTQL_STREAM)
      return copy_avx2_stream(in_size, out_size, src, dst, stop - start);
    return copy_avx2(in_size, out_size, src, dst, stop - start);
  }
#endif
  return copy_baseline(in_size, out_size, src, dst, stop - start);
}

static const char *const DOMAINS[] = {"com.amd.quark.bench"};

static const ExtqlOpName NAMES[] = {
    {0, "QuantizeCopy", OP_QUANTIZE},
    {0, "DequantizeCopy", OP_DEQUANTIZE},
};

static ExtqlOpSet COPY_OPS = {DOMAINS, 1, NAMES, 2, copy_range, 0, NULL, 0, NULL};

EXTQL_EXPORT OrtStatus *EXTQL_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                         const OrtApiBase *base) {
  return extql_ort_register(options, base, &COPY_OPS);
}
