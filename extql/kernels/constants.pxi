# A channel's constants (Chan) and per-element constants (Cols): what the
# formula reads for one scale and zero point, or for a window of elements
# whose scale changes faster than a tile.

cdef enum:
    # Per-axis quantization whose runs (the elements sharing a channel:
    # the product of the dimensions after the axis) are shorter than
    # SHORT_RUN is walked with a scale per element, in windows of up to
    # WINDOW elements or, when the range holds a whole period of D * inner
    # <= PERIOD_MAX elements, over that period expanded once.
    WINDOW = 1024
    # The most arrays of per-element constants (cols_arrays).
    COLS_ARRAYS = 4
    SHORT_RUN = 64
    PERIOD_MAX = 1 << 17
    # Where a tile's results go: straight into the output, through the
    # tile (the input and output overlap, as an in-place 32-bit call), or
    # through the tile with streaming stores (an output larger than the
    # caches).
    OUT_DIRECT = 0
    OUT_TILE = 1
    OUT_STREAM = 2
    # How a quantize tile with one channel's constants takes the quotient
    # x / s: the division, the multiply by an exact reciprocal, or
    # quotient_fma.
    Q_DIV = 0
    Q_MUL = 1
    Q_FMA = 2


cdef struct Opts:
    # What a call asks beyond the layout: quantize's precision of the
    # quotient (0: float32, else EXTQL_FLOAT16 / EXTQL_BFLOAT16), and
    # dequantize's output type and its element size.
    int prec
    int ytype
    int64_t ysize

cdef struct Chan:
    float s          # the scale
    float r          # 1 / s where that is exact (s a power of two), else 0
    # quantize where quotient_fma takes the quotient (8/16-bit; 32-bit with
    # the zero point 0; else y 0):
    # y = RN(1 / s), yl = RN((1 - s * y) / s) (y + yl is 1 / s to 2^-48),
    # and xl, xh = -|s| * 2^33, |s| * 2^33, the bounds it clamps x to.
    float y, yl, xl, xh
    # float16 / bfloat16 with the scale 1 and the zero point +0: a
    # conversion (the drivers' quantize_convert, dequantize_convert).
    bint conv
    float zf         # the zero point as a float (exact for every type)
    int32_t zi       # as int32: the value (8/16-bit) or the bits (32-bit)
    double zd        # as a double (32-bit dequantize's exact path)
    float flo, fhi   # 8/16-bit quantize: lo - zp, hi - zp
    float fl, fh     # 32-bit quantize: lo - zp up, hi - zp down, to floats


cdef inline bint is_wide(qtype_t *like) noexcept nogil:
    return qtype_t is int32_t or qtype_t is uint32_t


cdef inline bint is_float(qtype_t *like) noexcept nogil:
    return qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float


cdef inline qtype_t zero_of(qtype_t *like) noexcept nogil:
    """The zero point 0 of the type (used when no zero point is given).
    The float32 carrier's is -0: quantize adds it, and v + (-0) is v for
    every v, -0 included (dequantize_carrier takes it as no zero point)."""
    cdef qtype_t z
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        z.bits = 0
    elif qtype_t is float:
        z = bits_f32(0x80000000u)
    else:
        z = 0
    return z


cdef inline float zero_float(qtype_t z) noexcept nogil:
    if qtype_t is float16_t:
        return f16_to_f32(z.bits)
    elif qtype_t is bfloat16_t:
        return bits_f32(<uint32_t>z.bits << 16)
    else:
        return <float>z


cdef inline int32_t zero_bits(qtype_t z) noexcept nogil:
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        return 0
    else:
        return <int32_t>z


cdef inline double zero_double(qtype_t z) noexcept nogil:
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        return 0
    else:
        return <double>z


cdef inline double wide_double(int32_t bits, const qtype_t *like) noexcept nogil:
    """A 32-bit zero point held as int32 bits, as a double: signed for
    int32, unsigned for uint32."""
    if qtype_t is uint32_t:
        return <double><uint32_t>bits
    return <double>bits


cdef inline float f32_toward(double d, bint up) noexcept nogil:
    """d (an integer of magnitude below 2^33) rounded to a float up (toward
    +inf) or down."""
    cdef float f = <float>d
    cdef uint32_t u
    if ((<double>f >= d) if up else (<double>f <= d)):
        return f
    u = f32_bits(f)          # one ulp toward +inf (up) or -inf; f != 0 here
    u = u + 1 if (f > 0) == up else u - 1
    return bits_f32(u)


cdef inline float exact_reciprocal(float s) noexcept nogil:
    """1 / s when s is a power of two (normal or subnormal, either sign) whose
    reciprocal is finite -- then x * (1 / s) is the same correctly rounded
    number as x / s for every x --, else 0."""
    cdef uint32_t u = f32_bits(s) & 0x7FFFFFFFu
    cdef float r
    if u == 0 or u >= 0x7F800000u:
        return 0
    if ((u & 0x7FFFFFu) != 0) if (u >> 23) != 0 else ((u & (u - 1)) != 0):
        return 0
    r = 1.0 / s
    return 0 if (f32_bits(r) & 0x7FFFFFFFu) >= 0x7F800000u else r


cdef inline float fma_reciprocal(float s) noexcept nogil:
    """RN(1 / s) when quotient_fma takes x / s (the copy does so:
    FMA_QUOTIENT, and 2^-60 <= |s| <= 2^60), else 0."""
    cdef float a = s if s >= 0 else -s
    if not FMA_QUOTIENT or not (a >= 8.673617379884035e-19 and a <= 1.152921504606847e18):
        return 0
    return <float>1 / s


cdef inline void zero_into(Chan *c, qtype_t z) noexcept nogil:
    """The zero point's fields of c."""
    cdef double zd = zero_double(z)
    c.zf = zero_float(z)
    c.zi = zero_bits(z)
    c.zd = zd
    c.flo = lower_bound(&z) - c.zf
    c.fhi = upper_bound(&z) - c.zf
    if qtype_t is int32_t:
        c.fl = f32_toward(EXTQL_INT32_LO - zd, 1)
        c.fh = f32_toward(EXTQL_INT32_HI - zd, 0)
    elif qtype_t is uint32_t:
        c.fl = f32_toward(EXTQL_UINT32_LO - zd, 1)
        c.fh = f32_toward(EXTQL_UINT32_HI - zd, 0)
    else:
        c.fl = 0
        c.fh = 0


cdef inline bint converts(float s, qtype_t z) noexcept nogil:
    """Whether a channel of scale s and zero point z is a conversion
    (Chan.conv): a float16 / bfloat16 type, the scale 1 and the zero point
    +0."""
    if qtype_t is float16_t or qtype_t is bfloat16_t:
        return s == 1 and z.bits == 0
    else:
        return False


cdef inline void chan_of(Chan *c, const float *scale, const qtype_t *zp,
                         int64_t d) noexcept nogil:
    """Channel d's constants (zp NULL: zero point 0)."""
    cdef qtype_t z = zero_of(<qtype_t *>zp) if zp == NULL else zp[d]
    zero_into(c, z)
    c.s = scale[d]
    c.r = exact_reciprocal(c.s)
    # quotient_fma: the 8/16-bit types, and the 32-bit ones with the zero
    # point 0 (store_wide; their formula with another zero point keeps the
    # division), on CPUs where it outruns the division (extql_quotient)
    c.y = (0 if c.r != 0 or is_float(<qtype_t *>zp)
           or (is_wide(<qtype_t *>zp) and c.zi != 0) or extql_quotient()
           else fma_reciprocal(c.s))
    c.yl = fmaf(-c.s, c.y, 1) / c.s if c.y != 0 else 0
    c.xh = (c.s if c.s >= 0 else -c.s) * <float>8589934592.0 if c.y != 0 else 0
    c.xl = -c.xh
    c.conv = converts(c.s, z)

cdef struct Cols:
    # Entry k holds the constants of one element; arrays of the entries a
    # window or period needs.  perz: zero points per entry, in the forms
    # the formula of the type and direction uses (zf: float; zi: int32 --
    # 8/16-bit quantize reads both; fl, fh: 32-bit quantize's bounds); else
    # every entry's zero point is z0's.
    float *s
    float *zf
    int32_t *zi
    float *fl
    float *fh
    bint perz
    Chan z0


cdef inline int64_t cols_arrays(qtype_t *like, bint perz,
                                bint quantize) noexcept nogil:
    """How many arrays of entries cols_layout lays out."""
    if not perz:
        return 1
    if (qtype_t is int32_t or qtype_t is uint32_t) and quantize:
        return 4
    if quantize and not is_float(like):
        return 3
    return 2


cdef inline void cols_layout(Cols *cl, float *buf, int64_t m, bint perz,
                             qtype_t *like, bint quantize) noexcept nogil:
    """Point cl's arrays at buf (room for cols_arrays(...) * m floats): s
    always, and when perz the zero point arrays the formula reads."""
    cl.s = buf
    cl.perz = perz
    cl.zf = cl.fl = cl.fh = NULL
    cl.zi = NULL
    if not perz:
        return
    if qtype_t is float16_t or qtype_t is bfloat16_t or qtype_t is float:
        cl.zf = buf + m
    elif qtype_t is int32_t or qtype_t is uint32_t:
        cl.zi = <int32_t *>(buf + m)
        if quantize:
            cl.fl = buf + 2 * m
            cl.fh = buf + 3 * m
    elif quantize:
        cl.zf = buf + m
        cl.zi = <int32_t *>(buf + 2 * m)
    else:
        cl.zi = <int32_t *>(buf + m)


cdef inline void cols_fill(Cols *cl, int64_t j, const Chan *c,
                           int64_t n) noexcept nogil:
    """Entries [j, j + n) get channel c's constants."""
    fill_32(cl.s + j, f32_bits(c.s), n)
    if cl.zf != NULL:
        fill_32(cl.zf + j, f32_bits(c.zf), n)
    if cl.zi != NULL:
        fill_32(cl.zi + j, <uint32_t>c.zi, n)
    if cl.fl != NULL:
        fill_32(cl.fl + j, f32_bits(c.fl), n)
        fill_32(cl.fh + j, f32_bits(c.fh), n)


cdef inline void cols_extend(Cols *cl, int64_t P, int64_t n) noexcept nogil:
    """Entries [P, P + n) repeat [0, n) periodically (entry k = entry k - P),
    so that a tile starting at any entry below P reads TILE valid ones."""
    cdef int64_t k
    for k in range(P, P + n):
        cl.s[k] = cl.s[k - P]
    if cl.zf != NULL:
        for k in range(P, P + n):
            cl.zf[k] = cl.zf[k - P]
    if cl.zi != NULL:
        for k in range(P, P + n):
            cl.zi[k] = cl.zi[k - P]
    if cl.fl != NULL:
        for k in range(P, P + n):
            cl.fl[k] = cl.fl[k - P]
            cl.fh[k] = cl.fh[k - P]


cdef inline bint uniform_zero(const qtype_t *zp, int64_t d, int64_t count,
                              int64_t D) noexcept nogil:
    """True when channels d, d + 1, ... (count of them, modulo D) have one
    zero point (or zp is NULL), so per-element zero points are not needed."""
    cdef int64_t _, c
    if zp == NULL:
        return True
    if count >= D:
        d, count = 0, D
    c = d
    for _ in range(count):
        if memcmp(&zp[c], &zp[d], sizeof(qtype_t)) != 0:
            return False
        c += 1
        if c == D:
            c = 0
    return True


cdef inline void cols_init(Cols *cl, float *buf, int64_t m,
                           const qtype_t *zp, int64_t d, bint perz,
                           bint quantize) noexcept nogil:
    """Lay out cl over buf (m entries), its zero point z0 channel d's."""
    cols_layout(cl, buf, m, perz, <qtype_t *>zp, quantize)
    zero_into(&cl.z0, zero_of(<qtype_t *>zp) if zp == NULL else zp[d])


cdef inline void convert_channels(Cols *cl, int64_t j, const float *scale,
                                  const qtype_t *zp, int64_t d,
                                  int64_t n) noexcept nogil:
    """Entries [j, j + n) get channels d .. d + n - 1 (one element each:
    per-axis along the last axis)."""
    cdef int64_t k
    cdef Chan c
    memcpy(cl.s + j, scale + d, n * sizeof(float))
    if cl.perz:
        for k in range(n):
            zero_into(&c, zp[d + k])
            if cl.zf != NULL:
                cl.zf[j + k] = c.zf
            if cl.zi != NULL:
                cl.zi[j + k] = c.zi
            if cl.fl != NULL:
                cl.fl[j + k] = c.fl
                cl.fh[j + k] = c.fh


cdef inline void expand_runs(Cols *cl, int64_t j, const float *scale,
                             const qtype_t *zp, int64_t D, int64_t inner,
                             int64_t d, int64_t off, int64_t w) noexcept nogil:
    """Entries [j, j + w) get the constants of w consecutive elements that
    start at channel d, offset off in its run of inner elements."""
    cdef int64_t run
    cdef Chan c
    while w > 0:
        run = inner - off if inner - off < w else w
        chan_of(&c, scale, zp, d)
        cols_fill(cl, j, &c, run)
        j += run
        w -= run
        off = 0
        d = d + 1 if d + 1 < D else 0


cdef inline int64_t next_entry(int64_t k, int64_t m, int64_t P) noexcept nogil:
    """Entry k + m of a period of P entries."""
    k += m
    if k >= P:
        k -= P
        if k >= P:
            k = k % P
    return k


# Blocked quantization's constants (block_size > 0)

cdef inline void block_row(Cols *cl, float *buf, const float *scale,
                           const qtype_t *zp, int64_t b, int64_t inner,
                           int64_t k, int64_t w, bint quantize) noexcept nogil:
    """cl's entries [0, w) get entries k .. k + w - 1 of block row b (the
    row of inner scales and zero points that block b of the rows uses)."""
    cdef const float *srow = scale + b * inner
    cdef const qtype_t *zrow = zp + b * inner if zp != NULL else NULL
    cols_init(cl, buf, w, zrow, k, not uniform_zero(zrow, k, w, inner),
              quantize)
    convert_channels(cl, 0, srow, zrow, k, w)


cdef inline void expand_blocks(Cols *cl, float *buf, const float *scale,
                               const qtype_t *zp, int64_t D, int64_t B,
                               int64_t i, int64_t w,
                               bint quantize) noexcept nogil:
    """cl over buf gets the constants of elements [i, i + w) of a tensor
    blocked along its last axis (inner 1): element i of row i // D uses
    block (i // D) * ceil(D / B) + (i % D) // B."""
    cdef int64_t Db = (D + B - 1) // B
    cdef int64_t j = 0, d = i % D, pos = d % B, b = (i // D) * Db + d // B, run
    cdef int64_t last = ((i + w - 1) // D) * Db + ((i + w - 1) % D) // B
    cdef Chan c
    cols_init(cl, buf, w, zp, b, not uniform_zero(zp, b, last - b + 1, last + 1),
              quantize)
    while j < w:
        # The run of the element's block (pos: its offset in the block).
        run = B - pos if B - pos < D - d else D - d
        run = run if run < w - j else w - j
        if cl.perz:
            chan_of(&c, scale, zp, b)
            cols_fill(cl, j, &c, run)
        else:
            # One zero point (cl.z0): only the scales, each repeated.
            fill_32(cl.s + j, f32_bits(scale[b]), run)
        j += run
        d += run
        pos += run
        if pos == B or d == D:
            b += 1
            pos = 0
            d = 0 if d == D else d


cdef inline void tile_blocks(Cols *tc, const float *scale, const qtype_t *zp,
                             int64_t b0, int shift) noexcept nogil:
    """tc's TILE entries get the constants of TILE elements blocked along
    the last axis in aligned blocks of 1 << shift: entry j of block
    b0 + (j >> shift).  Each block's value is read once into a local and
    stored 1 << shift times (a loop of stores the compiler vectorises)."""
    cdef int64_t k, j, m = 1 << shift
    cdef float *ts = tc.s
    cdef float *tz = tc.zf
    cdef int32_t *ti = tc.zi
    cdef float v, vz
    cdef int32_t vi
    for k in range(TILE >> shift):
        v = scale[b0 + k]
        for j in range(m):
            ts[k * m + j] = v
    if tz != NULL:
        for k in range(TILE >> shift):
            vz = zero_float(zp[b0 + k])
            for j in range(m):
                tz[k * m + j] = vz
    if ti != NULL:
        for k in range(TILE >> shift):
            vi = zero_bits(zp[b0 + k])
            for j in range(m):
                ti[k * m + j] = vi


cdef inline int block_shift(int64_t D, int64_t inner, int64_t B) noexcept nogil:
    """log2(B) when the blocks are aligned in the flat tensor (last axis, B a
    power of two from 8 to TILE dividing D): element e is in block e >> it.
    Else 0."""
    cdef int shift
    if inner != 1 or D % B != 0:
        return 0
    for shift in range(3, 8):
        if B == (1 << shift) and B <= TILE:
            return shift
    return 0
