/*
 * autovec.c - what GCC makes of the kernels' formula written as a plain loop,
 * and with two width-changing primitives, against hand-written AVX2 loops
 * (int8, one scale; the shape extql's kernels had before they became the
 * formula plus the primitives of extql/src/extql_primitives.h), in one
 * process, interleaved, medians.  The measurement behind
 * docs/development.rst "Kernels: the formula and its primitives"; not part
 * of extql.
 *
 *   gcc -O3 -fno-math-errno -fno-trapping-math -ffp-contract=off \
 *       -mavx2 -mfma -mf16c -o autovec autovec.c -lm
 *   ./autovec [elements ...]          (default 16384 65536 1048576)
 *
 * The scale and zero point come from volatile variables: with constants,
 * GCC specialises the loops for them (and merges the two clamps into
 * compares and blends), which no kernel sees.
 *
 * Rows, as a ratio to the hand-written loop:
 *   Q plain     the formula writes int8 directly (GCC narrows with masks);
 *   Q tile      the formula fills a tile of int32, a packing store narrows it;
 *   DQ plain    the formula reads int8 directly (GCC widens in registers);
 *   DQ tile     a widening load fills a tile of int32, the formula reads it.
 * The tiles have a constant length: with a length known only at run time,
 * both tile rows were 0.1-0.35 slower.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TILE 128
#define ROUNDS 41
#define NI __attribute__((noinline))

/* ---- hand-written loops ---- */
NI static void q_intrinsics(const float *x, int8_t *y, long n, float s, int8_t zp) {
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
    _mm256_storeu_si256((__m256i *)(y + i), c);
  }
}
NI static void dq_intrinsics(const int8_t *x, float *y, long n, float s, int8_t zp) {
  const __m256 vs = _mm256_set1_ps(s);
  const __m256i vz = _mm256_set1_epi32(zp);
  for (long i = 0; i < n; i += 8) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x + i)));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, vz)), vs));
  }
}

/* ---- the formula, as _kernels.pyx writes it ---- */
static inline int32_t q_one(float v, float zf) {
  const float flo = -128.f - zf, fhi = 127.f - zf;
  v = v > flo ? v : flo; /* NaN -> flo */
  v = v < fhi ? v : fhi;
  return (int32_t)(rintf(v) + zf);
}
NI static void q_plain(const float *restrict x, int8_t *restrict y, long n, float s, int8_t zp) {
  for (long i = 0; i < n; i++) y[i] = (int8_t)q_one(x[i] / s, zp);
}
/* The packing store. */
static inline void store_i8(int8_t *y, const int32_t *t, long n) {
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (long i = 0; i < n; i += 32) {
    __m256i a = _mm256_packs_epi32(_mm256_loadu_si256((const __m256i *)(t + i)),
                                   _mm256_loadu_si256((const __m256i *)(t + i + 8)));
    __m256i b = _mm256_packs_epi32(_mm256_loadu_si256((const __m256i *)(t + i + 16)),
                                   _mm256_loadu_si256((const __m256i *)(t + i + 24)));
    _mm256_storeu_si256((__m256i *)(y + i),
                        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm));
  }
}
NI static void q_tile(const float *restrict x, int8_t *restrict y, long n, float s, int8_t zp) {
  int32_t t[TILE];
  for (long i = 0; i < n; i += TILE) {
    for (long j = 0; j < TILE; j++) t[j] = q_one(x[i + j] / s, zp);
    store_i8(y + i, t, TILE);
  }
}
NI static void dq_plain(const int8_t *restrict x, float *restrict y, long n, float s, int8_t zp) {
  for (long i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * s;
}
/* The widening load. */
static inline void load_i8(int32_t *t, const int8_t *x, long n) {
  for (long i = 0; i < n; i += 8)
    _mm256_storeu_si256((__m256i *)(t + i),
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x + i))));
}
NI static void dq_tile(const int8_t *restrict x, float *restrict y, long n, float s, int8_t zp) {
  int32_t t[TILE];
  for (long i = 0; i < n; i += TILE) {
    load_i8(t, x + i, TILE);
    for (long j = 0; j < TILE; j++) y[i + j] = (float)(t[j] - zp) * s;
  }
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

volatile float scale_v = 0.05f;
volatile int zero_point_v = 3;

int main(int argc, char **argv) {
  static const long defaults[] = {16384, 65536, 1048576};
  static const char *names[6] = {"Q hand", "Q plain", "Q tile", "DQ hand", "DQ plain", "DQ tile"};
  const float s = scale_v;
  const int8_t zp = (int8_t)zero_point_v;
  int nsizes = argc > 1 ? argc - 1 : 3;
  printf("%-9s %-9s %10s %7s\n", "elements", "loop", "time", "ratio");
  for (int si = 0; si < nsizes; si++) {
    long n = argc > 1 ? atol(argv[si + 1]) : defaults[si];
    n -= n % TILE;
    if (n <= 0) {
      fprintf(stderr, "autovec: sizes are at least %d elements\n", TILE);
      return 2;
    }
    long reps = n >= (8L << 20) ? 1 : (8L << 20) / n;
    float *x = aligned_alloc(64, n * 4), *yd = aligned_alloc(64, n * 4);
    int8_t *yq = aligned_alloc(64, n), *yq2 = aligned_alloc(64, n);
    float *yd2 = aligned_alloc(64, n * 4);
    double t[6][ROUNDS], med[6];
    for (long i = 0; i < n; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 0.37f;
    for (int r = 0; r < ROUNDS; r++) {
      for (int k = 0; k < 6; k++) {
        int which = (k + r) % 6; /* a different first contender every round */
        double t0 = now();
        for (long j = 0; j < reps; j++) {
          if (which == 0) q_intrinsics(x, yq, n, s, zp);
          if (which == 1) q_plain(x, yq2, n, s, zp);
          if (which == 2) q_tile(x, yq2, n, s, zp);
          if (which == 3) dq_intrinsics(yq, yd, n, s, zp);
          if (which == 4) dq_plain(yq, yd2, n, s, zp);
          if (which == 5) dq_tile(yq, yd2, n, s, zp);
        }
        t[which][r] = (now() - t0) / reps;
      }
    }
    if (memcmp(yq, yq2, n) != 0 || memcmp(yd, yd2, n * 4) != 0) {
      fprintf(stderr, "autovec: the loops differ\n");
      return 1;
    }
    for (int k = 0; k < 6; k++) med[k] = median(t[k]);
    for (int k = 0; k < 6; k++)
      printf("%-9ld %-9s %7.2f us %7.2f\n", n, names[k], med[k] * 1e6, med[k] / med[k < 3 ? 0 : 3]);
    free(x), free(yd), free(yq), free(yq2), free(yd2);
  }
  return 0;
}
