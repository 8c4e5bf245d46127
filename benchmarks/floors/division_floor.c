/*
 * division_floor.c - the least time any exact float16 quantize can take on
 * this CPU for 64K in-cache elements: one IEEE vdivps (the contract's
 * division) and one vcvtps2ph per 8 elements, nothing else, best of 2000
 * runs; and the conversion alone (what a Cast does).  A yardstick for the
 * 64K float16 rows of `extql bench`, not part of extql.
 *
 *   cc -O2 -mavx2 -mf16c -o division_floor division_floor.c && ./division_floor
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define N 65536

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
  static float x[N] __attribute__((aligned(32)));
  static unsigned short y[N] __attribute__((aligned(32)));
  const __m256 s = _mm256_set1_ps(0.37f);
  double best_div = 1e9, best_cvt = 1e9, t;
  int i, rep;
  for (i = 0; i < N; i++) x[i] = (float)i * 0.37f - 1000.0f;
  for (rep = 0; rep < 2000; rep++) {
    t = now();
    for (i = 0; i < N; i += 8) {
      __m256 v = _mm256_div_ps(_mm256_load_ps(x + i), s);
      _mm_store_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    t = now() - t;
    if (t < best_div) best_div = t;
    t = now();
    for (i = 0; i < N; i += 8) {
      __m256 v = _mm256_load_ps(x + i);
      _mm_store_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    t = now() - t;
    if (t < best_cvt) best_cvt = t;
  }
  printf("64K elements: division + conversion %.2f us, conversion only %.2f us (y[5]=%u)\n",
         best_div * 1e6, best_cvt * 1e6, (unsigned)y[5]);
  return 0;
}
