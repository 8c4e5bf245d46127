/*
 * ort_api.h - the part of onnxruntime's C API that extql's custom-op shim
 * uses, declared by extql itself.
 *
 * onnxruntime's C API is a table of function pointers (OrtApi) returned by
 * OrtApiBase::GetApi(version).  The table is append-only: a function keeps
 * its slot forever and each API version only adds slots at the end, so a
 * library compiled against this declaration works with every runtime whose
 * API version is at least the one it asks for.  This header therefore
 * declares the table as a struct of slots: the functions the shim calls are
 * named and typed (from onnxruntime's documented API), every other slot is a
 * placeholder, and a static assertion pins the slot number of each named
 * function, so a miscount cannot compile.
 *
 * The same holds for OrtCustomOp, the table of callbacks a custom op hands
 * to onnxruntime: onnxruntime reads only the members that exist in the API
 * version written in its `version` field.
 *
 * Slot numbers (0-based, one pointer each) and the API version that added
 * them, as published by onnxruntime:
 *    0.. 101  version 1        (e.g. CreateStatus = 0, KernelInfoGetAttribute_string = 87,
 *                               ReleaseCustomOpDomain = 101)
 *  ... 163    up to version 8  (KernelInfoGetAttributeArray_int64 = 163)
 *  ... 238    up to version 14 (KernelInfo_GetInputCount = 230, _GetInputName = 232,
 *                               _GetInputTypeInfo = 234)
 *  ... 254    version 15       (KernelInfo_GetNodeName = 244,
 *                               KernelInfoGetConstantInput_tensor = 249)
 *  ... 265    version 16
 *  ... 275    version 17       (ShapeInferContext_GetInputCount = 267 .. ReadOpAttr = 272,
 *                               KernelContext_ParallelFor = 274)
 *  ... 279    version 18
 * onnxruntime 1.N provides API version N.
 */
#ifndef EXTQL_ORT_API_H
#define EXTQL_ORT_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define EXTQL_ORT_CALL __stdcall
#define EXTQL_EXPORT __declspec(dllexport)
#else
#define EXTQL_ORT_CALL
#define EXTQL_EXPORT __attribute__((visibility("default")))
#endif

/* Opaque onnxruntime objects: only ever handled through pointers. */
typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtShapeInferContext OrtShapeInferContext;
typedef struct OrtOpAttr OrtOpAttr;
typedef struct OrtCustomOp OrtCustomOp;
typedef struct OrtApi OrtApi;

/* onnxruntime's C enums are passed as int on every supported ABI. */

/* OrtErrorCode */
enum {
  EXTQL_ORT_OK = 0,
  EXTQL_ORT_FAIL = 1,
  EXTQL_ORT_INVALID_ARGUMENT = 2,
  EXTQL_ORT_INVALID_GRAPH = 10
};

/* ONNXTensorElementDataType: the numbering of ONNX's TensorProto.DataType. */
enum {
  EXTQL_ORT_UNDEFINED = 0,
  EXTQL_ORT_FLOAT = 1,
  EXTQL_ORT_DOUBLE = 11
};

/* ONNXType */
enum { EXTQL_ORT_TYPE_TENSOR = 1 };

/* OrtCustomOpInputOutputCharacteristic */
enum {
  EXTQL_ORT_IO_REQUIRED = 0,
  EXTQL_ORT_IO_OPTIONAL = 1,
  EXTQL_ORT_IO_VARIADIC = 2
};

/* OrtOpAttrType */
enum { EXTQL_ORT_OP_ATTR_INT = 1, EXTQL_ORT_OP_ATTR_STRING = 5 };

/* OrtMemType */
enum { EXTQL_ORT_MEM_DEFAULT = 0 };

/* The entry point of the runtime (never versioned: two slots forever). */
typedef struct OrtApiBase {
  const OrtApi *(EXTQL_ORT_CALL *GetApi)(uint32_t version);
  const char *(EXTQL_ORT_CALL *GetVersionString)(void);
} OrtApiBase;

#define EXTQL_ORT_STATUS OrtStatus *(EXTQL_ORT_CALL *

/* The function table, up to the last slot the shim uses (274). */
struct OrtApi {
  EXTQL_ORT_STATUS CreateStatus)(int code, const char *msg);                       /* 0 */
  int(EXTQL_ORT_CALL *GetErrorCode)(const OrtStatus *status);                    /* 1 */
  const char *(EXTQL_ORT_CALL *GetErrorMessage)(const OrtStatus *status);        /* 2 */
  void *slots_3_25[23];
  EXTQL_ORT_STATUS CreateCustomOpDomain)(const char *domain, OrtCustomOpDomain **out); /* 26 */
  EXTQL_ORT_STATUS CustomOpDomain_Add)(OrtCustomOpDomain *domain, const OrtCustomOp *op);
  EXTQL_ORT_STATUS AddCustomOpDomain)(OrtSessionOptions *options, OrtCustomOpDomain *domain);
  void *slots_29_50[22];
  EXTQL_ORT_STATUS GetTensorMutableData)(OrtValue *value, void **out);           /* 51 */
  void *slots_52_54[3];
  EXTQL_ORT_STATUS CastTypeInfoToTensorInfo)(const OrtTypeInfo *type_info,
                                             const OrtTensorTypeAndShapeInfo **out); /* 55 */
  EXTQL_ORT_STATUS GetOnnxTypeFromTypeInfo)(const OrtTypeInfo *type_info, int *out);
  EXTQL_ORT_STATUS CreateTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo **out); /* 57 */
  EXTQL_ORT_STATUS SetTensorElementType)(OrtTensorTypeAndShapeInfo *info, int type);
  EXTQL_ORT_STATUS SetDimensions)(OrtTensorTypeAndShapeInfo *info, const int64_t *dims,
                                  size_t count);                                  /* 59 */
  EXTQL_ORT_STATUS GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info, int *out);
  EXTQL_ORT_STATUS GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out);
  EXTQL_ORT_STATUS GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims,
                                  size_t count);                                  /* 62 */
  EXTQL_ORT_STATUS GetSymbolicDimensions)(const OrtTensorTypeAndShapeInfo *info,
                                          const char **dim_params, size_t count); /* 63 */
  EXTQL_ORT_STATUS GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo *info,
                                               size_t *out);                      /* 64 */
  EXTQL_ORT_STATUS GetTensorTypeAndShape)(const OrtValue *value,
                                          OrtTensorTypeAndShapeInfo **out);       /* 65 */
  void *slots_66_84[19];
  EXTQL_ORT_STATUS KernelInfoGetAttribute_float)(const OrtKernelInfo *info, const char *name,
                                                 float *out);                     /* 85 */
  EXTQL_ORT_STATUS KernelInfoGetAttribute_int64)(const OrtKernelInfo *info, const char *name,
                                                 int64_t *out);                   /* 86 */
  EXTQL_ORT_STATUS KernelInfoGetAttribute_string)(const OrtKernelInfo *info, const char *name,
                                                  char *out, size_t *size);      /* 87 */
  EXTQL_ORT_STATUS KernelContext_GetInputCount)(const OrtKernelContext *ctx, size_t *out);
  EXTQL_ORT_STATUS KernelContext_GetOutputCount)(const OrtKernelContext *ctx, size_t *out);
  EXTQL_ORT_STATUS KernelContext_GetInput)(const OrtKernelContext *ctx, size_t index,
                                           const OrtValue **out);                 /* 90 */
  EXTQL_ORT_STATUS KernelContext_GetOutput)(OrtKernelContext *ctx, size_t index,
                                            const int64_t *dims, size_t count,
                                            OrtValue **out);                      /* 91 */
  void *slot_92;
  void(EXTQL_ORT_CALL *ReleaseStatus)(OrtStatus *status);                        /* 93 */
  void *slots_94_97[4];
  void(EXTQL_ORT_CALL *ReleaseTypeInfo)(OrtTypeInfo *info);                      /* 98 */
  void(EXTQL_ORT_CALL *ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *info);
  void *slot_100;
  void(EXTQL_ORT_CALL *ReleaseCustomOpDomain)(OrtCustomOpDomain *domain);        /* 101 */
  void *slots_102_162[61];
  /* Reads the attribute's ints whatever its declared type, so a NULL buffer
   * and a size query succeed exactly when the attribute exists. */
  EXTQL_ORT_STATUS KernelInfoGetAttributeArray_int64)(const OrtKernelInfo *info,
                                                      const char *name, int64_t *out,
                                                      size_t *size);             /* 163 */
  void *slots_164_229[66];
  EXTQL_ORT_STATUS KernelInfo_GetInputCount)(const OrtKernelInfo *info, size_t *out); /* 230 */
  EXTQL_ORT_STATUS KernelInfo_GetOutputCount)(const OrtKernelInfo *info, size_t *out);
  EXTQL_ORT_STATUS KernelInfo_GetInputName)(const OrtKernelInfo *info, size_t index, char *out,
                                            size_t *size);                        /* 232 */
  EXTQL_ORT_STATUS KernelInfo_GetOutputName)(const OrtKernelInfo *info, size_t index,
                                             char *out, size_t *size);            /* 233 */
  EXTQL_ORT_STATUS KernelInfo_GetInputTypeInfo)(const OrtKernelInfo *info, size_t index,
                                                OrtTypeInfo **out);               /* 234 */
  EXTQL_ORT_STATUS KernelInfo_GetOutputTypeInfo)(const OrtKernelInfo *info, size_t index,
                                                 OrtTypeInfo **out);              /* 235 */
  void *slots_236_243[8];
  EXTQL_ORT_STATUS KernelInfo_GetNodeName)(const OrtKernelInfo *info, char *out,
                                           size_t *size);                         /* 244 */
  void *slots_245_248[4];
  EXTQL_ORT_STATUS KernelInfoGetConstantInput_tensor)(const OrtKernelInfo *info, size_t index,
                                                     int *is_constant,
                                                     const OrtValue **out); /* 249 */
  void *slots_250_266[17];
  EXTQL_ORT_STATUS ShapeInferContext_GetInputCount)(const OrtShapeInferContext *ctx,
                                                    size_t *out);                 /* 267 */
  EXTQL_ORT_STATUS ShapeInferContext_GetInputTypeShape)(const OrtShapeInferContext *ctx,
                                                        size_t index,
                                                        OrtTensorTypeAndShapeInfo **info);
  EXTQL_ORT_STATUS ShapeInferContext_GetAttribute)(const OrtShapeInferContext *ctx,
                                                   const char *name, const OrtOpAttr **attr);
  EXTQL_ORT_STATUS ShapeInferContext_SetOutputTypeShape)(const OrtShapeInferContext *ctx,
                                                         size_t index,
                                                         const OrtTensorTypeAndShapeInfo *info);
  EXTQL_ORT_STATUS SetSymbolicDimensions)(OrtTensorTypeAndShapeInfo *info,
                                          const char **dim_params, size_t count); /* 271 */
  EXTQL_ORT_STATUS ReadOpAttr)(const OrtOpAttr *attr, int type, void *data, size_t len,
                               size_t *out);                                      /* 272 */
  void *slot_273;
  EXTQL_ORT_STATUS KernelContext_ParallelFor)(const OrtKernelContext *ctx,
                                              void (*fn)(void *data, size_t index),
                                              size_t total, size_t num_batch,
                                              void *data);                        /* 274 */
};

#undef EXTQL_ORT_STATUS

/* The API version that added each slot the shim uses: a slot may be called
 * only when the runtime's API version is at least this. */
#define EXTQL_ORT_API_KERNEL_INFO_TYPES 14 /* KernelInfo_GetInput/OutputTypeInfo */
#define EXTQL_ORT_API_NODE_NAME 15         /* KernelInfo_GetNodeName */
#define EXTQL_ORT_API_CONSTANT_INPUT 15    /* KernelInfoGetConstantInput_tensor */
#define EXTQL_ORT_API_COMPUTE_V2 16        /* OrtCustomOp::CreateKernelV2 / KernelComputeV2 */
#define EXTQL_ORT_API_PARALLEL_FOR 17      /* KernelContext_ParallelFor */

/* The custom-op callback table.  onnxruntime reads the members of the
 * version written in `version` (and never more), so the shim writes the
 * lowest version that has everything it uses. */
struct OrtCustomOp {
  uint32_t version;
  /* version 1 */
  void *(EXTQL_ORT_CALL *CreateKernel)(const OrtCustomOp *op, const OrtApi *api,
                                        const OrtKernelInfo *info);
  const char *(EXTQL_ORT_CALL *GetName)(const OrtCustomOp *op);
  const char *(EXTQL_ORT_CALL *GetExecutionProviderType)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetInputType)(const OrtCustomOp *op, size_t index);
  size_t(EXTQL_ORT_CALL *GetInputTypeCount)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetOutputType)(const OrtCustomOp *op, size_t index);
  size_t(EXTQL_ORT_CALL *GetOutputTypeCount)(const OrtCustomOp *op);
  void(EXTQL_ORT_CALL *KernelCompute)(void *kernel, OrtKernelContext *ctx);
  void(EXTQL_ORT_CALL *KernelDestroy)(void *kernel);
  /* version 8 */
  int(EXTQL_ORT_CALL *GetInputCharacteristic)(const OrtCustomOp *op, size_t index);
  int(EXTQL_ORT_CALL *GetOutputCharacteristic)(const OrtCustomOp *op, size_t index);
  /* version 13 */
  int(EXTQL_ORT_CALL *GetInputMemoryType)(const OrtCustomOp *op, size_t index);
  /* version 14 */
  int(EXTQL_ORT_CALL *GetVariadicInputMinArity)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetVariadicInputHomogeneity)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetVariadicOutputMinArity)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetVariadicOutputHomogeneity)(const OrtCustomOp *op);
  /* version 16 */
  OrtStatus *(EXTQL_ORT_CALL *CreateKernelV2)(const OrtCustomOp *op, const OrtApi *api,
                                               const OrtKernelInfo *info, void **kernel);
  OrtStatus *(EXTQL_ORT_CALL *KernelComputeV2)(void *kernel, OrtKernelContext *ctx);
  /* version 17 (InferOutputShapeFn: set from C API 24 only, see ort_infer.c) */
  OrtStatus *(EXTQL_ORT_CALL *InferOutputShapeFn)(const OrtCustomOp *op,
                                                   OrtShapeInferContext *ctx);
  int(EXTQL_ORT_CALL *GetStartVersion)(const OrtCustomOp *op);
  int(EXTQL_ORT_CALL *GetEndVersion)(const OrtCustomOp *op);
  /* version 18: the (input, output) pairs whose buffers may be one (the
   * arrays allocated by the op, handed back to the Release function), and
   * those whose output is the input itself (an alias, never written). */
  size_t(EXTQL_ORT_CALL *GetMayInplace)(int **input_index, int **output_index);
  void(EXTQL_ORT_CALL *ReleaseMayInplace)(int *input_index, int *output_index);
  size_t(EXTQL_ORT_CALL *GetAliasMap)(int **input_index, int **output_index);
  void(EXTQL_ORT_CALL *ReleaseAliasMap)(int *input_index, int *output_index);
};

/* The OrtCustomOp version of the registrations that fill in no member of
 * version 18. */
#define EXTQL_ORT_CUSTOM_OP_VERSION 17
/* The version of the registrations that fill in version 18's members (the
 * in-place pairs), onnxruntime 1.18's: every supported runtime reads them. */
#define EXTQL_ORT_CUSTOM_OP_VERSION_INPLACE 18

/* Pin every named slot: offsetof / pointer size must be its slot number. */
#if defined(__cplusplus)
#define EXTQL_STATIC_ASSERT static_assert
#else
#define EXTQL_STATIC_ASSERT _Static_assert
#endif
#define EXTQL_ORT_SLOT(name, n) \
  EXTQL_STATIC_ASSERT(offsetof(OrtApi, name) == (n) * sizeof(void *), "OrtApi slot of " #name)
EXTQL_ORT_SLOT(CreateStatus, 0);
EXTQL_ORT_SLOT(GetErrorCode, 1);
EXTQL_ORT_SLOT(GetErrorMessage, 2);
EXTQL_ORT_SLOT(CreateCustomOpDomain, 26);
EXTQL_ORT_SLOT(CustomOpDomain_Add, 27);
EXTQL_ORT_SLOT(AddCustomOpDomain, 28);
EXTQL_ORT_SLOT(GetTensorMutableData, 51);
EXTQL_ORT_SLOT(CastTypeInfoToTensorInfo, 55);
EXTQL_ORT_SLOT(GetOnnxTypeFromTypeInfo, 56);
EXTQL_ORT_SLOT(GetTensorElementType, 60);
EXTQL_ORT_SLOT(GetDimensionsCount, 61);
EXTQL_ORT_SLOT(GetDimensions, 62);
EXTQL_ORT_SLOT(GetTensorShapeElementCount, 64);
EXTQL_ORT_SLOT(GetTensorTypeAndShape, 65);
EXTQL_ORT_SLOT(KernelInfoGetAttribute_float, 85);
EXTQL_ORT_SLOT(KernelInfoGetAttribute_int64, 86);
EXTQL_ORT_SLOT(KernelInfoGetAttribute_string, 87);
EXTQL_ORT_SLOT(KernelContext_GetInputCount, 88);
EXTQL_ORT_SLOT(KernelContext_GetOutputCount, 89);
EXTQL_ORT_SLOT(KernelContext_GetInput, 90);
EXTQL_ORT_SLOT(KernelContext_GetOutput, 91);
EXTQL_ORT_SLOT(ReleaseStatus, 93);
EXTQL_ORT_SLOT(ReleaseTypeInfo, 98);
EXTQL_ORT_SLOT(ReleaseTensorTypeAndShapeInfo, 99);
EXTQL_ORT_SLOT(ReleaseCustomOpDomain, 101);
EXTQL_ORT_SLOT(KernelInfoGetAttributeArray_int64, 163);
EXTQL_ORT_SLOT(KernelInfo_GetInputCount, 230);
EXTQL_ORT_SLOT(KernelInfo_GetOutputCount, 231);
EXTQL_ORT_SLOT(KernelInfo_GetInputName, 232);
EXTQL_ORT_SLOT(KernelInfo_GetOutputName, 233);
EXTQL_ORT_SLOT(KernelInfo_GetInputTypeInfo, 234);
EXTQL_ORT_SLOT(KernelInfo_GetOutputTypeInfo, 235);
EXTQL_ORT_SLOT(KernelInfo_GetNodeName, 244);
EXTQL_ORT_SLOT(KernelInfoGetConstantInput_tensor, 249);
EXTQL_ORT_SLOT(KernelContext_ParallelFor, 274);
EXTQL_ORT_SLOT(CreateTensorTypeAndShapeInfo, 57);
EXTQL_ORT_SLOT(SetTensorElementType, 58);
EXTQL_ORT_SLOT(SetDimensions, 59);
EXTQL_ORT_SLOT(GetSymbolicDimensions, 63);
EXTQL_ORT_SLOT(ShapeInferContext_GetInputCount, 267);
EXTQL_ORT_SLOT(ShapeInferContext_GetInputTypeShape, 268);
EXTQL_ORT_SLOT(ShapeInferContext_GetAttribute, 269);
EXTQL_ORT_SLOT(ShapeInferContext_SetOutputTypeShape, 270);
EXTQL_ORT_SLOT(SetSymbolicDimensions, 271);
EXTQL_ORT_SLOT(ReadOpAttr, 272);
#undef EXTQL_ORT_SLOT

/* The library's entry point, called by SessionOptions.register_custom_ops_library. */
EXTQL_EXPORT OrtStatus *EXTQL_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                         const OrtApiBase *api_base);

#ifdef __cplusplus
}
#endif

#endif /* EXTQL_ORT_API_H */
