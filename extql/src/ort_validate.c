/*
 * ort_validate.c - the checks of a node and of its inputs.
 *
 * Everything the NumPy API (extql/api/linear.py) rejects is rejected here with
 * the same rule and the same words.  Nothing reads outside a buffer: each
 * input's element count and shape come from onnxruntime and are checked
 * before a kernel touches them.  Kernel creation checks what the graph
 * declares (input count, element types, the attribute axis), so a wrong graph
 * fails when the session is made; the run checks the actual tensors.
 *
 * `axis` defaults to 1, as the operator documents say (Quark's own
 * custom-op library uses 0 when the attribute is absent; extql follows the
 * documents).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_rules.h"
#include "extql_types.h"
#include "ort_internal.h"

/* ------------------------------------------------------------------------ */
/* Tensor facts                                                              */
/* ------------------------------------------------------------------------ */

void extql_facts_init(TensorFacts *t) {
  t->type = 0;
  t->rank = 0;
  t->count = 0;
  t->dims = t->small;
}

void extql_facts_free(TensorFacts *t) {
  if (t->dims != t->small) free(t->dims);
  t->dims = t->small;
}

static OrtStatus *facts_of_info(const OrtApi *api, const char *label,
                                const OrtTensorTypeAndShapeInfo *info, TensorFacts *t) {
  EXTQL_TRY(api->GetTensorElementType(info, &t->type));
  EXTQL_TRY(api->GetDimensionsCount(info, &t->rank));
  if (t->rank > EXTQL_SMALL_RANK) {
    t->dims = (int64_t *)malloc(t->rank * sizeof(int64_t));
    if (t->dims == NULL) {
      t->dims = t->small;
      return extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    }
  }
  if (t->rank > 0) EXTQL_TRY(api->GetDimensions(info, t->dims, t->rank));
  return NULL;
}

/* Type, shape and element count of a tensor value. */
OrtStatus *extql_facts_of_value(const OrtApi *api, const char *label, const char *what,
                                const OrtValue *v, TensorFacts *t) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  OrtStatus *st;
  st = api->GetTensorTypeAndShape(v, &info);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "%s must be a tensor", what);
  }
  st = facts_of_info(api, label, info, t);
  if (st == NULL) {
    OrtStatus *st2 = api->GetTensorShapeElementCount(info, &t->count);
    if (st2 != NULL) st = extql_wrap(api, label, st2);
  }
  api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

/* The facts of the scale and the zero point when the graph makes them
 * constants (initializers), read once for every run of the kernel; an input
 * that is not a constant, or whose facts cannot be read, is left to each
 * run (which says what is wrong with it). */
void extql_read_constant_facts(const OrtApi *api, const OrtKernelInfo *info, ExtqlKernel *k) {
  size_t i, nin = 0;
  OrtStatus *st = api->KernelInfo_GetInputCount(info, &nin);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return;
  }
  for (i = 1; i < 3 && i < nin; i++) {
    TensorFacts *t = &k->const_facts[i - 1];
    const OrtValue *v = NULL;
    int is_constant = 0;
    extql_facts_init(t);
    st = api->KernelInfoGetConstantInput_tensor(info, i, &is_constant, &v);
    if (st == NULL && is_constant && v != NULL)
      st = extql_facts_of_value(api, k->label, "", v, t);
    else
      is_constant = 0;
    if (st != NULL) {
      api->ReleaseStatus(st);
      extql_facts_free(t);
      is_constant = 0;
    }
    k->const_in[i - 1] = is_constant;
  }
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
/* The rules (the same as extql/api/linear.py)                                */
/* ------------------------------------------------------------------------ */

/* Names of the inputs, as the operator documents call them (extql_rules.h). */
const char *extql_input_name(int kind, int index) {
  static const char *const q[3] = EXTQL_QUANTIZE_INPUT_NAMES;
  static const char *const dq[3] = EXTQL_DEQUANTIZE_INPUT_NAMES;
  return kind == OP_QUANTIZE ? q[index] : dq[index];
}

/* Every quantized type: the eight, the sub-byte ones, the small floats (the
 * order of extql.rules.types.QUANTIZED, so the messages are the NumPy API's). */
#define EXTQL_ALL_QTYPE_NAMES \
  EXTQL_QTYPE_NAMES ", " EXTQL_SUBBYTE_NAMES ", " EXTQL_SMALLFLOAT_NAMES

/* Check the element types; *out_type gets the type of y and *prec (quantize)
 * the precision of the division: the attribute precision, else the scale's
 * type.  zp_type is 0 when there is no zero point.  Any type may be 0 = not
 * known yet (kernel creation from a graph without types): it is then not
 * checked.  output_dtype and precision are the attributes (0: absent),
 * already known to be of the right kind (extql_read_type_attrs). */
OrtStatus *extql_check_types(const OrtApi *api, const char *label, int kind, int x_type,
                             int s_type, int zp_type, int output_dtype, int precision,
                             int *out_type, int *prec) {
  char b1[32], b2[32];
  /* Quantize's scale may be int32, as the official operator allows. */
  if (s_type != 0 && !extql_is_real_type(s_type) &&
      !(kind == OP_QUANTIZE && s_type == EXTQL_INT32))
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "%s must be one of %s, got %s",
                      extql_input_name(kind, 1),
                      kind == OP_QUANTIZE ? EXTQL_REAL_NAMES ", int32" : EXTQL_REAL_NAMES,
                      extql_type_name(s_type, b1, sizeof b1));
  if (kind == OP_QUANTIZE) {
    /* int32 x: the official operator allows it; the kernels round it to
     * float32. */
    if (x_type != 0 && !extql_is_quantize_x_type(x_type))
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "x must be one of " EXTQL_QUANTIZE_X_NAMES ", got %s",
                        extql_type_name(x_type, b1, sizeof b1));
    if (zp_type != 0 && !extql_is_qtype(zp_type))
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "y_zero_point must be one of " EXTQL_ALL_QTYPE_NAMES ", got %s",
                        extql_type_name(zp_type, b1, sizeof b1));
    if (zp_type != 0 && output_dtype != 0 && output_dtype != zp_type)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "the attribute output_dtype (%s) must be the zero point's type %s",
                        extql_type_name(output_dtype, b1, sizeof b1),
                        extql_type_name(zp_type, b2, sizeof b2));
    *out_type = zp_type != 0 ? zp_type : output_dtype != 0 ? output_dtype : EXTQL_UINT8;
    /* Without the attribute: the scale's type, float64 for an int32 scale
     * (as ONNX's reference divides): extql_rules.h. */
    *prec = precision != 0 ? precision : extql_default_precision(s_type);
  } else {
    if (x_type != 0 && !extql_is_qtype(x_type))
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "x must be one of " EXTQL_ALL_QTYPE_NAMES ", got %s",
                        extql_type_name(x_type, b1, sizeof b1));
    if (zp_type != 0 && x_type != 0 && zp_type != x_type)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "x_zero_point must have the dtype of x (%s), got %s",
                        extql_type_name(x_type, b1, sizeof b1),
                        extql_type_name(zp_type, b2, sizeof b2));
    *out_type = output_dtype != 0 ? output_dtype : s_type;
    *prec = 0;
  }
  return NULL;
}

/* A blocked scale: x's shape except ceil(D / block) along axis; the zero
 * point of the scale's shape. */
static OrtStatus *check_blocked(const OrtApi *api, const char *label, const TensorFacts *x,
                                const TensorFacts *s, const TensorFacts *zp, int64_t axis,
                                int64_t block, int64_t *D, int64_t *inner) {
  char b1[256], b2[256];
  int64_t rank = (int64_t)x->rank, a, i, blocks;
  int bad;
  if (rank == 0)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "blocked quantization (block_size %lld) needs x of rank >= 1",
                      (long long)block);
  if (axis < -rank || axis >= rank)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "axis %lld is out of range for x of rank %lld", (long long)axis,
                      (long long)rank);
  a = axis < 0 ? axis + rank : axis;
  blocks = (x->dims[a] + block - 1) / block;
  bad = (int64_t)s->rank != rank;
  for (i = 0; !bad && i < rank; i++)
    bad = s->dims[i] != (i == a ? blocks : x->dims[i]);
  if (bad)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "with block_size %lld along axis %lld, the scale must have x's shape %s "
                      "with ceil(%lld / %lld) = %lld blocks along the axis, got %s",
                      (long long)block, (long long)a,
                      extql_shape_str(x->dims, x->rank, b1, sizeof b1), (long long)x->dims[a],
                      (long long)block, (long long)blocks,
                      extql_shape_str(s->dims, s->rank, b2, sizeof b2));
  if (zp != NULL) {
    bad = zp->rank != s->rank;
    for (i = 0; !bad && i < rank; i++) bad = zp->dims[i] != s->dims[i];
    if (bad)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "the zero point must have the shape of the scale %s, got %s",
                        extql_shape_str(s->dims, s->rank, b1, sizeof b1),
                        extql_shape_str(zp->dims, zp->rank, b2, sizeof b2));
  }
  *D = x->dims[a];
  *inner = 1;
  for (i = a + 1; i < rank; i++) *inner *= x->dims[i];
  return NULL;
}

/* Check scale / zero point / axis (and block size) against x's shape;
 * return the [outer, D, inner] view the kernels take (per tensor: D = 1,
 * inner = all). */
OrtStatus *extql_check_granularity(const OrtApi *api, const char *label, const TensorFacts *x,
                                   const TensorFacts *s, const TensorFacts *zp, int64_t axis,
                                   int64_t block, int64_t *D, int64_t *inner) {
  char b1[256], b2[256];
  int64_t rank = (int64_t)x->rank, a, i;
  if (block > 0) return check_blocked(api, label, x, s, zp, axis, block, D, inner);
  if (s->rank >= 2)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "the scale must be a scalar or 1-D, got shape %s (a blocked scale, of "
                      "x's rank, needs the attribute block_size)",
                      extql_shape_str(s->dims, s->rank, b1, sizeof b1));
  if (zp != NULL) {
    int bad;
    if (s->count == 1) {
      bad = zp->rank >= 2 || zp->count != 1;
    } else {
      bad = zp->rank != s->rank || (s->rank == 1 && zp->dims[0] != s->dims[0]);
    }
    if (bad)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "the zero point must have the shape of the scale %s, got %s",
                        extql_shape_str(s->dims, s->rank, b1, sizeof b1),
                        extql_shape_str(zp->dims, zp->rank, b2, sizeof b2));
  }
  if (s->count == 1) {
    *D = 1;
    *inner = (int64_t)x->count;
    return NULL;
  }
  if (rank == 0)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "a per-axis scale of shape %s needs x of rank >= 1, got a scalar",
                      extql_shape_str(s->dims, s->rank, b1, sizeof b1));
  if (axis < -rank || axis >= rank)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "axis %lld is out of range for x of rank %lld", (long long)axis,
                      (long long)rank);
  a = axis < 0 ? axis + rank : axis;
  /* s->rank is 1 here (rank 0 has one element) */
  if (s->dims[0] != x->dims[a])
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "the scale has %lld elements but x has %lld along axis %lld (shape %s)",
                      (long long)s->dims[0], (long long)x->dims[a], (long long)a,
                      extql_shape_str(x->dims, x->rank, b1, sizeof b1));
  *D = x->dims[a];
  *inner = 1;
  for (i = a + 1; i < rank; i++) *inner *= x->dims[i];
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* The node, at kernel creation                                              */
/* ------------------------------------------------------------------------ */

/* The node has an attribute `name` that is not an int (the int getter
 * failed): a failed status saying what it is, or NULL when there is no such
 * attribute at all.  onnxruntime's int getter fails alike for an absent
 * attribute and for one of another type, so the others are probed: float,
 * string, and last the ints-array getter, which reads any attribute that
 * exists whatever its type (a size query with no buffer), so lists, tensors
 * and graphs are found too. */
static OrtStatus *int_of_another_type(const OrtApi *api, const OrtKernelInfo *info,
                                      const char *label, const char *name) {
  OrtStatus *st;
  float f;
  size_t size = 0;
  char text[64];
  st = api->KernelInfoGetAttribute_float(info, name, &f);
  if (st == NULL)
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute %s must be an integer, got %g", name, (double)f);
  api->ReleaseStatus(st);
  st = api->KernelInfoGetAttribute_string(info, name, NULL, &size);
  if (st == NULL) {
    text[0] = '\0';
    if (size <= sizeof text) {
      st = api->KernelInfoGetAttribute_string(info, name, text, &size);
      if (st != NULL) {
        api->ReleaseStatus(st);
        text[0] = '\0';
      }
    } else {
      snprintf(text, sizeof text, "...");
    }
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute %s must be an integer, got the string '%s'", name, text);
  }
  api->ReleaseStatus(st);
  size = 0;
  st = api->KernelInfoGetAttributeArray_int64(info, name, NULL, &size);
  if (st == NULL)
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute %s must be an integer, got an attribute of another type "
                      "(a list, tensor or graph)", name);
  api->ReleaseStatus(st);
  return NULL; /* no such attribute */
}

/* The int attribute `name`, or dflt when the node has none (of another
 * type: an error, not a silent default). */
static OrtStatus *read_int(const OrtApi *api, const OrtKernelInfo *info, const char *label,
                           const char *name, int64_t dflt, int64_t *value) {
  OrtStatus *st = api->KernelInfoGetAttribute_int64(info, name, value);
  if (st == NULL) return NULL;
  api->ReleaseStatus(st);
  *value = dflt;
  return int_of_another_type(api, info, label, name);
}

/* The attribute axis: an int, default 1. */
OrtStatus *extql_read_axis(const OrtApi *api, const OrtKernelInfo *info, const char *label,
                           int64_t *axis) {
  return read_int(api, info, label, "axis", EXTQL_DEFAULT_AXIS, axis);
}

/* The attribute block_size: an int >= 0, default 0 (0: per tensor or per
 * axis; > 0: blocked quantization along axis). */
OrtStatus *extql_read_block_size(const OrtApi *api, const OrtKernelInfo *info,
                                 const char *label, int64_t *block) {
  EXTQL_TRY(read_int(api, info, label, "block_size", EXTQL_DEFAULT_BLOCK_SIZE, block));
  if (*block < 0)
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute block_size must be >= 0, got %lld", (long long)*block);
  return NULL;
}

/* Whether code names a type the attribute output_dtype may give: one of
 * the quantized types for quantize, float32 / float16 / bfloat16 for
 * dequantize. */
int extql_output_dtype_ok(int kind, int64_t code) {
  if (code <= 0 || code > 64) return 0;
  return kind == OP_QUANTIZE ? extql_is_qtype((int)code) : extql_is_output_type((int)code);
}

/* The attributes output_dtype (quantize: one of the quantized types;
 * dequantize: float32, float16 or bfloat16) and precision (quantize:
 * float32, float16, bfloat16 or float64), 0 when absent, and quantize's saturate (0
 * or 1, default 1). */
OrtStatus *extql_read_type_attrs(const OrtApi *api, const OrtKernelInfo *info,
                                 const char *label, int kind, int *output_dtype,
                                 int *precision, int *saturate) {
  int64_t out = EXTQL_DEFAULT_OUTPUT_DTYPE, prec = EXTQL_DEFAULT_PRECISION,
          sat = EXTQL_DEFAULT_SATURATE;
  char b1[32];
  EXTQL_TRY(read_int(api, info, label, "output_dtype", EXTQL_DEFAULT_OUTPUT_DTYPE, &out));
  if (kind == OP_QUANTIZE)
    EXTQL_TRY(read_int(api, info, label, "precision", EXTQL_DEFAULT_PRECISION, &prec));
  if (kind == OP_QUANTIZE)
    EXTQL_TRY(read_int(api, info, label, "saturate", EXTQL_DEFAULT_SATURATE, &sat));
  if (sat != 0 && sat != 1)
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute saturate must be 0 or 1, got %lld", (long long)sat);
  *saturate = (int)sat;
  if (out != 0 && !extql_output_dtype_ok(kind, out))
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute output_dtype must be one of %s, got %s",
                      kind == OP_QUANTIZE ? EXTQL_ALL_QTYPE_NAMES : EXTQL_OUTPUT_NAMES,
                      out > 0 && out <= 64 ? extql_type_name((int)out, b1, sizeof b1) : "a code that is no type");
  if (prec != 0 && (prec < 0 || prec > 64 || !extql_is_precision_type((int)prec)))
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the attribute precision must be one of " EXTQL_PRECISION_NAMES ", got %s",
                      prec > 0 && prec <= 64 ? extql_type_name((int)prec, b1, sizeof b1) : "a code that is no type");
  *output_dtype = (int)out;
  *precision = (int)prec;
  return NULL;
}

/* The input count and the element types the graph declares, when it
 * declares them: a wrong graph fails now rather than at run time. */
OrtStatus *extql_check_node(const OrtApi *api, const OrtKernelInfo *info, const char *label,
                            int kind, int output_dtype, int precision, int inferred) {
  OrtStatus *st;
  size_t nin = 0;
  int x_type, s_type, zp_type = 0, y_type, out_type = 0, prec = 0;
  st = api->KernelInfo_GetInputCount(info, &nin);
  if (st != NULL) {
    api->ReleaseStatus(st);
    nin = 0;
  }
  if (nin != 0 && (nin < 2 || nin > 3))
    return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH, "expected 2 or 3 inputs, got %zu",
                      nin);
  x_type = declared_type(api, info, 0, 0);
  s_type = declared_type(api, info, 0, 1);
  if (nin == 3) zp_type = declared_type(api, info, 0, 2); /* 0 for an empty name */
  st = extql_check_types(api, label, kind, x_type, s_type, zp_type, output_dtype, precision,
                         &out_type, &prec);
  if (st == NULL && x_type != 0 && out_type != 0 &&
      (kind == OP_DEQUANTIZE || nin < 3 || zp_type != 0)) {
    char b1[32], b2[32];
    y_type = declared_type(api, info, 1, 0);
    if (y_type != 0 && y_type != out_type)
      st = extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the output y is %s but the inputs%s make it %s%s",
                      extql_type_name(y_type, b1, sizeof b1),
                      output_dtype != 0 ? " and output_dtype" : "",
                      extql_type_name(out_type, b2, sizeof b2),
                      output_dtype == 0 ? ""
                      : inferred
                          ? " (onnxruntime types the output by the attribute only where the "
                            "rank of x is known when the session is made: give the model "
                            "x's shape)"
                          : " (before 1.24 onnxruntime gives a custom operator's output the "
                            "type of an input: output_dtype can only repeat the type the "
                            "inputs give: the zero point's, uint8 without one, or for "
                            "dequantize the scale's)");
  }
  return st;
}
