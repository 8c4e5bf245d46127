# One element: the formula of each direction and type (the numerics of
# docs/operators/), plain branch-free C that the compiler vectorises.

cdef inline float quotient_fma(float x, float s, float y, float yl, float xl,
                               float xh) noexcept nogil:
    """x / s for the 8/16-bit types (and the 32-bit ones with the zero point
    0), by the reciprocal y + yl of s (y = RN(1 / s), yl = RN((1 - s * y) /
    s)) and one correction step: x clamped to [xl, xh] = |s| * [-2^33, 2^33]
    (NaN stays NaN), q = RN(x * y + RN(x * yl)) (within one ulp of x / s),
    then q + (x - s * q) * y rounded once (fused multiply-adds).  For
    2^-60 <= |s| <= 2^60 that is the division's result wherever the proof
    holds (Markstein's theorem), and elsewhere |x / s| < 2^-40, where both
    round to 0: the quantized value is the same (docs/development.rst, "The
    division").  (xl is its own value, not -xh: GCC would otherwise compute
    -x by a compare and a blend.)"""
    cdef float q, e
    x = xh if xh < x else x
    x = xl if xl > x else x
    q = fmaf(x, y, x * yl)
    e = fmaf(s, q, -x)
    return fmaf(-e, y, q)


cdef inline int32_t quantize_int(float v, float flo, float fhi,
                                 uint32_t zi) noexcept nogil:
    """8/16-bit: v = x / s clamped to [lo - zp, hi - zp] (NaN fails the first
    test and becomes lo - zp), rounded to nearest even, + zp.  The rounding
    is the addition of 1.5 * 2^23, exact for |v| <= 2^22: the sum's ulp is 1,
    and its low 23 bits are 2^22 + the rounded v, so the integer is read
    from the bits (no rounding instruction, no conversion)."""
    v = v if v > flo else flo
    v = v if v < fhi else fhi
    return <int32_t>(f32_bits(v + ROUND_MAGIC) - ROUND_MAGIC_BITS + zi)


cdef inline uint32_t quantize_wide(float v, float fl, float fh, uint32_t zi,
                                   uint32_t lo, uint32_t hi) noexcept nogil:
    """32-bit: r = round_half_even(v); lo when r < lo - zp (or NaN), hi when
    r > hi - zp, else r + zp -- exactly, in float32.

    fl and fh are lo - zp rounded up and hi - zp rounded down to floats, so
    r >= fl exactly when r >= lo - zp.  In range r + zp is a 32-bit value,
    computed modulo 2^32: r is brought into [-2^31, 2^31) by adding or
    subtracting 2^32 (exact), converted, and zp added with wraparound."""
    cdef float r = rint(v)
    cdef bint below = not (r >= fl)
    cdef bint above = r > fh
    cdef uint32_t y
    r = r if r > fl else fl          # keeps the conversion below defined
    r = r if r < fh else fh
    r = r - (TWO32 if r >= TWO31 else 0)
    r = r + (TWO32 if r < -TWO31 else 0)
    y = <uint32_t><int32_t>r + zi
    y = lo if below else y
    return hi if above else y


cdef inline float saturate_float(float v, float mx) noexcept nogil:
    """float16 / bfloat16: v = x / s + zp saturated to [-mx, mx]; NaN stays
    (it fails both tests)."""
    v = mx if mx < v else v
    return -mx if -mx > v else v


cdef inline float round_bf16(float v) noexcept nogil:
    """v rounded to nearest even to a bfloat16 value (a float32 holds every
    one exactly): the rounding of a division in bfloat16 (the float32
    quotient of two bfloat16 numbers, rounded once more, is the correctly
    rounded one: float32 has more than twice bfloat16's precision plus two
    bits).  The same exponent range as float32, so only the 16 low bits go;
    overflow carries into +-inf by itself; NaN stays NaN.  (float16's
    rounding is the primitive round_f16.)"""
    cdef uint32_t u = f32_bits(v)
    cdef uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u
    return bits_f32(u if (u & 0x7FFFFFFFu) > 0x7F800000u else r)


cdef inline float dequantize_narrow(int32_t x, int32_t z, float s) noexcept nogil:
    """8/16-bit: (x - zp) is exact in int32 and as a float; one rounding."""
    return <float>(x - z) * s


cdef inline float dequantize_float(float x, float z, float s) noexcept nogil:
    """float16 / bfloat16: x and zp widened exactly; (x - zp) * s."""
    return (x - z) * s


cdef inline float dequantize_carrier(float x, float z, float s) noexcept nogil:
    """The small floats through float32: (x - zp) * s, a zero point of 0
    (either sign, as no zero point) leaving x as it is, -0 included."""
    return (x if z == 0 else x - z) * s


cdef inline float dequantize_wide(double x, double z, float s) noexcept nogil:
    """32-bit: x - zp is exact in double (|x - zp| < 2^33), rounded once to
    float32, times s."""
    return <float>(x - z) * s


cdef inline float dequantize_wide_int(uint32_t x, uint32_t z,
                                      float s) noexcept nogil:
    """dequantize_wide when x - zp fits int32 (difference_overflows is
    false): the wrapped difference is then the exact one."""
    return <float><int32_t>(x - z) * s


cdef inline int difference_overflows(qtype_t x, uint32_t z) noexcept nogil:
    """1 when the 32-bit x - zp leaves int32's range.  int32: x and zp differ
    in sign and the wrapped difference's sign is not x's; uint32: the
    difference's int32 sign is not the borrow (x < zp)."""
    cdef uint32_t d
    if qtype_t is int32_t:
        d = <uint32_t>x - z
        return <int>((((<uint32_t>x) ^ z) & ((<uint32_t>x) ^ d)) >> 31)
    elif qtype_t is uint32_t:
        d = x - z
        return <int>(x < z) ^ <int>(d >> 31)
    else:
        return 0
