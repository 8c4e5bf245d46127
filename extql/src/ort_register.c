/*
 * ort_register.c - RegisterCustomOps' machinery: the onnxruntime version
 * check, the domains built once per process, and adding them to a session.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ort_internal.h"

#if defined(_WIN32)
#include <windows.h>
#endif

/* The oldest onnxruntime the shim supports, and the C API version it asks
 * for.  API 16 brought KernelComputeV2 (before it a C custom op cannot fail a
 * run with a status) and API 17 KernelContext_ParallelFor, but onnxruntime
 * 1.16 and 1.17 cannot infer the output type of a node whose optional zero
 * point is an empty name (their custom-op type inference rejects every
 * registration when an input is absent), so 1.18 is the first release on
 * which every form of the operators works. */
#define EXTQL_MIN_API 18
#define EXTQL_MIN_ORT_VERSION "1.18"

/* A spin lock around the first registration (sessions may be made from
 * several threads at once). */
static void lock_acquire(volatile long *lock) {
#if defined(_WIN32)
  while (InterlockedExchange(lock, 1) != 0) Sleep(0);
#else
  while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE) != 0) {
  }
#endif
}

static void lock_release(volatile long *lock) {
#if defined(_WIN32)
  InterlockedExchange(lock, 0);
#else
  __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
#endif
}

/* The API version of a runtime from its version string: onnxruntime 1.N
 * provides API N.  0 when the string is not of that form. */
static uint32_t api_version_of(const char *version) {
  long major, minor;
  char *end;
  if (version == NULL) return 0;
  major = strtol(version, &end, 10);
  if (end == version || *end != '.') return 0;
  minor = strtol(end + 1, &end, 10);
  if (major == 1 && minor > 0 && minor < 1000) return (uint32_t)minor;
  if (major > 1) return 1000; /* a later major version: at least every API here */
  return 0;
}

static OrtStatus *too_old(const OrtApiBase *base, const char *version) {
  char msg[512];
  const OrtApi *api1 = base->GetApi(1); /* every runtime provides version 1 */
  snprintf(msg, sizeof msg,
           "extql: onnxruntime %s is too old for extql's custom ops: they need onnxruntime >= "
           "%s (C API version %d), the first release that runs every form of them; "
           "upgrade onnxruntime (pip install -U onnxruntime)",
           version ? version : "(unknown version)", EXTQL_MIN_ORT_VERSION, EXTQL_MIN_API);
  if (api1 == NULL) return NULL; /* cannot even report it */
  return api1->CreateStatus(EXTQL_ORT_FAIL, msg);
}

/* Create the set's registrations and domains (under its lock); level is the
 * runtime's C API version (0: not known). */
static OrtStatus *build_domains(const OrtApiBase *base, const OrtApi *api, ExtqlOpSet *set,
                                uint32_t level) {
  OrtStatus *st = NULL;
  OrtCustomOpDomain **dom;
  int d, i;
  if (level >= EXTQL_ORT_API_INFER) set->infer_api = base->GetApi(EXTQL_ORT_API_INFER);
  if (set->ops == NULL && extql_ort_init_ops(set, EXTQL_ORT_CUSTOM_OP_VERSION, level) != 0)
    return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  dom = (OrtCustomOpDomain **)calloc((size_t)set->n_domains, sizeof *dom);
  if (dom == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  for (d = 0; d < set->n_domains; d++) {
    st = api->CreateCustomOpDomain(set->domains[d], &dom[d]);
    if (st != NULL) goto error;
  }
  for (i = 0; i < set->n_ops; i++) {
    st = api->CustomOpDomain_Add(dom[set->ops[i].domain], &set->ops[i].base);
    if (st != NULL) goto error;
  }
  set->handles = dom;
  set->built_api = api;
  return NULL;
error:
  for (d = 0; d < set->n_domains; d++)
    if (dom[d] != NULL) api->ReleaseCustomOpDomain(dom[d]);
  free(dom);
  return st;
}

void extql_ort_release(ExtqlOpSet *set) {
  int d;
  lock_acquire(&set->lock);
  if (set->handles != NULL && set->built_api != NULL) {
    for (d = 0; d < set->n_domains; d++)
      if (set->handles[d] != NULL) set->built_api->ReleaseCustomOpDomain(set->handles[d]);
  }
  free(set->handles);
  set->handles = NULL;
  free(set->ops);
  set->ops = NULL;
  set->n_ops = 0;
  lock_release(&set->lock);
}

/* Add the set's domains to the session options (building them the first
 * time), after checking that the runtime is new enough. */
OrtStatus *extql_ort_register(OrtSessionOptions *options, const OrtApiBase *base,
                              ExtqlOpSet *set) {
  const char *version;
  uint32_t level;
  const OrtApi *api;
  OrtStatus *st = NULL;
  int d;

  if (base == NULL) return NULL; /* nothing to report through */
  version = base->GetVersionString ? base->GetVersionString() : NULL;
  level = api_version_of(version);
  /* Check the version string first: GetApi of an unknown version prints a
   * complaint of its own on stderr before returning NULL. */
  if (level != 0 && level < EXTQL_MIN_API) return too_old(base, version);
  api = base->GetApi(EXTQL_MIN_API);
  if (api == NULL) return too_old(base, version);

  lock_acquire(&set->lock);
  if (set->handles == NULL) st = build_domains(base, api, set, level);
  lock_release(&set->lock);
  if (st != NULL) return st;

  for (d = 0; d < set->n_domains; d++) {
    st = api->AddCustomOpDomain(options, set->handles[d]);
    if (st != NULL) return st;
  }
  return NULL;
}
