# ---------------------------------------------------------------------------
# Small floats: float8 (four types) and float4e2m1 through float32
# ---------------------------------------------------------------------------
#
# A quantize to a small float computes v = x / s + zp in float32 with the
# drivers above (the float32 carrier: no saturation, no rounding; float8
# takes no zero point, as the official implementations do), then rounds v
# once, to nearest even, into the small type: with saturate, a magnitude
# beyond the largest finite value (infinity included) becomes that value;
# without, it becomes infinity where the type has one (float8e5m2) and NaN
# where it does not.  NaN stays NaN; float4e2m1, which has none and always
# saturates, takes NaN to the zero of the other sign (as ml_dtypes, and so
# ONNX's reference, convert it).  The one rounding is from float32: through
# float16 first would round twice (a value just above a float8 tie would
# land on the tie).  A dequantize widens the elements exactly into float32
# first.  float4e2m1 is packed two per byte, as int4.

cdef inline float pow2(int e) noexcept nogil:
    """2^e for -126 <= e <= 127, exactly."""
    return bits_f32(<uint32_t>(e + 127) << 23)


cdef inline uint8_t to_small(float v, const SmallFloat *t,
                             bint sat) noexcept nogil:
    """v rounded to nearest even into the small float type t: its code."""
    cdef uint32_t u = f32_bits(v)
    cdef uint8_t sign = <uint8_t>((u >> 31) << (t.bits - 1))
    cdef uint32_t au = u & 0x7FFFFFFFu
    cdef float a = bits_f32(au), q, ulp
    cdef int e, emin = 1 - t.bias
    cdef uint32_t mant, field
    if au > 0x7F800000u:  # NaN
        if t.kind == SF_FNUZ:
            return 0x80
        if t.kind == SF_NONE:
            return sign ^ <uint8_t>(1 << (t.bits - 1))
        return sign | <uint8_t>((1 << (t.bits - 1)) - 1 if t.kind == SF_FN
                                else 0x7E)
    if au < 0x7F800000u:
        # The spacing of the type at a: that of a's binade, or the subnormal
        # one below the smallest normal exponent; a / ulp is exact, and
        # rint rounds it to nearest even.
        e = <int>(au >> 23) - 127
        e = e if e > emin else emin
        ulp = pow2(e - t.mbits)
        q = rint(a / ulp) * ulp
    else:
        q = a  # infinity
    if q > t.maxv:
        if sat or t.kind == SF_NONE:
            q = t.maxv
        elif t.kind == SF_IEEE:
            return sign | 0x7C
        elif t.kind == SF_FNUZ:
            return 0x80
        else:
            return sign | <uint8_t>((1 << (t.bits - 1)) - 1)
    if q == 0:
        return 0 if t.kind == SF_FNUZ else sign
    e = <int>(f32_bits(q) >> 23) - 127
    if e < emin:
        # Subnormal: the exponent field 0, the mantissa the count of ulps.
        return sign | <uint8_t>(<uint32_t>(q / pow2(emin - t.mbits)))
    mant = (f32_bits(q) >> (23 - t.mbits)) & ((1u << t.mbits) - 1)
    field = <uint32_t>(e + t.bias)
    return sign | <uint8_t>((field << t.mbits) | mant)


cdef inline float from_small(uint8_t b, const SmallFloat *t) noexcept nogil:
    """The value of the code b of the small float type t, exactly."""
    cdef int top = t.bits - 1
    cdef uint32_t sign = <uint32_t>((b >> top) & 1) << 31
    cdef uint32_t mag = b & ((1u << top) - 1)
    cdef uint32_t field = mag >> t.mbits, mant = mag & ((1u << t.mbits) - 1)
    cdef uint32_t emax_field = (1u << t.ebits) - 1
    if t.kind == SF_FNUZ and b == 0x80:
        return bits_f32(0x7FC00000u)
    if t.kind == SF_FN and mag == (1u << top) - 1:
        return bits_f32(sign | 0x7FC00000u)
    if t.kind == SF_IEEE and field == emax_field:
        return bits_f32(sign | (0x7F800000u if mant == 0 else 0x7FC00000u))
    if field == 0:
        return bits_f32(sign | f32_bits(<float>mant * pow2(1 - t.bias - t.mbits)))
    return bits_f32(sign | (<uint32_t>(<int>field - t.bias + 127) << 23)
                    | (mant << (23 - t.mbits)))


cdef void to_small_codes(const float *v, uint8_t *dst, int64_t n,
                         const SmallFloat *t, bint sat) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        dst[j] = to_small(v[j], t, sat)


cdef void from_small_codes(const uint8_t *src, float *v, int64_t n,
                           const SmallFloat *t) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        v[j] = from_small(src[j], t)


cdef inline void small_table(float *table, const SmallFloat *t) noexcept nogil:
    """The value of every code of t (256 or 16 of them): dequantize looks
    its elements up instead of decoding each."""
    cdef int b
    for b in range(1 << t.bits):
        table[b] = from_small(<uint8_t>b, t)


cdef void lookup_codes(const uint8_t *src, float *v, int64_t n,
                       const float *table) noexcept nogil:
    cdef int64_t j
    for j in range(n):
        v[j] = table[src[j]]


cdef int smallfloat_range(int qtype, bint quantize, const void *x,
                          const float *scale, const void *zp, void *y,
                          int64_t D, int64_t inner, int64_t block,
                          int64_t start, int64_t stop, int stream,
                          bint unpacked, bint sat, const Opts *o) noexcept nogil:
    """Quantize (float32 x) to or dequantize from a small float type,
    elements [start, stop) (float4e2m1 packed: start a multiple of 2; the
    zero point as float32), through float32 window by window: quantize
    computes v = x / s + zp into the window and rounds it into codes;
    dequantize looks the codes up into the window and dequantizes it."""
    cdef SmallFloat t
    cdef int per
    cdef int64_t i = start, e
    cdef float buf[SUB_CHUNK]
    cdef float table[256]
    cdef uint8_t codes[SUB_CHUNK]
    cdef float *window
    if not smallfloat_of(qtype, &t):
        return -1
    per = 1 if unpacked else 8 // t.bits
    if start % per != 0:
        return -1
    if quantize and t.bits == 8:
        # float8 takes no zero point (onnxruntime's and ONNX's reference
        # QuantizeLinear ignore it): v = x / s, -0 included.
        zp = NULL
    if not quantize:
        small_table(table, &t)
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        window = <float *>based_at(buf, i * <int64_t>sizeof(float))
        if quantize:
            quantize_any(<const float *>x, scale, <const float *>zp, window, D,
                         inner, block, i, e, 0, o)
            if per == 1:
                to_small_codes(buf, <uint8_t *>y + i, e - i, &t, sat)
            else:
                to_small_codes(buf, codes, e - i, &t, sat)
                pack_values(<const uint8_t *>codes, <uint8_t *>y + i // per, e - i,
                            t.bits, per, 0, (1 << t.bits) - 1)
        else:
            if per == 1:
                lookup_codes(<const uint8_t *>x + i, buf, e - i, table)
            else:
                unpack_values(<const uint8_t *>x + i // per, <uint8_t *>codes, e - i,
                              t.bits, per)
                lookup_codes(codes, buf, e - i, table)
            dequantize_any(<const float *>window, scale, <const float *>zp,
                           <char *>y, D, inner, block, i, e, stream, o)
        i = e
    return 0
