/*
 * ort_blocks.c - Quark's block formats in onnxruntime: BFPQuantizeDequantize
 * and MXQuantizeDequantize (com.amd.quark) and their legacy names
 * BFPFixNeuron and MXFixNeuron (com.vai.quantize).
 *
 * One input x, one output y of x's type and shape (docs/operators:
 * bfp_quantize_dequantize, mx_quantize_dequantize).
 *
 * Registrations.  One per type of x (float32, float16: y of the same type)
 * and an untyped one last, whose kernel creation names what is wrong with any
 * other type (onnxruntime gives its untyped y the type of x).  They are of
 * OrtCustomOp version 18 and say that y may take x's buffer: onnxruntime
 * then runs a node in place when x has no other use (an activation, not a
 * graph input or a weight); the kernels read each work item before they
 * write it, so y may be x.  From C API 24 the inference callback gives y x's
 * type and shape (ort_infer.c).
 *
 * Attributes.  Read when the session is made, with the defaults and the
 * checks of extql/rules/blocks.py, from the header generated from it
 * (extql_block_rules.h: the attribute tables and the words of each
 * refusal), so a node is refused with the NumPy API's words, after the
 * label "<operator> (node '<name>')".  The axis is checked against x's rank
 * when the graph gives the rank, and at every run.
 *
 * The run.  The kernels' work items (one per block-row, extql_block_items)
 * are split into ranges of about the elements extql_split.h gives a range,
 * run by KernelContext_ParallelFor on the session's intra-op thread pool
 * (inline with one thread, and for a tensor below the pool minimum).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_block_rules.h"
#include "extql_split.h"
#include "ort_internal.h"

/* The registrations per name: one per type of x and the untyped one. */
EXTQL_STATIC_ASSERT(EXTQL_BLOCK_N_X_TYPES + 1 <= EXTQL_BLOCK_OPS_PER_NAME,
                    "EXTQL_BLOCK_OPS_PER_NAME");
/* The most attributes an operator has (the tables of extql_block_rules.h). */
#define MAX_ATTRS 16
EXTQL_STATIC_ASSERT(EXTQL_BFP_N_ATTRS <= MAX_ATTRS && EXTQL_MX_N_ATTRS <= MAX_ATTRS,
                    "MAX_ATTRS");

/* A kernel: one node of a session. */
typedef struct {
  const OrtApi *api;
  const ExtqlBlockKernels *kernels;
  ExtqlBlockParams p;
  int64_t axis;
  char label[192]; /* "BFPQuantizeDequantize (node 'n')" */
} BlockKernel;

/* ------------------------------------------------------------------------ */
/* Values as Python writes them (the NumPy API's messages)                   */
/* ------------------------------------------------------------------------ */

/* A string as Python's repr writes it: in single quotes (double quotes when
 * it holds a single quote and no double quote), backslash, the quote and
 * control characters escaped.  Bytes from 0x80 are kept (UTF-8). */
static const char *py_str_repr(const char *s, char *buf, size_t size) {
  char quote = strchr(s, '\'') != NULL && strchr(s, '"') == NULL ? '"' : '\'';
  size_t used = 0;
  const unsigned char *c;
  char piece[8];
  if (size < 8) return "";
  buf[used++] = quote;
  for (c = (const unsigned char *)s; *c != '\0'; c++) {
    if (*c == '\\' || *c == (unsigned char)quote)
      snprintf(piece, sizeof piece, "\\%c", *c);
    else if (*c == '\n')
      snprintf(piece, sizeof piece, "\\n");
    else if (*c == '\r')
      snprintf(piece, sizeof piece, "\\r");
    else if (*c == '\t')
      snprintf(piece, sizeof piece, "\\t");
    else if (*c < 0x20 || *c == 0x7f)
      snprintf(piece, sizeof piece, "\\x%02x", *c);
    else
      snprintf(piece, sizeof piece, "%c", *c);
    if (used + strlen(piece) + 2 > size) break; /* room for the quote and '\0' */
    memcpy(buf + used, piece, strlen(piece));
    used += strlen(piece);
  }
  buf[used++] = quote;
  buf[used] = '\0';
  return buf;
}

/* A double as Python's repr writes it: the fewest digits that read back as
 * the value, fixed notation for decimal exponents -4 to 15 (with ".0" for an
 * integer), else d.ddde+XX. */
static const char *py_float_repr(double v, char *buf, size_t size) {
  char text[64];
  int digits, exp10 = 0;
  char *e;
  if (isnan(v) || isinf(v)) {
    snprintf(buf, size, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    return buf;
  }
  for (digits = 1; digits < 17; digits++) {
    snprintf(text, sizeof text, "%.*e", digits - 1, v);
    if (strtod(text, NULL) == v) break;
  }
  snprintf(text, sizeof text, "%.*e", digits - 1, v);
  e = strchr(text, 'e');
  if (e != NULL) exp10 = atoi(e + 1);
  if (exp10 < -4 || exp10 >= 16) {
    snprintf(buf, size, "%s", text);
    return buf;
  }
  snprintf(buf, size, "%.*f", digits - 1 - exp10 > 0 ? digits - 1 - exp10 : 0, v);
  if (strchr(buf, '.') == NULL && strlen(buf) + 2 < size) strcat(buf, ".0");
  return buf;
}

const char *extql_py_str_repr(const char *s, char *buf, size_t size) {
  return py_str_repr(s, buf, size);
}

const char *extql_py_float_repr(double v, char *buf, size_t size) {
  return py_float_repr(v, buf, size);
}

/* A failed status "<label>: <message>" of the rules' words. */
static OrtStatus *refuse(const OrtApi *api, const char *label, int code, const char *message) {
  return extql_fail(api, label, code, "%s", message);
}

/* ------------------------------------------------------------------------ */
/* Attributes                                                                */
/* ------------------------------------------------------------------------ */

/* An attribute of the node that is not of the kind the table says (the
 * getter of that kind failed): its value as Python shows it in text (NULL:
 * the node has no attribute of that name). */
static const char *value_of_another_kind(const OrtApi *api, const OrtKernelInfo *info,
                                         const char *name, char kind, char *buf,
                                         size_t size) {
  OrtStatus *st;
  int64_t i;
  float f;
  size_t n = 0;
  char *text;
  if (kind != 'i') {
    st = api->KernelInfoGetAttribute_int64(info, name, &i);
    if (st == NULL) {
      snprintf(buf, size, "%lld", (long long)i);
      return buf;
    }
    api->ReleaseStatus(st);
  }
  st = api->KernelInfoGetAttribute_float(info, name, &f);
  if (st == NULL) return py_float_repr((double)f, buf, size);
  api->ReleaseStatus(st);
  if (kind != 's') {
    st = api->KernelInfoGetAttribute_string(info, name, NULL, &n);
    if (st == NULL) {
      text = (char *)malloc(n + 1);
      if (text == NULL) {
        snprintf(buf, size, "a string");
        return buf;
      }
      st = api->KernelInfoGetAttribute_string(info, name, text, &n);
      if (st == NULL) {
        text[n < 1 ? 0 : n - 1] = '\0';
        py_str_repr(text, buf, size);
      } else {
        snprintf(buf, size, "a string");
      }
      free(text);
      if (st != NULL) api->ReleaseStatus(st);
      return buf;
    }
    api->ReleaseStatus(st);
  }
  /* The ints-array getter answers a size query for an attribute of any
   * type: a list (of ints, whose values are shown), a tensor or a graph. */
  n = 0;
  st = api->KernelInfoGetAttributeArray_int64(info, name, NULL, &n);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return NULL; /* no such attribute */
  }
  if (n > 0) {
    int64_t *v = (int64_t *)malloc(n * sizeof *v);
    size_t k, used;
    if (v != NULL && (st = api->KernelInfoGetAttributeArray_int64(info, name, v, &n)) == NULL) {
      used = (size_t)snprintf(buf, size, "[");
      for (k = 0; k < n && used < size; k++)
        used += (size_t)snprintf(buf + used, size - used, k ? ", %lld" : "%lld", (long long)v[k]);
      if (used < size) snprintf(buf + used, size - used, "]");
      free(v);
      return buf;
    }
    if (st != NULL) api->ReleaseStatus(st);
    free(v);
  }
  snprintf(buf, size, "an attribute of another type (a list, tensor or graph)");
  return buf;
}

const char *extql_attr_value_text(const OrtApi *api, const OrtKernelInfo *info,
                                  const char *name, char kind, char *buf, size_t size) {
  return value_of_another_kind(api, info, name, kind, buf, size);
}

/* The node's attributes of the table, each of its kind, with the defaults:
 * integers into ints[], strings into strs[] (malloc'd, to free). */
static OrtStatus *read_attributes(const OrtApi *api, const OrtKernelInfo *info,
                                  const char *label, const ExtqlBlockAttr *table, int n,
                                  int64_t *ints, char **strs) {
  char value[256], msg[1024];
  OrtStatus *st;
  size_t size;
  int a;
  for (a = 0; a < n; a++) {
    const ExtqlBlockAttr *t = &table[a];
    const char *other;
    if (t->kind == 'i') {
      st = api->KernelInfoGetAttribute_int64(info, t->name, &ints[a]);
      if (st == NULL) continue;
      api->ReleaseStatus(st);
      ints[a] = t->int_default;
    } else {
      size = 0;
      st = api->KernelInfoGetAttribute_string(info, t->name, NULL, &size);
      if (st == NULL) {
        strs[a] = (char *)malloc(size + 1);
        if (strs[a] == NULL) return extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
        st = api->KernelInfoGetAttribute_string(info, t->name, strs[a], &size);
        if (st != NULL) return extql_wrap(api, label, st);
        strs[a][size < 1 ? 0 : size - 1] = '\0';
        continue;
      }
      api->ReleaseStatus(st);
      strs[a] = (char *)malloc(strlen(t->string_default) + 1);
      if (strs[a] == NULL) return extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
      strcpy(strs[a], t->string_default);
    }
    other = value_of_another_kind(api, info, t->name, t->kind, value, sizeof value);
    if (other == NULL) continue; /* absent: the default */
    if (t->kind == 'i')
      extql_block_msg_not_integer(msg, sizeof msg, t->name, other);
    else
      extql_block_msg_not_string(msg, sizeof msg, t->name, other);
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  return NULL;
}

static OrtStatus *check_common(const OrtApi *api, const char *label, int64_t block,
                               int64_t mode) {
  char msg[1024];
  if (block < 1) {
    extql_block_msg_block_size(msg, sizeof msg, (long long)block);
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  if (!extql_block_rounding_ok(mode)) {
    extql_block_msg_rounding_mode(msg, sizeof msg, (long long)mode);
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  return NULL;
}

/* BFPQuantizeDequantize's attributes, checked as extql.rules.blocks.check_bfp
 * does (in its order), into the kernels' parameters. */
static OrtStatus *bfp_params(const OrtApi *api, const char *label, const int64_t *v,
                             char *const *s, ExtqlBlockParams *p, int64_t *axis) {
  char msg[1024], quoted[256];
  const char *method = s[EXTQL_BFP_ATTR_BFP_METHOD];
  int64_t lo, hi, bits = v[EXTQL_BFP_ATTR_BIT_WIDTH], block = v[EXTQL_BFP_ATTR_BLOCK_SIZE];
  int64_t sub = v[EXTQL_BFP_ATTR_SUB_BLOCK_SIZE], shift = v[EXTQL_BFP_ATTR_SUB_BLOCK_SHIFT_BITS];
  int m, kind = -1;
  OrtStatus *st;
  for (m = 0; m < EXTQL_BFP_N_METHODS; m++)
    if (strcmp(method, EXTQL_BFP_METHODS[m].name) == 0) kind = EXTQL_BFP_METHODS[m].kind;
  py_str_repr(method, quoted, sizeof quoted);
  if (kind < 0) {
    extql_block_msg_bfp_method(msg, sizeof msg, quoted);
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  extql_bfp_bit_width_range(kind, &lo, &hi);
  if (bits < lo || bits > hi) {
    extql_block_msg_bit_width(msg, sizeof msg, (long long)bits, (long long)lo, (long long)hi,
                              quoted, (long long)(lo - EXTQL_BFP_SIGN_AND_EXPONENT_BITS),
                              (long long)(hi - EXTQL_BFP_SIGN_AND_EXPONENT_BITS));
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  st = check_common(api, label, block, v[EXTQL_BFP_ATTR_ROUNDING_MODE]);
  if (st != NULL) return st;
  if (kind == EXTQL_BLOCK_BFP_PRIME) {
    if (sub < 1 || block % sub != 0) {
      extql_block_msg_sub_block_size(msg, sizeof msg, (long long)sub, (long long)block, quoted);
      return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
    }
    if (shift < EXTQL_BFP_SHIFT_BITS_LO || shift > EXTQL_BFP_SHIFT_BITS_HI) {
      extql_block_msg_sub_block_shift_bits(msg, sizeof msg, (long long)shift,
                                           (long long)EXTQL_BFP_SHIFT_BITS_LO,
                                           (long long)EXTQL_BFP_SHIFT_BITS_HI, quoted);
      return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
    }
  }
  /* The parameters as extql.api.blocks gives them to the kernels. */
  memset(p, 0, sizeof *p);
  p->kind = kind;
  p->block = block;
  p->rounding = (int)v[EXTQL_BFP_ATTR_ROUNDING_MODE];
  p->mbits = (int)(bits - EXTQL_BFP_SIGN_AND_EXPONENT_BITS);
  p->bfloat_first = v[EXTQL_BFP_ATTR_CONVERT_TO_BFLOAT_BEFORE_BFP] != 0;
  p->compiler = v[EXTQL_BFP_ATTR_USE_COMPILER_VERSION_CPU_KERNEL] != 0;
  p->sub_block = sub;
  p->shift_bits = (int)shift;
  *axis = v[EXTQL_BFP_ATTR_AXIS];
  return NULL;
}

/* MXQuantizeDequantize's attributes, checked as extql.rules.blocks.check_mx
 * does, into the kernels' parameters. */
static OrtStatus *mx_params(const OrtApi *api, const char *label, const int64_t *v,
                            char *const *s, ExtqlBlockParams *p, int64_t *axis) {
  char msg[1024], quoted[256];
  const char *name = s[EXTQL_MX_ATTR_ELEMENT_DTYPE];
  const ExtqlMxElement *el = NULL;
  OrtStatus *st;
  int e;
  for (e = 0; e < EXTQL_MX_N_ELEMENTS; e++)
    if (strcmp(name, EXTQL_MX_ELEMENTS[e].name) == 0) el = &EXTQL_MX_ELEMENTS[e];
  if (el == NULL) {
    extql_block_msg_element_dtype(msg, sizeof msg, py_str_repr(name, quoted, sizeof quoted));
    return refuse(api, label, EXTQL_ORT_INVALID_GRAPH, msg);
  }
  st = check_common(api, label, v[EXTQL_MX_ATTR_BLOCK_SIZE], v[EXTQL_MX_ATTR_ROUNDING_MODE]);
  if (st != NULL) return st;
  memset(p, 0, sizeof *p);
  p->kind = EXTQL_BLOCK_MX;
  p->block = v[EXTQL_MX_ATTR_BLOCK_SIZE];
  p->rounding = (int)v[EXTQL_MX_ATTR_ROUNDING_MODE];
  p->mbits = el->mbits;
  p->sub_block = 1;
  p->ebits = el->ebits;
  p->emax = el->emax;
  p->largest = el->largest;
  *axis = v[EXTQL_MX_ATTR_AXIS];
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* x: its type and the blocks' layout                                        */
/* ------------------------------------------------------------------------ */

static OrtStatus *check_x_type(const OrtApi *api, const char *label, int code, int status) {
  char msg[256], name[32];
  if (code == 0 || extql_block_x_type_ok(code)) return NULL;
  extql_block_msg_x_type(msg, sizeof msg, extql_type_name(code, name, sizeof name));
  return refuse(api, label, status, msg);
}

/* The axis against the rank, as extql.rules.blocks.check_axis: rank 0 and 1
 * ignore it. */
static OrtStatus *check_axis(const OrtApi *api, const char *label, int64_t axis, int64_t rank,
                             int status) {
  char msg[256];
  if (rank <= 1 || (axis >= -rank && axis < rank)) return NULL;
  extql_block_msg_axis(msg, sizeof msg, (long long)axis, (long long)-rank,
                       (long long)(rank - 1), (long long)rank);
  return refuse(api, label, status, msg);
}

/* x's type and rank as the graph declares them (0 and -1 when it does not
 * say). */
static void declared_x(const OrtApi *api, const OrtKernelInfo *info, int *type, int64_t *rank) {
  OrtTypeInfo *ti = NULL;
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  OrtStatus *st;
  int onnx_type = 0;
  size_t r = 0;
  *type = 0;
  *rank = -1;
  st = api->KernelInfo_GetInputTypeInfo(info, 0, &ti);
  if (st == NULL && ti != NULL) st = api->GetOnnxTypeFromTypeInfo(ti, &onnx_type);
  if (st == NULL && ti != NULL && onnx_type == EXTQL_ORT_TYPE_TENSOR) {
    st = api->CastTypeInfoToTensorInfo(ti, &tensor);
    if (st == NULL && tensor != NULL) st = api->GetTensorElementType(tensor, type);
    /* A tensor of unknown shape reports rank 0, as a scalar does: only a
     * rank of 2 or more says something. */
    if (st == NULL && tensor != NULL) st = api->GetDimensionsCount(tensor, &r);
    if (st == NULL && r >= 2) *rank = (int64_t)r;
  }
  if (st != NULL) {
    api->ReleaseStatus(st);
    *type = 0;
  }
  if (ti != NULL) api->ReleaseTypeInfo(ti);
}

/* [outer, D, inner] of x with the blocks along the axis (rank 0 and 1: the
 * only axis). */
static void layout(const TensorFacts *x, int64_t axis, int64_t *outer, int64_t *D,
                   int64_t *inner) {
  int64_t rank = (int64_t)x->rank, a, i;
  *outer = 1;
  *inner = 1;
  if (rank <= 1) {
    *D = (int64_t)x->count;
    return;
  }
  a = axis < 0 ? axis + rank : axis;
  for (i = 0; i < a; i++) *outer *= x->dims[i];
  for (i = a + 1; i < rank; i++) *inner *= x->dims[i];
  *D = x->dims[a];
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

static OrtStatus *EXTQL_ORT_CALL block_kernel_create(const OrtCustomOp *op_, const OrtApi *api,
                                                     const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  const ExtqlBlockAttr *table = op->kind == OP_BFP ? EXTQL_BFP_ATTRIBUTES : EXTQL_MX_ATTRIBUTES;
  int n = op->kind == OP_BFP ? EXTQL_BFP_N_ATTRS : EXTQL_MX_N_ATTRS;
  int64_t ints[MAX_ATTRS] = {0}, rank;
  char *strs[MAX_ATTRS] = {NULL};
  BlockKernel *k;
  OrtStatus *st;
  int a, type;

  *out = NULL;
  k = (BlockKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  k->kernels = op->blocks;
  extql_kernel_label(api, info, op->name, k->label, sizeof k->label);
  st = read_attributes(api, info, k->label, table, n, ints, strs);
  if (st == NULL && op->kind == OP_BFP) st = bfp_params(api, k->label, ints, strs, &k->p, &k->axis);
  if (st == NULL && op->kind == OP_MX) st = mx_params(api, k->label, ints, strs, &k->p, &k->axis);
  for (a = 0; a < n; a++) free(strs[a]);
  if (st == NULL) {
    /* What the graph says of x: a wrong type or axis fails now. */
    declared_x(api, info, &type, &rank);
    st = check_x_type(api, k->label, type, EXTQL_ORT_INVALID_GRAPH);
    if (st == NULL) st = check_axis(api, k->label, k->axis, rank, EXTQL_ORT_INVALID_GRAPH);
  }
  if (st == NULL && k->kernels == NULL)
    st = extql_fail(api, k->label, EXTQL_ORT_FAIL, "this library has no block-format kernels");
  if (st != NULL) {
    free(k);
    return st;
  }
  *out = k;
  return NULL;
}

static void EXTQL_ORT_CALL block_kernel_destroy(void *kernel) { free(kernel); }

/* Work for one KernelContext_ParallelFor call: ranges of `per` work items. */
typedef struct {
  const ExtqlBlockKernels *kernels;
  const ExtqlBlockParams *p;
  int xtype;
  const void *x;
  void *y;
  int64_t outer, D, inner, items, per;
  volatile int failed; /* a range function's non-zero code */
} BlockJob;

static void EXTQL_ORT_CALL run_items(void *data, size_t index) {
  BlockJob *job = (BlockJob *)data;
  int64_t start = (int64_t)index * job->per, stop = start + job->per;
  int rc;
  if (start >= job->items) return;
  if (stop > job->items) stop = job->items;
  rc = job->kernels->range(job->p, job->xtype, job->x, job->y, job->outer, job->D, job->inner,
                           start, stop);
  if (rc != 0) job->failed = rc;
}

/* The data of a tensor at an address aligned for its elements: the tensor
 * itself, or a copy (*copy, to free) when it is not (a caller's buffer at
 * an odd offset; the kernels read and write typed elements). */
static void *aligned(void *p, size_t count, size_t size, int copy_data, void **copy) {
  *copy = NULL;
  if (((uintptr_t)p & (uintptr_t)(size - 1)) == 0) return p;
  *copy = malloc(count * size);
  if (*copy != NULL && copy_data) memcpy(*copy, p, count * size);
  return *copy;
}

static OrtStatus *EXTQL_ORT_CALL block_kernel_compute(void *kernel, OrtKernelContext *ctx) {
  BlockKernel *k = (BlockKernel *)kernel;
  const OrtApi *api = k->api;
  const char *label = k->label;
  const OrtValue *vx = NULL;
  OrtValue *vy = NULL;
  TensorFacts fx, fy;
  OrtStatus *st = NULL;
  void *px = NULL, *py = NULL, *x_copy = NULL, *y_copy = NULL;
  const void *x;
  void *y;
  size_t elem;
  BlockJob job;
  int64_t n, chunk, size;

  extql_facts_init(&fx);
  extql_facts_init(&fy);
  EXTQL_TRY(api->KernelContext_GetInput(ctx, 0, &vx));
  if (vx == NULL)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "the input x is required");
  st = extql_facts_of_value(api, label, "x", vx, &fx);
  if (st == NULL && fx.type == 0)
    st = extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "x has no element type");
  if (st == NULL) st = check_x_type(api, label, fx.type, EXTQL_ORT_INVALID_ARGUMENT);
  if (st == NULL)
    st = check_axis(api, label, k->axis, (int64_t)fx.rank, EXTQL_ORT_INVALID_ARGUMENT);
  if (st != NULL) goto done;
  st = api->KernelContext_GetOutput(ctx, 0, fx.rank ? fx.dims : fx.small, fx.rank, &vy);
  if (st == NULL && vy == NULL) st = api->CreateStatus(EXTQL_ORT_FAIL, "no output tensor");
  if (st == NULL) st = extql_facts_of_value(api, label, "y", vy, &fy);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (fy.type != fx.type || fy.count != fx.count) {
    char b1[32], b2[32];
    st = extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH, "the output y is %s but x is %s",
                    extql_type_name(fy.type, b1, sizeof b1),
                    extql_type_name(fx.type, b2, sizeof b2));
    goto done;
  }
  if (fx.count == 0) goto done; /* empty: nothing to compute */
  st = api->GetTensorMutableData((OrtValue *)vx, &px);
  if (st == NULL) st = api->GetTensorMutableData(vy, &py);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (px == NULL || py == NULL) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave a tensor without data");
    goto done;
  }
  elem = extql_elem_size(fx.type);
  x = aligned(px, fx.count, elem, 1, &x_copy);
  y = aligned(py, fx.count, elem, 0, &y_copy);
  if (x == NULL || y == NULL) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    goto done;
  }

  memset(&job, 0, sizeof job);
  job.kernels = k->kernels;
  job.p = &k->p;
  job.xtype = fx.type;
  job.x = x;
  job.y = y;
  layout(&fx, k->axis, &job.outer, &job.D, &job.inner);
  job.items = k->kernels->items(&k->p, job.outer, job.D, job.inner);
  n = (int64_t)fx.count;
  chunk = extql_chunk_for(n, 0); /* the session pool: its size is not known here */
  size = k->kernels->item_size(&k->p, job.inner);
  job.per = chunk / (size > 0 ? size : 1);
  if (job.per < 1) job.per = 1;
  if (chunk >= n || job.items <= 1 || job.per >= job.items) {
    job.per = job.items;
    run_items(&job, 0);
  } else {
    /* ParallelFor runs the ranges inline when the session has one thread. */
    st = api->KernelContext_ParallelFor(ctx, run_items,
                                        (size_t)((job.items + job.per - 1) / job.per), 0, &job);
    if (st != NULL) {
      st = extql_wrap(api, label, st);
      goto done;
    }
  }
  if (job.failed == -2)
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory (a block buffer)");
  else if (job.failed != 0)
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "the kernel does not know element type %d",
                    fx.type);
  else if (y != py)
    memcpy(py, y, fx.count * elem);

done:
  free(x_copy);
  free(y_copy);
  extql_facts_free(&fx);
  extql_facts_free(&fy);
  return st;
}

/* ------------------------------------------------------------------------ */
/* Registrations                                                             */
/* ------------------------------------------------------------------------ */

/* y may take x's buffer: the pair (0, 0), in arrays onnxruntime hands back
 * to op_release_pairs. */
static size_t EXTQL_ORT_CALL op_may_inplace(int **input_index, int **output_index) {
  *input_index = (int *)malloc(sizeof(int));
  *output_index = (int *)malloc(sizeof(int));
  if (*input_index == NULL || *output_index == NULL) {
    free(*input_index);
    free(*output_index);
    *input_index = *output_index = NULL;
    return 0;
  }
  **input_index = 0;
  **output_index = 0;
  return 1;
}

/* y is never x itself without a write: no alias. */
static size_t EXTQL_ORT_CALL op_no_alias(int **input_index, int **output_index) {
  *input_index = *output_index = NULL;
  return 0;
}

static void EXTQL_ORT_CALL op_release_pairs(int *input_index, int *output_index) {
  free(input_index);
  free(output_index);
}

static OrtStatus *EXTQL_ORT_CALL op_infer(const OrtCustomOp *op, OrtShapeInferContext *ctx) {
  extql_infer_like_input(((const ExtqlOp *)op)->infer_api, ctx, extql_block_x_type_ok);
  return NULL;
}

static void init_block_op(ExtqlOp *op, const ExtqlOpSet *set, int n, int type) {
  extql_op_init(op, set, n, type, EXTQL_ORT_CUSTOM_OP_VERSION_INPLACE);
  op->form = type != EXTQL_ORT_UNDEFINED ? EXTQL_FORM_TYPED : EXTQL_FORM_UNTYPED;
  op->blocks = set->blocks;
  op->base.KernelDestroy = block_kernel_destroy;
  op->base.CreateKernelV2 = block_kernel_create;
  op->base.KernelComputeV2 = block_kernel_compute;
  if (set->infer_api != NULL) op->base.InferOutputShapeFn = op_infer;
  op->base.GetMayInplace = op_may_inplace;
  op->base.ReleaseMayInplace = op_release_pairs;
  op->base.GetAliasMap = op_no_alias;
  op->base.ReleaseAliasMap = op_release_pairs;
}

int extql_block_init_ops(ExtqlOp *ops, const ExtqlOpSet *set, int n) {
  int t, i = 0;
  /* The typed ones first (onnxruntime builds the operator's schema from the
   * first, and types y from the first whose input type matches), the
   * untyped one last. */
  for (t = 0; t < EXTQL_BLOCK_N_X_TYPES; t++) init_block_op(&ops[i++], set, n, EXTQL_BLOCK_X_TYPES[t]);
  init_block_op(&ops[i++], set, n, EXTQL_ORT_UNDEFINED);
  return i;
}
