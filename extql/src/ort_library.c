/*
 * ort_library.c - extql's onnxruntime custom-op library.
 *
 * Built with the kernels into libextql_ort, a shared object with no Python
 * in it that exports RegisterCustomOps;
 * SessionOptions.register_custom_ops_library(extql.get_library_path()) (or
 * any host's registration of that file) then runs natively on the CPU
 * execution provider
 *
 *   com.amd.quark     ExtendedQuantizeLinear, ExtendedDequantizeLinear,
 *                     BFPQuantizeDequantize, MXQuantizeDequantize,
 *                     ExtendedInstanceNormalization, ExtendedLSTM       (version 1)
 *   com.vai.quantize  VitisQuantizeLinear, VitisDequantizeLinear,
 *                     BFPFixNeuron, MXFixNeuron,
 *                     VitisInstanceNormalization, VitisLSTM             (legacy names)
 *
 * and nothing else.  The work is done by the C entry points of
 * extql_kernels.h: no Python object, no GIL.  The registrations, checks and
 * the split of the work are in the other ort_*.c files (ort_internal.h).
 */
#include "extql_block_rules.h"
#include "extql_kernels.h"
#include "ort_internal.h"

static const char *const DOMAINS[] = {"com.amd.quark", "com.vai.quantize"};

static const ExtqlOpName NAMES[] = {
    {0, "ExtendedQuantizeLinear", OP_QUANTIZE},
    {0, "ExtendedDequantizeLinear", OP_DEQUANTIZE},
    {1, "VitisQuantizeLinear", OP_QUANTIZE},
    {1, "VitisDequantizeLinear", OP_DEQUANTIZE},
    {0, EXTQL_BFP_OP, OP_BFP},
    {0, EXTQL_MX_OP, OP_MX},
    {1, EXTQL_BFP_LEGACY_OP, OP_BFP},
    {1, EXTQL_MX_LEGACY_OP, OP_MX},
    {0, "ExtendedInstanceNormalization", OP_DPU_IN},
    {1, "VitisInstanceNormalization", OP_DPU_IN},
    {0, "ExtendedLSTM", OP_DPU_LSTM},
    {1, "VitisLSTM", OP_DPU_LSTM},
};

/* The block formats' kernels (ort_blocks.c). */
static const ExtqlBlockKernels BLOCK_KERNELS = {extql_block_items, extql_block_item_size,
                                                extql_block_range};

/* Elements [start, stop) through the kernels, with the stores they choose
 * for an output of out_bytes (non-temporal for one larger than the caches). */
static int kernels_range(const ExtqlWork *w, int64_t start, int64_t stop) {
  int flags = EXTQL_STREAM_FLAGS(w->out_bytes) | (w->saturate ? 0 : EXTQL_NO_SATURATE);
  if (w->kind == OP_QUANTIZE && w->prec == EXTQL_ORT_DOUBLE)
    return extql_quantize_f64_range(w->qtype, w->ftype, w->stype, w->x, w->scale, w->zp, w->y,
                                    w->D, w->inner, w->block, start, stop, flags, w->ones,
                                    w->zero2);
  if (w->kind == OP_QUANTIZE)
    return extql_quantize_range(w->qtype, w->ftype, w->prec, w->x, w->scale, w->zp, w->y, w->D,
                                w->inner, w->block, start, stop, flags);
  return extql_dequantize_range(w->qtype, w->ftype, w->x, w->scale, w->zp, w->y, w->D, w->inner,
                                w->block, start, stop, flags);
}

static ExtqlOpSet LIBRARY = {
    DOMAINS, (int)(sizeof DOMAINS / sizeof DOMAINS[0]),
    NAMES,   (int)(sizeof NAMES / sizeof NAMES[0]),
    kernels_range, extql_convert_scales, extql_unpack, extql_f64_params, 0, NULL, 0, NULL,
    NULL, NULL, &BLOCK_KERNELS, extql_dpu_init_ops};

/* The library unloaded: its domains and registrations go with it. */
#if defined(_WIN32)
#include <windows.h>
BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved) {
  (void)instance;
  /* At process exit (reserved != NULL) onnxruntime may be gone already. */
  if (reason == DLL_PROCESS_DETACH && reserved == NULL) extql_ort_release(&LIBRARY);
  return TRUE;
}
#elif defined(__GNUC__)
__attribute__((destructor)) static void release_library(void) { extql_ort_release(&LIBRARY); }
#endif

EXTQL_EXPORT OrtStatus *EXTQL_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                         const OrtApiBase *base) {
  return extql_ort_register(options, base, &LIBRARY);
}
