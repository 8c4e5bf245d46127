# ---------------------------------------------------------------------------
# Sub-byte types: int4 / uint4 / int2 / uint2 through the 8-bit type
# ---------------------------------------------------------------------------
#
# A sub-byte quantize is the quantize to the 8-bit type of the same
# signedness (the carrier), clamped again to the narrow range: the carrier's
# result is clamp(round(x / s) + zp, lo8, hi8) (NaN: lo8), and as the
# narrow range and its zero point lie inside the carrier's, clamping that to
# [lo, hi] gives clamp(round(x / s) + zp, lo, hi) (NaN: lo) -- the narrow
# type's formula.  A dequantize widens the elements exactly into the carrier
# first.  Both go through a buffer of SUB_CHUNK carrier elements on the
# stack, so the drivers above run unchanged.  In memory the elements are
# packed 8 // bits per byte, element k of a byte in its bits [k * bits,
# (k + 1) * bits) (ONNX's layout), or with EXTQL_UNPACKED one per byte in
# the low bits (ml_dtypes' layout).  The zero point is always given as
# carrier elements (extql_unpack).

cdef enum:
    SUB_CHUNK = 8192

ctypedef fused byte_t:
    int8_t
    uint8_t


cdef inline byte_t clamp_byte(byte_t v, byte_t lo, byte_t hi) noexcept nogil:
    v = v if v > lo else lo
    return v if v < hi else hi


cdef inline void pack_values(const byte_t *v, uint8_t *dst, int64_t m,
                             int bits, int per, int lo,
                             int hi) noexcept nogil:
    """m carrier elements clamped to [lo, hi] and packed per to a byte (the
    last byte's unused high bits 0)."""
    cdef int64_t j, k, full = m // per
    cdef byte_t bl = <byte_t>lo, bh = <byte_t>hi
    cdef uint8_t mask = <uint8_t>((1 << bits) - 1), acc
    if per == 1:
        for j in range(m):
            dst[j] = <uint8_t>clamp_byte(v[j], bl, bh) & mask
        return
    if per == 2:
        for j in range(full):
            dst[j] = ((<uint8_t>clamp_byte(v[2 * j], bl, bh) & 15)
                      | ((<uint8_t>clamp_byte(v[2 * j + 1], bl, bh) & 15) << 4))
    else:
        for j in range(full):
            dst[j] = ((<uint8_t>clamp_byte(v[4 * j], bl, bh) & 3)
                      | ((<uint8_t>clamp_byte(v[4 * j + 1], bl, bh) & 3) << 2)
                      | ((<uint8_t>clamp_byte(v[4 * j + 2], bl, bh) & 3) << 4)
                      | ((<uint8_t>clamp_byte(v[4 * j + 3], bl, bh) & 3) << 6))
    if m > full * per:
        acc = 0
        for k in range(m - full * per):
            acc |= (<uint8_t>clamp_byte(v[full * per + k], bl, bh) & mask) << (k * bits)
        dst[full] = acc


cdef inline byte_t field(uint8_t b, int k, int bits, byte_t *like) noexcept nogil:
    """Element k of the byte b (bits wide), sign-extended for int8_t: moved
    to the top of the byte, then shifted down arithmetically or not."""
    cdef uint8_t top = <uint8_t>(b << (8 - bits - k * bits))
    if byte_t is int8_t:
        return <int8_t>(<int8_t>top >> (8 - bits))
    else:
        return <uint8_t>(top >> (8 - bits))


cdef inline void unpack_values(const uint8_t *src, byte_t *v, int64_t m,
                               int bits, int per) noexcept nogil:
    """m elements packed per to a byte into carrier elements."""
    cdef int64_t j, k, full = m // per
    if per == 1:
        for j in range(m):
            v[j] = field(src[j], 0, bits, v)
        return
    if per == 2:
        for j in range(full):
            v[2 * j] = field(src[j], 0, 4, v)
            v[2 * j + 1] = field(src[j], 1, 4, v)
    else:
        for j in range(full):
            v[4 * j] = field(src[j], 0, 2, v)
            v[4 * j + 1] = field(src[j], 1, 2, v)
            v[4 * j + 2] = field(src[j], 2, 2, v)
            v[4 * j + 3] = field(src[j], 3, 2, v)
    for k in range(m - full * per):
        v[full * per + k] = field(src[full], <int>k, bits, v)


cdef inline void *based_at(void *buf, int64_t offset) noexcept nogil:
    """A pointer p with p + offset bytes == buf: the drivers index their
    output (or input) by the element's place in the tensor, and the buffer
    holds the elements from element i on (offset = i * the element size).
    (As an address computation, since buf - offset may lie outside any
    object.)"""
    return <void *>(<size_t>buf - <size_t>offset)


cdef inline void subbyte_window(byte_t *like, bint quantize, const void *x,
                                const float *scale, const void *zp, void *y,
                                int64_t D, int64_t inner, int64_t block,
                                int64_t i, int64_t e, int bits, int per,
                                int lo, int hi, int stream,
                                const Opts *o) noexcept nogil:
    """Elements [i, e) (at most SUB_CHUNK) through the carrier byte_t:
    quantized into it, then clamped and packed into y; or unpacked from x
    into it, then dequantized into y."""
    cdef byte_t buf[SUB_CHUNK]
    if quantize:
        quantize_any(<const float *>x, scale, <const byte_t *>zp,
                     <byte_t *>based_at(buf, i), D, inner, block, i, e, 0, o)
        pack_values(<const byte_t *>buf, <uint8_t *>y + i // per, e - i, bits,
                    per, lo, hi)
    else:
        unpack_values(<const uint8_t *>x + i // per, buf, e - i, bits, per)
        dequantize_any(<const byte_t *>based_at(buf, i), scale,
                       <const byte_t *>zp, <char *>y, D, inner, block, i, e,
                       stream, o)


cdef int subbyte_range(int qtype, bint quantize, const void *x,
                       const float *scale, const void *zp, void *y, int64_t D,
                       int64_t inner, int64_t block, int64_t start,
                       int64_t stop, int stream, bint unpacked,
                       const Opts *o) noexcept nogil:
    """Quantize (float32 x) to or dequantize from a sub-byte type, elements
    [start, stop) (start a multiple of the elements per byte; stop too
    unless it is the tensor's end), in windows that end on multiples of
    SUB_CHUNK, so that they stay aligned to the tiles."""
    cdef int bits, lo, hi, per
    cdef int64_t i = start, e
    if not subbyte_of(qtype, &bits, &lo, &hi):
        return -1
    per = 1 if unpacked else 8 // bits
    if start % per != 0:
        return -1
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        if lo < 0:
            subbyte_window(<int8_t *>NULL, quantize, x, scale, zp, y, D, inner,
                           block, i, e, bits, per, lo, hi, stream, o)
        else:
            subbyte_window(<uint8_t *>NULL, quantize, x, scale, zp, y, D, inner,
                           block, i, e, bits, per, lo, hi, stream, o)
        i = e
    return 0
