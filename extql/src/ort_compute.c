/*
 * ort_compute.c - one run of a node: read and check the inputs, stage
 * misaligned buffers, split the work and call the library's range function.
 *
 * Threads.  The work is split into ranges of the flat tensor (extql_split.h)
 * run by KernelContext_ParallelFor on the session's own intra-op thread
 * pool, so it honours the session's intra_op_num_threads, never adds threads
 * of its own (no oversubscription, no OpenMP team shared between sessions)
 * and runs inline when the session has one thread.  extql's own thread setting
 * (EXTQL_NUM_THREADS) is for the NumPy API only.
 */
#include <stdlib.h>
#include <string.h>

#include "extql_split.h"
#include "extql_types.h"
#include "ort_internal.h"

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
  /* x, scale, zero point, y (NULL when used in place); a quantize in
   * float64's ones and zero2 (see ExtqlWork) */
  void *copies[6];
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
  for (i = 0; i < 6; i++) free(g->copies[i]);
}

/* ------------------------------------------------------------------------ */
/* The run                                                                   */
/* ------------------------------------------------------------------------ */

/* Work for one KernelContext_ParallelFor call. */
typedef struct {
  ExtqlRangeFn range;
  ExtqlWork work;
  int64_t n, chunk;
  volatile int failed;
} Job;

static void EXTQL_ORT_CALL run_chunk(void *data, size_t index) {
  Job *job = (Job *)data;
  int64_t start = (int64_t)index * job->chunk;
  int64_t stop = start + job->chunk;
  if (start >= job->n) return;
  if (stop > job->n) stop = job->n;
  if (job->range(&job->work, start, stop) != 0) job->failed = 1;
}

OrtStatus *EXTQL_ORT_CALL extql_kernel_compute(void *kernel, OrtKernelContext *ctx) {
  ExtqlKernel *k = (ExtqlKernel *)kernel;
  const OrtApi *api = k->api;
  const char *label = k->label;
  const OrtValue *vx = NULL, *vs = NULL, *vz = NULL;
  OrtValue *vy = NULL;
  TensorFacts fx, fs, fz, fy;
  const TensorFacts *s_f = &fs, *z_f = &fz; /* the scale's and zero point's: read or constant */
  OrtStatus *st = NULL;
  size_t nin = 0;
  int out_type = 0, qtype, ftype, prec = 0, f64_int;
  int64_t D = 1, inner = 1;
  void *px = NULL, *ps = NULL, *pz = NULL, *py = NULL, *py_out = NULL;
  size_t x_size, y_size;
  Staging staging;
  char b1[32], b2[32];

  memset(&staging, 0, sizeof staging);
  extql_facts_init(&fx);
  extql_facts_init(&fs);
  extql_facts_init(&fz);
  extql_facts_init(&fy);

  EXTQL_TRY(api->KernelContext_GetInputCount(ctx, &nin));
  if (nin < 2 || nin > 3)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "expected 2 or 3 inputs, got %zu",
                      nin);
  EXTQL_TRY(api->KernelContext_GetInput(ctx, 0, &vx));
  EXTQL_TRY(api->KernelContext_GetInput(ctx, 1, &vs));
  if (nin == 3) EXTQL_TRY(api->KernelContext_GetInput(ctx, 2, &vz)); /* NULL: empty name */
  if (vx == NULL || vs == NULL)
    return extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT, "inputs x and %s are required",
                      extql_input_name(k->kind, 1));

  st = extql_facts_of_value(api, label, "x", vx, &fx);
  if (k->const_in[0])
    s_f = &k->const_facts[0];
  else if (st == NULL)
    st = extql_facts_of_value(api, label, extql_input_name(k->kind, 1), vs, &fs);
  if (vz != NULL && k->const_in[1])
    z_f = &k->const_facts[1];
  else if (st == NULL && vz != NULL)
    st = extql_facts_of_value(api, label, extql_input_name(k->kind, 2), vz, &fz);
  if (st == NULL)
    st = extql_check_types(api, label, k->kind, fx.type, s_f->type, vz ? z_f->type : 0,
                           k->output_dtype, k->precision, &out_type, &prec);
  if (st == NULL)
    st = extql_check_granularity(api, label, &fx, s_f, vz ? z_f : NULL, k->axis, k->block, &D,
                                 &inner);
  if (st != NULL) goto done;
  qtype = k->kind == OP_QUANTIZE ? out_type : fx.type;
  ftype = k->kind == OP_QUANTIZE ? fx.type : out_type;

  st = api->KernelContext_GetOutput(ctx, 0, fx.rank ? fx.dims : fx.small, fx.rank, &vy);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (vy == NULL) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave no output tensor");
    goto done;
  }
  /* The graph decides the output's element type: it must be the one the
   * inputs give, or the kernel would write the wrong element size.  (y has
   * x's shape: it was made so above.) */
  if (EXTQL_LOAD_RELAXED(&k->y_type_seen) != out_type) {
    st = extql_facts_of_value(api, label, "y", vy, &fy);
    if (st != NULL) goto done;
    if (fy.type != out_type || fy.count != fx.count) {
      st = extql_fail(api, label, EXTQL_ORT_INVALID_GRAPH,
                      "the output y is %s but the inputs%s make it %s",
                      extql_type_name(fy.type, b1, sizeof b1),
                      k->output_dtype != 0 ? " and output_dtype" : "",
                      extql_type_name(out_type, b2, sizeof b2));
      goto done;
    }
    EXTQL_STORE_RELAXED(&k->y_type_seen, out_type);
  }
  if (fx.count == 0) goto done; /* empty: nothing to compute */

  st = api->GetTensorMutableData((OrtValue *)vx, &px);
  if (st == NULL) st = api->GetTensorMutableData((OrtValue *)vs, &ps);
  if (st == NULL && vz != NULL) st = api->GetTensorMutableData((OrtValue *)vz, &pz);
  if (st == NULL) st = api->GetTensorMutableData(vy, &py);
  if (st != NULL) {
    st = extql_wrap(api, label, st);
    goto done;
  }
  if (px == NULL || ps == NULL || py == NULL || (vz != NULL && pz == NULL)) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "onnxruntime gave a tensor without data");
    goto done;
  }
  x_size = extql_elem_size(fx.type);
  y_size = extql_elem_size(out_type);
  py_out = py;
  if (stage_input(&staging, 0, &px, fx.count, x_size) != 0 ||
      stage_input(&staging, 1, &ps, s_f->count, extql_elem_size(s_f->type)) != 0 ||
      stage_input(&staging, 2, &pz, z_f->count, extql_elem_size(qtype)) != 0) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
    goto done;
  }
  if (k->kind == OP_QUANTIZE && prec == EXTQL_ORT_DOUBLE && k->f64_params == NULL) {
    st = extql_fail(api, label, EXTQL_ORT_FAIL, "this library does not divide in float64");
    goto done;
  }
  /* float64's stage takes an int32 scale as it is. */
  f64_int = k->kind == OP_QUANTIZE && prec == EXTQL_ORT_DOUBLE && s_f->type == EXTQL_INT32;
  if (!f64_int &&
      (s_f->type != EXTQL_ORT_FLOAT || (prec != 0 && prec != EXTQL_ORT_FLOAT && prec != EXTQL_ORT_DOUBLE)) &&
      k->convert_scales != NULL) {
    /* Scales of float16 / bfloat16 / int32 (rounded to nearest even, as an
     * int32 x is), or rounded to the precision of the division: converted
     * once into float32 (the kernels take float32; float64's stage takes
     * float scales exact). */
    float *converted = (float *)malloc((s_f->count ? s_f->count : 1) * sizeof(float));
    int rc;
    if (converted == NULL) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
      goto done;
    }
    rc = k->convert_scales(s_f->type,
                           k->kind == OP_QUANTIZE && prec != EXTQL_ORT_DOUBLE ? prec : EXTQL_ORT_FLOAT, ps,
                           converted, (int64_t)s_f->count);
    /* The converted scales replace ps, which may be a staged copy. */
    free(staging.copies[1]);
    staging.copies[1] = converted;
    ps = converted;
    if (rc != 0) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "the kernels do not know scale type %d",
                      s_f->type);
      goto done;
    }
  }
  if (pz != NULL && extql_unpacked_size(qtype) != 0) {
    /* A sub-byte or small float zero point: converted once into the form
     * the kernels take (int8 / uint8 or float32 elements). */
    void *unpacked = malloc((z_f->count ? z_f->count : 1) * extql_unpacked_size(qtype));
    int rc;
    if (unpacked == NULL) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
      goto done;
    }
    rc = k->unpack == NULL ? -1 : k->unpack(qtype, pz, unpacked, (int64_t)z_f->count);
    /* The unpacked zero points replace pz, which may be a staged copy. */
    free(staging.copies[2]);
    staging.copies[2] = unpacked;
    pz = unpacked;
    if (rc != 0) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "the kernels do not know element type %d",
                      qtype);
      goto done;
    }
    if (k->kind == OP_DEQUANTIZE && extql_is_float8(qtype)) {
      size_t i;
      for (i = 0; i < z_f->count; i++)
        if (((const float *)pz)[i] != 0) {
          st = extql_fail(api, label, EXTQL_ORT_INVALID_ARGUMENT,
                          "x_zero_point of %s must be 0 (a float8 dequantize takes no zero "
                          "point, as the official DequantizeLinear requires)",
                          extql_type_name(qtype, b1, sizeof b1));
          goto done;
        }
    }
  }
  if (misaligned(py, y_size)) {
    staging.copies[3] = py = malloc(fx.count * y_size);
    if (py == NULL) {
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
      goto done;
    }
  }

  {
    Job job;
    int64_t n = (int64_t)fx.count;
    memset(&job, 0, sizeof job);
    if (k->kind == OP_QUANTIZE && prec == EXTQL_ORT_DOUBLE) {
      /* The float32 stage's parameters. */
      size_t m = s_f->count ? s_f->count : 1;
      staging.copies[4] = malloc(m * sizeof(float));
      staging.copies[5] = malloc(m * sizeof(float));
      if (staging.copies[4] == NULL || staging.copies[5] == NULL) {
        st = extql_fail(api, label, EXTQL_ORT_FAIL, "out of memory");
        goto done;
      }
      job.work.stype = f64_int ? EXTQL_INT32 : EXTQL_ORT_FLOAT; /* (else converted) */
      job.work.ones = (const float *)staging.copies[4];
      job.work.zero2 = k->f64_params(qtype, (float *)staging.copies[4], staging.copies[5],
                                     (int64_t)m)
                           ? staging.copies[5]
                           : pz;
    }
    job.range = k->range;
    job.work.kind = k->kind;
    job.work.qtype = qtype;
    job.work.ftype = ftype;
    job.work.prec = k->kind == OP_QUANTIZE ? prec : EXTQL_ORT_FLOAT;
    job.work.saturate = k->kind == OP_QUANTIZE ? k->saturate : 1;
    job.work.x = px;
    job.work.scale = (const float *)ps;
    job.work.zp = pz;
    job.work.y = py;
    job.work.D = D;
    job.work.inner = inner;
    job.work.block = k->block;
    job.work.out_bytes = n * (int64_t)y_size;
    job.n = n;
    job.failed = 0;
    job.chunk = extql_chunk_for(n, 0); /* the session pool: its size is not known here */
    if (job.chunk == n) {
      run_chunk(&job, 0);
    } else {
      /* ParallelFor runs the ranges inline when the session has one thread. */
      st = api->KernelContext_ParallelFor(ctx, run_chunk, (size_t)((n + job.chunk - 1) / job.chunk),
                                          0, &job);
      if (st != NULL) {
        st = extql_wrap(api, label, st);
        goto done;
      }
    }
    if (job.failed)
      st = extql_fail(api, label, EXTQL_ORT_FAIL, "the kernel does not know element type %d",
                      qtype);
    else if (py != py_out)
      memcpy(py_out, py, fx.count * y_size);
  }

done:
  staging_free(&staging);
  extql_facts_free(&fx);
  extql_facts_free(&fs);
  extql_facts_free(&fz);
  extql_facts_free(&fy);
  return st;
}
