/*
 * extql_isa.c - which copy of the kernels runs: the instruction set chosen
 * once from the CPU (or EXTQL_ISA in the environment), and the public entry
 * points that forward to that copy (generated into extql_dispatch.h from
 * extql/_entrypoints.py).
 *
 * EXTQL_ISA=<name> (baseline, avx2, avx512) picks a variant by hand, when
 * this build and this CPU have it; otherwise the most capable one the CPU
 * runs is chosen, with a warning on stderr naming it when EXTQL_ISA named
 * another.
 *
 * It also chooses how the AVX2 / AVX-512 quantize takes its quotient x / s
 * (extql_quotient): by the division instruction, or by the reciprocal and
 * fused multiply-add corrections of quotient_fma (extql/kernels/formula.pxi).
 * Both give the division's bits; which is faster depends on the CPU's
 * divider, not on the instruction set (docs/development.rst, "The
 * division").  EXTQL_QUOTIENT=division|fma picks one by hand.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_dispatch.h"

/* -1: not decided yet; else an EXTQL_ISA_* code.  Racing first calls all
   store the same value. */
static int extql_isa_choice = -1;

EXTQL_API int extql_isa_supported(int isa) {
  return isa >= 0 && isa < EXTQL_ISA_COUNT && extql_isa_checks[isa]();
}

EXTQL_API const char *extql_isa_name(int isa) {
  return isa >= 0 && isa < EXTQL_ISA_COUNT ? extql_isa_names[isa] : NULL;
}

static int extql_isa_best(void) {
  int isa;
  for (isa = EXTQL_ISA_COUNT - 1; isa > 0; isa--)
    if (extql_isa_supported(isa)) return isa;
  return 0;
}

/* The variant EXTQL_ISA names when this build and this CPU have it.  When
   they do not (an unknown name, a variant this build lacks or this CPU
   cannot run), the best variant runs and stderr says so once, naming it:
   a forced variant that silently does not run would make a measurement or
   a test of "the AVX-512 kernels" measure another copy.  An empty value is
   no choice. */
static int extql_isa_detect(void) {
  static int warned = 0;
  const char *env = getenv("EXTQL_ISA");
  int isa, best = extql_isa_best();
  if (env == NULL || env[0] == '\0') return best;
  for (isa = 0; isa < EXTQL_ISA_COUNT; isa++)
    if (strcmp(env, extql_isa_names[isa]) == 0 && extql_isa_supported(isa)) return isa;
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return best;
  for (isa = 0; isa < EXTQL_ISA_COUNT; isa++)
    if (strcmp(env, extql_isa_names[isa]) == 0) {
      fprintf(stderr,
              "extql: warning: EXTQL_ISA=%s: this build or this CPU lacks the %s kernels; "
              "the %s kernels run\n",
              env, env, extql_isa_names[best]);
      return best;
    }
  fprintf(stderr, "extql: warning: EXTQL_ISA=%s is not a kernel variant (", env);
  for (isa = 0; isa < EXTQL_ISA_COUNT; isa++)
    fprintf(stderr, "%s%s", isa ? ", " : "", extql_isa_names[isa]);
  fprintf(stderr, "); the %s kernels run\n", extql_isa_names[best]);
  return best;
}

/* A choice made once: *slot, or detect()'s value stored there while *slot
   is -1 (not decided yet). */
static int extql_choice(int *slot, int (*detect)(void)) {
  int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if (v < 0) {
    v = detect();
    __atomic_store_n(slot, v, __ATOMIC_RELAXED);
  }
  return v;
}

EXTQL_API int extql_isa(void) { return extql_choice(&extql_isa_choice, extql_isa_detect); }

EXTQL_API int extql_isa_force(int isa) {
  if (isa >= 0 && !extql_isa_supported(isa)) return -1;
  __atomic_store_n(&extql_isa_choice, isa < 0 ? -1 : isa, __ATOMIC_RELAXED);
  return 0;
}

/* -1: not decided yet; else 1 (division) or 0 (fused multiply-adds). */
static int extql_quotient_choice = -1;

/* 1 on CPUs whose vector division outruns the reciprocal and its two
   corrections: AMD's from family 19h (Zen 3 and later; measured on Zen 4,
   where the 8-bit quantize takes 0.82x the corrections' time with AVX-512
   and 0.72x with AVX2).  Intel's dividers are slower (there the corrections
   take 0.72x the division's time). */
static int extql_cpu_divides_fast(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d, family;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  /* "AuthenticAMD" in EBX, EDX, ECX */
  if (b != 0x68747541u || d != 0x69746E65u || c != 0x444D4163u) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  family = (a >> 8) & 0xFu;
  if (family == 0xFu) family += (a >> 20) & 0xFFu;
  return family >= 0x19u;
#else
  return 0;
#endif
}

/* EXTQL_QUOTIENT when it names a method; otherwise the CPU's choice, with a
   warning naming it once when EXTQL_QUOTIENT was set to something else. */
static int extql_quotient_detect(void) {
  static int warned = 0;
  const char *env = getenv("EXTQL_QUOTIENT");
  int best = extql_cpu_divides_fast();
  if (env == NULL || env[0] == '\0') return best;
  if (strcmp(env, "division") == 0) return 1;
  if (strcmp(env, "fma") == 0) return 0;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    fprintf(stderr,
            "extql: warning: EXTQL_QUOTIENT=%s is not a quotient method (division, fma); "
            "%s runs\n",
            env, best ? "division" : "fma");
  return best;
}

EXTQL_API int extql_quotient(void) {
  return extql_choice(&extql_quotient_choice, extql_quotient_detect);
}

EXTQL_API void extql_quotient_force(int division) {
  __atomic_store_n(&extql_quotient_choice, division < 0 ? -1 : division != 0, __ATOMIC_RELAXED);
}
