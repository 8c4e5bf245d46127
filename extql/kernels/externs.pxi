# The C side the kernels build on: the type codes and the type table
# (generated from extql/rules/typetable.py into src/extql_types.h), the stores and
# loads of src/extql_primitives.h, the split of the work, and the naming of
# this unit's entry points for the instruction set it is compiled for.

from libc.stdint cimport (
    int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
)
from libc.string cimport memcpy, memcmp
from libc.math cimport fmaf, nearbyint
from libc.stdlib cimport free, malloc

# The public header (generated from extql/_entrypoints.py): the flags, the
# block formats' ExtqlBlockParams, and (under other names than this unit's
# copies) the public entry points.
include "extql_api.pxi"

cdef extern from "extql_types.h":
    enum:
        EXTQL_UINT8
        EXTQL_INT8
        EXTQL_UINT16
        EXTQL_INT16
        EXTQL_INT32
        EXTQL_FLOAT16
        EXTQL_UINT32
        EXTQL_BFLOAT16

cdef extern from "extql_unit.h":
    # This copy's entry points are named by the instruction set it is
    # compiled for (EXTQL_ISA_FN); their prototypes come from the same list
    # as the public ones, so the compiler checks the definitions below.
    pass

cdef extern from "extql_types.h":
    int qtype_size "extql_qtype_size"(int code) noexcept nogil
    int subbyte_of "extql_subbyte"(int code, int *bits, int *lo,
                                   int *hi) noexcept nogil
    ctypedef struct SmallFloat "ExtqlSmallFloat":
        int bits, ebits, mbits, bias, kind
        float maxv
    int smallfloat_of "extql_smallfloat"(int code, SmallFloat *f) noexcept nogil
    enum:
        SF_FN "EXTQL_SF_FN"
        SF_FNUZ "EXTQL_SF_FNUZ"
        SF_IEEE "EXTQL_SF_IEEE"
        SF_NONE "EXTQL_SF_NONE"

cdef extern from "extql_primitives.h":
    enum:
        TILE "EXTQL_TILE"
        HAVE_STREAM "EXTQL_HAVE_STREAM"
        VECTOR_BYTES "EXTQL_VECTOR_BYTES"
        FMA_QUOTIENT "EXTQL_FMA_QUOTIENT"
    uint32_t f32_bits "extql_f32_bits"(float f) noexcept nogil
    float bits_f32 "extql_bits_f32"(uint32_t u) noexcept nogil
    float f16_to_f32 "extql_f16_to_f32"(uint16_t h) noexcept nogil
    float rint "extql_rint"(float v) noexcept nogil
    float opaque "extql_opaque"(float v) noexcept nogil
    void prefetch "extql_prefetch"(const void *p, int64_t nbytes) noexcept nogil
    void store_i8 "extql_store_i8"(int8_t *dst, const int32_t *t, int64_t n,
                                   int stream) noexcept nogil
    void store_u8 "extql_store_u8"(uint8_t *dst, const int32_t *t, int64_t n,
                                   int stream) noexcept nogil
    void store_i16 "extql_store_i16"(int16_t *dst, const int32_t *t,
                                     int64_t n, int stream) noexcept nogil
    void store_u16 "extql_store_u16"(uint16_t *dst, const int32_t *t,
                                     int64_t n, int stream) noexcept nogil
    void store_wide_i32 "extql_store_wide_i32"(int32_t *dst, const float *t,
                                               int64_t n, int stream) noexcept nogil
    void store_wide_u32 "extql_store_wide_u32"(uint32_t *dst, const float *t,
                                               int64_t n, int stream) noexcept nogil
    void store_32 "extql_store_32"(void *dst, const void *t, int64_t n,
                                   int stream) noexcept nogil
    void store_f16 "extql_store_f16"(uint16_t *dst, const float *t, int64_t n,
                                     int stream) noexcept nogil
    void store_bf16 "extql_store_bf16"(uint16_t *dst, const float *t,
                                       int64_t n, int stream) noexcept nogil
    void load_i8 "extql_load_i8"(int32_t *t, const int8_t *src,
                                 int64_t n) noexcept nogil
    void load_u8 "extql_load_u8"(int32_t *t, const uint8_t *src,
                                 int64_t n) noexcept nogil
    void load_i16 "extql_load_i16"(int32_t *t, const int16_t *src,
                                   int64_t n) noexcept nogil
    void load_u16 "extql_load_u16"(int32_t *t, const uint16_t *src,
                                   int64_t n) noexcept nogil
    void load_f16 "extql_load_f16"(float *t, const uint16_t *src,
                                   int64_t n) noexcept nogil
    void load_bf16 "extql_load_bf16"(float *t, const uint16_t *src,
                                     int64_t n) noexcept nogil
    void widen_f16 "extql_widen_f16"(float *t, const uint16_t *src, int64_t n,
                                     int stream) noexcept nogil
    void widen_bf16 "extql_widen_bf16"(float *t, const uint16_t *src, int64_t n,
                                       int stream) noexcept nogil
    void cast_f16 "extql_cast_f16"(uint16_t *dst, const float *x, int64_t n,
                                   int stream) noexcept nogil
    void cast_bf16 "extql_cast_bf16"(uint16_t *dst, const float *x, int64_t n,
                                     int stream) noexcept nogil
    void round_f16 "extql_round_f16"(float *t, int64_t n) noexcept nogil
    void fill_32 "extql_fill_32"(void *p, uint32_t v, int64_t n) noexcept nogil
    void stream32 "extql_stream32"(void *dst, const void *src) noexcept nogil
    void store_fence "extql_store_fence"() noexcept nogil

cdef extern from *:
    """
    /* The two 16-bit float types, as distinct C types for the fused type. */
    typedef struct { uint16_t bits; } extql_float16_t;
    typedef struct { uint16_t bits; } extql_bfloat16_t;

    /* Float constants must be float literals: a double literal would turn
       the float arithmetic around it into double arithmetic. */
    #define EXTQL_TWO31 2147483648.0f
    #define EXTQL_TWO32 4294967296.0f
    /* 1.5 * 2^23 and its bits: quantize_int's rounding. */
    #define EXTQL_ROUND_MAGIC 12582912.0f
    #define EXTQL_ROUND_MAGIC_BITS 0x4B400000u
    #include <math.h>
    #define EXTQL_INF INFINITY
    """
    ctypedef struct float16_t "extql_float16_t":
        uint16_t bits
    ctypedef struct bfloat16_t "extql_bfloat16_t":
        uint16_t bits
    const float TWO31 "EXTQL_TWO31"
    const float ROUND_MAGIC "EXTQL_ROUND_MAGIC"
    const uint32_t ROUND_MAGIC_BITS "EXTQL_ROUND_MAGIC_BITS"
    const float TWO32 "EXTQL_TWO32"
    const float INF "EXTQL_INF"


# The quantized side: the eight types, and float32 -- the carrier of the
# float8 / float4 types, not a quantized type of its own: quantize gives
# x / s + zp unsaturated and unrounded, dequantize takes float32 x.
ctypedef fused qtype_t:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    float16_t
    bfloat16_t
    float
