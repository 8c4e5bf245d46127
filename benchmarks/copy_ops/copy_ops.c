/*
 * copy_ops.c - the copy anchor of the benchmarks: a custom-op library that
 * registers
 *
 *   com.amd.quark.bench  QuantizeCopy, DequantizeCopy, BlockCopy
 *
 * built by extql_bench/copy_library.py from this file and the
 * shim's own files (extql/src/ort_*.c but ort_library.c).  So the ops take
 * the same inputs, check them with the same code and split the work the same
 * way on the session's thread pool as extql's operators, but run the copy
 * below instead of the math: each element of x read and written to y with no
 * arithmetic (the low bytes of each float32 for quantize, each element
 * zero-extended to 32 bits for dequantize), moving exactly the bytes the
 * operator moves.  Its time is the memory-bandwidth limit the benchmark
 * measures extql against.  BlockCopy is a block-format node
 * (BFPQuantizeDequantize's attributes; ort_blocks.c reads them and splits
 * the work items as for extql's block formats) whose work items are copied
 * from x to y, float32 or float16, unchanged.  Not part of extql's product
 * library.
 *
 * The copy runs the variant extql's kernels run (extql_bench_copy_set_isa):
 * the baseline, plain C loops; or, on x86-64 with GCC or Clang, AVX2 vector
 * loops (32 output bytes a step, the source prefetched ahead) whose output,
 * when it is at least EXTQL_STREAM_MIN_BYTES, is written with non-temporal
 * stores, as the kernels write it.
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
 * bytes each): the low bytes, or the element zero-extended.  -1 for sizes
 * that are not those of a quantize or dequantize. */
/* One conversion: each IN element's low bytes (or the element zero-extended)
 * as an OUT element. */
#define COPY_LOOP(IN, OUT) \
  for (i = 0; i < n; i++) ((OUT *)dst)[i] = (OUT)((const IN *)src)[i]

static int copy_baseline(int in_size, int out_size, const void *src, void *dst, int64_t n) {
  int64_t i;
  if (in_size == 4 && out_size == 1)
    COPY_LOOP(uint32_t, uint8_t);
  else if (in_size == 4 && out_size == 2)
    COPY_LOOP(uint32_t, uint16_t);
  else if (in_size == 4 && out_size == 4)
    COPY_LOOP(uint32_t, uint32_t);
  else if (in_size == 2 && out_size == 1)
    COPY_LOOP(uint16_t, uint8_t);
  else if (in_size == 2 && out_size == 2)
    COPY_LOOP(uint16_t, uint16_t);
  else if (in_size == 2 && out_size == 4)
    COPY_LOOP(uint16_t, uint32_t);
  else if (in_size == 1 && out_size == 2)
    COPY_LOOP(uint8_t, uint16_t);
  else if (in_size == 1 && out_size == 4)
    COPY_LOOP(uint8_t, uint32_t);
  else
    return -1;
  return 0;
}

#if COPY_HAVE_AVX2
#define AVX2 __attribute__((target("avx2")))

/* Source bytes read ahead by software prefetch in the loops that write at
 * least as many bytes as they read (the narrowing ones are left to the
 * hardware prefetcher, as in the kernels). */
#define PREFETCH_BYTES 2048

AVX2 static inline void store32(char *p, __m256i v, int stream) {
  if (stream)
    _mm256_stream_si256((__m256i *)p, v);
  else
    _mm256_storeu_si256((__m256i *)p, v);
}

/* 32 output bytes from the source at s: the vector step of each conversion. */
AVX2 static inline __m256i step_41(const char *s) {
  const __m256i m = _mm256_set1_epi32(0xFF);
  __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)s), m);
  __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32)), m);
  __m256i c = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 64)), m);
  __m256i d = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 96)), m);
  __m256i v = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
AVX2 static inline __m256i step_42(const char *s) {
  const __m256i m = _mm256_set1_epi32(0xFFFF);
  __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)s), m);
  __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32)), m);
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
}
AVX2 static inline __m256i step_21(const char *s) {
  const __m256i m = _mm256_set1_epi16(0xFF);
  __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)s), m);
  __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32)), m);
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
}
AVX2 static inline __m256i step_12(const char *s) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
}
AVX2 static inline __m256i step_44(const char *s) {
  return _mm256_loadu_si256((const __m256i *)s);
}
AVX2 static inline __m256i step_14(const char *s) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s));
}
AVX2 static inline __m256i step_24(const char *s) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
}

/* The vector loop of one conversion: 32 output bytes (32 / OUT elements)
 * per step; returns the elements written. */
#define VECTOR_LOOP(IN, OUT, STEP)                                               \
  do {                                                                           \
    const int64_t per_ = 32 / (OUT);                                             \
    for (; i + per_ <= n; i += per_) {                                           \
      if ((IN) <= (OUT)) _mm_prefetch(src + i * (IN) + PREFETCH_BYTES, _MM_HINT_T0); \
      store32(dst + i * (OUT), STEP(src + i * (IN)), stream);                    \
    }                                                                            \
  } while (0)

/* The AVX2 copy: plain stores up to a 32-byte aligned output (when
 * streaming), the vector loop, then the baseline loop for the rest. */
AVX2 static int copy_avx2(int in_size, int out_size, const char *src, char *dst, int64_t n,
                          int stream) {
  int64_t i = 0;
  if (stream) {
    i = (int64_t)(((32u - ((uintptr_t)dst & 31u)) & 31u) / (unsigned)out_size);
    if ((uintptr_t)dst % (unsigned)out_size != 0 || i > n) i = 0, stream = 0;
    if (copy_baseline(in_size, out_size, src, dst, i) != 0) return -1;
  }
  if (in_size == 4 && out_size == 1)
    VECTOR_LOOP(4, 1, step_41);
  else if (in_size == 4 && out_size == 2)
    VECTOR_LOOP(4, 2, step_42);
  else if (in_size == 4 && out_size == 4)
    VECTOR_LOOP(4, 4, step_44);
  else if (in_size == 1 && out_size == 4)
    VECTOR_LOOP(1, 4, step_14);
  else if (in_size == 2 && out_size == 4)
    VECTOR_LOOP(2, 4, step_24);
  else if (in_size == 2 && out_size == 1)
    VECTOR_LOOP(2, 1, step_21);
  else if (in_size == 2 && out_size == 2)
    VECTOR_LOOP(2, 2, step_44);
  else if (in_size == 1 && out_size == 2)
    VECTOR_LOOP(1, 2, step_12);
  else
    return -1;
  if (stream) _mm_sfence();
  return copy_baseline(in_size, out_size, src + i * in_size, dst + i * out_size, n - i);
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

/* The range function of the copy ops (see ExtqlRangeFn): the bytes of x's
 * elements [start, stop) to y's, as many as each element of x and y has.
 * The packed types (sub-byte, float4e2m1) have no whole bytes per element: -1. */
static int copy_range(const ExtqlWork *w, int64_t start, int64_t stop) {
  int qsize = (int)extql_elem_size(w->qtype), fsize = (int)extql_elem_size(w->ftype);
  int in_size = w->kind == OP_QUANTIZE ? fsize : qsize;
  int out_size = w->kind == OP_QUANTIZE ? qsize : fsize;
  const char *src = (const char *)w->x + start * in_size;
  char *dst = (char *)w->y + start * out_size;
  if (extql_is_subbyte(w->qtype) || w->qtype == EXTQL_FLOAT4E2M1) return -1;
  if (stop <= start) return 0;
#if COPY_HAVE_AVX2
  if (use_avx2())
    return copy_avx2(in_size, out_size, src, dst, stop - start,
                     (EXTQL_STREAM_FLAGS(w->out_bytes) & EXTQL_STREAM) != 0);
#endif
  return copy_baseline(in_size, out_size, src, dst, stop - start);
}

/* BlockCopy's work items, as extql_block_items counts them (one per
 * block-row of [outer, D, inner] with the blocks along D). */
static int64_t copy_block_items(const ExtqlBlockParams *p, int64_t outer, int64_t D,
                                int64_t inner) {
  if (outer <= 0 || D <= 0 || inner <= 0) return 0;
  return outer * ((D + p->block - 1) / p->block);
}

static int64_t copy_block_item_size(const ExtqlBlockParams *p, int64_t inner) {
  return p->block * inner;
}

/* The first element of work item w (w = items: the tensor's end). */
static int64_t copy_block_first(const ExtqlBlockParams *p, int64_t D, int64_t inner,
                                int64_t w) {
  int64_t nb = (D + p->block - 1) / p->block, o = w / nb, b = w - o * nb;
  int64_t row = b * p->block < D ? b * p->block : D;
  return (o * D + row) * inner;
}

/* Work items [start, stop) from x to y: block-rows follow each other in
 * memory, so the range is one span of elements. */
static int copy_block_range(const ExtqlBlockParams *p, int xtype, const void *x, void *y,
                            int64_t outer, int64_t D, int64_t inner, int64_t start,
                            int64_t stop) {
  size_t size = xtype == EXTQL_FLOAT32 ? 4 : xtype == EXTQL_FLOAT16 ? 2 : 0;
  int64_t first = copy_block_first(p, D, inner, start);
  int64_t end = copy_block_first(p, D, inner, stop);
  (void)outer;
  if (size == 0) return -1;
  if (end > first)
    memmove((char *)y + (size_t)first * size, (const char *)x + (size_t)first * size,
            (size_t)(end - first) * size);
  return 0;
}

static const ExtqlBlockKernels COPY_BLOCKS = {copy_block_items, copy_block_item_size,
                                              copy_block_range};

static const char *const DOMAINS[] = {"com.amd.quark.bench"};

static const ExtqlOpName NAMES[] = {
    {0, "QuantizeCopy", OP_QUANTIZE},
    {0, "DequantizeCopy", OP_DEQUANTIZE},
    {0, "BlockCopy", OP_BFP},
};

static ExtqlOpSet COPY_OPS = {DOMAINS, 1, NAMES, 3, copy_range, NULL, NULL, NULL, 0, NULL, 0, NULL,
                              NULL, NULL, &COPY_BLOCKS};

EXTQL_EXPORT OrtStatus *EXTQL_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                         const OrtApiBase *base) {
  return extql_ort_register(options, base, &COPY_OPS);
}
