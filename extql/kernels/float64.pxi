# ---------------------------------------------------------------------------
# Precision float64 (the default for an int32 scale): a first stage takes the
# quotient in float64 and rounds what the formula needs of it once to
# float32; the float32 formula then runs with a scale of 1.
# ---------------------------------------------------------------------------

cdef enum:
    # What the float64 stage does with the quotient q, by output type.
    F64_ROUND = 0      # integer types: rint(q)
    F64_PLAIN = 1      # float8: q (it takes no zero point)
    F64_ZERO = 2       # float16, bfloat16, float4e2m1: q + zp


cdef inline int f64_kind(int qtype) noexcept nogil:
    cdef SmallFloat t
    if qtype == EXTQL_FLOAT16 or qtype == EXTQL_BFLOAT16:
        return F64_ZERO
    if smallfloat_of(qtype, &t):
        return F64_PLAIN if t.bits == 8 else F64_ZERO
    return F64_ROUND


cdef inline double zero_f64(int qtype, const void *zp, int64_t c) noexcept nogil:
    """Zero point c of a float type in the form the kernels take it (float16 /
    bfloat16 bits, float4e2m1 as float32) as a double; NULL: +0."""
    cdef float f
    if zp == NULL:
        return 0.0
    if qtype == EXTQL_FLOAT16:
        load_f16(&f, <const uint16_t *>zp + c, 1)
        return f
    if qtype == EXTQL_BFLOAT16:
        return bits_f32(<uint32_t>(<const uint16_t *>zp)[c] << 16)
    return (<const float *>zp)[c]


cdef inline double scale_f64(const void *scale, bint wide, int64_t c) noexcept nogil:
    """Scale c (int32 when wide, else float32) as a double, exactly."""
    if wide:
        return (<const int32_t *>scale)[c]
    return (<const float *>scale)[c]


cdef inline void quotients_f64_tile(const double *xd, float *v, int64_t n,
                                    const void *scale, bint wide, bint per,
                                    int64_t c, double z, const void *zp,
                                    int qtype, int kind) noexcept nogil:
    """v[j] for n <= TILE elements whose x (as doubles) is xd: the scale c
    for all (per 0; its zero point z), or scale / zero point c + j (per 1).
    One loop per case, so that each vectorises."""
    cdef int64_t j
    cdef double s = scale_f64(scale, wide, c)
    n = n if n < TILE else TILE  # (always; it tells the compiler the bound)
    if per:
        if kind == F64_ROUND:
            for j in range(n):
                v[j] = <float>nearbyint(xd[j] / scale_f64(scale, wide, c + j))
        elif kind == F64_PLAIN:
            for j in range(n):
                v[j] = <float>(xd[j] / scale_f64(scale, wide, c + j))
        else:
            for j in range(n):
                v[j] = <float>(xd[j] / scale_f64(scale, wide, c + j)
                               + zero_f64(qtype, zp, c + j))
    elif kind == F64_ROUND:
        for j in range(n):
            v[j] = <float>nearbyint(xd[j] / s)
    elif kind == F64_PLAIN:
        for j in range(n):
            v[j] = <float>(xd[j] / s)
    else:
        for j in range(n):
            v[j] = <float>(xd[j] / s + z)


cdef inline void widen_f64(int xtype, const void *x, int64_t i, double *xd,
                           int64_t n) noexcept nogil:
    """Elements [i, i + n) (n <= TILE) of quantize's x (type xtype) as
    doubles (exactly: every value of the four types is one)."""
    cdef float xw[TILE]
    cdef int64_t j
    n = n if n < TILE else TILE
    if xtype == EXTQL_INT32:
        for j in range(n):
            xd[j] = (<const int32_t *>x)[i + j]
        return
    if xtype == EXTQL_FLOAT32:
        memcpy(xw, <const float *>x + i, n * sizeof(float))
    elif xtype == EXTQL_FLOAT16:
        load_f16(xw, <const uint16_t *>x + i, n)
    else:
        load_bf16(xw, <const uint16_t *>x + i, n)
    for j in range(n):
        xd[j] = xw[j]


cdef void quotients_f64(int xtype, const void *x, const void *scale, bint wide,
                        const void *zp, int qtype, float *v, int64_t D,
                        int64_t inner, int64_t block, int64_t start,
                        int64_t stop) noexcept nogil:
    """The float64 stage over elements [start, stop): in runs of one row
    (the elements sharing the scale's index up to the innermost one), each
    in tiles."""
    cdef double xd[TILE]
    cdef int kind = f64_kind(qtype)
    cdef int64_t i = start, e, row, d, nb, c, m
    cdef bint per = block > 0
    cdef double z
    nb = (D + block - 1) // block if per else D
    while i < stop:
        row = i // inner
        e = (row + 1) * inner
        e = e if e < stop else stop
        d = row % D
        # The scale of element j: entry d (per tensor / per axis), or entry
        # (outer, d / block, j - row * inner) of the blocked [outer, nb, inner].
        c = (((row // D) * nb + d // block) * inner - row * inner) if per else d
        z = 0.0 if per or kind != F64_ZERO else zero_f64(qtype, zp, c)
        while i < e:
            m = e - i if e - i < TILE else TILE
            widen_f64(xtype, x, i, xd, m)
            quotients_f64_tile(xd, v + i, m, scale, wide, per, c + i if per else c,
                               z, zp, qtype, kind)
            i += m


cdef int quotients_f64_range(
        int qtype, int xtype, int stype, const void *x, const void *scale,
        const void *zero_point, float *v, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop) noexcept nogil:
    """The float64 stage for elements [start, stop) into v[start:stop): q =
    x / s in float64 (x and the scale -- float32 or int32: stype -- are
    exact there), rounded to an integer (integer outputs) or added to the
    zero point (float16, bfloat16, float4e2m1; float8 takes none), then
    rounded once to float32."""
    cdef bint wide = stype == EXTQL_INT32
    if (stype != EXTQL_FLOAT32 and not wide) or x_size(xtype) == 0:
        return -1
    if not known_type(qtype) or D <= 0 or inner <= 0:
        return -1
    quotients_f64(xtype, x, scale, wide, zero_point, qtype, v, D, inner, block,
                  start, stop)
    return 0


cdef public int f64_params "EXTQL_ISA_FN(extql_f64_params)"(
        int qtype, float *ones, void *zero2, int64_t count) noexcept nogil:
    """The float32 stage's parameters of a quantize in float64: count
    scales of 1 into ones and, for the types whose zero point the float64
    stage added (float16, bfloat16, float4e2m1), count zero points of -0 in
    the form the kernels take (x + -0 is x, -0 included) into zero2 (room
    for count float32).  Returns 1 when the float32 stage takes zero2, 0
    when it takes the operator's own zero point."""
    cdef int64_t c
    for c in range(count):
        ones[c] = 1
    if f64_kind(qtype) != F64_ZERO:
        return 0
    for c in range(count):
        if qtype == EXTQL_FLOAT16 or qtype == EXTQL_BFLOAT16:
            (<uint16_t *>zero2)[c] = 0x8000u
        else:
            (<float *>zero2)[c] = -0.0
    return 1


cdef public int quantize_f64_range "EXTQL_ISA_FN(extql_quantize_f64_range)"(
        int qtype, int xtype, int stype, const void *x, const void *scale,
        const void *zero_point, void *y, int64_t D, int64_t inner,
        int64_t block, int64_t start, int64_t stop, int flags,
        const float *ones, const void *zero2) noexcept nogil:
    """Quantize [start, stop) with the division in float64, window by
    window (so that the float32 values stay in the cache): the float64
    stage into a window buffer, then the float32 formula on it with the
    scales ``ones`` and zero points ``zero2`` (extql_f64_params: -0 or the
    operator's own).  The windows end at multiples of SUB_CHUNK, which keeps
    packed outputs' bytes whole."""
    cdef float buf[SUB_CHUNK]
    cdef float *v
    cdef int64_t i = start, e
    while i < stop:
        e = (i // SUB_CHUNK + 1) * SUB_CHUNK
        e = e if e < stop else stop
        # (the stages index by the element's place in the tensor)
        v = <float *>based_at(buf, i * <int64_t>sizeof(float))
        if quotients_f64_range(qtype, xtype, stype, x, scale, zero_point, v, D,
                               inner, block, i, e) != 0:
            return -1
        if quantize_range(qtype, EXTQL_FLOAT32, EXTQL_FLOAT32, v, ones, zero2, y,
                          D, inner, block, i, e, flags) != 0:
            return -1
        i = e
    return 0
