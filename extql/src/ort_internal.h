/*
 * ort_internal.h - what the files of the onnxruntime custom-op shim share.
 *
 * The shim is split by concern:
 *   ort_register.c  RegisterCustomOps' machinery: version check, domains
 *   ort_ops.c       the OrtCustomOp registrations (types per registration)
 *                   and kernel creation
 *   ort_blocks.c    the block formats (BFPQuantizeDequantize,
 *                   MXQuantizeDequantize): their registrations, attributes,
 *                   checks and run
 *   ort_dpu.c       the DPU-emulation operators' registrations and the
 *                   instance norm (ExtendedInstanceNormalization)
 *   ort_lstm.c      ExtendedLSTM: attributes, checks, run, inference
 *   ort_validate.c  the checks of inputs, attributes and declared types
 *   ort_messages.c  type names, shapes and failed statuses
 *   ort_infer.c     the output's type and shape for graph inference
 *   ort_compute.c   staging, splitting the work on the session's thread
 *                   pool and calling the range function
 *   ort_callbacks.c the OrtCustomOp callbacks every registration shares
 *   ort_library.c   extql's library: its operators, on extql's kernels
 * A library is an ExtqlOpSet (its domains, operator names and the range
 * function that does the work) and a RegisterCustomOps that hands it to
 * extql_ort_register; benchmarks/ builds a second one from the same files.
 *
 * Element types are numbered as ONNX's TensorProto.DataType; the quantized
 * ones come from the generated extql_types.h (which extql_kernels.h
 * includes).
 */
#ifndef EXTQL_ORT_INTERNAL_H
#define EXTQL_ORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "extql_kernels.h"
#include "ort_api.h"

#if defined(__GNUC__) && !defined(_WIN32)
#define EXTQL_INTERNAL __attribute__((visibility("hidden")))
#else
#define EXTQL_INTERNAL
#endif

/* The kinds of operator: quantize and dequantize (ExtqlWork), and the
 * block formats (ort_blocks.c). */
enum { OP_QUANTIZE = 0, OP_DEQUANTIZE = 1, OP_BFP = 2, OP_MX = 3, OP_DPU_IN = 4, OP_DPU_LSTM = 5 };
#define EXTQL_IS_BLOCK_OP(kind) ((kind) == OP_BFP || (kind) == OP_MX)
/* Quark's DPU-emulation operators (ort_dpu.c): every kind from OP_DPU_IN on. */
#define EXTQL_IS_DPU_OP(kind) ((kind) >= OP_DPU_IN)

/* The first C API version (onnxruntime release) on which the inference
 * callback is registered (ort_infer.c says why not before). */
#define EXTQL_ORT_API_INFER 24

/* One operator's work on one tensor.  kind OP_QUANTIZE: x of ftype, y of
 * qtype; OP_DEQUANTIZE: x of qtype, y of ftype (ftype float32, float16 or
 * bfloat16).  prec: quantize's precision of the division (the same three
 * codes); the scale is float32, already a value of prec.  A sub-byte or
 * small float qtype's zero point is given as the kernels take it
 * (ExtqlUnpackFn); saturate: quantize's attribute (float8 outputs).  The
 * tensor is [outer, D, inner] (per tensor: D = 1); block > 0: blocked along D (the
 * scale [outer, ceil(D / block), inner]); out_bytes is the size of the whole
 * output (for the choice of stores). */
typedef struct {
  int kind, qtype, ftype, prec, saturate;
  const void *x;
  const float *scale;
  const void *zp;
  void *y;
  int64_t D, inner, block, out_bytes;
  /* prec EXTQL_ORT_DOUBLE (the division in float64): scale is float32 or
   * int32 (stype), exact; ones and zero2 are the float32 stage's
   * parameters of extql_quantize_f64_range. */
  int stype;
  const float *ones;
  const void *zero2;
} ExtqlWork;

/* Elements [start, stop) of the work: 0, or -1 for an element type the
 * function does not know. */
typedef int (*ExtqlRangeFn)(const ExtqlWork *work, int64_t start, int64_t stop);

/* n scales of type stype as float32 into dst, rounded to prec (float16 /
 * bfloat16) or not (float32); 0, or -1 for an unknown code. */
typedef int (*ExtqlConvertFn)(int stype, int prec, const void *src, float *dst, int64_t n);

/* n elements of a sub-byte or small float type qtype (as in an ONNX tensor)
 * as the range function takes zero points (int8 / uint8 or float32
 * elements: extql_unpacked_size bytes each); 0, or -1 for another type. */
typedef int (*ExtqlUnpackFn)(int qtype, const void *src, void *dst, int64_t n);

/* The float32 stage's parameters of a quantize in float64 (extql_f64_params):
 * count scales of 1 into ones, and -0 zero points into zero2 (room for
 * count float32) when it returns 1. */
typedef int (*ExtqlF64ParamsFn)(int qtype, float *ones, void *zero2, int64_t count);

/* The block formats' kernels (extql_kernels.h): the work items of a
 * tensor, the elements of one, and the items [start, stop). */
typedef struct {
  int64_t (*items)(const ExtqlBlockParams *p, int64_t outer, int64_t D, int64_t inner);
  int64_t (*item_size)(const ExtqlBlockParams *p, int64_t inner);
  int (*range)(const ExtqlBlockParams *p, int xtype, const void *x, void *y, int64_t outer,
               int64_t D, int64_t inner, int64_t start, int64_t stop);
} ExtqlBlockKernels;

/* One operator name of a library. */
typedef struct {
  int domain; /* index into ExtqlOpSet.domains */
  const char *name;
  int kind; /* OP_QUANTIZE / OP_DEQUANTIZE / OP_BFP / OP_MX */
} ExtqlOpName;

/* One registration: the OrtCustomOp table first, so the pointer onnxruntime
 * hands back to the callbacks is also a pointer to this struct. */
typedef struct {
  OrtCustomOp base;
  const char *name;
  int kind;
  int qtype; /* the zero point / quantized type; 0 = untyped */
  int stype; /* dequantize's typed forms: the scale's and y's type */
  int form;  /* EXTQL_FORM_* */
  int domain;
  ExtqlRangeFn range;
  ExtqlConvertFn convert_scales;
  ExtqlUnpackFn unpack;
  ExtqlF64ParamsFn f64_params;
  /* The runtime's API for the inference callback (ort_infer.c); NULL when
   * the runtime is too old for it and the callback is not registered. */
  const OrtApi *infer_api;
  /* OP_BFP / OP_MX: the block formats' kernels */
  const ExtqlBlockKernels *blocks;
} ExtqlOp;

enum {
  EXTQL_FORM_TYPED = 0,   /* quantize: x and scale float, zero point and y qtype;
                             dequantize: x and zero point qtype, scale and y stype */
  EXTQL_FORM_ZP_ONLY = 1, /* quantize: x and scale untyped, zero point and y qtype (uint8) */
  EXTQL_FORM_UNTYPED = 2, /* inputs untyped; dequantize's output float, quantize's untyped */
  EXTQL_FORM_SCALE_ONLY = 3, /* dequantize: x and zero point untyped, scale and y stype */
  EXTQL_FORM_ANY = 4         /* dequantize: inputs and output untyped (with ort_infer.c) */
};

/* A custom-op library: what it registers, and its registrations, built once
 * by the first RegisterCustomOps (under lock) and kept for the life of the
 * process: onnxruntime requires a domain to outlive every session that uses
 * it. */
typedef struct ExtqlOpSetTag {
  const char *const *domains;
  int n_domains;
  const ExtqlOpName *names;
  int n_names;
  ExtqlRangeFn range;
  /* Scales of another type than float32 (or rounded to a narrower
   * precision) as float32 (extql_convert_scales), or NULL when the library
   * does not read scales. */
  ExtqlConvertFn convert_scales;
  /* Sub-byte zero points as int8 / uint8 (extql_unpack), or NULL when the
   * library takes no sub-byte types. */
  ExtqlUnpackFn unpack;
  /* A quantize in float64's parameters (extql_f64_params), or NULL when the
   * library does not divide in float64. */
  ExtqlF64ParamsFn f64_params;
  /* state */
  volatile long lock;
  ExtqlOp *ops;
  int n_ops;
  OrtCustomOpDomain **handles; /* n_domains, NULL until built */
  const OrtApi *built_api;     /* the API that built the domains (to release them) */
  const OrtApi *infer_api;     /* see ExtqlOp */
  /* The block formats' kernels, or NULL when the library has no OP_BFP /
   * OP_MX names. */
  const ExtqlBlockKernels *blocks;
  /* The registrations of a DPU-emulation name (extql_dpu_init_ops,
   * ort_dpu.c), or NULL when the library has no OP_DPU_* names. */
  int (*dpu_init_ops)(ExtqlOp *ops, const struct ExtqlOpSetTag *set, int n);
} ExtqlOpSet;

/* Type, shape and element count of a tensor. */
#define EXTQL_SMALL_RANK 8
typedef struct {
  int type;
  size_t rank;
  size_t count;
  int64_t *dims;
  int64_t small[EXTQL_SMALL_RANK];
} TensorFacts;

/* A kernel: one node of a session. */
typedef struct {
  const OrtApi *api;
  int kind;
  ExtqlRangeFn range;
  ExtqlConvertFn convert_scales;
  ExtqlUnpackFn unpack;
  ExtqlF64ParamsFn f64_params;
  int64_t axis;
  int64_t block;   /* the attribute block_size: 0, or blocked quantization */
  int output_dtype; /* the attribute output_dtype, 0 when absent */
  int precision;    /* quantize's attribute precision, 0 when absent */
  int saturate;     /* quantize's attribute saturate (float8), 1 when absent */
  char label[192]; /* "ExtendedQuantizeLinear (node 'q')" */
  /* The scale (0) and the zero point (1) when the graph makes them
   * constants (initializers): their facts, read once when the kernel is
   * made (const_in[i] 1), so that a run reads only x's (and y's, below). */
  int const_in[2];
  TensorFacts const_facts[2];
  /* The type a run has found y to have, as the inputs make it (0 before
   * one has): the graph's types do not change between runs, so later runs
   * with the same type skip reading y's.  Read and written with
   * EXTQL_LOAD_RELAXED / EXTQL_STORE_RELAXED (runs may be concurrent). */
  int y_type_seen;
} ExtqlKernel;

/* One int shared by concurrent runs, read and written whole. */
#if defined(_MSC_VER)
#define EXTQL_LOAD_RELAXED(p) (*(volatile const int *)(p))
#define EXTQL_STORE_RELAXED(p, v) (*(volatile int *)(p) = (v))
#else
#define EXTQL_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define EXTQL_STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#endif

/* ort_register.c */
EXTQL_INTERNAL OrtStatus *extql_ort_register(OrtSessionOptions *options, const OrtApiBase *base,
                                             ExtqlOpSet *set);

/* Release the set's domains and registrations: when the library is unloaded
 * (onnxruntime unloads a registered library once no session uses it; the
 * next registration builds them again).  Without it each load of the
 * library in a host that creates and releases sessions would leak them. */
EXTQL_INTERNAL void extql_ort_release(ExtqlOpSet *set);

/* ort_ops.c */
EXTQL_INTERNAL int extql_ort_init_ops(ExtqlOpSet *set, uint32_t version, uint32_t runtime_api);

/* ort_messages.c */
EXTQL_INTERNAL int extql_is_qtype(int type);
EXTQL_INTERNAL int extql_is_subbyte(int type);
EXTQL_INTERNAL int extql_is_smallfloat(int type);
EXTQL_INTERNAL int extql_is_float8(int type);
EXTQL_INTERNAL size_t extql_unpacked_size(int type);
EXTQL_INTERNAL size_t extql_elem_size(int type);
EXTQL_INTERNAL const char *extql_type_name(int type, char *buf, size_t size);
EXTQL_INTERNAL const char *extql_shape_str(const int64_t *dims, size_t rank, char *buf,
                                           size_t size);
EXTQL_INTERNAL OrtStatus *extql_fail(const OrtApi *api, const char *label, int code,
                                     const char *fmt, ...);
EXTQL_INTERNAL OrtStatus *extql_wrap(const OrtApi *api, const char *label, OrtStatus *st);
/* "<name> (node '<node>')", or the name alone for a node without a name:
 * the label of a kernel's messages. */
EXTQL_INTERNAL void extql_kernel_label(const OrtApi *api, const OrtKernelInfo *info,
                                       const char *name, char *buf, size_t size);

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
EXTQL_INTERNAL void extql_read_constant_facts(const OrtApi *api, const OrtKernelInfo *info,
                                              ExtqlKernel *k);
EXTQL_INTERNAL const char *extql_input_name(int kind, int index);
EXTQL_INTERNAL OrtStatus *extql_check_types(const OrtApi *api, const char *label, int kind,
                                            int x_type, int s_type, int zp_type,
                                            int output_dtype, int precision, int *out_type,
                                            int *prec);
EXTQL_INTERNAL OrtStatus *extql_check_granularity(const OrtApi *api, const char *label,
                                                  const TensorFacts *x, const TensorFacts *s,
                                                  const TensorFacts *zp, int64_t axis,
                                                  int64_t block, int64_t *D, int64_t *inner);
EXTQL_INTERNAL OrtStatus *extql_read_axis(const OrtApi *api, const OrtKernelInfo *info,
                                          const char *label, int64_t *axis);
EXTQL_INTERNAL OrtStatus *extql_read_block_size(const OrtApi *api, const OrtKernelInfo *info,
                                                const char *label, int64_t *block);
EXTQL_INTERNAL OrtStatus *extql_read_type_attrs(const OrtApi *api, const OrtKernelInfo *info,
                                                const char *label, int kind, int *output_dtype,
                                                int *precision, int *saturate);
EXTQL_INTERNAL int extql_output_dtype_ok(int kind, int64_t code);
EXTQL_INTERNAL OrtStatus *extql_check_node(const OrtApi *api, const OrtKernelInfo *info,
                                           const char *label, int kind, int output_dtype,
                                           int precision, int inferred);

/* ort_infer.c */
EXTQL_INTERNAL OrtStatus *EXTQL_ORT_CALL extql_infer_output(const OrtCustomOp *op,
                                                            OrtShapeInferContext *ctx);
/* y of x's type and shape, when type_ok(x's type) (the block formats'
 * inference callback); anything else is left as the registrations typed
 * it. */
EXTQL_INTERNAL void extql_infer_like_input(const OrtApi *api, OrtShapeInferContext *ctx,
                                           int (*type_ok)(int type));

/* ort_blocks.c */
/* The registrations of block-format name n of the set into ops (room for
 * EXTQL_BLOCK_OPS_PER_NAME); returns how many. */
#define EXTQL_BLOCK_OPS_PER_NAME 3
EXTQL_INTERNAL int extql_block_init_ops(ExtqlOp *ops, const ExtqlOpSet *set, int n);

/* The registrations of a DPU operator's name n (ort_dpu.c): at most 2. */
EXTQL_INTERNAL int extql_dpu_init_ops(ExtqlOp *ops, const ExtqlOpSet *set, int n);
/* The element type input `index` has in the graph (0 when it does not say). */
EXTQL_INTERNAL int extql_declared_type(const OrtApi *api, const OrtKernelInfo *info,
                                       size_t index);

/* ExtendedLSTM's kernel (ort_lstm.c): ONNX LSTM's inputs and outputs. */
#define EXTQL_LSTM_INPUTS 8
#define EXTQL_LSTM_OUTPUTS 3
EXTQL_INTERNAL OrtStatus *EXTQL_ORT_CALL extql_ort_lstm_create(const OrtCustomOp *op,
                                                               const OrtApi *api,
                                                               const OrtKernelInfo *info,
                                                               void **out);
EXTQL_INTERNAL OrtStatus *EXTQL_ORT_CALL extql_ort_lstm_compute(void *kernel,
                                                                OrtKernelContext *ctx);
EXTQL_INTERNAL void EXTQL_ORT_CALL extql_ort_lstm_destroy(void *kernel);
/* X, W, R required, the other inputs optional; Y required, Y_h / Y_c optional. */
EXTQL_INTERNAL int EXTQL_ORT_CALL extql_ort_lstm_input_characteristic(const OrtCustomOp *op,
                                                                      size_t index);
EXTQL_INTERNAL int EXTQL_ORT_CALL extql_ort_lstm_output_characteristic(const OrtCustomOp *op,
                                                                       size_t index);
EXTQL_INTERNAL void extql_ort_lstm_infer(const OrtApi *api, OrtShapeInferContext *ctx);

/* Python's words for values (ort_blocks.c): a string's and a double's repr,
 * and an attribute that is not of kind ('i', 'f' or 's') as Python shows it
 * (NULL: the node has no such attribute). */
EXTQL_INTERNAL const char *extql_py_str_repr(const char *s, char *buf, size_t size);
EXTQL_INTERNAL const char *extql_py_float_repr(double v, char *buf, size_t size);
EXTQL_INTERNAL const char *extql_attr_value_text(const OrtApi *api, const OrtKernelInfo *info,
                                                 const char *name, char kind, char *buf,
                                                 size_t size);

/* ort_callbacks.c */
/* op zeroed, then named as name n of the set, with the registration's type
 * stype (every input's and output's, unless the caller sets its own
 * callbacks), one input and one output, all required and in CPU memory,
 * variadic arities of one, the set's inference API and the given custom-op
 * version.  The caller adds its kernel's callbacks. */
EXTQL_INTERNAL void extql_op_init(ExtqlOp *op, const ExtqlOpSet *set, int n, int stype,
                                  uint32_t version);

/* ort_compute.c */
EXTQL_INTERNAL OrtStatus *EXTQL_ORT_CALL extql_kernel_compute(void *kernel,
                                                              OrtKernelContext *ctx);

#endif /* EXTQL_ORT_INTERNAL_H */
