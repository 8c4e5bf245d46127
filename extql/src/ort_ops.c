/*
 * ort_ops.c - the OrtCustomOp registrations of a library and kernel creation.
 *
 * Types.  Each operator is registered as several OrtCustomOps of one name:
 * typed ones (quantize: x float, scale float, zero point T -> y T;
 * dequantize: x T, scale S, zero point T -> y S, T one of the eight types or
 * of the official operators' others (see EXTQL_INT4_API below), S float32,
 * float16 or bfloat16) and fallbacks.  onnxruntime infers a node's output
 * type from the first registration whose input types match the node,
 * so the typed ones give every form its type: the zero point's type, or -
 * with no zero point (two inputs or an empty third name), where the uint8
 * registration comes first - uint8; for dequantize the scale's type.  A
 * quantize of float16 / bfloat16 x or scale takes its type from the
 * fallbacks below, which give the same.  A node whose types fit no typed
 * registration falls to a
 * fallback, whose kernel creation reports exactly what is wrong
 * ("x_zero_point must have the dtype of x ...") instead of onnxruntime's
 * generic "no kernel matches".  The fallbacks still give the output the type
 * the user means, or a graph that declares it would be rejected by
 * onnxruntime's type inference before the kernel can say what is wrong
 * (onnxruntime gives an untyped output the type of the last untyped input):
 * dequantize has "any x and zero point, scale S -> S" for each float type
 * and then the untyped one, which declares a float output; quantize has
 * "any x, any scale, uint8 zero point (or none) -> uint8" and then the
 * untyped one, whose output takes the zero point's type.  All share one
 * kernel that reads the actual types at run time, so whichever registration
 * onnxruntime picks, the result is right.
 *
 * output_dtype and shapes.  From C API 24 (EXTQL_ORT_API_INFER) every
 * registration also has the inference callback of ort_infer.c, which gives
 * the output the type the attribute output_dtype says and x's shape, and
 * dequantize has a last registration whose output takes any type, for the
 * kernel lookup of a node whose y the callback typed so.
 */
#include <stdlib.h>
#include <string.h>

#include "extql_types.h"
#include "ort_internal.h"

/* The float types of the scale (and dequantize's y). */
#define N_FLOATS 3
/* The types beyond the eight, from the first C API version (onnxruntime
 * release) whose custom operators take them: float8 in every supported
 * release; int4 / uint4 from 1.21 (1.18 fails the whole registration:
 * "tensor type 22 is not supported"; 1.20 registers them but rejects such
 * an input: "Type 'tensor(int4)' ... is invalid"); float4e2m1 from 1.24
 * (1.21 to 1.23 fail the whole registration).  No release takes int2 /
 * uint2 in a custom operator (1.32 rejects them as 1.20 does int4). */
#define EXTQL_INT4_API 21
#define EXTQL_FLOAT4_API 24
#define N_EXTRA 7 /* int4, uint4, four float8, float4e2m1 */
/* Registrations per operator name: at most the typed ones of every scale
 * type and the fallbacks (dequantize: one per scale type, the untyped one
 * and, with the inference callback, the one whose output takes any type);
 * a block format has fewer (EXTQL_BLOCK_OPS_PER_NAME). */
#define OPS_PER_NAME (N_FLOATS * (EXTQL_N_QTYPES + N_EXTRA) + N_FLOATS + 2)

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

static OrtStatus *EXTQL_ORT_CALL kernel_create(const OrtCustomOp *op_, const OrtApi *api,
                                               const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  ExtqlKernel *k;
  OrtStatus *st;

  *out = NULL;
  k = (ExtqlKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  k->kind = op->kind;
  k->range = op->range;
  k->convert_scales = op->convert_scales;
  k->f64_params = op->f64_params;
  k->unpack = op->unpack;

  extql_kernel_label(api, info, op->name, k->label, sizeof k->label);

  st = extql_read_axis(api, info, k->label, &k->axis);
  if (st == NULL) st = extql_read_block_size(api, info, k->label, &k->block);
  if (st == NULL)
    st = extql_read_type_attrs(api, info, k->label, op->kind, &k->output_dtype, &k->precision,
                               &k->saturate);
  if (st == NULL)
    st = extql_check_node(api, info, k->label, op->kind, k->output_dtype, k->precision,
                          op->infer_api != NULL);
  if (st != NULL) {
    free(k);
    return st;
  }
  extql_read_constant_facts(api, info, k);
  *out = k;
  return NULL;
}

static void EXTQL_ORT_CALL kernel_destroy(void *kernel) {
  ExtqlKernel *k = (ExtqlKernel *)kernel;
  if (k == NULL) return;
  if (k->const_in[0]) extql_facts_free(&k->const_facts[0]);
  if (k->const_in[1]) extql_facts_free(&k->const_facts[1]);
  free(k);
}

/* ------------------------------------------------------------------------ */
/* The OrtCustomOp callbacks                                                 */
/* ------------------------------------------------------------------------ */

static int EXTQL_ORT_CALL op_input_type(const OrtCustomOp *op_, size_t index) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  if (op->form == EXTQL_FORM_UNTYPED || op->form == EXTQL_FORM_ANY) return EXTQL_ORT_UNDEFINED;
  if (op->form == EXTQL_FORM_ZP_ONLY) return index == 2 ? op->qtype : EXTQL_ORT_UNDEFINED;
  if (op->form == EXTQL_FORM_SCALE_ONLY) return index == 1 ? op->stype : EXTQL_ORT_UNDEFINED;
  if (op->kind == OP_QUANTIZE) return index == 2 ? op->qtype : EXTQL_ORT_FLOAT;
  return index == 1 ? op->stype : op->qtype;
}

static size_t EXTQL_ORT_CALL op_input_count(const OrtCustomOp *op) {
  (void)op;
  return 3;
}

static int EXTQL_ORT_CALL op_output_type(const OrtCustomOp *op_, size_t index) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  (void)index;
  if (op->form == EXTQL_FORM_ANY) return EXTQL_ORT_UNDEFINED;
  if (op->kind == OP_DEQUANTIZE) return op->form == EXTQL_FORM_UNTYPED ? EXTQL_ORT_FLOAT : op->stype;
  return op->form == EXTQL_FORM_UNTYPED ? EXTQL_ORT_UNDEFINED : op->qtype;
}

/* The zero point (input 2) is optional. */
static int EXTQL_ORT_CALL op_input_characteristic(const OrtCustomOp *op, size_t index) {
  (void)op;
  return index == 2 ? EXTQL_ORT_IO_OPTIONAL : EXTQL_ORT_IO_REQUIRED;
}

static void init_op(ExtqlOp *op, const ExtqlOpSet *set, int n, int qtype, int stype, int form,
                    uint32_t version) {
  extql_op_init(op, set, n, stype, version);
  op->range = set->range;
  op->convert_scales = set->convert_scales;
  op->unpack = set->unpack;
  op->f64_params = set->f64_params;
  op->qtype = qtype;
  op->form = form;
  op->base.GetInputType = op_input_type;
  op->base.GetInputTypeCount = op_input_count;
  op->base.GetOutputType = op_output_type;
  op->base.KernelDestroy = kernel_destroy;
  op->base.GetInputCharacteristic = op_input_characteristic;
  op->base.CreateKernelV2 = kernel_create;
  op->base.KernelComputeV2 = extql_kernel_compute;
  if (set->infer_api != NULL) op->base.InferOutputShapeFn = extql_infer_output;
}

/* Fill set->ops (allocated here, kept for the life of the process); -1 when
 * out of memory.  runtime_api: the C API version of the running onnxruntime
 * (0: not known), which decides which types beyond the eight are registered. */
int extql_ort_init_ops(ExtqlOpSet *set, uint32_t version, uint32_t runtime_api) {
  static const int eight[EXTQL_N_QTYPES] = {
#define EXTQL_CODE(NAME, name, code, size, lo, hi) code,
      EXTQL_FOR_EACH_QTYPE(EXTQL_CODE)
#undef EXTQL_CODE
  };
  static const int float8[4] = {EXTQL_FLOAT8E4M3FN, EXTQL_FLOAT8E4M3FNUZ, EXTQL_FLOAT8E5M2,
                                EXTQL_FLOAT8E5M2FNUZ};
  static const int floats[N_FLOATS] = {EXTQL_ORT_FLOAT, EXTQL_FLOAT16, EXTQL_BFLOAT16};
  int codes[EXTQL_N_QTYPES + N_EXTRA], n_codes = 0;
  int n, t, f, i = 0;
  ExtqlOp *ops;
  for (t = 0; t < EXTQL_N_QTYPES; t++) codes[n_codes++] = eight[t];
  /* The other types only for a library that converts their zero points
   * (unpack), on a runtime that takes them. */
  if (set->unpack != NULL && runtime_api >= EXTQL_INT4_API) {
    codes[n_codes++] = EXTQL_INT4;
    codes[n_codes++] = EXTQL_UINT4;
  }
  if (set->unpack != NULL)
    for (t = 0; t < 4; t++) codes[n_codes++] = float8[t];
  if (set->unpack != NULL && runtime_api >= EXTQL_FLOAT4_API) codes[n_codes++] = EXTQL_FLOAT4E2M1;
  ops = (ExtqlOp *)calloc((size_t)set->n_names * OPS_PER_NAME, sizeof *ops);
  if (ops == NULL) return -1;
  for (n = 0; n < set->n_names; n++) {
    /* The typed registrations first, uint8 leading (the type of a quantize
     * without zero point), then the fallbacks, the untyped one last.
     * Dequantize has a set per scale type, float32's first: onnxruntime
     * builds the operator's schema from the first registration, whose output
     * type must be fixed.  The block formats have their own (ort_blocks.c). */
    int quantize = set->names[n].kind == OP_QUANTIZE;
    if (EXTQL_IS_BLOCK_OP(set->names[n].kind)) {
      i += extql_block_init_ops(&ops[i], set, n);
      continue;
    }
    if (EXTQL_IS_DPU_OP(set->names[n].kind)) {
      if (set->dpu_init_ops != NULL) i += set->dpu_init_ops(&ops[i], set, n);
      continue;
    }
    for (f = 0; f < (quantize ? 1 : N_FLOATS); f++) {
      init_op(&ops[i++], set, n, EXTQL_UINT8, floats[f], EXTQL_FORM_TYPED, version);
      for (t = 0; t < n_codes; t++)
        if (codes[t] != EXTQL_UINT8)
          init_op(&ops[i++], set, n, codes[t], floats[f], EXTQL_FORM_TYPED, version);
    }
    if (quantize)
      init_op(&ops[i++], set, n, EXTQL_UINT8, 0, EXTQL_FORM_ZP_ONLY, version);
    else
      for (f = 0; f < N_FLOATS; f++)
        init_op(&ops[i++], set, n, 0, floats[f], EXTQL_FORM_SCALE_ONLY, version);
    init_op(&ops[i++], set, n, 0, 0, EXTQL_FORM_UNTYPED, version);
    /* With the inference callback, a dequantize's y may have a type its
     * inputs do not give (output_dtype): a last registration takes any. */
    if (!quantize && set->infer_api != NULL)
      init_op(&ops[i++], set, n, 0, 0, EXTQL_FORM_ANY, version);
  }
  set->ops = ops;
  set->n_ops = i;
  return 0;
}
