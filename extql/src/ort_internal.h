/*
 * ort_internal.h - what the files of the onnxruntime custom-op shim share.
 *
 * The shim is split by concern:
 *   ort_register.c  RegisterCustomOps' machinery: version check, domains
 *   ort_ops.c       the OrtCustomOp registrations (types per registration)
 *                   and kernel creation
 *   ort_validate.c  the checks of inputs, attributes and declared types
 *   ort_messages.c  type names, shapes and failed statuses
 *   ort_compute.c   staging, splitting the work on the session's thread
 *                   pool and calling the range function
 *   ort_library.c   extql's library: its operators, on extql's kernels
 * A library is an ExtqlOpSet (its domains, operator names and the range
 * function that does the work) and a RegisterCustomOps that hands it to
 * extql_ort_register; benchmarks/ builds a second one from the same files.
 *
 * Element types are numbered as ONNX's TensorProto.DataType; the quantized
 * ones come from the generated extql_types.h (included by the files that
 * need the table, never together with extql_kernels.h, which has its own
 * enumerators).
 */
#ifndef EXTQL_ORT_INTERNAL_H
#define EXTQL_ORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ort_api.h"

#if defined(__GNUC__) && !defined(_WIN32)
#define EXTQL_INTERNAL __attribute__((visibility("hidden")))
#else
#define EXTQL_INTERNAL
#endif

enum { OP_QUANTIZE = 0, OP_DEQUANTIZE = 1 };

/* Elements [start, stop) of one operator's work.  kind: OP_QUANTIZE (x
 * float32, y of qtype) or OP_DEQUANTIZE (x of qtype, y float32); the tensor
 * is [outer, D, inner] (per tensor: D = 1); block > 0: blocked along D (the
 * scale [outer, ceil(D / block), inner]); out_bytes is the size of the whole
 * output (for the choice of stores).  0, or -1 for an element type the
 * function does not know. */
typedef int (*ExtqlRangeFn)(int kind, int qtype, const void *x, const float *scale,
                            const void *zero_point, void *y, int64_t D, int64_t inner,
                            int64_t block, int64_t start, int64_t stop, int64_t out_bytes);

/* One operator name of a library. */
typedef struct {
  int domain; /* index into ExtqlOpSet.domains */
  const char *name;
  int kind; /* OP_QUANTIZE / OP_DEQUANTIZE */
} ExtqlOpName;

/* One registration: the OrtCustomOp table first, so the pointer onnxruntime
 * hands back to the callbacks is also a pointer to this struct. */
typedef struct {
  OrtCustomOp base;
  const char *name;
  int kind;
  int qtype; /* the zero point / quantized type; 0 = untyped */
  int form;  /* EXTQL_FORM_* */
  int domain;
  ExtqlRangeFn range;
} ExtqlOp;

enum {
  EXTQL_FORM_TYPED = 0,   /* every input typed by qtype */
  EXTQL_FORM_ZP_ONLY = 1, /* quantize: x and scale untyped, zero point and y qtype (uint8) */
  EXTQL_FORM_UNTYPED = 2  /* inputs untyped; dequantize's output float, quantize's untyped */
};

/* A custom-op library: what it registers, and its registrations, built once
 * by the first RegisterCustomOps (under lock) and kept for the life of the
 * process: onnxruntime requires a domain to outlive every session that uses
 * it. */
typedef struct {
  const char *const *domains;
  int n_domains;
  const ExtqlOpName *names;
  int n_names;
  ExtqlRangeFn range;
  /* state */
  volatile long lock;
  ExtqlOp *ops;
  int n_ops;
  OrtCustomOpDomain **handles; /* n_domains, NULL until built */
} ExtqlOpSet;

/* A kernel: one node of a session. */
typedef struct {
  const OrtApi *api;
  int kind;
  ExtqlRangeFn range;
  int64_t axis;
  int64_t block;   /* the attribute block_size: 0, or blocked quantization */
  char label[192]; /* "ExtendedQuantizeLinear (node 'q')" */
} ExtqlKernel;

/* Type, shape and element count of a tensor. */
#define EXTQL_SMALL_RANK 8
typedef struct {
  int type;
  size_t rank;
  size_t count;
  int64_t *dims;
  int64_t small[EXTQL_SMALL_RANK];
} TensorFacts;

/* ort_register.c */
EXTQL_INTERNAL OrtStatus *extql_ort_register(OrtSessionOptions *options, const OrtApiBase *base,
                                             ExtqlOpSet *set);

/* ort_ops.c */
EXTQL_INTERNAL int extql_ort_init_ops(ExtqlOpSet *set, uint32_t version);

/* ort_messages.c */
EXTQL_INTERNAL int extql_is_qtype(int type);
EXTQL_INTERNAL size_t extql_elem_size(int type);
EXTQL_INTERNAL const char *extql_type_name(int type, char *buf, size_t size);
EXTQL_INTERNAL const char *extql_shape_str(const int64_t *dims, size_t rank, char *buf,
                                           size_t size);
EXTQL_INTERNAL OrtStatus *extql_fail(const OrtApi *api, const char *label, int code,
                                     const char *fmt, ...);
EXTQL_INTERNAL OrtStatus *extql_wrap(const OrtApi *api, const char *label, OrtStatus *st);

/* Return from the calling function with st (prefixed by label) when it failed. */
#define EXTQL_TRY(expr)                                   \
  do {                                                    \
    OrtStatus *st_ = (expr);                              \
    if (st_ != NULL) return extql_wrap(api, label, st_);  \
  } while (0)

/* ort_validate.c */
EXTQL_INTERNAL void extql_facts_init(TensorFacts *t);
EXTQL_INTERNAL void extql_facts_free(TensorFacts *t);
EXTQL_INTERNAL OrtStatus *extql_facts_of_value(const OrtApi *api, const char *label,
                                               const char *what, const OrtValue *v,
                                               TensorFacts *t);
EXTQL_INTERNAL const char *extql_input_name(int kind, int index);
EXTQL_INTERNAL OrtStatus *extql_check_types(const OrtApi *api, const char *label, int kind,
                                            int x_type, int s_type, int zp_type, int *out_type);
EXTQL_INTERNAL OrtStatus *extql_check_granularity(const OrtApi *api, const char *label,
                                                  const TensorFacts *x, const TensorFacts *s,
                                                  const TensorFacts *zp, int64_t axis,
                                                  int64_t block, int64_t *D, int64_t *inner);
EXTQL_INTERNAL OrtStatus *extql_read_axis(const OrtApi *api, const OrtKernelInfo *info,
                                          const char *label, int64_t *axis);
EXTQL_INTERNAL OrtStatus *extql_read_block_size(const OrtApi *api, const OrtKernelInfo *info,
                                                const char *label, int64_t *block);
EXTQL_INTERNAL OrtStatus *extql_check_node(const OrtApi *api, const OrtKernelInfo *info,
                                           const char *label, int kind);

/* ort_compute.c */
EXTQL_INTERNAL OrtStatus *EXTQL_ORT_CALL extql_kernel_compute(void *kernel,
                                                              OrtKernelContext *ctx);

#endif /* EXTQL_ORT_INTERNAL_H */
