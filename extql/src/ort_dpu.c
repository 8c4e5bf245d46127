/*
 * ort_dpu.c - Quark's DPU-emulation operators in the onnxruntime library:
 * ExtendedInstanceNormalization (com.amd.quark) / VitisInstanceNormalization
 * (com.vai.quantize), docs/operators/extended_instance_normalization.rst, and
 * the registrations of ExtendedLSTM / VitisLSTM, whose kernel is ort_lstm.c.
 *
 * Each DPU operator kind has a row in DPU_KINDS (below): its registrations
 * are made by extql_dpu_init_ops from that row, so that another DPU operator
 * (the LSTM) adds its kind, its names in ort_library.c and its own file with
 * an init function, without touching the instance norm.
 *
 * The kernel object holds only the node's attributes and label, read when it
 * is made; a run keeps everything else on its own stack, so concurrent runs
 * of one session share nothing they write.  Instances are split between the
 * session's threads (KernelContext_ParallelFor).
 */
#include <stdlib.h>
#include <string.h>

#include "extql_kernels.h"
#include "extql_split.h"
#include "ort_internal.h"

#define IN_INPUTS 3
static const char *const IN_INPUT_NAMES[IN_INPUTS] = {"x", "scale", "B"};

typedef struct {
  const OrtApi *api;
  float epsilon;
  char label[192];
} InKernel;

/* The element type input `index` has in the graph (0 when it does not say). */
int extql_declared_type(const OrtApi *api, const OrtKernelInfo *info, size_t index) {
  OrtTypeInfo *ti = NULL;
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  OrtStatus *st;
  int onnx_type = 0, type = 0;
  st = api->KernelInfo_GetInputTypeInfo(info, index, &ti);
  if (st == NULL && ti != NULL) st = api->GetOnnxTypeFromTypeInfo(ti, &onnx_type);
  if (st == NULL && ti != NULL && onnx_type == EXTQL_ORT_TYPE_TENSOR) {
    st = api->CastTypeInfoToTensorInfo(ti, &tensor);
    if (st == NULL && tensor != NULL) st = api->GetTensorElementType(tensor, &type);
  }
  if (st != NULL) {
    api->ReleaseStatus(st);
    type = 0;
  }
  if (ti != NULL) api->ReleaseTypeInfo(ti);
  return type;
}

static OrtStatus *check_type(const OrtApi *api, const char *label, int i, int type, int code) {
  char b[32];
  if (type == 0 || type == EXTQL_FLOAT32) return NULL;
  return extql_fail(api, label, code, "%s must be float32, got %s", IN_INPUT_NAMES[i],
                    extql_type_name(type, b, sizeof b));
}

static OrtStatus *EXTQL_ORT_CALL in_kernel_create(const OrtCustomOp *op_, const OrtApi *api,
                                                  const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  InKernel *k;
  OrtStatus *st = NULL;
  float eps = 1e-5f;
  int i;
  *out = NULL;
  k = (InKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  extql_kernel_label(api, info, op->name, k->label, sizeof k->label);
  st = api->KernelInfoGetAttribute_float(info, "epsilon", &eps);
  if (st != NULL) { /* absent: the default */
    api->ReleaseStatus(st);
    st = NULL;
    eps = 1e-5f;
  }
  k->epsilon = eps;
  for (i = 0; i < IN_INPUTS && st == NULL; i++)
    st = check_type(api, k->label, i, extql_declared_type(api, info, (size_t)i),
                    EXTQL_ORT_INVALID_GRAPH);
  if (st != NULL) {
    free(k);
    return st;
  }
  *out = k;
  return NULL;
}

static void EXTQL_ORT_CALL in_kernel_destroy(void *kernel) { free(kernel); }

/* One run's work for KernelContext_ParallelFor: instances in ranges of `per`. */
typedef struct {
  const float *x, *scale, *bias;
  float *y;
  int64_t C, S, instances, per;
  float epsilon;
} InJob;

static void EXTQL_ORT_CALL in_run(void *data, size_t index) {
  const InJob *job = (const InJob *)data;
  int64_t start = (int64_t)index * job->per, stop = start + job->per;
  if (start >= job->instances) return;
  if (stop > job->instances) stop = job->instances;
  extql_dpu_in_range(job->x, job->scale, job->bias, job->y, job->C, job->S, job->epsilon, start,
                     stop);
}

static OrtStatus *EXTQL_ORT_CALL in_kernel_compute(void *kernel, OrtKernelContext *ctx) {
  InKernel *k = (InKernel *)kernel;
  const OrtApi *api = k->api;
  const char *label = k->label;
  const OrtValue *v[IN_INPUTS] = {NULL, NULL, NULL};
  OrtValue *vy = NULL;
  TensorFacts f[IN_INPUTS], fy;
  OrtStatus *st = NULL;
  void *p[IN_INPUTS] = {NULL, NULL, NULL}, *py = NULL;
  InJob job;
  int64_t C, S = 1, chunk, n;
  size_t d;
  int i;
  char b1[96];

  for (i = 0; i < IN_INPUTS; i++) extql_facts_init(&f[i]);
  extql_facts_init(&fy);
  for (i = 0; i < IN_INPUTS && st == NULL; i++) {
    st = api->KernelContext_GetInput(ctx, (size_t)i, &v[i]);
    if (st != NULL) {
      st = extql_wrap(api, label, st);
      break;
    }
    if (v[i] == NULL) {
      st = extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "the input %s is required",
                      IN_INPUT_NAMES[i]);
      break;
    }
    st = extql_facts_of_value(api, label, IN_INPUT_NAMES[i], v[i], &f[i]);
    if (st == NULL)
      st = check_type(api, label, i, f[i].type == 0 ? -1 : f[i].type,
                      EXTQL_ORT_INVALID_ARGUMENT);
  }
  if (st != NULL) goto done;
  if (f[0].rank < 2) {
    st = extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                    "x must have rank >= 2 (N, C, ...), got rank %d", (int)f[0].rank);
    goto done;
  }
  C = f[0].dims[1];
  for (i = 1; i < IN_INPUTS; i++) {
    if (f[i].rank != 1 || f[i].dims[0] != C) {
      st = extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "%s must be 1-D of length C = %lld (x's dimension 1), got shape %s",
                      IN_INPUT_NAMES[i], (long long)C,
                      extql_shape_str(f[i].dims, f[i].rank, b1, sizeof b1));
      goto done;
    }
  }
  for (d = 2; d < f[0].rank; d++) S *= f[0].dims[d];
  st = api->KernelContext_GetOutput(ctx, 0, f[0].dims, f[0].rank, &vy);
  if (st == NULL && vy == NULL) st = api->CreateStatus(EXTQL_ORT_FAIL, "no output tensor");
  if (st == NULL) st = extql_facts_of_value(api, label, "y", vy, &fy);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (fy.type != EXTQL_FLOAT32) {
    st = extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH, "the output y is %s, not float32",
                    extql_type_name(fy.type, b1, sizeof b1));
    goto done;
  }
  if (f[0].count == 0) goto done; /* empty: nothing to compute */
  for (i = 0; i < IN_INPUTS && st == NULL; i++)
    st = api->GetTensorMutableData((OrtValue *)v[i], &p[i]);
  if (st == NULL) st = api->GetTensorMutableData(vy, &py);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (p[0] == NULL || p[1] == NULL || p[2] == NULL || py == NULL) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave a tensor without data");
    goto done;
  }
  memset(&job, 0, sizeof job);
  job.x = (const float *)p[0];
  job.scale = (const float *)p[1];
  job.bias = (const float *)p[2];
  job.y = (float *)py;
  job.C = C;
  job.S = S;
  job.epsilon = k->epsilon;
  job.instances = S > 0 ? (int64_t)f[0].count / S : 0;
  n = (int64_t)f[0].count;
  chunk = extql_chunk_for(n, 0); /* the session pool: its size is not known here */
  job.per = chunk / (S > 0 ? S : 1);
  /* Whole groups of 16: the kernel sums 16 instances' statistics side by side
     (EXTQL_DPU_IN_LANES, extql/kernels/dpu_in.pxi), a remainder one by one. */
  job.per = (job.per + 15) / 16 * 16;
  if (chunk >= n || job.instances <= 1 || job.per >= job.instances) {
    job.per = job.instances;
    in_run(&job, 0);
  } else {
    st = api->KernelContext_ParallelFor(
        ctx, in_run, (size_t)((job.instances + job.per - 1) / job.per), 0, &job);
    if (st != NULL) st = extql_wrap(api, label, st);
  }

done:
  for (i = 0; i < IN_INPUTS; i++) extql_facts_free(&f[i]);
  extql_facts_free(&fy);
  return st;
}

/* ------------------------------------------------------------------------ */
/* Registrations                                                             */
/* ------------------------------------------------------------------------ */

/* One DPU operator kind: its inputs and outputs (every one required unless
 * the kind says), its kernel functions and its inference callback. */
typedef struct {
  int kind;
  size_t n_inputs, n_outputs;
  int(EXTQL_ORT_CALL *input_characteristic)(const OrtCustomOp *, size_t);
  int(EXTQL_ORT_CALL *output_characteristic)(const OrtCustomOp *, size_t);
  OrtStatus *(EXTQL_ORT_CALL *create)(const OrtCustomOp *, const OrtApi *, const OrtKernelInfo *,
                                      void **);
  OrtStatus *(EXTQL_ORT_CALL *compute)(void *, OrtKernelContext *);
  void(EXTQL_ORT_CALL *destroy)(void *);
  void (*infer)(const OrtApi *api, OrtShapeInferContext *ctx);
} DpuKind;

static int float32_only(int type) { return type == EXTQL_FLOAT32; }

/* The instance norm's y: x's type and shape. */
static void in_infer(const OrtApi *api, OrtShapeInferContext *ctx) {
  extql_infer_like_input(api, ctx, float32_only);
}

static const DpuKind DPU_KINDS[] = {
    {OP_DPU_IN, IN_INPUTS, 1, NULL, NULL, in_kernel_create, in_kernel_compute,
     in_kernel_destroy, in_infer},
    /* ExtendedLSTM (ort_lstm.c): X, W, R required, B and ONNX's optional
     * inputs (refused) optional; Y required, Y_h / Y_c optional. */
    {OP_DPU_LSTM, EXTQL_LSTM_INPUTS, EXTQL_LSTM_OUTPUTS, extql_ort_lstm_input_characteristic,
     extql_ort_lstm_output_characteristic, extql_ort_lstm_create,
     extql_ort_lstm_compute, extql_ort_lstm_destroy, extql_ort_lstm_infer},
};

static const DpuKind *kind_of(int kind) {
  size_t i;
  for (i = 0; i < sizeof DPU_KINDS / sizeof DPU_KINDS[0]; i++)
    if (DPU_KINDS[i].kind == kind) return &DPU_KINDS[i];
  return NULL;
}

static size_t EXTQL_ORT_CALL op_inputs(const OrtCustomOp *op) {
  return kind_of(((const ExtqlOp *)op)->kind)->n_inputs;
}

static size_t EXTQL_ORT_CALL op_outputs(const OrtCustomOp *op) {
  return kind_of(((const ExtqlOp *)op)->kind)->n_outputs;
}

/* The kind's outputs' types and shapes. */
static OrtStatus *EXTQL_ORT_CALL op_infer(const OrtCustomOp *op_, OrtShapeInferContext *ctx) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  kind_of(op->kind)->infer(op->infer_api, ctx);
  return NULL;
}

static void init_dpu_op(ExtqlOp *op, const ExtqlOpSet *set, int n, int type,
                        const DpuKind *kind) {
  extql_op_init(op, set, n, type, EXTQL_ORT_CUSTOM_OP_VERSION_INPLACE);
  op->form = type != EXTQL_ORT_UNDEFINED ? EXTQL_FORM_TYPED : EXTQL_FORM_UNTYPED;
  op->base.GetInputTypeCount = op_inputs;
  op->base.GetOutputTypeCount = op_outputs;
  op->base.KernelDestroy = kind->destroy;
  if (kind->input_characteristic != NULL)
    op->base.GetInputCharacteristic = kind->input_characteristic;
  if (kind->output_characteristic != NULL)
    op->base.GetOutputCharacteristic = kind->output_characteristic;
  op->base.CreateKernelV2 = kind->create;
  op->base.KernelComputeV2 = kind->compute;
  if (set->infer_api != NULL) op->base.InferOutputShapeFn = op_infer;
}

int extql_dpu_init_ops(ExtqlOp *ops, const ExtqlOpSet *set, int n) {
  const DpuKind *kind = kind_of(set->names[n].kind);
  if (kind == NULL) return 0;
  /* float32 first (onnxruntime builds the schema from the first), then the
   * untyped one, whose kernel names the node and the wrong type. */
  init_dpu_op(&ops[0], set, n, EXTQL_FLOAT32, kind);
  init_dpu_op(&ops[1], set, n, EXTQL_ORT_UNDEFINED, kind);
  return 2;
}
