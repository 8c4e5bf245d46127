/*
 * ort_ops.c - the OrtCustomOp registrations of a library and kernel creation.
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
 * ("x_zero_point must have the dtype of x ...") instead of onnxruntime's
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
 * Shapes.  No InferOutputShapeFn is registered: onnxruntime 1.17 dereferences
 * a null type for an absent optional input before calling it (a crash for an
 * empty zero-point name), and before API 24 the callback cannot tell an
 * input of unknown rank from a scalar, so it would declare wrong shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_types.h"
#include "ort_internal.h"

/* Registrations per operator name: the typed ones and at most two fallbacks. */
#define OPS_PER_NAME (EXTQL_N_QTYPES + 2)

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

static OrtStatus *EXTQL_ORT_CALL kernel_create(const OrtCustomOp *op_, const OrtApi *api,
                                               const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  ExtqlKernel *k;
  OrtStatus *st;
  char node[128];
  size_t size = sizeof node;

  *out = NULL;
  k = (ExtqlKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  k->kind = op->kind;
  k->range = op->range;

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

  st = extql_read_axis(api, info, k->label, &k->axis);
  if (st == NULL) st = extql_read_block_size(api, info, k->label, &k->block);
  if (st == NULL) st = extql_check_node(api, info, k->label, op->kind);
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
  if (op->form == EXTQL_FORM_UNTYPED) return EXTQL_ORT_UNDEFINED;
  if (op->form == EXTQL_FORM_ZP_ONLY) return index == 2 ? op->qtype : EXTQL_ORT_UNDEFINED;
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
  return op->form == EXTQL_FORM_UNTYPED ? EXTQL_ORT_UNDEFINED : op->qtype;
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

static void init_op(ExtqlOp *op, const ExtqlOpSet *set, int n, int qtype, int form,
                    uint32_t version) {
  memset(op, 0, sizeof *op);
  op->name = set->names[n].name;
  op->kind = set->names[n].kind;
  op->domain = set->names[n].domain;
  op->range = set->range;
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
  op->base.KernelComputeV2 = extql_kernel_compute;
}

/* Fill set->ops (allocated here, kept for the life of the process); -1 when
 * out of memory. */
int extql_ort_init_ops(ExtqlOpSet *set, uint32_t version) {
  static const int codes[EXTQL_N_QTYPES] = {
#define EXTQL_CODE(NAME, name, code, size, lo, hi) code,
      EXTQL_FOR_EACH_QTYPE(EXTQL_CODE)
#undef EXTQL_CODE
  };
  int n, t, i = 0;
  ExtqlOp *ops = (ExtqlOp *)calloc((size_t)set->n_names * OPS_PER_NAME, sizeof *ops);
  if (ops == NULL) return -1;
  for (n = 0; n < set->n_names; n++) {
    /* The typed registrations first, uint8 leading (the type of a quantize
     * without zero point), then the fallbacks, the untyped one last. */
    init_op(&ops[i++], set, n, EXTQL_UINT8, EXTQL_FORM_TYPED, version);
    for (t = 0; t < EXTQL_N_QTYPES; t++)
      if (codes[t] != EXTQL_UINT8) init_op(&ops[i++], set, n, codes[t], EXTQL_FORM_TYPED, version);
    if (set->names[n].kind == OP_QUANTIZE)
      init_op(&ops[i++], set, n, EXTQL_UINT8, EXTQL_FORM_ZP_ONLY, version);
    init_op(&ops[i++], set, n, 0, EXTQL_FORM_UNTYPED, version);
  }
  set->ops = ops;
  set->n_ops = i;
  return 0;
}
