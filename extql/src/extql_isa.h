/*
 * extql_isa.h - instruction-set variants of the kernels and the runtime
 * choice between them.  Included by _kernels.pyx only.
 *
 * setup.py compiles the Cython-generated _kernels.c twice on x86-64 with GCC
 * or Clang: once for the baseline (SSE2, runs on every x86-64 CPU) and once
 * with -mavx2 -mfma -mf16c and -DEXTQL_VARIANT_AVX2, renaming that copy's
 * exported symbols with an _avx2 suffix.  The baseline's range functions call
 * the AVX2 copy when the CPU has AVX2, FMA and F16C and EXTQL_ISA is not
 * "baseline".  Both copies are compiled from the same Cython source, so the
 * math is written once; they give the same bits (the tests run every variant).
 */
#ifndef EXTQL_ISA_H
#define EXTQL_ISA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ISA codes reported by extql_isa(). */
#define EXTQL_ISA_BASELINE 0
#define EXTQL_ISA_AVX2 1

#if defined(EXTQL_HAVE_AVX2_VARIANT) && !defined(EXTQL_VARIANT_AVX2)
int extql_quantize_typed_range_ex_avx2(int qtype, int xtype, int prec, const void *x,
                                       const float *scale, const void *zero_point, void *y,
                                       int64_t D, int64_t inner, int64_t block,
                                       int64_t start, int64_t stop, int flags);
int extql_dequantize_typed_range_ex_avx2(int qtype, int ytype, const void *x,
                                         const float *scale, const void *zero_point, void *y,
                                         int64_t D, int64_t inner, int64_t block,
                                         int64_t start, int64_t stop, int flags);
int extql_quotients_f64_avx2(int qtype, int xtype, int stype, const void *x, const void *scale,
                             const void *zero_point, float *v, int64_t D, int64_t inner,
                             int64_t block, int64_t start, int64_t stop);

/* -1: not decided yet; else an EXTQL_ISA_* code.  Racing first calls all
   store the same value. */
static int extql_isa_choice = -1;

static int extql_isa_detect(void) {
  const char *env = getenv("EXTQL_ISA");
  if (env != NULL && strcmp(env, "baseline") == 0) return EXTQL_ISA_BASELINE;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return EXTQL_ISA_AVX2;
  return EXTQL_ISA_BASELINE;
}

static inline int extql_isa_current(void) {
  int isa = __atomic_load_n(&extql_isa_choice, __ATOMIC_RELAXED);
  if (isa < 0) {
    isa = extql_isa_detect();
    __atomic_store_n(&extql_isa_choice, isa, __ATOMIC_RELAXED);
  }
  return isa;
}

/* 1 when this build and this CPU can run the variant. */
static int extql_isa_supported(int isa) {
  if (isa == EXTQL_ISA_BASELINE) return 1;
  if (isa != EXTQL_ISA_AVX2) return 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

/* Force an ISA (for tests and benchmarks); returns 0, or -1 if the CPU or
   the build lacks it.  A negative isa returns to automatic detection. */
static int extql_isa_force(int isa) {
  if (isa >= 0 && !extql_isa_supported(isa)) return -1;
  __atomic_store_n(&extql_isa_choice, isa < 0 ? -1 : isa, __ATOMIC_RELAXED);
  return 0;
}
#define EXTQL_USE_AVX2() (extql_isa_current() == EXTQL_ISA_AVX2)
#else
/* This is the variant itself (whose exported names setup.py suffixes with
   _avx2, so the names below are its own, never called), or a build without
   the variant. */
#if !defined(EXTQL_VARIANT_AVX2)
#define extql_quantize_typed_range_ex_avx2(...) (-1)
#define extql_dequantize_typed_range_ex_avx2(...) (-1)
#define extql_quotients_f64_avx2(...) (-1)
#endif
#define EXTQL_USE_AVX2() 0
static inline int extql_isa_supported(int isa) { return isa == EXTQL_ISA_BASELINE; }
static inline int extql_isa_current(void) {
#if defined(EXTQL_VARIANT_AVX2)
  return EXTQL_ISA_AVX2;
#else
  return EXTQL_ISA_BASELINE;
#endif
}
static inline int extql_isa_force(int isa) {
  return (isa < 0 || isa == EXTQL_ISA_BASELINE) ? 0 : -1;
}
#endif

#endif /* EXTQL_ISA_H */
