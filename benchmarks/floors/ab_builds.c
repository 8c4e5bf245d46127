/*
 * ab_builds.c - two builds of extql's library, kernel against kernel: the
 * public entry points extql_quantize_range / extql_dequantize_range of
 * build A and build B loaded side by side (dlopen), called on the same
 * buffers in alternating order, medians of the calls.  A yardstick for a
 * kernel change (the figures of docs/development.rst "Kernels: the formula
 * and its primitives" that compare two builds), not part of extql.
 *
 *   cc -O2 -o ab_builds ab_builds.c -ldl
 *   cp extql/libextql_ort.so /tmp/a.so   # (rebuild with the change)
 *   EXTQL_ISA=avx512 ./ab_builds /tmp/a.so extql/libextql_ort.so 262144 3 0.0371
 *
 * Arguments: library A, library B, elements, the quantized type's ONNX code
 * (3 int8, 2 uint8, 5 int16, 4 uint16, 6 int32, 12 uint32, 10 float16,
 * 16 bfloat16), scale, then optionally channels D (per axis over [1, D, n/D];
 * default 1: per tensor), calls (default 1500) and 1 for dequantize.  The
 * zero point is 0; EXTQL_ISA picks the kernel variant in both.  Prints both
 * medians and B/A (below 1: B is faster).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*quantize_fn)(int, int, int, const void *, const float *, const void *, void *,
                           int64_t, int64_t, int64_t, int64_t, int64_t, int);
typedef int (*dequantize_fn)(int, int, const void *, const float *, const void *, void *,
                             int64_t, int64_t, int64_t, int64_t, int64_t, int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  quantize_fn q[2];
  dequantize_fn dq[2];
  int64_t n, D, inner, i;
  int qtype, calls, deq, r, k;
  float s, *x, *scale;
  int32_t *zp;
  char *y;
  double *t[2];
  if (argc < 6) {
    fprintf(stderr, "usage: %s LIB_A LIB_B N QTYPE SCALE [D [CALLS [DEQUANTIZE]]]\n", argv[0]);
    return 2;
  }
  n = atoll(argv[3]);
  qtype = atoi(argv[4]);
  s = (float)atof(argv[5]);
  D = argc > 6 ? atoll(argv[6]) : 1;
  calls = argc > 7 ? atoi(argv[7]) : 1500;
  deq = argc > 8 ? atoi(argv[8]) : 0;
  if (n <= 0 || D <= 0 || n % D != 0 || calls <= 0) {
    fprintf(stderr, "N and D must be positive, D must divide N, CALLS positive\n");
    return 2;
  }
  inner = n / D;
  for (k = 0; k < 2; k++) {
    void *h = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    q[k] = (quantize_fn)dlsym(h, "extql_quantize_range");
    dq[k] = (dequantize_fn)dlsym(h, "extql_dequantize_range");
    if (q[k] == NULL || dq[k] == NULL) {
      fprintf(stderr, "%s: no extql entry points\n", argv[1 + k]);
      return 1;
    }
  }
  x = aligned_alloc(64, (size_t)n * 4);
  y = aligned_alloc(64, (size_t)n * 4);
  scale = malloc((size_t)D * sizeof(float));
  zp = calloc((size_t)D, sizeof(int32_t));
  t[0] = malloc((size_t)calls * sizeof(double));
  t[1] = malloc((size_t)calls * sizeof(double));
  if (!x || !y || !scale || !zp || !t[0] || !t[1]) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (i = 0; i < D; i++) scale[i] = s * (1.0f + 0.01f * (float)i);
  srand(1);
  for (i = 0; i < n; i++) x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 8.0f;
  memset(y, 0, (size_t)n * 4);
  for (r = 0; r < calls; r++) {
    for (k = 0; k < 2; k++) {
      int which = (r + k) & 1, rc;
      double t0 = now();
      rc = deq ? dq[which](qtype, 1, y, scale, zp, x, D, inner, 0, 0, n, 0)
               : q[which](qtype, 1, 1, x, scale, zp, y, D, inner, 0, 0, n, 0);
      t[which][r] = now() - t0;
      if (rc != 0) {
        fprintf(stderr, "%s: error %d\n", argv[1 + which], rc);
        return 1;
      }
    }
  }
  qsort(t[0], (size_t)calls, sizeof(double), by_value);
  qsort(t[1], (size_t)calls, sizeof(double), by_value);
  printf("%s n=%lld qtype=%d D=%lld  A %.1f us  B %.1f us  B/A %.3f\n", deq ? "DQ" : "Q",
         (long long)n, qtype, (long long)D, t[0][calls / 2] * 1e6, t[1][calls / 2] * 1e6,
         t[1][calls / 2] / t[0][calls / 2]);
  return 0;
}
