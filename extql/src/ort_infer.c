/*
 * ort_infer.c - the output's element type and shape for onnxruntime's graph
 * inference (OrtCustomOp::InferOutputShapeFn).
 *
 * onnxruntime types a custom operator's output from the first registration
 * whose input types match the node (ort_ops.c).  An attribute cannot enter
 * that match, so without this callback a dequantize whose output_dtype is
 * not the scale's type, or a quantize with output_dtype and no zero point,
 * would be typed as if the attribute were absent.  onnxruntime calls the
 * callback after the match; it gives y the type the operator defines (the
 * rule of extql_check_types) and x's shape, so the nodes after it are
 * inferred too.
 *
 * Registered only from EXTQL_ORT_API_INFER on: older runtimes (1.21 to 1.23
 * tried) build the callback's context by dereferencing the type of every
 * input, a null one for a zero point given as an empty name, and crash
 * when the session is made.
 *
 * Anything the callback cannot read (or a node whose types are wrong) leaves
 * the output as the registrations typed it: kernel creation then reports
 * the problem with its own message.
 *
 * The block formats (ort_blocks.c) give y x's type and shape
 * (extql_infer_like_input).
 */
#include <stdio.h>
#include <stdlib.h>

#if defined(_WIN32)
#include <windows.h>
#endif

#include "ort_internal.h"

/* The element type of input `index`, its info in *info (owned by the
 * context); 0 when the input is absent or not known. */
static int input_type(const OrtApi *api, OrtShapeInferContext *ctx, size_t index,
                      OrtTensorTypeAndShapeInfo **info) {
  OrtStatus *st;
  int type = 0;
  *info = NULL;
  st = api->ShapeInferContext_GetInputTypeShape(ctx, index, info);
  if (st == NULL && *info != NULL) st = api->GetTensorElementType(*info, &type);
  if (st != NULL) {
    api->ReleaseStatus(st);
    *info = NULL;
    return 0;
  }
  return type;
}

/* The int attribute `name`, dflt when absent. */
static int64_t int_attribute(const OrtApi *api, OrtShapeInferContext *ctx, const char *name,
                             int64_t dflt) {
  const OrtOpAttr *attr = NULL;
  int64_t value = dflt;
  size_t size = 0;
  OrtStatus *st = api->ShapeInferContext_GetAttribute(ctx, name, &attr);
  if (st == NULL && attr != NULL)
    st = api->ReadOpAttr(attr, EXTQL_ORT_OP_ATTR_INT, &value, sizeof value, &size);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return dflt;
  }
  return value;
}

/* A name for a dimension that has neither a value nor a name: the callback
 * can only write values and names, and a name of its own (never given to
 * another dimension) says no more than "unknown". */
static const char *unknown_dim_name(char *buf, size_t size) {
  static volatile long counter = 0;
  long n;
#if defined(_WIN32)
  n = InterlockedIncrement(&counter);
#else
  n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
#endif
  snprintf(buf, size, "extql_unk_%ld", n);
  return buf;
}

/* x's shape into out; 1 when it was copied, 0 when it cannot be: x's rank
 * is not known.  onnxruntime gives the callback an input of unknown rank as
 * a shape of no dimensions, the same as a scalar's (from C API 24,
 * TensorTypeAndShape_HasShape says true for both), and declaring a scalar
 * output for it would be wrong (a Shape of it would be folded to []), so a
 * rank-0 x is not passed on: its node keeps the registrations' type. */
static int copy_shape(const OrtApi *api, const OrtTensorTypeAndShapeInfo *x,
                      OrtTensorTypeAndShapeInfo *out) {
  OrtStatus *st;
  size_t rank = 0, i;
  int64_t *dims = NULL;
  const char **names = NULL;
  char *own = NULL;
  int copied = 0;
  st = api->GetDimensionsCount(x, &rank);
  if (st != NULL || rank == 0) goto done;
  dims = (int64_t *)malloc(rank * sizeof *dims);
  names = (const char **)malloc(rank * sizeof *names);
  own = (char *)malloc(rank * 32);
  if (dims == NULL || names == NULL || own == NULL) goto done;
  st = api->GetDimensions(x, dims, rank);
  if (st == NULL) st = api->GetSymbolicDimensions(x, names, rank);
  if (st != NULL) goto done;
  for (i = 0; i < rank; i++)
    if (dims[i] < 0 && (names[i] == NULL || names[i][0] == '\0'))
      names[i] = unknown_dim_name(own + 32 * i, 32);
  st = api->SetDimensions(out, dims, rank);
  if (st == NULL) st = api->SetSymbolicDimensions(out, names, rank);
  copied = st == NULL;
done:
  if (st != NULL) api->ReleaseStatus(st);
  free(dims);
  free(names);
  free(own);
  return copied;
}

OrtStatus *EXTQL_ORT_CALL extql_infer_output(const OrtCustomOp *op_, OrtShapeInferContext *ctx) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  const OrtApi *api = op->infer_api;
  OrtTensorTypeAndShapeInfo *x = NULL, *s = NULL, *zp = NULL, *out = NULL;
  OrtStatus *st;
  size_t n_inputs = 0;
  int x_type, s_type, zp_type = 0, out_type = 0, prec = 0;
  int64_t output_dtype;

  if (api == NULL) return NULL;
  st = api->ShapeInferContext_GetInputCount(ctx, &n_inputs);
  if (st != NULL || n_inputs < 2 || n_inputs > 3) goto keep;
  x_type = input_type(api, ctx, 0, &x);
  s_type = input_type(api, ctx, 1, &s);
  if (n_inputs == 3) zp_type = input_type(api, ctx, 2, &zp);
  if (x == NULL || x_type == 0 || s_type == 0) goto keep;
  output_dtype = int_attribute(api, ctx, "output_dtype", 0);
  if (output_dtype != 0 && !extql_output_dtype_ok(op->kind, output_dtype)) goto keep;
  st = extql_check_types(api, op->name, op->kind, x_type, s_type, zp_type, (int)output_dtype, 0,
                         &out_type, &prec);
  if (st != NULL || out_type == 0) goto keep;

  st = api->CreateTensorTypeAndShapeInfo(&out);
  if (st == NULL) st = api->SetTensorElementType(out, out_type);
  if (st == NULL && copy_shape(api, x, out))
    st = api->ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
keep:
  if (st != NULL) api->ReleaseStatus(st);
  if (out != NULL) api->ReleaseTensorTypeAndShapeInfo(out);
  return NULL;
}

void extql_infer_like_input(const OrtApi *api, OrtShapeInferContext *ctx,
                            int (*type_ok)(int type)) {
  OrtTensorTypeAndShapeInfo *x = NULL, *out = NULL;
  OrtStatus *st;
  size_t n_inputs = 0;
  int x_type;

  if (api == NULL) return;
  st = api->ShapeInferContext_GetInputCount(ctx, &n_inputs);
  if (st != NULL || n_inputs < 1) goto keep;
  x_type = input_type(api, ctx, 0, &x);
  if (x == NULL || !type_ok(x_type)) goto keep;
  st = api->CreateTensorTypeAndShapeInfo(&out);
  if (st == NULL) st = api->SetTensorElementType(out, x_type);
  if (st == NULL && copy_shape(api, x, out))
    st = api->ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
keep:
  if (st != NULL) api->ReleaseStatus(st);
  if (out != NULL) api->ReleaseTensorTypeAndShapeInfo(out);
}
