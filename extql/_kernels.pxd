# C-level entry points of the kernels, for other Cython code:
#     from extql._kernels cimport extql_quantize_range
# C callers include src/extql_kernels.h instead.  See _kernels.pyx.
from libc.stdint cimport int64_t

cdef public int extql_quantize_range(
    int qtype, const float *x, const float *scale, const void *zero_point,
    void *y, int64_t D, int64_t inner, int64_t start, int64_t stop) noexcept nogil
cdef public int extql_dequantize_range(
    int qtype, const void *x, const float *scale, const void *zero_point,
    float *y, int64_t D, int64_t inner, int64_t start, int64_t stop) noexcept nogil
cdef public int extql_quantize_range_ex(
    int qtype, const float *x, const float *scale, const void *zero_point,
    void *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
    int flags) noexcept nogil
cdef public int extql_dequantize_range_ex(
    int qtype, const void *x, const float *scale, const void *zero_point,
    float *y, int64_t D, int64_t inner, int64_t start, int64_t stop,
    int flags) noexcept nogil
cdef public int extql_quantize_typed_range_ex(
    int qtype, int xtype, int prec, const void *x, const float *scale,
    const void *zero_point, void *y, int64_t D, int64_t inner, int64_t block,
    int64_t start, int64_t stop, int flags) noexcept nogil
cdef public int extql_dequantize_typed_range_ex(
    int qtype, int ytype, const void *x, const float *scale,
    const void *zero_point, void *y, int64_t D, int64_t inner, int64_t block,
    int64_t start, int64_t stop, int flags) noexcept nogil
cdef public int extql_convert_scales(
    int stype, int prec, const void *src, float *dst, int64_t n) noexcept nogil
cdef public int extql_quantize_typed(
    int qtype, int xtype, int prec, const void *x, const float *scale,
    const void *zero_point, void *y, int64_t n, int64_t D, int64_t inner,
    int64_t block, int nthreads, int flags) noexcept nogil
cdef public int extql_dequantize_typed(
    int qtype, int ytype, const void *x, const float *scale,
    const void *zero_point, void *y, int64_t n, int64_t D, int64_t inner,
    int64_t block, int nthreads, int flags) noexcept nogil
cdef public int extql_quotients_f64(
    int qtype, int xtype, int stype, const void *x, const void *scale,
    const void *zero_point, float *v, int64_t D, int64_t inner, int64_t block,
    int64_t start, int64_t stop) noexcept nogil
cdef public int extql_f64_params(
    int qtype, float *ones, void *zero2, int64_t count) noexcept nogil
cdef public int extql_quantize_f64_range(
    int qtype, int xtype, int stype, const void *x, const void *scale,
    const void *zero_point, void *y, int64_t D, int64_t inner, int64_t block,
    int64_t start, int64_t stop, int flags, const float *ones,
    const void *zero2) noexcept nogil
cdef public int extql_unpack(
    int qtype, const void *src, void *dst, int64_t n) noexcept nogil
cdef public int extql_quantize(
    int qtype, const float *x, const float *scale, const void *zero_point,
    void *y, int64_t n, int64_t D, int64_t inner, int nthreads) noexcept nogil
cdef public int extql_dequantize(
    int qtype, const void *x, const float *scale, const void *zero_point,
    float *y, int64_t n, int64_t D, int64_t inner, int nthreads) noexcept nogil
cdef public int extql_get_num_threads() noexcept nogil
cdef public void extql_set_num_threads(int n) noexcept nogil
cdef public int extql_have_openmp() noexcept nogil
