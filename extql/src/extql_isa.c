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
 */
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

EXTQL_API int extql_isa(void) {
  int isa = __atomic_load_n(&extql_isa_choice, __ATOMIC_RELAXED);
  if (isa < 0) {
    isa = extql_isa_detect();
    __atomic_store_n(&extql_isa_choice, isa, __ATOMIC_RELAXED);
  }
  return isa;
}

EXTQL_API int extql_isa_force(int isa) {
  if (isa >= 0 && !extql_isa_supported(isa)) return -1;
  __atomic_store_n(&extql_isa_choice, isa < 0 ? -1 : isa, __ATOMIC_RELAXED);
  return 0;
}
