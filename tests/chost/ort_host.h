/*
 * ort_host.h - the part of onnxruntime's C API that a host program uses to
 * load a model, register a custom-op library and run: declared by extql's
 * tests for tests/chost/host.c, the C host of tests/ort/test_c_host.py.
 *
 * It is the host's side of the API, as the shim's extql/src/ort_api.h is
 * the custom op's side, and it is declared the same way: onnxruntime's C API
 * is a table of function pointers (OrtApi) that OrtGetApiBase()->GetApi(v)
 * returns, and the table is append-only, so a function keeps its slot
 * forever.  The struct below names and types the slots the host calls (from
 * onnxruntime's documented API), pads every other slot, and a static
 * assertion pins each named slot's number, so a miscount cannot compile.
 *
 * Every slot named here exists from API version 1, except
 * RegisterCustomOpsLibrary_V2 (slot 228), which onnxruntime 1.14 added: the
 * host asks for ORT_HOST_API_VERSION.  Paths are `char` strings, as
 * onnxruntime takes them on POSIX systems (Windows takes wchar_t paths).
 */
#ifndef EXTQL_ORT_HOST_H
#define EXTQL_ORT_HOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#error "ort_host.h declares POSIX paths (char); onnxruntime takes wchar_t paths on Windows"
#endif
#define ORT_HOST_CALL

/* The API version the host asks for: the first that has every slot below. */
#define ORT_HOST_API_VERSION 14

/* Opaque onnxruntime objects, handled through pointers only. */
typedef struct OrtEnv OrtEnv;
typedef struct OrtStatus OrtStatus;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtApi OrtApi;

/* onnxruntime's C enums, passed as int on every supported ABI. */

/* OrtLoggingLevel */
enum { ORT_HOST_LOG_WARNING = 2, ORT_HOST_LOG_ERROR = 3 };
/* OrtAllocatorType, OrtMemType */
enum { ORT_HOST_ARENA_ALLOCATOR = 1, ORT_HOST_MEM_DEFAULT = 0 };
/* ONNXType */
enum { ORT_HOST_TYPE_TENSOR = 1 };
/* GraphOptimizationLevel: 0 (none), 1 (basic), 2 (extended), 99 (all). */

/* The entry point of the runtime: two slots forever. */
typedef struct OrtApiBase {
  const OrtApi *(ORT_HOST_CALL *GetApi)(uint32_t version);
  const char *(ORT_HOST_CALL *GetVersionString)(void);
} OrtApiBase;

/* Exported by libonnxruntime. */
const OrtApiBase *ORT_HOST_CALL OrtGetApiBase(void);

#define ORT_HOST_STATUS OrtStatus *(ORT_HOST_CALL *

/* The function table, up to the last slot the host uses (228). */
struct OrtApi {
  void *slot_0;
  int(ORT_HOST_CALL *GetErrorCode)(const OrtStatus *status);                      /* 1 */
  const char *(ORT_HOST_CALL *GetErrorMessage)(const OrtStatus *status);          /* 2 */
  ORT_HOST_STATUS CreateEnv)(int logging_level, const char *logid, OrtEnv **out);  /* 3 */
  void *slots_4_6[3];
  ORT_HOST_STATUS CreateSession)(const OrtEnv *env, const char *model_path,
                                 const OrtSessionOptions *options, OrtSession **out); /* 7 */
  void *slot_8;
  ORT_HOST_STATUS Run)(OrtSession *session, const OrtRunOptions *run_options,
                       const char *const *input_names, const OrtValue *const *inputs,
                       size_t input_count, const char *const *output_names,
                       size_t output_count, OrtValue **outputs);                  /* 9 */
  ORT_HOST_STATUS CreateSessionOptions)(OrtSessionOptions **out);                 /* 10 */
  void *slots_11_22[12];
  ORT_HOST_STATUS SetSessionGraphOptimizationLevel)(OrtSessionOptions *options,
                                                    int level);                   /* 23 */
  ORT_HOST_STATUS SetIntraOpNumThreads)(OrtSessionOptions *options, int threads); /* 24 */
  void *slots_25_29[5];
  ORT_HOST_STATUS SessionGetInputCount)(const OrtSession *session, size_t *out);   /* 30 */
  ORT_HOST_STATUS SessionGetOutputCount)(const OrtSession *session, size_t *out);  /* 31 */
  void *slots_32_35[4];
  ORT_HOST_STATUS SessionGetInputName)(const OrtSession *session, size_t index,
                                       OrtAllocator *allocator, char **out);     /* 36 */
  ORT_HOST_STATUS SessionGetOutputName)(const OrtSession *session, size_t index,
                                        OrtAllocator *allocator, char **out);    /* 37 */
  void *slots_38_48[11];
  ORT_HOST_STATUS CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo *info, void *data,
                                                  size_t data_bytes, const int64_t *shape,
                                                  size_t rank, int element_type,
                                                  OrtValue **out);                 /* 49 */
  void *slot_50;
  ORT_HOST_STATUS GetTensorMutableData)(OrtValue *value, void **out);             /* 51 */
  void *slots_52_59[8];
  ORT_HOST_STATUS GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info,
                                        int *out);                               /* 60 */
  ORT_HOST_STATUS GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info,
                                      size_t *out);                              /* 61 */
  ORT_HOST_STATUS GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims,
                                 size_t count);                                  /* 62 */
  void *slot_63;
  ORT_HOST_STATUS GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo *info,
                                              size_t *out);                      /* 64 */
  ORT_HOST_STATUS GetTensorTypeAndShape)(const OrtValue *value,
                                         OrtTensorTypeAndShapeInfo **out);       /* 65 */
  void *slot_66;
  ORT_HOST_STATUS GetValueType)(const OrtValue *value, int *out);                 /* 67 */
  void *slot_68;
  ORT_HOST_STATUS CreateCpuMemoryInfo)(int allocator_type, int mem_type,
                                       OrtMemoryInfo **out);                     /* 69 */
  void *slots_70_75[6];
  ORT_HOST_STATUS AllocatorFree)(OrtAllocator *allocator, void *p);               /* 76 */
  void *slot_77;
  ORT_HOST_STATUS GetAllocatorWithDefaultOptions)(OrtAllocator **out);            /* 78 */
  void *slots_79_91[13];
  void(ORT_HOST_CALL *ReleaseEnv)(OrtEnv *env);                                  /* 92 */
  void(ORT_HOST_CALL *ReleaseStatus)(OrtStatus *status);                         /* 93 */
  void(ORT_HOST_CALL *ReleaseMemoryInfo)(OrtMemoryInfo *info);                   /* 94 */
  void(ORT_HOST_CALL *ReleaseSession)(OrtSession *session);                      /* 95 */
  void(ORT_HOST_CALL *ReleaseValue)(OrtValue *value);                            /* 96 */
  void *slots_97_98[2];
  void(ORT_HOST_CALL *ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *info); /* 99 */
  void(ORT_HOST_CALL *ReleaseSessionOptions)(OrtSessionOptions *options);        /* 100 */
  void *slots_101_227[127];
  /* Loads the library, calls its RegisterCustomOps and keeps it loaded for as
   * long as a session (or these options) uses it. */
  ORT_HOST_STATUS RegisterCustomOpsLibrary_V2)(OrtSessionOptions *options,
                                               const char *library_path);       /* 228 */
};

#undef ORT_HOST_STATUS

/* Pin every named slot: its offset over the pointer size is its number. */
#if defined(__cplusplus)
#define ORT_HOST_STATIC_ASSERT static_assert
#else
#define ORT_HOST_STATIC_ASSERT _Static_assert
#endif
#define ORT_HOST_SLOT(name, n) \
  ORT_HOST_STATIC_ASSERT(offsetof(OrtApi, name) == (n) * sizeof(void *), "OrtApi slot of " #name)
ORT_HOST_SLOT(GetErrorCode, 1);
ORT_HOST_SLOT(GetErrorMessage, 2);
ORT_HOST_SLOT(CreateEnv, 3);
ORT_HOST_SLOT(CreateSession, 7);
ORT_HOST_SLOT(Run, 9);
ORT_HOST_SLOT(CreateSessionOptions, 10);
ORT_HOST_SLOT(SetSessionGraphOptimizationLevel, 23);
ORT_HOST_SLOT(SetIntraOpNumThreads, 24);
ORT_HOST_SLOT(SessionGetInputCount, 30);
ORT_HOST_SLOT(SessionGetOutputCount, 31);
ORT_HOST_SLOT(SessionGetInputName, 36);
ORT_HOST_SLOT(SessionGetOutputName, 37);
ORT_HOST_SLOT(CreateTensorWithDataAsOrtValue, 49);
ORT_HOST_SLOT(GetTensorMutableData, 51);
ORT_HOST_SLOT(GetTensorElementType, 60);
ORT_HOST_SLOT(GetDimensionsCount, 61);
ORT_HOST_SLOT(GetDimensions, 62);
ORT_HOST_SLOT(GetTensorShapeElementCount, 64);
ORT_HOST_SLOT(GetTensorTypeAndShape, 65);
ORT_HOST_SLOT(GetValueType, 67);
ORT_HOST_SLOT(CreateCpuMemoryInfo, 69);
ORT_HOST_SLOT(AllocatorFree, 76);
ORT_HOST_SLOT(GetAllocatorWithDefaultOptions, 78);
ORT_HOST_SLOT(ReleaseEnv, 92);
ORT_HOST_SLOT(ReleaseStatus, 93);
ORT_HOST_SLOT(ReleaseMemoryInfo, 94);
ORT_HOST_SLOT(ReleaseSession, 95);
ORT_HOST_SLOT(ReleaseValue, 96);
ORT_HOST_SLOT(ReleaseTensorTypeAndShapeInfo, 99);
ORT_HOST_SLOT(ReleaseSessionOptions, 100);
ORT_HOST_SLOT(RegisterCustomOpsLibrary_V2, 228);
#undef ORT_HOST_SLOT

#ifdef __cplusplus
}
#endif

#endif /* EXTQL_ORT_HOST_H */
