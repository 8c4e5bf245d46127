/*
 * ort_messages.c - element types and the words of the shim's messages.
 *
 * Every failure is a failed OrtStatus "<label>: <message>", the label being
 * the operator and node name, with types and shapes written as the NumPy
 * API's messages write them (extql/api/linear.py), so a user reads the same
 * words from both.
 */
#include <stdarg.h>
#include <stdio.h>

#include "extql_types.h"
#include "ort_internal.h"

int extql_is_subbyte(int type) {
  int bits, lo, hi;
  return extql_subbyte(type, &bits, &lo, &hi);
}

int extql_is_smallfloat(int type) {
  ExtqlSmallFloat f;
  return extql_smallfloat(type, &f);
}

int extql_is_float8(int type) {
  ExtqlSmallFloat f;
  return extql_smallfloat(type, &f) && f.bits == 8;
}

int extql_is_qtype(int type) {
  return extql_qtype_size(type) != 0 || extql_is_subbyte(type) || extql_is_smallfloat(type);
}

/* The size of one element of a quantized type (1 for the sub-byte and
 * small float types: their alignment), or 4 (float32). */
size_t extql_elem_size(int type) {
  int size = extql_qtype_size(type);
  if (size == 0 && (extql_is_subbyte(type) || extql_is_smallfloat(type))) size = 1;
  return size != 0 ? (size_t)size : 4;
}

/* The bytes of one zero point as the kernels take it (extql_unpack): 1 for
 * the sub-byte types (int8 / uint8), 4 for the small floats (float32); 0
 * for a type whose zero points are taken as they are. */
size_t extql_unpacked_size(int type) {
  if (extql_is_subbyte(type)) return 1;
  if (extql_is_smallfloat(type)) return 4;
  return 0;
}

/* NumPy-style names of ONNX element types. */
const char *extql_type_name(int type, char *buf, size_t size) {
  static const char *const others[] = {
      NULL,    "float32", NULL,      NULL,       NULL,      NULL,        NULL, "int64",
      "string", "bool",   NULL,      "float64",  NULL,      "uint64",    "complex64",
      "complex128"};
#define EXTQL_NAME(NAME, name, code, size_, lo, hi) \
  if (type == (code)) return name;
  EXTQL_FOR_EACH_QTYPE(EXTQL_NAME)
#undef EXTQL_NAME
#define EXTQL_NAME(NAME, name, code, bits, lo, hi) \
  if (type == (code)) return name;
  EXTQL_FOR_EACH_SUBBYTE(EXTQL_NAME)
#undef EXTQL_NAME
#define EXTQL_NAME(NAME, name, code, bits) \
  if (type == (code)) return name;
  EXTQL_FOR_EACH_SMALLFLOAT(EXTQL_NAME)
#undef EXTQL_NAME
  if (type > 0 && type < (int)(sizeof others / sizeof others[0]) && others[type] != NULL)
    return others[type];
  snprintf(buf, size, "ONNX type %d", type);
  return buf;
}

/* A shape as Python prints a tuple: (), (3,), (2, 4). */
const char *extql_shape_str(const int64_t *dims, size_t rank, char *buf, size_t size) {
  size_t i, used = 0;
  int w;
  if (size == 0) return buf;
  buf[0] = '\0';
  w = snprintf(buf, size, "(");
  used = w > 0 ? (size_t)w : 0;
  for (i = 0; i < rank && used < size; i++) {
    w = snprintf(buf + used, size - used, i == 0 ? "%lld" : ", %lld", (long long)dims[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < size) snprintf(buf + used, size - used, rank == 1 ? ",)" : ")");
  return buf;
}

/* A failed status "<label>: <message>". */
OrtStatus *extql_fail(const OrtApi *api, const char *label, int code, const char *fmt, ...) {
  char msg[1024];
  int n;
  va_list ap;
  n = snprintf(msg, sizeof msg, "%s: ", label);
  if (n < 0 || (size_t)n >= sizeof msg) n = 0;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  return api->CreateStatus(code, msg);
}

/* A status returned by onnxruntime, prefixed with the label (st released). */
OrtStatus *extql_wrap(const OrtApi *api, const char *label, OrtStatus *st) {
  OrtStatus *out;
  if (st == NULL) return NULL;
  out = extql_fail(api, label, api->GetErrorCode(st), "%s", api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  return out;
}

void extql_kernel_label(const OrtApi *api, const OrtKernelInfo *info, const char *name,
                        char *buf, size_t size) {
  char node[128];
  size_t n = sizeof node;
  OrtStatus *st;
  /* onnxruntime's own messages name the node, so the user can find it. */
  node[0] = '\0';
  st = api->KernelInfo_GetNodeName(info, node, &n);
  if (st != NULL) {
    api->ReleaseStatus(st);
    node[0] = '\0';
  }
  if (node[0] != '\0')
    snprintf(buf, size, "%s (node '%s')", name, node);
  else
    snprintf(buf, size, "%s", name);
}
