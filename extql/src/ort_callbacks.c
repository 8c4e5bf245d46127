/*
 * ort_callbacks.c - the OrtCustomOp callbacks every registration of the
 * library shares: its name, the CPU provider, inputs and outputs required
 * and in CPU memory, variadic arities of one, and the types of the
 * registration.  extql_op_init fills them in; each operator's file
 * (ort_ops.c, ort_blocks.c, ort_dpu.c) then sets what is its own: the
 * counts and types of its inputs and outputs where they differ, its kernel
 * and its shape inference.
 */
#include <string.h>

#include "ort_internal.h"

static const char *EXTQL_ORT_CALL op_name(const OrtCustomOp *op) {
  return ((const ExtqlOp *)op)->name;
}

static const char *EXTQL_ORT_CALL op_provider(const OrtCustomOp *op) {
  (void)op;
  return "CPUExecutionProvider";
}

/* Every input and output: the registration's type (EXTQL_ORT_UNDEFINED for
   the untyped one, whose kernel names the node and the wrong type). */
static int EXTQL_ORT_CALL op_type(const OrtCustomOp *op, size_t index) {
  (void)index;
  return ((const ExtqlOp *)op)->stype;
}

static size_t EXTQL_ORT_CALL op_count_one(const OrtCustomOp *op) {
  (void)op;
  return 1;
}

static int EXTQL_ORT_CALL op_required(const OrtCustomOp *op, size_t index) {
  (void)op;
  (void)index;
  return EXTQL_ORT_IO_REQUIRED;
}

static int EXTQL_ORT_CALL op_memory_type(const OrtCustomOp *op, size_t index) {
  (void)op;
  (void)index;
  return EXTQL_ORT_MEM_DEFAULT;
}

static int EXTQL_ORT_CALL op_one(const OrtCustomOp *op) {
  (void)op;
  return 1;
}

void extql_op_init(ExtqlOp *op, const ExtqlOpSet *set, int n, int stype, uint32_t version) {
  memset(op, 0, sizeof *op);
  op->name = set->names[n].name;
  op->kind = set->names[n].kind;
  op->domain = set->names[n].domain;
  op->stype = stype;
  op->infer_api = set->infer_api;
  op->base.version = version;
  op->base.GetName = op_name;
  op->base.GetExecutionProviderType = op_provider;
  op->base.GetInputType = op_type;
  op->base.GetInputTypeCount = op_count_one;
  op->base.GetOutputType = op_type;
  op->base.GetOutputTypeCount = op_count_one;
  op->base.GetInputCharacteristic = op_required;
  op->base.GetOutputCharacteristic = op_required;
  op->base.GetInputMemoryType = op_memory_type;
  op->base.GetVariadicInputMinArity = op_one;
  op->base.GetVariadicInputHomogeneity = op_one;
  op->base.GetVariadicOutputMinArity = op_one;
  op->base.GetVariadicOutputHomogeneity = op_one;
}
