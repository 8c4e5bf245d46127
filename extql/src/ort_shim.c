/*
 * ort_shim.c - onnxruntime custom ops on extql's kernels.
 *
 * Built into the extension extql._kernels, so one shared object holds the
 * kernels and exports RegisterCustomOps; SessionOptions.
 * register_custom_ops_library(extql.get_library_path()) then runs
 *
 *   com.amd.quark     ExtendedQuantizeLinear, ExtendedDequantizeLinear  (version 1)
 *   com.vai.quantize  VitisQuantizeLinear, VitisDequantizeLinear        (legacy names)
 *
 * and, for `extql bench` only, the yardstick it measures them against:
 *
 *   com.amd.quark.bench  QuantizeCopy, DequantizeCopy
 *
 * which take the same inputs, check them the same way and split the work the
 * same way on the same thread pool, but run the copy kernel
 * (extql_bench_copy_range: the op's bytes moved with no arithmetic) instead of
 * the math, so that the time of the memory traffic alone is measured exactly
 * as the op is.
 * natively on the CPU execution provider.  The compute path calls the C entry
 * points of extql_kernels.h: no Python object, no GIL.
 *
 * Shapes.  No InferOutputShapeFn is registered: onnxruntime 1.17 dereferences
 * a null type for an absent optional input before calling it (a crash for an
 * empty zero-point name), and before API 24 the callback cannot tell an
 * input of unknown rank from a scalar, so it would declare wrong shapes.
 * The output's element type is inferred from the registrations (below).
 *
 * Types.  Each operator is registered as several OrtCustomOps of one name:
 * eight typed ones (quantize: x float, scale float, zero point T -> y T;
 * dequantize: x T, scale float, zero point T -> y float, T one of the eight
 * types) and fallbacks.  onnxruntime infers a node's output type from the
 * first registration whose input types match the node, so the typed ones
 * give every form its type: the zero point's type, or - with no zero point
 * (two inputs or an empty third name), where the uint8 registration comes
 * first - uint8.  A node whose types fit no typed registration falls to a
 * fallback, whose kernel creation reports exactly what is wrong
 * ("x_zero_point must have the type of x ...") instead of onnxruntime's
 * generic "no kernel matches".  The fallbacks still give the output the type
 * the user means, or a graph that declares it would be rejected by
 * onnxruntime's type inference before the kernel can say what is wrong
 * (onnxruntime gives an untyped output the type of the last untyped input):
 * dequantize's untyped fallback declares a float output; quantize has
 * "any x, any scale, uint8 zero point (or none) -> uint8" and then the
 * untyped one, whose output takes the zero point's type.  All share one
 * kernel that reads the actual types at run time, so whichever registration
 * onnxruntime picks, the result is right.
 *
 * Errors.  Everything the NumPy API (extql/numpy_api.py) rejects is rejected
 * here with the same rule and the same words, as a failed OrtStatus whose
 * message starts with the operator (and node) name.  Nothing here aborts,
 * throws or reads outside a buffer: each input's element count and shape
 * come from onnxruntime and are checked before a kernel touches them.
 *
 * Threads.  The work is split into ranges of the flat tensor run by
 * KernelContext_ParallelFor on the session's own intra-op thread pool, so it
 * honours the session's intra_op_num_threads, never adds threads of its own
 * (no oversubscription, no OpenMP team shared between sessions) and runs
 * inline when the session has one thread.  Tensors below
 * EXTQL_ORT_PARALLEL_MIN_ELEMENTS run on the calling thread: handing work to
 * a pool thread costs a wake-up (tens of microseconds when the pool does not
 * spin), more than a smaller tensor takes on one core (measured: 64K-element
 * quantize 15 us inline, 19 us split in two; 256K 48 us, 38 us split).
 * (extql's own thread setting, EXTQL_NUM_THREADS, is for the NumPy API
 * only.)
 *
 * Attributes are read once, when the kernel is created.  `axis` defaults to
 * 1, as the operator documents say.  (Quark's own custom-op library silently
 * uses 0 when the attribute is absent; extql follows the documents.)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_kernels.h"
#include "ort_api.h"

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

enum { OP_QUANTIZE = 0, OP_DEQUANTIZE = 1 };

/* Tensors smaller than this run on the calling thread (see "Threads"). */
#define EXTQL_ORT_PARALLEL_MIN_ELEMENTS (1 << 18)
/* Otherwise the tensor is cut into about EXTQL_ORT_CHUNKS ranges (enough for
 * the pool to balance them over its threads), of at least
 * EXTQL_ORT_CHUNK_MIN and at most EXTQL_ORT_CHUNK_MAX elements: each range
 * has a fixed cost (a pool hand-off; for per-axis along the last axis, the
 * periodic scale and zero point), so ranges are made as large as balance
 * allows. */
#define EXTQL_ORT_CHUNKS 64
#define EXTQL_ORT_CHUNK_MIN (1 << 15)
#define EXTQL_ORT_CHUNK_MAX (1 << 18)

#define N_QTYPES 8
static const int QTYPE_CODES[N_QTYPES] = {
    EXTQL_UINT8, EXTQL_INT8,  EXTQL_UINT16, EXTQL_INT16,
    EXTQL_INT32, EXTQL_UINT32, EXTQL_FLOAT16, EXTQL_BFLOAT16};
#define TYPE_LIST "int8, uint8, int16, uint16, int32, uint32, float16, bfloat16"

/* One registration: the OrtCustomOp table first, so the pointer onnxruntime
 * hands back to the callbacks is also a pointer to this struct. */
typedef struct {
  OrtCustomOp base;
  const char *name;
  int kind;  /* OP_QUANTIZE / OP_DEQUANTIZE */
  int copy;  /* 1: the bench copy kernel instead of the math */
  int qtype; /* the zero point / quantized type; 0 = untyped */
  int form;  /* FORM_* */
} ExtqlOp;

/* The copy kernel of `extql bench` (extql/_kernels.pyx). */
int extql_bench_copy_range(int in_size, int out_size, const void *src, void *dst, int64_t start,
                           int64_t stop, int flags);

enum {
  FORM_TYPED = 0,    /* every input typed by qtype */
  FORM_ZP_ONLY = 1,  /* quantize: x and scale untyped, zero point and y qtype (uint8) */
  FORM_UNTYPED = 2   /* inputs untyped; dequantize's output float, quantize's untyped */
};

#define N_NAMES 6
#define MAX_OPS_PER_NAME (N_QTYPES + 2)
static ExtqlOp g_ops[N_NAMES * MAX_OPS_PER_NAME];
static int g_nops; /* registrations in g_ops */
static int g_op_domain[N_NAMES * MAX_OPS_PER_NAME]; /* index into OP_NAMES */

#define N_DOMAINS 3
static const char *const DOMAINS[N_DOMAINS] = {"com.amd.quark", "com.vai.quantize",
                                               "com.amd.quark.bench"};

static const struct {
  int domain; /* index in DOMAINS */
  const char *name;
  int kind, copy;
} OP_NAMES[N_NAMES] = {
    {0, "ExtendedQuantizeLinear", OP_QUANTIZE, 0},
    {0, "ExtendedDequantizeLinear", OP_DEQUANTIZE, 0},
    {1, "VitisQuantizeLinear", OP_QUANTIZE, 0},
    {1, "VitisDequantizeLinear", OP_DEQUANTIZE, 0},
    {2, "QuantizeCopy", OP_QUANTIZE, 1},
    {2, "DequantizeCopy", OP_DEQUANTIZE, 1},
};

/* Process-wide registration state, built once by the first RegisterCustomOps
 * (under g_lock) and kept for the life of the process: onnxruntime requires
 * a domain to outlive every session that uses it. */
static OrtCustomOpDomain *g_domains[N_DOMAINS];
static volatile long g_lock;

static void lock_acquire(void) {
#if defined(_WIN32)
  while (InterlockedExchange(&g_lock, 1) != 0) Sleep(0);
#else
  while (__atomic_exchange_n(&g_lock, 1, __ATOMIC_ACQUIRE) != 0) {
  }
#endif
}

static void lock_release(void) {
#if defined(_WIN32)
  InterlockedExchange(&g_lock, 0);
#else
  __atomic_store_n(&g_lock, 0, __ATOMIC_RELEASE);
#endif
}

/* ------------------------------------------------------------------------ */
/* Names and messages                                                        */
/* ------------------------------------------------------------------------ */

/* The size of one element of a quantized type (or float32). */
static size_t elem_size(int type) {
  switch (type) {
    case EXTQL_UINT8:
    case EXTQL_INT8: return 1;
    case EXTQL_UINT16:
    case EXTQL_INT16:
    case EXTQL_FLOAT16:
    case EXTQL_BFLOAT16: return 2;
    default: return 4; /* int32, uint32, float32 */
  }
}

static int is_qtype(int t) {
  int i;
  for (i = 0; i < N_QTYPES; i++)
    if (QTYPE_CODES[i] == t) return 1;
  return 0;
}

/* NumPy-style names, as the Python API's messages use them. */
static const char *type_name(int t, char *buf, size_t size) {
  switch (t) {
    case 1: return "float32";
    case 2: return "uint8";
    case 3: return "int8";
    case 4: return "uint16";
    case 5: return "int16";
    case 6: return "int32";
    case 7: return "int64";
    case 8: return "string";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "float64";
    case 12: return "uint32";
    case 13: return "uint64";
    case 14: return "complex64";
    case 15: return "complex128";
    case 16: return "bfloat16";
    default: snprintf(buf, size, "ONNX type %d", t); return buf;
  }
}

/* A shape as Python prints a tuple: (), (3,), (2, 4). */
static const char *shape_str(const int64_t *dims, size_t rank, char *buf, size_t size) {
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
static OrtStatus *fail(const OrtApi *api, const char *label, int code, const char *fmt, ...) {
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

/* Prefix a status returned by onnxruntime with the label. */
static OrtStatus *wrap(const OrtApi *api, const char *label, OrtStatus *st) {
  OrtStatus *out;
  if (st == NULL) return NULL;
  out = fail(api, label, api->GetErrorCode(st), "%s", api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  return out;
}

#define TRY(expr)                                 \
  do {                                            \
    OrtStatus *st_ = (expr);                      \
    if (st_ != NULL) return wrap(api, label, st_); \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Tensor facts                                                              */
/* ------------------------------------------------------------------------ */

#define SMALL_RANK 8

typedef struct {
  int type;
  size_t rank;
  size_t count; /* number of elements */
  int64_t *dims;
  int64_t small[SMALL_RANK];
} TensorFacts;

static void facts_init(TensorFacts *t) {
  memset(t, 0, sizeof *t);
  t->dims = t->small;
}

static void facts_free(TensorFacts *t) {
  if (t->dims != t->small) free(t->dims);
  t->dims = t->small;
}

static OrtStatus *facts_of_info(const OrtApi *api, const char *label,
                                const OrtTensorTypeAndShapeInfo *info, TensorFacts *t) {
  TRY(api->GetTensorElementType(info, &t->type));
  TRY(api->GetDimensionsCount(info, &t->rank));
  if (t->rank > SMALL_RANK) {
    t->dims = (int64_t *)malloc(t->rank * sizeof(int64_t));
    if (t->dims == NULL) {
      t->dims = t->small;
      return fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    }
  }
  if (t->rank > 0) TRY(api->GetDimensions(info, t->dims, t->rank));
  return NULL;
}

/* Type, shape and element count of a tensor value. */
static OrtStatus *facts_of_value(const OrtApi *api, const char *label, const char *what,
                                 const OrtValue *v, TensorFacts *t) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  OrtStatus *st;
  st = api->GetTensorTypeAndShape(v, &info);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "%s must be a tensor", what);
  }
  st = facts_of_info(api, label, info, t);
  if (st == NULL) {
    OrtStatus *st2 = api->GetTensorShapeElementCount(info, &t->count);
    if (st2 != NULL) st = wrap(api, label, st2);
  }
  api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

/* The element type of a node input/output as the graph declares it; 0 when
 * the graph does not say (or says it is not a tensor). */
static int declared_type(const OrtApi *api, const OrtKernelInfo *info, int output, size_t index) {
  OrtTypeInfo *ti = NULL;
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  OrtStatus *st;
  int onnx_type = 0, type = 0;
  st = output ? api->KernelInfo_GetOutputTypeInfo(info, index, &ti)
              : api->KernelInfo_GetInputTypeInfo(info, index, &ti);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return 0;
  }
  if (ti == NULL) return 0;
  st = api->GetOnnxTypeFromTypeInfo(ti, &onnx_type);
  if (st == NULL && onnx_type == EXTQL_ORT_TYPE_TENSOR) {
    st = api->CastTypeInfoToTensorInfo(ti, &tensor);
    if (st == NULL && tensor != NULL) {
      st = api->GetTensorElementType(tensor, &type);
      if (st != NULL) type = 0;
    }
  }
  if (st != NULL) api->ReleaseStatus(st);
  api->ReleaseTypeInfo(ti);
  return type;
}

/* ------------------------------------------------------------------------ */
/* The rules (the same as extql/numpy_api.py)                                */
/* ------------------------------------------------------------------------ */

/* Names of the inputs, as the operator documents call them. */
static const char *in_name(int kind, int index) {
  static const char *const q[3] = {"x", "y_scale", "y_zero_point"};
  static const char *const dq[3] = {"x", "x_scale", "x_zero_point"};
  return kind == OP_QUANTIZE ? q[index] : dq[index];
}

/* Check the element types; *out_type gets the type of y.  zp_type is 0 when
 * there is no zero point.  Any type may be 0 = not known yet (kernel
 * creation from a graph without types): it is then not checked. */
static OrtStatus *check_types(const OrtApi *api, const char *label, int kind, int x_type,
                              int s_type, int zp_type, int *out_type) {
  char b1[32], b2[32];
  if (kind == OP_QUANTIZE) {
    if (x_type != 0 && x_type != EXTQL_ORT_FLOAT)
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "x must be float32, got %s",
                  type_name(x_type, b1, sizeof b1));
    if (s_type != 0 && s_type != EXTQL_ORT_FLOAT)
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "y_scale must be float32, got %s",
                  type_name(s_type, b1, sizeof b1));
    if (zp_type != 0 && !is_qtype(zp_type))
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                  "y_zero_point must be one of " TYPE_LIST ", got %s",
                  type_name(zp_type, b1, sizeof b1));
    *out_type = zp_type != 0 ? zp_type : EXTQL_UINT8;
  } else {
    if (x_type != 0 && !is_qtype(x_type))
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "x must be one of " TYPE_LIST ", got %s",
                  type_name(x_type, b1, sizeof b1));
    if (s_type != 0 && s_type != EXTQL_ORT_FLOAT)
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "x_scale must be float32, got %s",
                  type_name(s_type, b1, sizeof b1));
    if (zp_type != 0 && x_type != 0 && zp_type != x_type)
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                  "x_zero_point must have the dtype of x (%s), got %s",
                  type_name(x_type, b1, sizeof b1), type_name(zp_type, b2, sizeof b2));
    *out_type = EXTQL_ORT_FLOAT;
  }
  return NULL;
}

/* Check scale / zero point / axis against x's shape; return the [outer, D,
 * inner] view the kernels take (per tensor: D = 1, inner = all). */
static OrtStatus *check_granularity(const OrtApi *api, const char *label, const TensorFacts *x,
                                    const TensorFacts *s, const TensorFacts *zp, int64_t axis,
                                    int64_t *D, int64_t *inner) {
  char b1[256], b2[256];
  int64_t rank = (int64_t)x->rank, a, i;
  if (s->rank >= 2)
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                "the scale must be a scalar or 1-D, got shape %s",
                shape_str(s->dims, s->rank, b1, sizeof b1));
  if (zp != NULL) {
    int bad;
    if (s->count == 1) {
      bad = zp->rank >= 2 || zp->count != 1;
    } else {
      bad = zp->rank != s->rank || (s->rank == 1 && zp->dims[0] != s->dims[0]);
    }
    if (bad)
      return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                  "the zero point must have the shape of the scale %s, got %s",
                  shape_str(s->dims, s->rank, b1, sizeof b1),
                  shape_str(zp->dims, zp->rank, b2, sizeof b2));
  }
  if (s->count == 1) {
    *D = 1;
    *inner = (int64_t)x->count;
    return NULL;
  }
  if (rank == 0)
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                "a per-axis scale of shape %s needs x of rank >= 1, got a scalar",
                shape_str(s->dims, s->rank, b1, sizeof b1));
  if (axis < -rank || axis >= rank)
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                "axis %lld is out of range for x of rank %lld", (long long)axis,
                (long long)rank);
  a = axis < 0 ? axis + rank : axis;
  /* s->rank is 1 here (rank 0 has one element) */
  if (s->dims[0] != x->dims[a])
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                "the scale has %lld elements but x has %lld along axis %lld (shape %s)",
                (long long)s->dims[0], (long long)x->dims[a], (long long)a,
                shape_str(x->dims, x->rank, b1, sizeof b1));
  *D = x->dims[a];
  *inner = 1;
  for (i = a + 1; i < rank; i++) *inner *= x->dims[i];
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Alignment                                                                 */
/* ------------------------------------------------------------------------ */

static int misaligned(const void *p, size_t size) {
  return ((uintptr_t)p & (uintptr_t)(size - 1)) != 0;
}

/* onnxruntime hands the kernel a caller's buffer as it is, and a tensor
 * made from, say, np.frombuffer at an odd offset is not aligned to its
 * element size; the kernels read and write typed elements, and a misaligned
 * pointer is undefined behaviour (the compiler may use aligned vector
 * loads).  Such a tensor is staged through an aligned copy (malloc aligns
 * for every type); an aligned one is used in place. */
typedef struct {
  void *copies[4]; /* x, scale, zero point, y: NULL when used in place */
} Staging;

static int stage_input(Staging *g, int slot, void **p, size_t count, size_t size) {
  void *copy;
  if (*p == NULL || !misaligned(*p, size)) return 0;
  copy = malloc(count * size);
  if (copy == NULL) return -1;
  memcpy(copy, *p, count * size);
  g->copies[slot] = copy;
  *p = copy;
  return 0;
}

static void staging_free(Staging *g) {
  int i;
  for (i = 0; i < 4; i++) free(g->copies[i]);
}

/* ------------------------------------------------------------------------ */
/* The kernel                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
  const OrtApi *api;
  int kind, copy;
  int64_t axis;
  char label[192];  /* "ExtendedQuantizeLinear (node 'q')" */
} ExtqlKernel;

/* Work for one KernelContext_ParallelFor call. */
typedef struct {
  int kind, copy, qtype;
  const void *x;
  const float *scale;
  const void *zp;
  void *y;
  int64_t n, D, inner, chunk;
  int flags; /* EXTQL_STREAM for outputs larger than the caches */
  volatile int failed;
} Job;

static void EXTQL_ORT_CALL run_chunk(void *data, size_t index) {
  Job *job = (Job *)data;
  int64_t start = (int64_t)index * job->chunk;
  int64_t stop = start + job->chunk;
  int rc;
  if (start >= job->n) return;
  if (stop > job->n) stop = job->n;
  if (job->copy)
    rc = job->kind == OP_QUANTIZE
             ? extql_bench_copy_range(4, (int)elem_size(job->qtype), job->x, job->y, start, stop,
                                      job->flags)
             : extql_bench_copy_range((int)elem_size(job->qtype), 4, job->x, job->y, start, stop,
                                      job->flags);
  else if (job->kind == OP_QUANTIZE)
    rc = extql_quantize_range_ex(job->qtype, (const float *)job->x, job->scale, job->zp, job->y,
                                 job->D, job->inner, start, stop, job->flags);
  else
    rc = extql_dequantize_range_ex(job->qtype, job->x, job->scale, job->zp, (float *)job->y,
                                   job->D, job->inner, start, stop, job->flags);
  if (rc != 0) job->failed = 1;
}

static OrtStatus *EXTQL_ORT_CALL kernel_compute(void *kernel, OrtKernelContext *ctx) {
  ExtqlKernel *k = (ExtqlKernel *)kernel;
  const OrtApi *api = k->api;
  const char *label = k->label;
  const OrtValue *vx = NULL, *vs = NULL, *vz = NULL;
  OrtValue *vy = NULL;
  TensorFacts fx, fs, fz, fy;
  OrtStatus *st = NULL;
  size_t nin = 0;
  int out_type = 0, qtype;
  int64_t D = 1, inner = 1;
  void *px = NULL, *ps = NULL, *pz = NULL, *py = NULL, *py_out = NULL;
  size_t x_size, y_size;
  Staging staging;
  char b1[32], b2[32];

  memset(&staging, 0, sizeof staging);

  facts_init(&fx);
  facts_init(&fs);
  facts_init(&fz);
  facts_init(&fy);

  TRY(api->KernelContext_GetInputCount(ctx, &nin));
  if (nin < 2 || nin > 3)
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "expected 2 or 3 inputs, got %zu", nin);
  TRY(api->KernelContext_GetInput(ctx, 0, &vx));
  TRY(api->KernelContext_GetInput(ctx, 1, &vs));
  if (nin == 3) TRY(api->KernelContext_GetInput(ctx, 2, &vz)); /* NULL: empty name */
  if (vx == NULL || vs == NULL)
    return fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "inputs x and %s are required",
                in_name(k->kind, 1));

  st = facts_of_value(api, label, "x", vx, &fx);
  if (st == NULL) st = facts_of_value(api, label, in_name(k->kind, 1), vs, &fs);
  if (st == NULL && vz != NULL) st = facts_of_value(api, label, in_name(k->kind, 2), vz, &fz);
  if (st == NULL)
    st = check_types(api, label, k->kind, fx.type, fs.type, vz ? fz.type : 0, &out_type);
  if (st == NULL)
    st = check_granularity(api, label, &fx, &fs, vz ? &fz : NULL, k->axis, &D, &inner);
  if (st != NULL) goto done;
  qtype = k->kind == OP_QUANTIZE ? out_type : fx.type;

  st = api->KernelContext_GetOutput(ctx, 0, fx.rank ? fx.dims : fx.small, fx.rank, &vy);
  if (st != NULL) {
    st = wrap(api, label, st);
    goto done;
  }
  if (vy == NULL) {
    st = fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave no output tensor");
    goto done;
  }
  st = facts_of_value(api, label, "y", vy, &fy);
  if (st != NULL) goto done;
  /* The graph decides the output's element type: it must be the one the
   * inputs give, or the kernel would write the wrong element size. */
  if (fy.type != out_type || fy.count != fx.count) {
    st = fail(api, label, EXTQL_ORT_INVALID_GRAPH,
              "the output y is %s but the inputs make it %s", type_name(fy.type, b1, sizeof b1),
              type_name(out_type, b2, sizeof b2));
    goto done;
  }
  if (fx.count == 0) goto done; /* empty: nothing to compute */

  st = api->GetTensorMutableData((OrtValue *)vx, &px);
  if (st == NULL) st = api->GetTensorMutableData((OrtValue *)vs, &ps);
  if (st == NULL && vz != NULL) st = api->GetTensorMutableData((OrtValue *)vz, &pz);
  if (st == NULL) st = api->GetTensorMutableData(vy, &py);
  if (st != NULL) {
    st = wrap(api, label, st);
    goto done;
  }
  if (px == NULL || ps == NULL || py == NULL || (vz != NULL && pz == NULL)) {
    st = fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave a tensor without data");
    goto done;
  }
  x_size = k->kind == OP_QUANTIZE ? 4 : elem_size(qtype);
  y_size = k->kind == OP_QUANTIZE ? elem_size(qtype) : 4;
  py_out = py;
  if (stage_input(&staging, 0, &px, fx.count, x_size) != 0 ||
      stage_input(&staging, 1, &ps, fs.count, 4) != 0 ||
      stage_input(&staging, 2, &pz, fz.count, elem_size(qtype)) != 0) {
    st = fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    goto done;
  }
  if (misaligned(py, y_size)) {
    staging.copies[3] = py = malloc(fx.count * y_size);
    if (py == NULL) {
      st = fail(api, label, EXTQL_ORT_FAIL, "out of memory");
      goto done;
    }
  }

  {
    Job job;
    int64_t n = (int64_t)fx.count, nchunks;
    job.kind = k->kind;
    job.copy = k->copy;
    job.qtype = qtype;
    job.x = px;
    job.scale = (const float *)ps;
    job.zp = pz;
    job.y = py;
    job.n = n;
    job.D = D;
    job.inner = inner;
    job.failed = 0;
    job.flags = EXTQL_STREAM_FLAGS(n * (int64_t)y_size);
    if (n < EXTQL_ORT_PARALLEL_MIN_ELEMENTS) {
      job.chunk = n;
      run_chunk(&job, 0);
    } else {
      /* 64-element aligned ranges handed out one by one by onnxruntime's
       * intra-op pool (which runs them inline when the session has a
       * single thread). */
      job.chunk = n / EXTQL_ORT_CHUNKS;
      if (job.chunk < EXTQL_ORT_CHUNK_MIN) job.chunk = EXTQL_ORT_CHUNK_MIN;
      if (job.chunk > EXTQL_ORT_CHUNK_MAX) job.chunk = EXTQL_ORT_CHUNK_MAX;
      job.chunk = (job.chunk + 63) & ~(int64_t)63;
      nchunks = (n + job.chunk - 1) / job.chunk;
      st = api->KernelContext_ParallelFor(ctx, run_chunk, (size_t)nchunks, 0, &job);
      if (st != NULL) {
        st = wrap(api, label, st);
        goto done;
      }
    }
    if (job.failed)
      st = fail(api, label, EXTQL_ORT_FAIL, "the kernel does not know element type %d", qtype);
    else if (py != py_out)
      memcpy(py_out, py, fx.count * y_size);
  }

done:
  staging_free(&staging);
  facts_free(&fx);
  facts_free(&fs);
  facts_free(&fz);
  facts_free(&fy);
  return st;
}

/* The node has an attribute "axis" that is not an int (the int getter
 * failed): a failed status saying what it is, or NULL when there is no
 * attribute "axis" at all.  onnxruntime's int getter fails alike for an absent
 * attribute and for one of another type, so the others are probed: float,
 * string, and last the ints-array getter, which reads any attribute that
 * exists whatever its type (a size query with no buffer), so lists, tensors
 * and graphs are found too. */
static OrtStatus *axis_of_another_type(const OrtApi *api, const OrtKernelInfo *info,
                                       const char *label) {
  OrtStatus *st;
  float f;
  size_t size = 0;
  char text[64];
  st = api->KernelInfoGetAttribute_float(info, "axis", &f);
  if (st == NULL)
    return fail(api, label, EXTQL_ORT_INVALID_GRAPH, "the attribute axis must be an integer, got %g",
                (double)f);
  api->ReleaseStatus(st);
  st = api->KernelInfoGetAttribute_string(info, "axis", NULL, &size);
  if (st == NULL) {
    text[0] = '\0';
    if (size <= sizeof text) {
      st = api->KernelInfoGetAttribute_string(info, "axis", text, &size);
      if (st != NULL) {
        api->ReleaseStatus(st);
        text[0] = '\0';
      }
    } else {
      snprintf(text, sizeof text, "...");
    }
    return fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                "the attribute axis must be an integer, got the string '%s'", text);
  }
  api->ReleaseStatus(st);
  size = 0;
  st = api->KernelInfoGetAttributeArray_int64(info, "axis", NULL, &size);
  if (st == NULL)
    return fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                "the attribute axis must be an integer, got an attribute of another type "
                "(a list, tensor or graph)");
  api->ReleaseStatus(st);
  return NULL; /* no attribute axis */
}

static OrtStatus *EXTQL_ORT_CALL kernel_create(const OrtCustomOp *op_, const OrtApi *api,
                                               const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  ExtqlKernel *k;
  OrtStatus *st;
  char node[128];
  size_t size = sizeof node, nin = 0;
  int64_t axis = 1;
  int x_type, s_type, zp_type = 0, y_type, out_type = 0;
  const char *label;

  *out = NULL;
  k = (ExtqlKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  k->kind = op->kind;
  k->copy = op->copy;
  label = k->label;

  /* The label: operator and node name (onnxruntime's own messages name the
   * node, so the user can find it). */
  node[0] = '\0';
  st = api->KernelInfo_GetNodeName(info, node, &size);
  if (st != NULL) {
    api->ReleaseStatus(st);
    node[0] = '\0';
  }
  if (node[0] != '\0')
    snprintf(k->label, sizeof k->label, "%s (node '%s')", op->name, node);
  else
    snprintf(k->label, sizeof k->label, "%s", op->name);

  /* axis: an int attribute, default 1 (absent: 1; of another type: an
   * error, not a silent default). */
  st = api->KernelInfoGetAttribute_int64(info, "axis", &axis);
  if (st != NULL) {
    api->ReleaseStatus(st);
    axis = 1;
    st = axis_of_another_type(api, info, label);
    if (st != NULL) {
      free(k);
      return st;
    }
  }
  k->axis = axis;

  /* Types, when the graph knows them: fail now rather than at run time. */
  st = api->KernelInfo_GetInputCount(info, &nin);
  if (st != NULL) {
    api->ReleaseStatus(st);
    nin = 0;
  }
  if (nin != 0 && (nin < 2 || nin > 3)) {
    st = fail(api, label, EXTQL_ORT_INVALID_GRAPH, "expected 2 or 3 inputs, got %zu", nin);
    free(k);
    return st;
  }
  x_type = declared_type(api, info, 0, 0);
  s_type = declared_type(api, info, 0, 1);
  if (nin == 3) zp_type = declared_type(api, info, 0, 2); /* 0 for an empty name */
  st = check_types(api, label, op->kind, x_type, s_type, zp_type, &out_type);
  if (st == NULL && x_type != 0 && (op->kind == OP_DEQUANTIZE || nin < 3 || zp_type != 0)) {
    char b1[32], b2[32];
    y_type = declared_type(api, info, 1, 0);
    if (y_type != 0 && y_type != out_type)
      st = fail(api, label, EXTQL_ORT_INVALID_GRAPH, "the output y is %s but the inputs make it %s",
                type_name(y_type, b1, sizeof b1), type_name(out_type, b2, sizeof b2));
  }
  if (st != NULL) {
    free(k);
    return st;
  }
  *out = k;
  return NULL;
}

static void EXTQL_ORT_CALL kernel_destroy(void *kernel) { free(kernel); }

/* ------------------------------------------------------------------------ */
/* The OrtCustomOp callbacks                                                 */
/* ------------------------------------------------------------------------ */

static const char *EXTQL_ORT_CALL op_name(const OrtCustomOp *op) {
  return ((const ExtqlOp *)op)->name;
}

static const char *EXTQL_ORT_CALL op_provider(const OrtCustomOp *op) {
  (void)op;
  return "CPUExecutionProvider";
}

static int EXTQL_ORT_CALL op_input_type(const OrtCustomOp *op_, size_t index) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  if (op->form == FORM_UNTYPED) return EXTQL_ORT_UNDEFINED;
  if (op->form == FORM_ZP_ONLY) return index == 2 ? op->qtype : EXTQL_ORT_UNDEFINED;
  if (op->kind == OP_QUANTIZE) return index == 2 ? op->qtype : EXTQL_ORT_FLOAT;
  return index == 1 ? EXTQL_ORT_FLOAT : op->qtype;
}

static size_t EXTQL_ORT_CALL op_input_count(const OrtCustomOp *op) {
  (void)op;
  return 3;
}

static int EXTQL_ORT_CALL op_output_type(const OrtCustomOp *op_, size_t index) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  (void)index;
  if (op->kind == OP_DEQUANTIZE) return EXTQL_ORT_FLOAT;
  return op->form == FORM_UNTYPED ? EXTQL_ORT_UNDEFINED : op->qtype;
}

static size_t EXTQL_ORT_CALL op_output_count(const OrtCustomOp *op) {
  (void)op;
  return 1;
}

static int EXTQL_ORT_CALL op_input_characteristic(const OrtCustomOp *op, size_t index) {
  (void)op;
  return index == 2 ? EXTQL_ORT_IO_OPTIONAL : EXTQL_ORT_IO_REQUIRED;
}

static int EXTQL_ORT_CALL op_output_characteristic(const OrtCustomOp *op, size_t index) {
  (void)op;
  (void)index;
  return EXTQL_ORT_IO_REQUIRED;
}

static int EXTQL_ORT_CALL op_input_memory_type(const OrtCustomOp *op, size_t index) {
  (void)op;
  (void)index;
  return EXTQL_ORT_MEM_DEFAULT;
}

static int EXTQL_ORT_CALL op_variadic_min_arity(const OrtCustomOp *op) {
  (void)op;
  return 1;
}

static int EXTQL_ORT_CALL op_variadic_homogeneity(const OrtCustomOp *op) {
  (void)op;
  return 1;
}

static void init_op(ExtqlOp *op, int n, int qtype, int form, uint32_t version) {
  memset(op, 0, sizeof *op);
  op->name = OP_NAMES[n].name;
  op->kind = OP_NAMES[n].kind;
  op->copy = OP_NAMES[n].copy;
  op->qtype = qtype;
  op->form = form;
  op->base.version = version;
  op->base.GetName = op_name;
  op->base.GetExecutionProviderType = op_provider;
  op->base.GetInputType = op_input_type;
  op->base.GetInputTypeCount = op_input_count;
  op->base.GetOutputType = op_output_type;
  op->base.GetOutputTypeCount = op_output_count;
  op->base.KernelDestroy = kernel_destroy;
  op->base.GetInputCharacteristic = op_input_characteristic;
  op->base.GetOutputCharacteristic = op_output_characteristic;
  op->base.GetInputMemoryType = op_input_memory_type;
  op->base.GetVariadicInputMinArity = op_variadic_min_arity;
  op->base.GetVariadicInputHomogeneity = op_variadic_homogeneity;
  op->base.GetVariadicOutputMinArity = op_variadic_min_arity;
  op->base.GetVariadicOutputHomogeneity = op_variadic_homogeneity;
  op->base.CreateKernelV2 = kernel_create;
  op->base.KernelComputeV2 = kernel_compute;
}

static void init_ops(uint32_t version) {
  int n, t, i = 0;
  for (n = 0; n < N_NAMES; n++) {
    /* The typed registrations first (uint8 leading: the type of a quantize
     * without zero point), then the fallbacks, the untyped one last. */
    for (t = 0; t < N_QTYPES; t++) {
      g_op_domain[i] = n;
      init_op(&g_ops[i++], n, QTYPE_CODES[t], FORM_TYPED, version);
    }
    if (OP_NAMES[n].kind == OP_QUANTIZE) {
      g_op_domain[i] = n;
      init_op(&g_ops[i++], n, EXTQL_UINT8, FORM_ZP_ONLY, version);
    }
    g_op_domain[i] = n;
    init_op(&g_ops[i++], n, 0, FORM_UNTYPED, version);
  }
  g_nops = i;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                              */
/* ------------------------------------------------------------------------ */

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

/* Create the domains once (under g_lock). */
static OrtStatus *build_domains(const OrtApi *api) {
  OrtStatus *st;
  OrtCustomOpDomain *dom[N_DOMAINS] = {NULL};
  int d, i;
  for (d = 0; d < N_DOMAINS; d++) {
    st = api->CreateCustomOpDomain(DOMAINS[d], &dom[d]);
    if (st != NULL) goto error;
  }
  for (i = 0; i < g_nops; i++) {
    st = api->CustomOpDomain_Add(dom[OP_NAMES[g_op_domain[i]].domain], &g_ops[i].base);
    if (st != NULL) goto error;
  }
  for (d = 0; d < N_DOMAINS; d++) g_domains[d] = dom[d];
  return NULL;
error:
  for (d = 0; d < N_DOMAINS; d++)
    if (dom[d] != NULL) api->ReleaseCustomOpDomain(dom[d]);
  return st;
}

EXTQL_EXPORT OrtStatus *EXTQL_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                         const OrtApiBase *base) {
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

  lock_acquire();
  if (g_domains[0] == NULL) {
    init_ops(EXTQL_ORT_CUSTOM_OP_VERSION);
    st = build_domains(api);
  }
  lock_release();
  if (st != NULL) return st;

  for (d = 0; d < N_DOMAINS; d++) {
    st = api->AddCustomOpDomain(options, g_domains[d]);
    if (st != NULL) return st;
  }
  return NULL;
}
