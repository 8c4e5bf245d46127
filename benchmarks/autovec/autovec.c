/*
 * autovec.c - what GCC makes of the kernels' formula written as a plain loop,
 * against the hand-vectorised loop of extql/src/extql_avx2.h (int8, per
 * tensor), in one process, interleaved, medians.  The measurement behind
 * docs/development.rst "Kernels: the compiler's loops"; not part of extql.
 *
 *   gcc -O3 -fno-math-errno -fno-trapping-math -ffp-contract=off \
 *       -mavx2 -mfma -mf16c -o autovec autovec.c -lm
 *   ./autovec [elements ...]          (default 65536 1048576 16777216)
 *
 * Rows: "plain" writes the output directly (what the kernels do for outputs
 * that stay in the caches); "tile" computes TILE elements into an aligned
 * buffer and copies it out with non-temporal stores (what a Cython loop
 * needs for outputs larger than the caches: GCC never emits those stores);
 * "narrow" (quantize, in cache) computes the int32 results in a same-width
 * loop into a tile and narrows them with a packing primitive.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TILE 128
#define ROUNDS 31

/* ---- the hand-written loops (as extql_avx2.h: int8, one scale) ---- */
static void q_intrinsics(const float *x, int8_t *y, long n, float s, int8_t zp, int stream) {
  const __m256 vs = _mm256_set1_ps(s), zf = _mm256_set1_ps(zp);
  const __m256 flo = _mm256_set1_ps(-128.f - zp), fhi = _mm256_set1_ps(127.f - zp);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (long i = 0; i < n; i += 32) {
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
      __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), vs);
      v = _mm256_min_ps(_mm256_max_ps(v, flo), fhi);
      r[k] = _mm256_cvtps_epi32(_mm256_add_ps(_mm256_round_ps(v, 8), zf));
    }
    __m256i c = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3])), perm);
    if (stream)
      _mm256_stream_si256((__m256i *)(y + i), c);
    else
      _mm256_storeu_si256((__m256i *)(y + i), c);
  }
  if (stream) _mm_sfence();
}
static void dq_intrinsics(const int8_t *x, float *y, long n, float s, int8_t zp, int stream) {
  const __m256 vs = _mm256_set1_ps(s);
  const __m256i vz = _mm256_set1_epi32(zp);
  for (long i = 0; i < n; i += 8) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x + i)));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, vz)), vs);
    if (stream)
      _mm256_stream_ps(y + i, f);
    else
      _mm256_storeu_ps(y + i, f);
  }
  if (stream) _mm_sfence();
}

/* ---- the formula as a plain loop (what Cython generates from the .pyx) ---- */
static inline int8_t q_one(float x, float s, float zf, float flo, float fhi) {
  float v = x / s;
  v = v > flo ? v : flo; /* NaN -> flo */
  v = v < fhi ? v : fhi;
  /* rintf (vroundps) between the selects and the narrowing conversion: with
     the magic-number rounding instead, GCC 12 narrows the comparison masks
     to bytes (several times slower) or, with trapping math, does not
     vectorise the loop at all. */
  return (int8_t)(int32_t)(rintf(v) + zf);
}
static void q_plain(const float *restrict x, int8_t *restrict y, long n, float s, int8_t zp) {
  const float zf = zp, flo = -128.f - zf, fhi = 127.f - zf;
  for (long i = 0; i < n; i++) y[i] = q_one(x[i], s, zf, flo, fhi);
}
static inline int32_t q_one32(float x, float s, float zf, float flo, float fhi) {
  float v = x / s;
  v = v > flo ? v : flo;
  v = v < fhi ? v : fhi;
  return (int32_t)(rintf(v) + zf);
}
/* TILE int32 values already in [-128, 127] to bytes: the packing primitive. */
static void narrow_i32_i8(int8_t *dst, const int32_t *src) {
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (long i = 0; i < TILE; i += 32) {
    __m256i a = _mm256_packs_epi32(_mm256_load_si256((const __m256i *)(src + i)),
                                   _mm256_load_si256((const __m256i *)(src + i + 8)));
    __m256i b = _mm256_packs_epi32(_mm256_load_si256((const __m256i *)(src + i + 16)),
                                   _mm256_load_si256((const __m256i *)(src + i + 24)));
    _mm256_storeu_si256((__m256i *)(dst + i),
                        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm));
  }
}
static void q_narrow(const float *restrict x, int8_t *restrict y, long n, float s, int8_t zp) {
  const float zf = zp, flo = -128.f - zf, fhi = 127.f - zf;
  _Alignas(64) int32_t buf[TILE];
  for (long i = 0; i < n; i += TILE) {
    for (long j = 0; j < TILE; j++) buf[j] = q_one32(x[i + j], s, zf, flo, fhi);
    narrow_i32_i8(y + i, buf);
  }
}
static void dq_plain(const int8_t *restrict x, float *restrict y, long n, float s, int8_t zp) {
  for (long i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * s;
}
static void stream_copy(void *dst, const void *src, long bytes) {
  for (long i = 0; i < bytes; i += 32)
    _mm256_stream_si256((__m256i *)((char *)dst + i),
                        _mm256_load_si256((const __m256i *)((const char *)src + i)));
}
static void q_tile(const float *x, int8_t *y, long n, float s, int8_t zp) {
  _Alignas(64) int8_t buf[TILE];
  for (long i = 0; i < n; i += TILE) {
    q_plain(x + i, buf, TILE, s, zp);
    stream_copy(y + i, buf, TILE);
  }
  _mm_sfence();
}
static void dq_tile(const int8_t *x, float *y, long n, float s, int8_t zp) {
  _Alignas(64) float buf[TILE];
  for (long i = 0; i < n; i += TILE) {
    dq_plain(x + i, buf, TILE, s, zp);
    stream_copy(y + i, buf, TILE * sizeof(float));
  }
  _mm_sfence();
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int by_value(const void *a, const void *b) {
  double d = *(const double *)a - *(const double *)b;
  return d < 0 ? -1 : d > 0;
}
static double median(double *v) {
  qsort(v, ROUNDS, sizeof *v, by_value);
  return v[ROUNDS / 2];
}

int main(int argc, char **argv) {
  static const long defaults[] = {65536, 1048576, 16777216};
  int nsizes = argc > 1 ? argc - 1 : 3;
  printf("%-9s %-8s %-5s %12s %12s %7s\n", "elements", "kernel", "out", "intrinsics", "plain C",
         "ratio");
  for (int si = 0; si < nsizes; si++) {
    long n = argc > 1 ? atol(argv[si + 1]) : defaults[si];
    n -= n % TILE;
    if (n <= 0) {
      fprintf(stderr, "autovec: sizes are at least %d elements\n", TILE);
      return 2;
    }
    long reps = n >= (4L << 20) ? 1 : (4L << 20) / n;
    int stream = n * 4 >= (16L << 20); /* as EXTQL_STREAM_MIN_BYTES (the float32 side) */
    float *x = aligned_alloc(64, n * 4), *yd = aligned_alloc(64, n * 4);
    int8_t *yq = aligned_alloc(64, n), *yq2 = aligned_alloc(64, n);
    double t[5][ROUNDS];
    for (long i = 0; i < n; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 0.37f;
    memset(yd, 0, n * 4);
    memset(yq2, 0, n);
    q_intrinsics(x, yq, n, 0.05f, 3, 0);
    for (int r = 0; r < ROUNDS; r++) {
      for (int k = 0; k < 5; k++) {
        int which = (k + r) % 5; /* a different first contender every round */
        double t0 = now();
        for (long j = 0; j < reps; j++) {
          if (which == 0) q_intrinsics(x, yq, n, 0.05f, 3, stream);
          if (which == 1) (stream ? q_tile(x, yq2, n, 0.05f, 3) : q_plain(x, yq2, n, 0.05f, 3));
          if (which == 2) dq_intrinsics(yq, yd, n, 0.05f, 3, stream);
          if (which == 3) (stream ? dq_tile(yq, yd, n, 0.05f, 3) : dq_plain(yq, yd, n, 0.05f, 3));
          if (which == 4 && !stream) q_narrow(x, yq2, n, 0.05f, 3);
        }
        t[which][r] = (now() - t0) / reps;
      }
    }
    if (memcmp(yq, yq2, n) != 0) {
      fprintf(stderr, "autovec: the two quantize loops differ\n");
      return 1;
    }
    double q0 = median(t[0]), q1 = median(t[1]), d0 = median(t[2]), d1 = median(t[3]);
    const char *how = stream ? "tile" : "plain";
    printf("%-9ld %-8s %-5s %9.1f us %9.1f us %7.2f\n", n, "Q int8", how, q0 * 1e6, q1 * 1e6,
           q1 / q0);
    if (!stream) {
      double q2 = median(t[4]);
      printf("%-9ld %-8s %-5s %9.1f us %9.1f us %7.2f\n", n, "Q int8", "narrow", q0 * 1e6,
             q2 * 1e6, q2 / q0);
    }
    printf("%-9ld %-8s %-5s %9.1f us %9.1f us %7.2f\n", n, "DQ int8", how, d0 * 1e6, d1 * 1e6,
           d1 / d0);
    free(x), free(yd), free(yq), free(yq2);
  }
  return 0;
}
