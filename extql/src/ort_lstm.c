/*
 * ort_lstm.c - ExtendedLSTM (com.amd.quark) / VitisLSTM (com.vai.quantize) in
 * the onnxruntime library: Quark's DPU emulation of an LSTM in 16-bit fixed
 * point, docs/operators/extended_lstm.rst, on the kernels' entry points
 * extql_lstm_params / _prepared_size / _prepare / _items / _range.
 *
 * The node is read and refused as extql.rules.lstm reads and refuses it (the
 * same words after the label): its attributes when the kernel is made, its
 * shapes and the fixed-point shifts at each run.  Inputs as ONNX's LSTM
 * numbers them (X, W, R, optional B; sequence_lens, initial_h, initial_c and
 * P are refused when the node names them), outputs Y, Y_h, Y_c (Y required,
 * the other two optional).
 *
 * The kernel object holds the node's checked attributes, its label and, when
 * the graph makes W, R (and B) constants (initializers, as Quark writes
 * them), their quantized form, prepared once when the kernel is made and
 * only read afterwards.  A run with W or R not constant quantizes them into
 * a buffer of its own (malloc'd, freed at its end), so concurrent runs of one
 * session share nothing they write; its work items (batch elements x
 * directions, each over its whole sequence) are split between the session's
 * threads (KernelContext_ParallelFor).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extql_kernels.h"
#include "ort_internal.h"

/* The inputs and outputs, as ONNX's LSTM numbers them (extql.rules.lstm's
 * INPUTS, REFUSED_INPUTS and OUTPUTS). */
#define LSTM_IN_USED 4
static const char *const LSTM_INPUT_NAMES[EXTQL_LSTM_INPUTS] = {
    "X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
static const char *const LSTM_REFUSED_WHY[EXTQL_LSTM_INPUTS] = {
    NULL,
    NULL,
    NULL,
    NULL,
    "the DPU runs every sequence to its end",
    "the DPU starts h from its output zero point",
    "the DPU starts c from 0",
    "the DPU has no peepholes"};
static const char *const LSTM_OUTPUT_NAMES[EXTQL_LSTM_OUTPUTS] = {"Y", "Y_h", "Y_c"};

/* ONNX LSTM attributes the DPU has no use for (extql.rules.lstm's
 * REFUSED_ATTRIBUTES). */
static const char *const REFUSED_ATTRS[][2] = {
    {"activations", "the DPU's gates are fixed (sigmoid, tanh, tanh)"},
    {"activation_alpha", "the DPU's gates are fixed"},
    {"activation_beta", "the DPU's gates are fixed"},
    {"clip", "the DPU clips nothing"}};

/* The quantized tensors, in the kernels' order (extql.rules.lstm's QPARAMS). */
static const char *const QPARAMS[5] = {"x", "w", "r", "b", "y"};

typedef struct {
  const OrtApi *api;
  int64_t hidden;
  float scales[5];
  int zero_points[5];
  int dirs, reverse, layout;
  char direction[16];
  char label[192];
  /* W, R and B quantized when the kernel was made (NULL: at each run) */
  void *prepared;
} LstmKernel;

/* ------------------------------------------------------------------------ */
/* Attributes (extql.rules.lstm.check_lstm, in its order)                    */
/* ------------------------------------------------------------------------ */

/* 1 when the node has an attribute `name`, of any type (the ints-array
 * getter answers a size query for every type). */
static int has_attr(const OrtApi *api, const OrtKernelInfo *info, const char *name) {
  size_t n = 0;
  OrtStatus *st = api->KernelInfoGetAttributeArray_int64(info, name, NULL, &n);
  if (st == NULL) return 1;
  api->ReleaseStatus(st);
  return 0;
}

static OrtStatus *bad(const OrtApi *api, const char *label, const char *fmt, const char *a,
                      const char *b) {
  return extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH, fmt, a, b);
}

/* The int attribute `name` (present, checked by the caller) into *v. */
static OrtStatus *read_int(const OrtApi *api, const OrtKernelInfo *info, const char *label,
                           const char *name, int64_t dflt, int64_t *v) {
  char text[256];
  const char *other;
  OrtStatus *st = api->KernelInfoGetAttribute_int64(info, name, v);
  if (st == NULL) return NULL;
  api->ReleaseStatus(st);
  *v = dflt;
  other = extql_attr_value_text(api, info, name, 'i', text, sizeof text);
  if (other == NULL) return NULL; /* absent: the default */
  return bad(api, label, "attribute %s must be an integer, got %s", name, other);
}

/* A scale: a float attribute, or an int one (Python takes it as a float). */
static OrtStatus *read_scale(const OrtApi *api, const OrtKernelInfo *info, const char *label,
                             const char *name, double *v) {
  char text[256];
  const char *other;
  float f;
  int64_t i;
  OrtStatus *st;
  *v = 0.0;
  st = api->KernelInfoGetAttribute_float(info, name, &f);
  if (st == NULL) {
    *v = (double)f;
    return NULL;
  }
  api->ReleaseStatus(st);
  st = api->KernelInfoGetAttribute_int64(info, name, &i);
  if (st == NULL) {
    *v = (double)i;
    return NULL;
  }
  api->ReleaseStatus(st);
  other = extql_attr_value_text(api, info, name, 'f', text, sizeof text);
  return bad(api, label, "attribute %s must be a float, got %s", name,
             other != NULL ? other : "nothing");
}

static OrtStatus *read_attributes(const OrtApi *api, const OrtKernelInfo *info,
                                  const char *label, LstmKernel *k) {
  char missing[512], name[32], text[256], shown[64];
  const char *other;
  OrtStatus *st;
  size_t a, size = 0;
  int p;
  int64_t v;
  double s;
  float s32;

  for (a = 0; a < sizeof REFUSED_ATTRS / sizeof REFUSED_ATTRS[0]; a++)
    if (has_attr(api, info, REFUSED_ATTRS[a][0]))
      return bad(api, label, "attribute %s is not supported: %s", REFUSED_ATTRS[a][0],
                 REFUSED_ATTRS[a][1]);
  missing[0] = '\0';
  for (p = -1; p < 10; p++) {
    if (p < 0)
      snprintf(name, sizeof name, "hidden_size");
    else
      snprintf(name, sizeof name, "%s_%s", QPARAMS[p % 5], p < 5 ? "scale" : "zero_point");
    if (!has_attr(api, info, name)) {
      if (missing[0] != '\0') strncat(missing, ", ", sizeof missing - strlen(missing) - 1);
      strncat(missing, name, sizeof missing - strlen(missing) - 1);
    }
  }
  if (missing[0] != '\0')
    return bad(api, label, "missing required attribute(s) %s%s", missing, "");

  st = read_int(api, info, label, "hidden_size", 0, &v);
  if (st != NULL) return st;
  if (v < 1) {
    snprintf(text, sizeof text, "%lld", (long long)v);
    return bad(api, label, "hidden_size must be at least 1, got %s%s", text, "");
  }
  k->hidden = v;

  for (p = 0; p < 5; p++) {
    snprintf(name, sizeof name, "%s_scale", QPARAMS[p]);
    st = read_scale(api, info, label, name, &s);
    if (st != NULL) return st;
    s32 = (float)s;
    if (!(isfinite(s32) && s32 > 0))
      return bad(api, label, "attribute %s must be a positive finite float32, got %s", name,
                 extql_py_float_repr(s, shown, sizeof shown));
    snprintf(name, sizeof name, "%s_zero_point", QPARAMS[p]);
    st = read_int(api, info, label, name, 0, &v);
    if (st != NULL) return st;
    if (v < 0 || v > 65535) {
      snprintf(text, sizeof text, "%lld", (long long)v);
      return bad(api, label, "attribute %s must be a uint16 value in [0, 65535], got %s", name,
                 text);
    }
    k->scales[p] = s32;
    k->zero_points[p] = (int)v;
  }

  /* direction: a string, "bidirectional" when absent */
  snprintf(k->direction, sizeof k->direction, "bidirectional");
  st = api->KernelInfoGetAttribute_string(info, "direction", NULL, &size);
  if (st == NULL) {
    char *d = (char *)malloc(size + 1);
    if (d == NULL) return extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    st = api->KernelInfoGetAttribute_string(info, "direction", d, &size);
    if (st != NULL) {
      free(d);
      return extql_wrap(api, label, st);
    }
    d[size < 1 ? 0 : size - 1] = '\0';
    if (strcmp(d, "bidirectional") != 0 && strcmp(d, "forward") != 0 &&
        strcmp(d, "reverse") != 0) {
      extql_py_str_repr(d, text, sizeof text);
      free(d);
      return bad(api, label,
                 "direction must be one of ['bidirectional', 'forward', 'reverse'], got %s%s",
                 text, "");
    }
    snprintf(k->direction, sizeof k->direction, "%s", d);
    free(d);
  } else {
    api->ReleaseStatus(st);
    other = extql_attr_value_text(api, info, "direction", 's', text, sizeof text);
    if (other != NULL)
      return bad(api, label,
                 "direction must be one of ['bidirectional', 'forward', 'reverse'], got %s%s",
                 other, "");
  }
  k->dirs = strcmp(k->direction, "bidirectional") == 0 ? 2 : 1;
  k->reverse = strcmp(k->direction, "reverse") == 0;

  st = read_int(api, info, label, "layout", 0, &v);
  if (st != NULL) return st;
  if (v != 0 && v != 1) {
    snprintf(text, sizeof text, "%lld", (long long)v);
    return bad(api, label, "layout must be 0 or 1, got %s%s", text, "");
  }
  k->layout = (int)v;
  st = read_int(api, info, label, "input_forget", 0, &v);
  if (st != NULL) return st;
  if (v != 0) {
    snprintf(text, sizeof text, "%lld", (long long)v);
    return bad(api, label,
               "input_forget must be 0, got %s (the DPU couples no gates; Quark refuses it "
               "too)%s",
               text, "");
  }
  return NULL;
}

/* The node's input `index` names a tensor (not absent, not an empty name). */
static int input_given(const OrtApi *api, const OrtKernelInfo *info, size_t index) {
  char name[8];
  size_t size = sizeof name;
  OrtStatus *st = api->KernelInfo_GetInputName(info, index, name, &size);
  if (st == NULL) return name[0] != '\0';
  api->ReleaseStatus(st);
  /* a name longer than the buffer: given; a failure for another reason: the
   * size query says */
  size = 0;
  st = api->KernelInfo_GetInputName(info, index, NULL, &size);
  if (st != NULL) {
    api->ReleaseStatus(st);
    return 0;
  }
  return size > 1;
}

static OrtStatus *refuse_input(const OrtApi *api, const char *label, int code, size_t i) {
  return extql_fail(api, label, code, "input %s is not supported: %s", LSTM_INPUT_NAMES[i],
                    LSTM_REFUSED_WHY[i]);
}

static OrtStatus *check_type(const OrtApi *api, const char *label, size_t i, int type,
                             int code) {
  char b[32];
  if (type == 0 || type == EXTQL_FLOAT32) return NULL;
  return extql_fail(api, label, code, "%s must be float32, got %s", LSTM_INPUT_NAMES[i],
                    extql_type_name(type, b, sizeof b));
}

static OrtStatus *check_shapes(const LstmKernel *k, const TensorFacts *f, int64_t *seq,
                               int64_t *batch, int64_t *n_in);

/* k->prepared from W, R and B when the graph makes all it has of them
 * constants of the shapes the attributes want (W [dirs, 4H, input], R
 * [dirs, 4H, H], B [dirs, 8H]) and the shifts for that input size are in
 * range; otherwise (or short of memory) each run prepares its own and
 * checks, and refuses, what is wrong. */
static void prepare_constants(LstmKernel *k, const OrtKernelInfo *info, size_t n_inputs) {
  const OrtApi *api = k->api;
  const OrtValue *v[LSTM_IN_USED] = {NULL, NULL, NULL, NULL};
  void *data[LSTM_IN_USED] = {NULL, NULL, NULL, NULL};
  TensorFacts f[LSTM_IN_USED];
  ExtqlLstmParams params;
  int64_t H = k->hidden, n_in = 0;
  size_t i;
  int ok = n_inputs >= 3;
  for (i = 0; i < LSTM_IN_USED; i++) extql_facts_init(&f[i]);
  for (i = 1; i < LSTM_IN_USED && ok; i++) {
    int is_constant = 0;
    OrtStatus *st;
    if (i >= n_inputs || !input_given(api, info, i)) {
      ok = i == 3; /* B may be absent */
      continue;
    }
    st = api->KernelInfoGetConstantInput_tensor(info, i, &is_constant, &v[i]);
    if (st == NULL && is_constant && v[i] != NULL)
      st = extql_facts_of_value(api, k->label, LSTM_INPUT_NAMES[i], v[i], &f[i]);
    else
      ok = 0;
    if (st == NULL && ok && f[i].count > 0)
      st = api->GetTensorMutableData((OrtValue *)v[i], &data[i]);
    if (st != NULL) {
      api->ReleaseStatus(st);
      ok = 0;
    }
    ok = ok && f[i].type == EXTQL_FLOAT32 && data[i] != NULL;
  }
  if (ok && f[1].rank == 3 && f[1].dims[2] >= 1) {
    /* the runs' own shape rules, for an X of W's input size */
    int64_t seq, batch;
    OrtStatus *st;
    f[0].type = EXTQL_FLOAT32, f[0].rank = 3;
    f[0].small[0] = f[0].small[1] = 1, f[0].small[2] = f[1].dims[2];
    st = check_shapes(k, f, &seq, &batch, &n_in);
    ok = st == NULL;
    if (!ok) api->ReleaseStatus(st);
  } else {
    ok = 0;
  }
  if (ok)
    ok = extql_lstm_params(&params, k->scales, k->zero_points, n_in, H, k->dirs, k->reverse) ==
         EXTQL_LSTM_OK;
  if (ok) {
    void *prep = malloc((size_t)extql_lstm_prepared_size(&params));
    if (prep != NULL && extql_lstm_prepare(&params, (const float *)data[1],
                                           (const float *)data[2], (const float *)data[3],
                                           prep) == 0) {
      k->prepared = prep;
    } else {
      free(prep);
    }
  }
  for (i = 0; i < LSTM_IN_USED; i++) extql_facts_free(&f[i]);
}

OrtStatus *EXTQL_ORT_CALL extql_ort_lstm_create(const OrtCustomOp *op_, const OrtApi *api,
                                                const OrtKernelInfo *info, void **out) {
  const ExtqlOp *op = (const ExtqlOp *)op_;
  LstmKernel *k;
  OrtStatus *st = NULL;
  size_t n_inputs = 0, i;
  *out = NULL;
  k = (LstmKernel *)calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(EXTQL_ORT_FAIL, "extql: out of memory");
  k->api = api;
  extql_kernel_label(api, info, op->name, k->label, sizeof k->label);
  st = api->KernelInfo_GetInputCount(info, &n_inputs);
  if (st != NULL) {
    st = extql_wrap(api, k->label, st);
  } else {
    for (i = LSTM_IN_USED; i < n_inputs && i < EXTQL_LSTM_INPUTS && st == NULL; i++)
      if (input_given(api, info, i)) st = refuse_input(api, k->label, EXTQL_ORT_INVALID_GRAPH, i);
  }
  if (st == NULL) st = read_attributes(api, info, k->label, k);
  for (i = 0; i < LSTM_IN_USED && i < n_inputs && st == NULL; i++)
    st = check_type(api, k->label, i, extql_declared_type(api, info, i),
                    EXTQL_ORT_INVALID_GRAPH);
  if (st != NULL) {
    free(k);
    return st;
  }
  prepare_constants(k, info, n_inputs);
  *out = k;
  return NULL;
}

void EXTQL_ORT_CALL extql_ort_lstm_destroy(void *kernel) {
  LstmKernel *k = (LstmKernel *)kernel;
  if (k != NULL) free(k->prepared);
  free(kernel);
}

int EXTQL_ORT_CALL extql_ort_lstm_input_characteristic(const OrtCustomOp *op, size_t index) {
  (void)op;
  return index < 3 ? EXTQL_ORT_IO_REQUIRED : EXTQL_ORT_IO_OPTIONAL;
}

int EXTQL_ORT_CALL extql_ort_lstm_output_characteristic(const OrtCustomOp *op, size_t index) {
  (void)op;
  return index < 1 ? EXTQL_ORT_IO_REQUIRED : EXTQL_ORT_IO_OPTIONAL;
}

/* ------------------------------------------------------------------------ */
/* Runs                                                                      */
/* ------------------------------------------------------------------------ */

/* A shape as Python prints a list: [2, 16, 6] ("input" for an unknown). */
static const char *py_list(const int64_t *dims, size_t rank, char *buf, size_t size) {
  size_t i, used;
  int w;
  w = snprintf(buf, size, "[");
  used = w > 0 ? (size_t)w : 0;
  for (i = 0; i < rank && used < size; i++) {
    if (dims[i] < 0)
      w = snprintf(buf + used, size - used, i == 0 ? "input" : ", input");
    else
      w = snprintf(buf + used, size - used, i == 0 ? "%lld" : ", %lld", (long long)dims[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* extql.rules.lstm.check_shapes: (seq, batch, input) of X, W, R, B checked. */
static OrtStatus *check_shapes(const LstmKernel *k, const TensorFacts *f, int64_t *seq,
                               int64_t *batch, int64_t *n_in) {
  const OrtApi *api = k->api;
  const char *label = k->label;
  char b1[128], b2[128];
  int64_t H = k->hidden, want[3];
  int i;
  if (f[0].rank != 3)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "X must have rank 3 ([seq, batch, input], layout 1: [batch, seq, "
                      "input]), got shape %s",
                      py_list(f[0].dims, f[0].rank, b1, sizeof b1));
  *seq = k->layout == 0 ? f[0].dims[0] : f[0].dims[1];
  *batch = k->layout == 0 ? f[0].dims[1] : f[0].dims[0];
  *n_in = f[0].dims[2];
  if (*n_in < 1)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                      "X's input size must be at least 1, got %lld", (long long)*n_in);
  for (i = 1; i < LSTM_IN_USED; i++) {
    size_t rank = i == 3 ? 2 : 3;
    int ok;
    if (f[i].type == 0) continue; /* B absent */
    want[0] = k->dirs;
    want[1] = i == 3 ? 8 * H : 4 * H;
    want[2] = i == 1 ? *n_in : H;
    ok = f[i].rank == rank && f[i].dims[0] == want[0] && f[i].dims[1] == want[1] &&
         (rank == 2 || f[i].dims[2] == want[2]);
    if (!ok)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                        "%s must have shape %s (direction '%s', hidden_size %lld), got %s",
                        LSTM_INPUT_NAMES[i], py_list(want, rank, b1, sizeof b1), k->direction,
                        (long long)H, py_list(f[i].dims, f[i].rank, b2, sizeof b2));
  }
  return NULL;
}

/* extql.rules.lstm.shift_refusal: the words of a kernel refusal. */
static OrtStatus *shift_refusal(const LstmKernel *k, int code, const ExtqlLstmParams *p) {
  const char *shift = "?", *source = "the attributes";
  int value = 0, hi = 31;
  switch (code) {
    case EXTQL_LSTM_BAD_SIZE:
      return extql_fail(k->api, k->label, EXTQL_ORT_INVALID_ARGUMENT,
                        "the input size and hidden_size must be below 2^22 (the exact integer "
                        "dot products)");
    case EXTQL_LSTM_BAD_AX: shift = "ax", value = p->ax, source = "x_scale * w_scale"; break;
    case EXTQL_LSTM_BAD_AH: shift = "ah", value = p->ah, source = "y_scale * r_scale"; break;
    case EXTQL_LSTM_BAD_XWQ:
      shift = "xwq", value = p->xwq, source = "x_scale * w_scale and the input size";
      break;
    case EXTQL_LSTM_BAD_HRQ:
      shift = "hrq", value = p->hrq, source = "y_scale * r_scale and hidden_size";
      break;
    case EXTQL_LSTM_BAD_XS:
      shift = "xs", value = p->xs, source = "x_scale * w_scale * (w_zero_point - 32768)";
      break;
    case EXTQL_LSTM_BAD_HS:
      shift = "hs", value = p->hs, source = "y_scale * r_scale * (r_zero_point - 32768)";
      break;
    case EXTQL_LSTM_BAD_OH: shift = "oh", value = p->oh, source = "y_scale", hi = 32; break;
    default: break;
  }
  return extql_fail(k->api, k->label, EXTQL_ORT_INVALID_ARGUMENT,
                    "the fixed-point shift %s = %d from %s is outside [0, %d]: Quark's kernel "
                    "shifts a C int by it, which C leaves undefined",
                    shift, value, source, hi);
}

/* One run's work for KernelContext_ParallelFor: item `index`. */
typedef struct {
  const ExtqlLstmParams *p;
  const void *prepared;
  const float *x;
  float *y[EXTQL_LSTM_OUTPUTS];
  int64_t seq, batch;
  int layout;
  int failed;
} LstmJob;

static void EXTQL_ORT_CALL lstm_run_item(void *data, size_t index) {
  LstmJob *job = (LstmJob *)data;
  if (extql_lstm_range(job->p, job->prepared, job->x, job->y[0], job->y[1], job->y[2], job->seq,
                       job->batch, job->layout, (int64_t)index, (int64_t)index + 1) != 0)
    EXTQL_STORE_RELAXED(&job->failed, 1);
}

/* The work below which a run stays on the calling thread (multiply-adds):
 * the NumPy API's threshold. */
#define LSTM_PARALLEL_WORK 65536

OrtStatus *EXTQL_ORT_CALL extql_ort_lstm_compute(void *kernel, OrtKernelContext *ctx) {
  LstmKernel *k = (LstmKernel *)kernel;
  const OrtApi *api = k->api;
  const char *label = k->label;
  const OrtValue *v[EXTQL_LSTM_INPUTS];
  OrtValue *vy[EXTQL_LSTM_OUTPUTS] = {NULL, NULL, NULL};
  TensorFacts f[LSTM_IN_USED], fy;
  OrtStatus *st = NULL;
  void *p[LSTM_IN_USED] = {NULL, NULL, NULL, NULL}, *py = NULL, *prep = NULL;
  ExtqlLstmParams params;
  LstmJob job;
  int64_t seq = 0, batch = 0, n_in = 0, H = k->hidden, dims[EXTQL_LSTM_OUTPUTS][4], items;
  size_t n_inputs = 0, n_outputs = 0, i, rank[EXTQL_LSTM_OUTPUTS];
  int code;
  char b1[32];

  for (i = 0; i < LSTM_IN_USED; i++) extql_facts_init(&f[i]);
  extql_facts_init(&fy);
  memset(&job, 0, sizeof job);
  EXTQL_TRY(api->KernelContext_GetInputCount(ctx, &n_inputs));
  EXTQL_TRY(api->KernelContext_GetOutputCount(ctx, &n_outputs));
  if (n_inputs > EXTQL_LSTM_INPUTS) n_inputs = EXTQL_LSTM_INPUTS;
  if (n_outputs > EXTQL_LSTM_OUTPUTS) n_outputs = EXTQL_LSTM_OUTPUTS;
  for (i = 0; i < EXTQL_LSTM_INPUTS; i++) {
    v[i] = NULL;
    if (i < n_inputs) EXTQL_TRY(api->KernelContext_GetInput(ctx, i, &v[i]));
    if (v[i] == NULL && i < 3)
      return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "the input %s is required",
                        LSTM_INPUT_NAMES[i]);
    if (v[i] != NULL && i >= LSTM_IN_USED)
      return refuse_input(api, label, EXTQL_ORT_INVALID_ARGUMENT, i);
  }
  for (i = 0; i < LSTM_IN_USED && st == NULL; i++) {
    if (v[i] == NULL) continue;
    st = extql_facts_of_value(api, label, LSTM_INPUT_NAMES[i], v[i], &f[i]);
    if (st == NULL)
      st = check_type(api, label, i, f[i].type == 0 ? -1 : f[i].type,
                      EXTQL_ORT_INVALID_ARGUMENT);
  }
  if (st == NULL) st = check_shapes(k, f, &seq, &batch, &n_in);
  if (st != NULL) goto done;
  code = extql_lstm_params(&params, k->scales, k->zero_points, n_in, H, k->dirs, k->reverse);
  if (code != EXTQL_LSTM_OK) {
    st = shift_refusal(k, code, &params);
    goto done;
  }

  /* Y [seq, dirs, batch, H] (layout 1 [batch, seq, dirs, H]); Y_h, Y_c
   * [dirs, batch, H] (layout 1 [batch, dirs, H]) */
  if (k->layout == 0) {
    dims[0][0] = seq, dims[0][1] = k->dirs, dims[0][2] = batch;
    dims[1][0] = k->dirs, dims[1][1] = batch;
  } else {
    dims[0][0] = batch, dims[0][1] = seq, dims[0][2] = k->dirs;
    dims[1][0] = batch, dims[1][1] = k->dirs;
  }
  dims[0][3] = H;
  dims[1][2] = H;
  memcpy(dims[2], dims[1], sizeof dims[1]);
  rank[0] = 4, rank[1] = rank[2] = 3;
  for (i = 0; i < n_outputs; i++) {
    st = api->KernelContext_GetOutput(ctx, i, dims[i], rank[i], &vy[i]);
    if (st != NULL) {
      st = extql_wrap(api, label, st);
      goto done;
    }
    if (vy[i] == NULL) continue; /* not wanted: an empty name */
    st = extql_facts_of_value(api, label, LSTM_OUTPUT_NAMES[i], vy[i], &fy);
    if (st == NULL && fy.type != EXTQL_FLOAT32)
      st = extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH, "the output %s is %s, not float32",
                      LSTM_OUTPUT_NAMES[i], extql_type_name(fy.type, b1, sizeof b1));
    if (st == NULL && fy.count > 0) st = api->GetTensorMutableData(vy[i], &py);
    extql_facts_free(&fy);
    if (st != NULL) goto done;
    job.y[i] = fy.count > 0 ? (float *)py : NULL;
  }
  items = extql_lstm_items(&params, batch);
  if (items == 0 || (job.y[0] == NULL && job.y[1] == NULL && job.y[2] == NULL)) goto done;
  for (i = 0; i < LSTM_IN_USED && st == NULL; i++) {
    if (v[i] == NULL || f[i].count == 0) continue;
    st = api->GetTensorMutableData((OrtValue *)v[i], &p[i]);
    if (st == NULL && p[i] == NULL)
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave a tensor without data");
  }
  if (st != NULL) goto done;
  if (k->prepared != NULL) {
    /* the constants' (this run's W, R, B; check_shapes tied X to W) */
    job.prepared = k->prepared;
  } else {
    prep = malloc((size_t)extql_lstm_prepared_size(&params));
    if (prep == NULL ||
        extql_lstm_prepare(&params, (const float *)p[1], (const float *)p[2],
                           (const float *)p[3], prep) != 0) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory for the quantized weights");
      goto done;
    }
    job.prepared = prep;
  }
  job.p = &params;
  job.x = (const float *)p[0];
  job.seq = seq;
  job.batch = batch;
  job.layout = k->layout;
  if (items > 1 && (double)seq * (double)H * (double)(n_in + H) * (double)items >=
                       LSTM_PARALLEL_WORK) {
    st = api->KernelContext_ParallelFor(ctx, lstm_run_item, (size_t)items, 0, &job);
    if (st != NULL) st = extql_wrap(api, label, st);
  } else if (extql_lstm_range(&params, job.prepared, job.x, job.y[0], job.y[1], job.y[2], seq, batch,
                              k->layout, 0, items) != 0) {
    job.failed = 1;
  }
  if (st == NULL && EXTQL_LOAD_RELAXED(&job.failed))
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory for a step's buffers");

done:
  free(prep);
  for (i = 0; i < LSTM_IN_USED; i++) extql_facts_free(&f[i]);
  return st;
}

/* ------------------------------------------------------------------------ */
/* Inference                                                                 */
/* ------------------------------------------------------------------------ */

/* Y's type and shape from X's and the attributes hidden_size, direction and
 * layout; anything that cannot be read leaves Y as the registrations type it
 * (the kernel then reports the problem).  Only Y: the callback cannot tell
 * whether the node has the optional outputs Y_h / Y_c (writing one it has not
 * is out of bounds), which keep the registrations' float32. */
void extql_ort_lstm_infer(const OrtApi *api, OrtShapeInferContext *ctx) {
  OrtTensorTypeAndShapeInfo *x = NULL, *out = NULL;
  const OrtOpAttr *attr = NULL;
  OrtStatus *st;
  size_t rank = 0, n = 0, i;
  int64_t xd[3], yd[4], hidden = 0, layout = 0;
  const char *xn[3], *yn[4];
  char direction[16] = "bidirectional", own[3][32];
  int type = 0, dirs;
  static volatile long counter = 0;

  if (api == NULL) return;
  st = api->ShapeInferContext_GetInputTypeShape(ctx, 0, &x);
  if (st == NULL && x != NULL) st = api->GetTensorElementType(x, &type);
  if (st == NULL && x != NULL) st = api->GetDimensionsCount(x, &rank);
  if (st != NULL || x == NULL || type != EXTQL_FLOAT32 || rank != 3) goto keep;
  st = api->GetDimensions(x, xd, 3);
  if (st == NULL) st = api->GetSymbolicDimensions(x, xn, 3);
  if (st == NULL) st = api->ShapeInferContext_GetAttribute(ctx, "hidden_size", &attr);
  if (st == NULL) st = api->ReadOpAttr(attr, EXTQL_ORT_OP_ATTR_INT, &hidden, sizeof hidden, &n);
  if (st != NULL || hidden < 1) goto keep;
  attr = NULL;
  st = api->ShapeInferContext_GetAttribute(ctx, "layout", &attr);
  if (st == NULL) st = api->ReadOpAttr(attr, EXTQL_ORT_OP_ATTR_INT, &layout, sizeof layout, &n);
  if (st != NULL) { /* absent: 0 (of another type: the kernel refuses it) */
    api->ReleaseStatus(st);
    st = NULL;
    layout = 0;
  }
  if (layout != 0 && layout != 1) goto keep;
  attr = NULL;
  st = api->ShapeInferContext_GetAttribute(ctx, "direction", &attr);
  if (st == NULL)
    st = api->ReadOpAttr(attr, EXTQL_ORT_OP_ATTR_STRING, direction, sizeof direction, &n);
  if (st != NULL) {
    api->ReleaseStatus(st);
    st = NULL;
    if (attr != NULL) goto keep; /* a direction too long or not a string */
    snprintf(direction, sizeof direction, "bidirectional");
  }
  if (strcmp(direction, "bidirectional") == 0)
    dirs = 2;
  else if (strcmp(direction, "forward") == 0 || strcmp(direction, "reverse") == 0)
    dirs = 1;
  else
    goto keep;
  for (i = 0; i < 2; i++) /* a dimension with neither value nor name: a name of its own */
    if (xd[i] < 0 && (xn[i] == NULL || xn[i][0] == '\0')) {
#if defined(_WIN32)
      long c = ++counter;
#else
      long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
#endif
      snprintf(own[i], sizeof own[i], "extql_lstm_%ld", c);
      xn[i] = own[i];
    }
  /* layout 0: X [seq, batch, input] -> Y [seq, dirs, batch, H];
   * layout 1: X [batch, seq, input] -> Y [batch, seq, dirs, H] */
  yd[0] = xd[0], yn[0] = xn[0];
  yd[1] = layout == 0 ? dirs : xd[1], yn[1] = layout == 0 ? "" : xn[1];
  yd[2] = layout == 0 ? xd[1] : dirs, yn[2] = layout == 0 ? xn[1] : "";
  yd[3] = hidden, yn[3] = "";
  for (i = 0; i < 4; i++)
    if (yd[i] >= 0) yn[i] = "";
  st = api->CreateTensorTypeAndShapeInfo(&out);
  if (st == NULL) st = api->SetTensorElementType(out, EXTQL_FLOAT32);
  if (st == NULL) st = api->SetDimensions(out, yd, 4);
  if (st == NULL) st = api->SetSymbolicDimensions(out, yn, 4);
  if (st == NULL) st = api->ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
keep:
  if (st != NULL) api->ReleaseStatus(st);
  if (out != NULL) api->ReleaseTensorTypeAndShapeInfo(out);
}
