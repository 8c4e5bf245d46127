/*
 * extql_kernels.h - the C-level entry points of extql's kernels.
 *
 * The kernels are written in Cython (extql/_kernels.pyx) and compiled into the
 * extension extql._kernels; these functions are exported from it with C linkage.
 * They touch no Python object, never take the GIL and need no module
 * initialisation, so a C caller (the onnxruntime custom-op shim) can call them
 * from any thread.
 *
 * Element types are numbered as ONNX's TensorProto.DataType.  Tensors are
 * dense and C-contiguous.  For per-tensor quantization pass D = 1 and
 * inner = n; for per-axis quantization of a tensor of shape
 * [outer, D, inner] (D = the length of the quantized axis) pass D and inner:
 * element i uses scale[(i / inner) % D].  A NULL zero point means 0.
 */
#ifndef EXTQL_KERNELS_H
#define EXTQL_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "extql_types.h" /* the type codes EXTQL_INT8 ... (ONNX numbering) */

/* float32's code (ONNX's TensorProto.FLOAT); float16 and bfloat16 are
 * EXTQL_FLOAT16 and EXTQL_BFLOAT16 of extql_types.h. */
#define EXTQL_FLOAT32 1
/* float64's code (TensorProto.DOUBLE): quantize's precision float64, the
 * default for an int32 scale (extql_quantize_f64_range). */
#define EXTQL_FLOAT64 11

#include "extql_split.h" /* EXTQL_PARALLEL_MIN_ELEMENTS: the thread split */

/* Flags of the _ex range functions.  EXTQL_STREAM: write the output with
 * non-temporal stores, bypassing the caches -- faster for an output too large
 * to stay in the caches (no read of each line before it is written), slower
 * for a consumer that would have found a small output in the cache.  A hint:
 * the results are the same bits either way (variants without such stores
 * ignore it). */
#define EXTQL_STREAM 1
/* EXTQL_UNPACKED: the sub-byte types (int4, uint4, int2, uint2) one element
 * per byte, in its low bits (ml_dtypes' layout), instead of packed 8 / bits
 * per byte, element k of a byte in its bits [k * bits, (k + 1) * bits)
 * (ONNX's layout). */
#define EXTQL_UNPACKED 2
/* EXTQL_NO_SATURATE: quantize to a small float type (float8) without
 * saturation (ONNX's saturate = 0): a magnitude beyond the largest finite
 * value becomes infinity (float8e5m2) or NaN (the others). */
#define EXTQL_NO_SATURATE 4
/* Outputs of at least this many bytes are streamed by extql_quantize /
 * extql_dequantize and by the onnxruntime ops; EXTQL_STREAM_FLAGS(bytes) is
 * the flags they use for an output of that size. */
#define EXTQL_STREAM_MIN_BYTES (16 * 1024 * 1024)
#define EXTQL_STREAM_FLAGS(out_bytes) ((out_bytes) >= EXTQL_STREAM_MIN_BYTES ? EXTQL_STREAM : 0)

/* Quantize elements [start, stop) of x into y (element type qtype).
 * Returns 0, or -1 when qtype is not one of the eight types. */
int extql_quantize_range(int qtype, const float *x, const float *scale,
                         const void *zero_point, void *y, int64_t D,
                         int64_t inner, int64_t start, int64_t stop);

/* Dequantize elements [start, stop) of x (element type qtype) into y. */
int extql_dequantize_range(int qtype, const void *x, const float *scale,
                           const void *zero_point, float *y, int64_t D,
                           int64_t inner, int64_t start, int64_t stop);

/* The same with flags (EXTQL_STREAM or 0). */
int extql_quantize_range_ex(int qtype, const float *x, const float *scale,
                            const void *zero_point, void *y, int64_t D,
                            int64_t inner, int64_t start, int64_t stop,
                            int flags);
int extql_dequantize_range_ex(int qtype, const void *x, const float *scale,
                              const void *zero_point, float *y, int64_t D,
                              int64_t inner, int64_t start, int64_t stop,
                              int flags);

/* The general form.  The float side -- quantize's x, dequantize's y -- is
 * float32, float16 or bfloat16 (xtype / ytype: EXTQL_FLOAT32,
 * EXTQL_FLOAT16, EXTQL_BFLOAT16); quantize's x may also be int32
 * (EXTQL_INT32), rounded to nearest even into float32 and then quantized as
 * a float32 x.  Quantize divides in the precision prec
 * (one of the same three codes): for float16 / bfloat16, x is rounded to
 * prec, divided by the scale, and the quotient rounded to prec again (the
 * scale must already be a value of prec: extql_convert_scales).
 * Dequantize's y is the float32 result rounded to nearest even into ytype.
 * block > 0: blocked quantization along D in blocks of `block` elements
 * (ONNX's block_size): the scale and zero point are dense [outer,
 * ceil(D / block), inner] and element (o, d, i) uses entry (o, d / block, i);
 * block 0 is per tensor / per axis as above.  Returns 0, or -1 for an
 * unknown type or precision code.
 *
 * qtype may be a sub-byte type (EXTQL_INT4, EXTQL_UINT4, EXTQL_INT2,
 * EXTQL_UINT2) or a small float (EXTQL_FLOAT8E4M3FN, EXTQL_FLOAT8E4M3FNUZ,
 * EXTQL_FLOAT8E5M2, EXTQL_FLOAT8E5M2FNUZ, EXTQL_FLOAT4E2M1): then the zero
 * point is given as the kernels take it (extql_unpack: int8 / uint8 or
 * float32 elements), and a sub-byte or float4e2m1 tensor is packed unless
 * flags has EXTQL_UNPACKED; start must be a multiple of the elements per
 * byte, and so must stop unless it is the tensor's end (ranges that share a
 * byte would race; -1 otherwise). */
int extql_quantize_typed_range_ex(int qtype, int xtype, int prec, const void *x,
                                  const float *scale, const void *zero_point, void *y,
                                  int64_t D, int64_t inner, int64_t block, int64_t start,
                                  int64_t stop, int flags);
int extql_dequantize_typed_range_ex(int qtype, int ytype, const void *x, const float *scale,
                                    const void *zero_point, void *y, int64_t D,
                                    int64_t inner, int64_t block, int64_t start,
                                    int64_t stop, int flags);

/* n scales of type stype (EXTQL_FLOAT32, EXTQL_FLOAT16, EXTQL_BFLOAT16, or
 * EXTQL_INT32: rounded to nearest even, as an int32 x is) as float32 into
 * dst, rounded to nearest even into prec when that is float16 / bfloat16 (the
 * scale a quantize in that precision divides by).  0, or -1 for an unknown
 * code. */
int extql_convert_scales(int stype, int prec, const void *src, float *dst, int64_t n);

/* Quantize with the division in float64 (precision float64, the default for
 * an int32 scale, as ONNX's reference implementation divides), elements
 * [start, stop), layout and flags as extql_quantize_typed_range_ex.  The
 * scale is float32 or int32 (stype: EXTQL_FLOAT32, EXTQL_INT32; a float16 /
 * bfloat16 / float8e8m0 scale widened to float32 first, exactly).  Two
 * stages, window by window: extql_quotients_f64 writes, for each element,
 * the quotient q = x / s taken in float64 -- rounded there to an integer
 * for the integer types, plus the zero point for float16 / bfloat16 /
 * float4e2m1 (float8 takes none) -- rounded once to float32 (called alone,
 * into v[start:stop)); then the float32 formula runs on those values with the
 * scales `ones` and the zero points `zero2`, which extql_f64_params fills
 * (count = the number of scales): ones all 1, and zero2 all -0 when it
 * returns 1 (room for count float32), else pass the operator's zero point.
 * 0, or -1 for an unknown code. */
int extql_quotients_f64(int qtype, int xtype, int stype, const void *x, const void *scale,
                        const void *zero_point, float *v, int64_t D, int64_t inner,
                        int64_t block, int64_t start, int64_t stop);
int extql_f64_params(int qtype, float *ones, void *zero2, int64_t count);
int extql_quantize_f64_range(int qtype, int xtype, int stype, const void *x,
                             const void *scale, const void *zero_point, void *y, int64_t D,
                             int64_t inner, int64_t block, int64_t start, int64_t stop,
                             int flags, const float *ones, const void *zero2);

/* n elements of a sub-byte or small float type (as in an ONNX tensor:
 * int4 / uint4 / int2 / uint2 / float4e2m1 packed) into dst as the kernels
 * take zero points: int8 / uint8 elements for the sub-byte types
 * (sign-extended for int4 / int2), float32 for the small floats.  0, or -1
 * for another type. */
int extql_unpack(int qtype, const void *src, void *dst, int64_t n);

/* The whole tensor of n elements, in chunks handed out dynamically to
 * nthreads OpenMP threads (nthreads <= 0: extql_get_num_threads()).  Tensors below
 * EXTQL_PARALLEL_MIN_ELEMENTS run on the calling thread. */
int extql_quantize(int qtype, const float *x, const float *scale,
                   const void *zero_point, void *y, int64_t n, int64_t D,
                   int64_t inner, int nthreads);
int extql_dequantize(int qtype, const void *x, const float *scale,
                     const void *zero_point, float *y, int64_t n, int64_t D,
                     int64_t inner, int nthreads);

/* The same in the general form (extql_quantize_typed_range_ex); flags:
 * EXTQL_UNPACKED, EXTQL_NO_SATURATE or 0 (the stores are chosen by the
 * output's size). */
int extql_quantize_typed(int qtype, int xtype, int prec, const void *x, const float *scale,
                         const void *zero_point, void *y, int64_t n, int64_t D, int64_t inner,
                         int64_t block, int nthreads, int flags);
int extql_dequantize_typed(int qtype, int ytype, const void *x, const float *scale,
                           const void *zero_point, void *y, int64_t n, int64_t D,
                           int64_t inner, int64_t block, int nthreads, int flags);

/* The thread count the kernels use by default: set by
 * extql_set_num_threads(), else the EXTQL_NUM_THREADS environment variable,
 * else the number of cores available to the process. */
int extql_get_num_threads(void);
/* n >= 1 sets the count; n <= 0 returns to the default. */
void extql_set_num_threads(int n);
/* 1 when the kernels were compiled with OpenMP, else 0 (serial only). */
int extql_have_openmp(void);

#ifdef __cplusplus
}
#endif

#endif /* EXTQL_KERNELS_H */
