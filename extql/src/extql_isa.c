/*
 * extql_isa.c - which copy of the kernels runs: the instruction set chosen
 * once from the CPU (or EXTQL_ISA in the environment), and the public entry
 * points that forward to that copy (generated into extql_dispatch.h from
 * extql/_entrypoints.py).
 *
 * EXTQL_ISA=<name> (baseline, avx2, avx512) picks a variant by hand, when
 * this build and this CPU have it; otherwise the most capable one the CPU
 * runs is chosen.
 */
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

static int extql_isa_detect(void) {
  const char *env = getenv("EXTQL_ISA");
  int isa;
  if (env != NULL)
    for (isa = 0; isa < EXTQL_ISA_COUNT; isa++)
      if (strcmp(env, extql_isa_names[isa]) == 0 && extql_isa_supported(isa)) return isa;
  for (isa = EXTQL_ISA_COUNT - 1; isa > 0; isa--)
    if (extql_isa_supported(isa)) return isa;
  return 0;
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
