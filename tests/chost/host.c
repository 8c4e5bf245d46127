/*
 * host.c - a C program that runs an ONNX model in onnxruntime with a
 * custom-op library registered, as a C (or C++, C#, Java, Rust) user's
 * program does: no Python anywhere in the process.  Built and run by
 * tests/ort/test_c_host.py against onnxruntime's C API as tests/chost/
 * ort_host.h declares it.
 *
 *   host LIBRARY MODEL OUTDIR [--run LEVEL:THREADS]... [--input NAME TYPE SHAPE FILE]...
 *
 * LIBRARY   the custom-op library, registered with RegisterCustomOpsLibrary_V2
 * MODEL     the .onnx file the sessions are made from
 * OUTDIR    where the outputs are written (an existing directory)
 * --run     one session and run per option: the graph optimisation level
 *           (0, 1, 2 or 99) and the intra-op thread count (0: onnxruntime's
 *           default); without any, one run at 99:0
 * --input   a graph input: its name, its ONNX element type (the number of
 *           TensorProto.DataType), its shape ("2,3,4"; "" for a scalar) and
 *           a file of its raw bytes in ONNX's layout (row-major, packed for
 *           the types of fewer than 8 bits)
 *
 * Writes each output of run R (0-based, in --run order) to
 * OUTDIR/r<R>_o<I>.bin (raw bytes, I the output's index) and prints, tab
 * separated, one line per fact:
 *   onnxruntime <version>
 *   output <R> <I> <element type> <d0,d1,...> <file> <name>
 *   mapped <path>     every file mapped into the process (Linux), listed
 *                     after the first run, while its session is alive
 * Exit status: 0 done; 1 onnxruntime failed (its message on stderr: a
 * library that refuses a model ends here); 2 bad arguments or files.
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

static const OrtApi *api;

/* Report onnxruntime's message for a failed call and release its status. */
static int ort_failed(OrtStatus *status, const char *what) {
  fprintf(stderr, "host: %s failed: %s\n", what, api->GetErrorMessage(status));
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
  fputs("\nusage: host LIBRARY MODEL OUTDIR [--run LEVEL:THREADS]... "
        "[--input NAME TYPE SHAPE FILE]...\n", stderr);
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

/* Read an input's file; its size must be what the type and shape take. */
static int read_input(const char *path, Input *in) {
  size_t count = 1, got;
  long size;
  int ok;
  FILE *f;
  for (size_t k = 0; k < in->rank; k++) {
    if (in->dims[k] != 0 && count > SIZE_MAX / (size_t)in->dims[k])
      return usage_error("input %s: the shape is too large", in->name);
    count *= (size_t)in->dims[k];
  }
  in->bytes = tensor_bytes(in->type, count, &ok);
  if (!ok)
    return usage_error("input %s: not an element type this host moves", in->name);
  f = fopen(path, "rb");
  if (!f)
    return usage_error("cannot open %s", path);
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return usage_error("cannot read %s", path);
  }
  if ((size_t)size != in->bytes) {
    fclose(f);
    fprintf(stderr, "host: input %s: %s holds %ld bytes, its type and shape take %zu\n",
            in->name, path, size, in->bytes);
    return 2;
  }
  in->data = malloc(in->bytes ? in->bytes : 1);
  if (!in->data) {
    fclose(f);
    return usage_error("out of memory reading %s", path);
  }
  got = fread(in->data, 1, in->bytes, f);
  fclose(f);
  return got == in->bytes ? 0 : usage_error("cannot read %s", path);
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

/* Write one output tensor to OUTDIR/r<R>_o<I>.bin and print its line. */
static int write_output(const char *outdir, int run, size_t index, const char *name,
                        OrtValue *value) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  int64_t dims[MAX_RANK];
  size_t rank = 0, count = 0, bytes;
  int rc = 0, type = 0, kind = 0, ok;
  void *data = NULL;
  char path[4096];
  FILE *f;

  ORT_CHECK(api->GetValueType(value, &kind), "GetValueType");
  if (kind != ORT_HOST_TYPE_TENSOR) {
    fprintf(stderr, "host: output %s is not a tensor\n", name);
    rc = 2;
    goto done;
  }
  ORT_CHECK(api->GetTensorTypeAndShape(value, &info), "GetTensorTypeAndShape");
  ORT_CHECK(api->GetTensorElementType(info, &type), "GetTensorElementType");
  ORT_CHECK(api->GetDimensionsCount(info, &rank), "GetDimensionsCount");
  if (rank > MAX_RANK) {
    fprintf(stderr, "host: output %s has rank %zu\n", name, rank);
    rc = 2;
    goto done;
  }
  ORT_CHECK(api->GetDimensions(info, dims, rank), "GetDimensions");
  ORT_CHECK(api->GetTensorShapeElementCount(info, &count), "GetTensorShapeElementCount");
  bytes = tensor_bytes(type, count, &ok);
  if (!ok) {
    fprintf(stderr, "host: output %s has element type %d, which this host does not move\n",
            name, type);
    rc = 2;
    goto done;
  }
  if (count)
    ORT_CHECK(api->GetTensorMutableData(value, &data), "GetTensorMutableData");
  snprintf(path, sizeof path, "%s/r%d_o%zu.bin", outdir, run, index);
  f = fopen(path, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "host: cannot write %s\n", path);
    rc = 2;
    goto done;
  }
  printf("output\t%d\t%zu\t%d\t", run, index, type);
  for (size_t k = 0; k < rank; k++)
    printf(k ? ",%" PRId64 : "%" PRId64, dims[k]);
  printf("\tr%d_o%zu.bin\t%s\n", run, index, name);
done:
  api->ReleaseTensorTypeAndShapeInfo(info);
  return rc;
}

/* One session with the library registered, one run, every output written. */
static int run_once(const OrtEnv *env, const char *library, const char *model,
                    const char *outdir, int run, RunConfig config, const Input *inputs,
                    size_t n_inputs) {
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
  ORT_CHECK(api->CreateSession(env, model, options, &session), "CreateSession");
  ORT_CHECK(api->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  ORT_CHECK(api->SessionGetOutputCount(session, &n_outputs), "SessionGetOutputCount");

  in_names = calloc(n_inputs + 1, sizeof *in_names);
  in_values = calloc(n_inputs + 1, sizeof *in_values);
  out_names = calloc(n_outputs + 1, sizeof *out_names);
  outputs = calloc(n_outputs + 1, sizeof *outputs);
  if (!in_names || !in_values || !out_names || !outputs) {
    fprintf(stderr, "host: out of memory\n");
    rc = 2;
    goto done;
  }
  for (size_t k = 0; k < n_inputs; k++) {
    in_names[k] = inputs[k].name;
    in_values[k] = inputs[k].value;
  }
  for (; named < n_outputs; named++)
    ORT_CHECK(api->SessionGetOutputName(session, named, allocator, &out_names[named]),
              "SessionGetOutputName");
  ORT_CHECK(api->Run(session, NULL, in_names, in_values, n_inputs,
                     (const char *const *)out_names, n_outputs, outputs),
            "Run");
  for (size_t k = 0; k < n_outputs && rc == 0; k++)
    rc = write_output(outdir, run, k, out_names[k], outputs[k]);
  if (run == 0 && rc == 0)
    print_mapped_files();
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

int main(int argc, char **argv) {
  const char *library, *model, *outdir;
  RunConfig runs[MAX_RUNS];
  Input *inputs;
  size_t n_inputs = 0;
  int n_runs = 0, rc = 0;
  OrtEnv *env = NULL;
  OrtMemoryInfo *memory = NULL;
  const OrtApiBase *base;

  if (argc < 4)
    return usage_error("%s", "missing arguments");
  library = argv[1];
  model = argv[2];
  outdir = argv[3];
  inputs = calloc((size_t)argc, sizeof *inputs);
  if (!inputs)
    return usage_error("%s", "out of memory");
  for (int a = 4; a < argc; a++) {
    if (strcmp(argv[a], "--run") == 0 && a + 1 < argc) {
      if (n_runs == MAX_RUNS || !parse_run(argv[++a], &runs[n_runs++]))
        return usage_error("bad --run %s (LEVEL:THREADS, LEVEL 0, 1, 2 or 99)", argv[a]);
    } else if (strcmp(argv[a], "--input") == 0 && a + 4 < argc) {
      Input *in = &inputs[n_inputs++];
      char *end;
      in->name = argv[a + 1];
      in->type = (int)strtol(argv[a + 2], &end, 10);
      if (*end != '\0' || end == argv[a + 2])
        return usage_error("bad element type %s", argv[a + 2]);
      if (!parse_shape(argv[a + 3], in))
        return usage_error("bad shape \"%s\" (e.g. 2,3,4; \"\" for a scalar)", argv[a + 3]);
      if ((rc = read_input(argv[a + 4], in)) != 0)
        return rc;
      a += 4;
    } else {
      return usage_error("unexpected argument %s", argv[a]);
    }
  }
  if (n_runs == 0)
    runs[n_runs++] = (RunConfig){99, 0};

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
  for (size_t k = 0; k < n_inputs; k++)
    ORT_CHECK(api->CreateTensorWithDataAsOrtValue(memory, inputs[k].data, inputs[k].bytes,
                                                  inputs[k].dims, inputs[k].rank,
                                                  inputs[k].type, &inputs[k].value),
              "CreateTensorWithDataAsOrtValue");
  for (int r = 0; r < n_runs && rc == 0; r++)
    rc = run_once(env, library, model, outdir, r, runs[r], inputs, n_inputs);
done:
  fflush(stdout);
  for (size_t k = 0; k < n_inputs; k++) {
    if (inputs[k].value)
      api->ReleaseValue(inputs[k].value);
    free(inputs[k].data);
  }
  free(inputs);
  if (memory)
    api->ReleaseMemoryInfo(memory);
  if (env)
    api->ReleaseEnv(env);
  return rc;
}
