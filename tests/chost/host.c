/*
 * host.c - a C program that runs ONNX models in onnxruntime with a
 * custom-op library registered, as a C (or C++, C#, Java, Rust) user's
 * program does: no Python anywhere in the process.  Built and run by
 * tests/ort/test_c_host.py against onnxruntime's C API as tests/chost/
 * ort_host.h declares it.
 *
 *   host LIBRARY OUTDIR JOB [-- JOB]...
 *   JOB: MODEL [--run LEVEL:THREADS]... [--input NAME TYPE SHAPE FILE]...
 *
 * LIBRARY   the custom-op library, registered with RegisterCustomOpsLibrary_V2
 *           in every session
 * OUTDIR    where the outputs are written (an existing directory)
 * MODEL     the .onnx file a job's sessions are made from
 * --run     one session and run per option: the graph optimisation level
 *           (0, 1, 2 or 99) and the intra-op thread count (0: onnxruntime's
 *           default); without any, one run at 99:0
 * --input   a graph input: its name, its ONNX element type (the number of
 *           TensorProto.DataType), its shape ("2,3,4"; "" for a scalar) and
 *           a file of its raw bytes in ONNX's layout (row-major, packed for
 *           the types of fewer than 8 bits)
 *
 * The jobs run one after the other in one onnxruntime environment, as an
 * application serving several models does.  Each output I of run R of job
 * J is written to OUTDIR/j<J>_r<R>_o<I>.bin (raw bytes), and the program
 * prints, tab separated, one line per fact:
 *   onnxruntime <version>
 *   output <J> <R> <I> <element type> <d0,d1,...> <file> <name>
 *   failed <J> <status>   a job that failed (the rest of it is not run;
 *                         onnxruntime's message is on stderr)
 *   mapped <path>         every file mapped into the process (Linux),
 *                         listed after the first run, its session alive
 * A failure's message on stderr starts "host: job J: " (onnxruntime's:
 * "host: job J: <call> failed: <message>").
 * Exit status: 0 every job done; else that of the first job that failed:
 * 1 onnxruntime failed (a library that refuses a model ends here), 2 a file
 * could not be read or written.  Bad arguments: 2 before anything runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_host.h"

#define MAX_RANK 32
#define MAX_RUNS 16

typedef struct {
  const char *name;
  const char *path;
  int type;
  size_t rank;
  int64_t dims[MAX_RANK];
  void *data;
  size_t bytes;
  OrtValue *value;
} Input;

typedef struct {
  int level;
  int threads;
} RunConfig;

typedef struct {
  const char *model;
  RunConfig runs[MAX_RUNS];
  int n_runs;
  Input *inputs;
  size_t n_inputs;
} Job;

static const OrtApi *api;
static int listed_mapped_files;
static int current_job = -1; /* the job running, for the messages */

/* Report onnxruntime's message for a failed call and release its status:
 * "host: job J: <call> failed: <message>". */
static int ort_failed(OrtStatus *status, const char *what) {
  if (current_job >= 0)
    fprintf(stderr, "host: job %d: ", current_job);
  else
    fputs("host: ", stderr);
  fprintf(stderr, "%s failed: %s\n", what, api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  return 1;
}

/* Run an OrtApi call; on failure report it and leave through `done`. */
#define ORT_CHECK(call, what)              \
  do {                                     \
    OrtStatus *status_ = (call);           \
    if (status_) {                         \
      rc = ort_failed(status_, what);      \
      goto done;                           \
    }                                      \
  } while (0)

static int usage_error(const char *fmt, const char *arg) {
  fputs("host: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nusage: host LIBRARY OUTDIR JOB [-- JOB]...\n"
        "  JOB: MODEL [--run LEVEL:THREADS]... [--input NAME TYPE SHAPE FILE]...\n", stderr);
  return 2;
}

/* A file the host could not read or write: "host: job J: <problem>". */
static int file_error(const char *fmt, const char *arg) {
  fprintf(stderr, "host: job %d: ", current_job);
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  return 2;
}

/* Bits per element of an ONNX element type (0: not a type the host moves). */
static unsigned element_bits(int type) {
  switch (type) {
  case 2: case 3: case 9:                 /* uint8, int8, bool */
  case 17: case 18: case 19: case 20:     /* the float8 types */
  case 24:                                /* float8e8m0 */
    return 8;
  case 4: case 5: case 10: case 16:       /* uint16, int16, float16, bfloat16 */
    return 16;
  case 1: case 6: case 12:                /* float, int32, uint32 */
    return 32;
  case 7: case 11: case 13:               /* int64, double, uint64 */
    return 64;
  case 21: case 22: case 23:              /* uint4, int4, float4e2m1 */
    return 4;
  case 25: case 26:                       /* uint2, int2 */
    return 2;
  default:
    return 0;
  }
}

/* The bytes of `count` elements of `type`, packed as ONNX packs them; 0 with
 * *ok = 0 for an unknown type or a size past SIZE_MAX. */
static size_t tensor_bytes(int type, size_t count, int *ok) {
  unsigned bits = element_bits(type);
  *ok = bits != 0 && count <= (SIZE_MAX - 7) / 64;
  return *ok ? (count * bits + 7) / 8 : 0;
}

/* "2,3,4" (or "" for a scalar) into dims; 0 on a malformed shape. */
static int parse_shape(const char *text, Input *in) {
  in->rank = 0;
  if (*text == '\0')
    return 1;
  for (;;) {
    char *end;
    long long d;
    if (in->rank == MAX_RANK || *text < '0' || *text > '9')
      return 0;
    errno = 0;
    d = strtoll(text, &end, 10);
    if (errno || d < 0)
      return 0;
    in->dims[in->rank++] = (int64_t)d;
    if (*end == '\0')
      return 1;
    if (*end != ',')
      return 0;
    text = end + 1;
  }
}

/* "LEVEL:THREADS" into a run; 0 when malformed. */
static int parse_run(const char *text, RunConfig *config) {
  char *end;
  long level = strtol(text, &end, 10), threads;
  if (end == text || *end != ':' || (level != 0 && level != 1 && level != 2 && level != 99))
    return 0;
  text = end + 1;
  threads = strtol(text, &end, 10);
  if (end == text || *end != '\0' || threads < 0 || threads > 256)
    return 0;
  config->level = (int)level;
  config->threads = (int)threads;
  return 1;
}

/* Read an input's file; its size must be what the type and shape take. */
static int read_input(Input *in) {
  size_t count = 1, got;
  long size;
  int ok;
  FILE *f;
  for (size_t k = 0; k < in->rank; k++) {
    if (in->dims[k] != 0 && count > SIZE_MAX / (size_t)in->dims[k])
      return file_error("input %s: the shape is too large", in->name);
    count *= (size_t)in->dims[k];
  }
  in->bytes = tensor_bytes(in->type, count, &ok);
  if (!ok)
    return file_error("input %s: not an element type this host moves", in->name);
  f = fopen(in->path, "rb");
  if (!f)
    return file_error("cannot open %s", in->path);
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return file_error("cannot read %s", in->path);
  }
  if ((size_t)size != in->bytes) {
    fclose(f);
    fprintf(stderr, "host: job %d: input %s: %s holds %ld bytes, its type and shape take %zu\n",
            current_job, in->name, in->path, size, in->bytes);
    return 2;
  }
  in->data = malloc(in->bytes ? in->bytes : 1);
  if (!in->data) {
    fclose(f);
    return file_error("out of memory reading %s", in->path);
  }
  got = fread(in->data, 1, in->bytes, f);
  fclose(f);
  return got == in->bytes ? 0 : file_error("cannot read %s", in->path);
}

/* Parse one job from argv[*a] on (up to "--" or the end); 0 or 2. */
static int parse_job(int argc, char **argv, int *a, Job *job) {
  job->model = argv[(*a)++];
  job->inputs = calloc((size_t)argc, sizeof *job->inputs);
  if (!job->inputs)
    return usage_error("%s", "out of memory");
  for (; *a < argc && strcmp(argv[*a], "--") != 0; (*a)++) {
    if (strcmp(argv[*a], "--run") == 0 && *a + 1 < argc) {
      ++*a;
      if (job->n_runs == MAX_RUNS || !parse_run(argv[*a], &job->runs[job->n_runs++]))
        return usage_error("bad --run %s (LEVEL:THREADS, LEVEL 0, 1, 2 or 99)", argv[*a]);
    } else if (strcmp(argv[*a], "--input") == 0 && *a + 4 < argc) {
      Input *in = &job->inputs[job->n_inputs++];
      char *end;
      in->name = argv[*a + 1];
      in->type = (int)strtol(argv[*a + 2], &end, 10);
      if (*end != '\0' || end == argv[*a + 2])
        return usage_error("bad element type %s", argv[*a + 2]);
      if (!parse_shape(argv[*a + 3], in))
        return usage_error("bad shape \"%s\" (e.g. 2,3,4; \"\" for a scalar)", argv[*a + 3]);
      in->path = argv[*a + 4];
      *a += 4;
    } else {
      return usage_error("unexpected argument %s", argv[*a]);
    }
  }
  if (job->n_runs == 0)
    job->runs[job->n_runs++] = (RunConfig){99, 0};
  return 0;
}

/* Print every file mapped into this process, once each (Linux's
 * /proc/self/maps: the pathname is the field that starts with '/'). */
static void print_mapped_files(void) {
#if defined(__linux__)
  char line[4096];
  char **seen = NULL;
  size_t n_seen = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) {
    fprintf(stderr, "host: cannot read /proc/self/maps\n");
    return;
  }
  while (fgets(line, sizeof line, f)) {
    char *path = strchr(line, '/');
    size_t k;
    char **grown;
    if (!path)
      continue;
    path[strcspn(path, "\n")] = '\0';
    for (k = 0; k < n_seen && strcmp(seen[k], path) != 0; k++)
      ;
    if (k < n_seen)
      continue;
    grown = realloc(seen, (n_seen + 1) * sizeof *seen);
    if (!grown)
      break;
    seen = grown;
    seen[n_seen] = malloc(strlen(path) + 1);
    if (!seen[n_seen])
      break;
    strcpy(seen[n_seen++], path);
    printf("mapped\t%s\n", path);
  }
  fclose(f);
  for (size_t k = 0; k < n_seen; k++)
    free(seen[k]);
  free(seen);
#endif
}

/* Write one output tensor to OUTDIR/j<J>_r<R>_o<I>.bin and print its line. */
static int write_output(const char *outdir, int job, int run, size_t index, const char *name,
                        OrtValue *value) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  int64_t dims[MAX_RANK];
  size_t rank = 0, count = 0, bytes;
  int rc = 0, type = 0, kind = 0, ok;
  void *data = NULL;
  char file[64], path[4096];
  FILE *f;

  ORT_CHECK(api->GetValueType(value, &kind), "GetValueType");
  if (kind != ORT_HOST_TYPE_TENSOR) {
    fprintf(stderr, "host: job %d: output %s is not a tensor\n", job, name);
    rc = 2;
    goto done;
  }
  ORT_CHECK(api->GetTensorTypeAndShape(value, &info), "GetTensorTypeAndShape");
  ORT_CHECK(api->GetTensorElementType(info, &type), "GetTensorElementType");
  ORT_CHECK(api->GetDimensionsCount(info, &rank), "GetDimensionsCount");
  if (rank > MAX_RANK) {
    fprintf(stderr, "host: job %d: output %s has rank %zu\n", job, name, rank);
    rc = 2;
    goto done;
  }
  ORT_CHECK(api->GetDimensions(info, dims, rank), "GetDimensions");
  ORT_CHECK(api->GetTensorShapeElementCount(info, &count), "GetTensorShapeElementCount");
  bytes = tensor_bytes(type, count, &ok);
  if (!ok) {
    fprintf(stderr, "host: job %d: output %s has element type %d, which this host does not move\n",
            job, name, type);
    rc = 2;
    goto done;
  }
  if (count)
    ORT_CHECK(api->GetTensorMutableData(value, &data), "GetTensorMutableData");
  snprintf(file, sizeof file, "j%d_r%d_o%zu.bin", job, run, index);
  snprintf(path, sizeof path, "%s/%s", outdir, file);
  f = fopen(path, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "host: job %d: cannot write %s\n", job, path);
    rc = 2;
    goto done;
  }
  printf("output\t%d\t%d\t%zu\t%d\t", job, run, index, type);
  for (size_t k = 0; k < rank; k++)
    printf(k ? ",%" PRId64 : "%" PRId64, dims[k]);
  printf("\t%s\t%s\n", file, name);
done:
  api->ReleaseTensorTypeAndShapeInfo(info);
  return rc;
}

/* One session with the library registered, one run, every output written. */
static int run_once(const OrtEnv *env, const char *library, const char *outdir, int j,
                    const Job *job, int run) {
  RunConfig config = job->runs[run];
  OrtSessionOptions *options = NULL;
  OrtSession *session = NULL;
  OrtAllocator *allocator = NULL;
  const char **in_names = NULL;
  const OrtValue **in_values = NULL;
  char **out_names = NULL;
  OrtValue **outputs = NULL;
  size_t n_outputs = 0, named = 0;
  int rc = 0;

  ORT_CHECK(api->CreateSessionOptions(&options), "CreateSessionOptions");
  ORT_CHECK(api->SetSessionGraphOptimizationLevel(options, config.level),
            "SetSessionGraphOptimizationLevel");
  if (config.threads > 0)
    ORT_CHECK(api->SetIntraOpNumThreads(options, config.threads), "SetIntraOpNumThreads");
  ORT_CHECK(api->RegisterCustomOpsLibrary_V2(options, library), "RegisterCustomOpsLibrary_V2");
  ORT_CHECK(api->CreateSession(env, job->model, options, &session), "CreateSession");
  ORT_CHECK(api->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  ORT_CHECK(api->SessionGetOutputCount(session, &n_outputs), "SessionGetOutputCount");

  in_names = calloc(job->n_inputs + 1, sizeof *in_names);
  in_values = calloc(job->n_inputs + 1, sizeof *in_values);
  out_names = calloc(n_outputs + 1, sizeof *out_names);
  outputs = calloc(n_outputs + 1, sizeof *outputs);
  if (!in_names || !in_values || !out_names || !outputs) {
    fprintf(stderr, "host: job %d: out of memory\n", j);
    rc = 2;
    goto done;
  }
  for (size_t k = 0; k < job->n_inputs; k++) {
    in_names[k] = job->inputs[k].name;
    in_values[k] = job->inputs[k].value;
  }
  for (; named < n_outputs; named++)
    ORT_CHECK(api->SessionGetOutputName(session, named, allocator, &out_names[named]),
              "SessionGetOutputName");
  ORT_CHECK(api->Run(session, NULL, in_names, in_values, job->n_inputs,
                     (const char *const *)out_names, n_outputs, outputs),
            "Run");
  for (size_t k = 0; k < n_outputs && rc == 0; k++)
    rc = write_output(outdir, j, run, k, out_names[k], outputs[k]);
  if (rc == 0 && !listed_mapped_files) {
    print_mapped_files();
    listed_mapped_files = 1;
  }
done:
  for (size_t k = 0; outputs && k < n_outputs; k++)
    api->ReleaseValue(outputs[k]);
  for (size_t k = 0; k < named; k++) {
    OrtStatus *status = api->AllocatorFree(allocator, out_names[k]);
    if (status)
      api->ReleaseStatus(status);
  }
  free(outputs);
  free(out_names);
  free(in_values);
  free(in_names);
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(options);
  return rc;
}

/* A job: its inputs read and made tensors, then its runs. */
static int run_job(const OrtEnv *env, const OrtMemoryInfo *memory, const char *library,
                   const char *outdir, int j, Job *job) {
  int rc = 0;
  for (size_t k = 0; k < job->n_inputs; k++) {
    Input *in = &job->inputs[k];
    if ((rc = read_input(in)) != 0)
      goto done;
    ORT_CHECK(api->CreateTensorWithDataAsOrtValue(memory, in->data, in->bytes, in->dims,
                                                  in->rank, in->type, &in->value),
              "CreateTensorWithDataAsOrtValue");
  }
  for (int r = 0; r < job->n_runs && rc == 0; r++)
    rc = run_once(env, library, outdir, j, job, r);
done:
  for (size_t k = 0; k < job->n_inputs; k++) {
    api->ReleaseValue(job->inputs[k].value);
    free(job->inputs[k].data);
  }
  return rc;
}

int main(int argc, char **argv) {
  const char *library, *outdir;
  Job *jobs;
  int n_jobs = 0, rc = 0, first_failure = 0;
  OrtEnv *env = NULL;
  OrtMemoryInfo *memory = NULL;
  const OrtApiBase *base;

  if (argc < 4)
    return usage_error("%s", "missing arguments");
  library = argv[1];
  outdir = argv[2];
  jobs = calloc((size_t)argc, sizeof *jobs);
  if (!jobs)
    return usage_error("%s", "out of memory");
  for (int a = 3; a < argc; a++) {
    if (strcmp(argv[a], "--") == 0 || (rc = parse_job(argc, argv, &a, &jobs[n_jobs++])) != 0)
      return rc ? rc : usage_error("%s", "a job without a model");
  }

  base = OrtGetApiBase();
  api = base->GetApi(ORT_HOST_API_VERSION);
  if (!api) {
    fprintf(stderr, "host: onnxruntime %s has no C API version %d\n",
            base->GetVersionString(), ORT_HOST_API_VERSION);
    return 1;
  }
  printf("onnxruntime\t%s\n", base->GetVersionString());

  ORT_CHECK(api->CreateEnv(ORT_HOST_LOG_ERROR, "extql-c-host", &env), "CreateEnv");
  ORT_CHECK(api->CreateCpuMemoryInfo(ORT_HOST_ARENA_ALLOCATOR, ORT_HOST_MEM_DEFAULT, &memory),
            "CreateCpuMemoryInfo");
  for (int j = 0; j < n_jobs; j++) {
    int job_rc;
    current_job = j;
    job_rc = run_job(env, memory, library, outdir, j, &jobs[j]);
    if (job_rc != 0) {
      printf("failed\t%d\t%d\n", j, job_rc);
      fflush(stdout);
      if (!first_failure)
        first_failure = job_rc;
    }
  }
  current_job = -1;
  rc = first_failure;
done:
  fflush(stdout);
  for (int j = 0; j < n_jobs; j++)
    free(jobs[j].inputs);
  free(jobs);
  api->ReleaseMemoryInfo(memory);
  api->ReleaseEnv(env);
  return rc;
}
