# Quark's block formats: BFPQuantizeDequantize and MXQuantizeDequantize.
#
# The math of docs/operators/bfp_quantize_dequantize.rst and
# mx_quantize_dequantize.rst, written once: C functions over raw pointers
# (noexcept nogil, no Python object, no module global), so that the Python
# extension and the Python-free onnxruntime library call the same code.
# The element formulas are in blockfmt_elements.pxi; this file walks blocks.
#
# The tensor is seen as [outer, D, inner] with the blocks running along D:
# block b of a line holds rows [b * block, min(D, (b + 1) * block)); the last
# block of a line is short (Quark pads it with zeros, which never change a
# block's largest exponent, so the padding is simply left out).  A work item
# is one block-row: for inner == 1 a contiguous run of at most `block`
# elements; for inner > 1 the block's rows times `inner` columns, walked
# column-wise so that the inner loops run over contiguous columns and
# vectorise (or, for fewer than BLK_NARROW columns, turned into contiguous
# blocks).  blockfmt_range(start, stop) does work items [start, stop), so
# that a thread pool can split a tensor between threads.
#
# Every element is computed in float32: float16 x is widened exactly, the
# result rounded back to nearest even.  x and y may be the same buffer: a
# work item reads its elements into float32 buffers before it writes any.
#
# What the including unit (dispatch.pyx) provides: float16_t (a struct of
# uint16_t bits), ExtqlBlockParams and the type codes, and from
# src/extql_primitives.h f32_bits, bits_f32, load_f16, store_f16.

include "blockfmt_elements.pxi"

from libc.stdlib cimport malloc, free


# ---------------------------------------------------------------------------
# A contiguous block (inner == 1): xf[0, n) -> yf[0, n) in float32

cdef inline void bfp_run(const float *xf, float *yf, int64_t n, float p1, float p2, float s,
                         float lo, float hi, int mode) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        yf[i] = bfp_elem(xf[i], p1, p2, s, lo, hi, mode)


cdef inline void bfp_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                           int mode) noexcept nogil:
    cdef uint32_t E = 0, e
    cdef int64_t i
    cdef int bump = 0
    cdef float p1, p2, s, lo, hi
    for i in range(n):
        e = blk_field_finite(xf[i])
        E = e if e > E else E
    if p.compiler:
        bfp_params(E, p.mbits, &p1, &p2, &s, &lo, &hi)
        for i in range(n):
            bump |= bfp_bumps(xf[i], p1, p2, E, mode)
        bfp_compiler_params(E, p.mbits, bump, &p1, &p2, &s, &lo, &hi)
    else:
        bfp_params(E, p.mbits, &p1, &p2, &s, &lo, &hi)
    bfp_run(xf, yf, n, p1, p2, s, lo, hi, mode)


cdef inline void prime_run_fast(const BlockParams *p, const float *xf, float *yf, int64_t n,
                                uint32_t E, int cap, float rmax, int mode) noexcept nogil:
    """prime_block's sub-blocks when every step 2^k is normal, and so is its
    reciprocal (k in [-126, 126]): the steps' exponents per element, for
    BLK_COLS elements (whole sub-blocks) at a time, then one vector loop."""
    cdef uint32_t kb[BLK_COLS]
    cdef int64_t S = p.sub_block
    cdef int64_t per = (BLK_COLS // S) * S
    cdef int64_t c0 = 0, cn, i, j, jn
    cdef uint32_t Ej, e, shift, k0b = E + 1 - <uint32_t>p.mbits
    while c0 < n:
        cn = c0 + per if c0 + per < n else n
        j = c0
        while j < cn:
            jn = j + S if j + S < cn else cn
            Ej = 0
            for i in range(j, jn):
                e = blk_field(xf[i])
                Ej = e if e > Ej else Ej
            shift = E - Ej if E - Ej < <uint32_t>cap else <uint32_t>cap
            for i in range(j, jn):
                kb[i - c0] = k0b - shift
            j = jn
        for i in range(c0, cn):
            yf[i] = prime_elem_fast(xf[i], kb[i - c0], rmax, mode)
        c0 = cn


cdef inline void prime_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                             int mode) noexcept nogil:
    cdef uint32_t E = 0, Ej, e
    cdef int64_t i, j, jn
    cdef int cap = blk_shift_cap(p)
    cdef int capE
    cdef float p1, p2, step
    cdef float rmax = <float>((1 << p.mbits) - 1)
    for i in range(n):
        e = blk_field(xf[i])
        E = e if e > E else E
    if E == 255:
        for i in range(n):
            yf[i] = bits_f32(BLK_NAN)
        return
    if E == 0:
        # Zeros and subnormals only: every element flushes to a zero of its sign.
        for i in range(n):
            yf[i] = bits_f32(f32_bits(xf[i]) & BLK_SIGN)
        return
    capE = cap if cap < <int>E else <int>E
    if (<int>E - 126 - p.mbits - capE >= -126 and <int>E - 126 - p.mbits <= 126
            and p.sub_block <= BLK_COLS):
        prime_run_fast(p, xf, yf, n, E, cap, rmax, mode)
        return
    j = 0
    while j < n:
        jn = j + p.sub_block if j + p.sub_block < n else n
        Ej = 0
        for i in range(j, jn):
            e = blk_field(xf[i])
            Ej = e if e > Ej else Ej
        prime_params(E, Ej, cap, p.mbits, &p1, &p2, &step)
        for i in range(j, jn):
            yf[i] = prime_elem(xf[i], p1, p2, step, rmax, mode, 0)
        j = jn


cdef inline void mx_block(const BlockParams *p, const float *xf, float *yf, int64_t n,
                          int mode) noexcept nogil:
    cdef uint32_t E = 0, e
    cdef int64_t i
    cdef float p1, p2, X
    cdef uint32_t emin
    for i in range(n):
        e = blk_field_finite(xf[i])
        E = e if e > E else E
    mx_params(E, p.emax, &p1, &p2, &X)
    if p.ebits == 0:
        for i in range(n):
            yf[i] = mx_int_elem(xf[i], p1, p2, X, mode)
    else:
        emin = mx_emin(p)
        for i in range(n):
            yf[i] = mx_float_elem(xf[i], p1, p2, X, emin, p.mbits, p.largest)


cdef inline void blk_block_mode(const BlockParams *p, const float *xf, float *yf, int64_t n,
                                int mode) noexcept nogil:
    if p.kind == EXTQL_BLOCK_BFP:
        bfp_block(p, xf, yf, n, mode)
    elif p.kind == EXTQL_BLOCK_BFP_PRIME:
        prime_block(p, xf, yf, n, mode)
    else:
        mx_block(p, xf, yf, n, mode)


cdef inline void blk_block_len(const BlockParams *p, const float *xf, float *yf, int64_t n
                               ) noexcept nogil:
    """One block, with the rounding mode a constant of each copy."""
    if p.rounding == 0:
        blk_block_mode(p, xf, yf, n, 0)
    elif p.rounding == 1:
        blk_block_mode(p, xf, yf, n, 1)
    else:
        blk_block_mode(p, xf, yf, n, 2)


cdef void blk_block(const BlockParams *p, const float *xf, float *yf, int64_t n) noexcept nogil:
    blk_block_len(p, xf, yf, n)


# ---------------------------------------------------------------------------
# A tile of contiguous blocks at once (to_bfp and MX): the block exponent
# expanded per element, then one vector loop over the tile whose steps are
# built from exponent bits.  That holds where a block's step and its
# reciprocal are normal float32 values; the other blocks (all zeros or
# subnormals, or a step beyond 2^126) are done again by blk_block.

cdef inline bint tile_fast_exponent(const BlockParams *p, uint32_t E) noexcept nogil:
    """Whether blk_tile_apply computes a block of exponent E exactly: its
    step's biased exponent (to_bfp E + 1 - m, MX E - emax) in [1, 253]."""
    cdef int kb = <int>E + 1 - p.mbits if p.kind == EXTQL_BLOCK_BFP else <int>E - p.emax
    return 1 <= kb <= 253


cdef inline void tile_apply_mode(const BlockParams *p, const float *xf, float *yf,
                                 const uint32_t *ke, int64_t n, int mode) noexcept nogil:
    cdef int64_t i
    cdef uint32_t kb, emin
    cdef float s, mmax = <float>((1 << p.mbits) - 1)
    if p.kind == EXTQL_BLOCK_BFP:
        for i in range(n):
            kb = ke[i] + 1 - <uint32_t>p.mbits
            s = bits_f32(kb << 23)
            yf[i] = bfp_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE, s, -(s * mmax),
                             s * mmax, mode)
    elif p.ebits == 0:
        for i in range(n):
            kb = ke[i] - <uint32_t>p.emax
            yf[i] = mx_int_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE,
                                bits_f32(kb << 23), mode)
    else:
        emin = mx_emin(p)
        for i in range(n):
            kb = ke[i] - <uint32_t>p.emax
            yf[i] = mx_float_elem(xf[i], bits_f32((254u - kb) << 23), BLK_ONE,
                                  bits_f32(kb << 23), emin, p.mbits, p.largest)


cdef void blk_tile_fast(const BlockParams *p, const float *xf, float *yf, int64_t n,
                        int64_t D, int64_t bb, int64_t nb) noexcept nogil:
    """The blocks of a tile of n <= BLK_TILE elements, the first being block
    bb of its line (nb per line of D)."""
    cdef uint32_t ke[BLK_TILE]
    cdef int64_t B = p.block
    cdef int64_t off = 0, ln, i, b0 = bb
    cdef uint32_t E, e
    cdef bint slow = 0
    while off < n:
        ln = D - bb * B if D - bb * B < B else B
        E = 0
        for i in range(off, off + ln):
            e = blk_field_finite(xf[i])
            E = e if e > E else E
        for i in range(off, off + ln):
            ke[i] = E
        slow |= not tile_fast_exponent(p, E)
        off += ln
        bb += 1
        if bb == nb:
            bb = 0
    if p.rounding == 0:
        tile_apply_mode(p, xf, yf, ke, n, 0)
    elif p.rounding == 1:
        tile_apply_mode(p, xf, yf, ke, n, 1)
    else:
        tile_apply_mode(p, xf, yf, ke, n, 2)
    if not slow:
        return
    off = 0
    bb = b0
    while off < n:
        ln = D - bb * B if D - bb * B < B else B
        if not tile_fast_exponent(p, ke[off]):
            blk_block(p, xf + off, yf + off, ln)
        off += ln
        bb += 1
        if bb == nb:
            bb = 0


# ---------------------------------------------------------------------------
# Moving elements between x / y and float32 buffers

cdef struct BlkIo:
    # A work item's tensors: x and y (possibly the same memory) of float32
    # or float16 (f16), addressed by element.  One loop body serves both
    # types: only these loads and stores look at it.
    const char *x
    char *y
    int f16


cdef void blk_load(const BlkIo *io, int64_t at, float *xf, int64_t n,
                   int bfloat_first) noexcept nogil:
    """x[at, at + n) as float32 into xf (bfloat16-rounded when asked).  The
    float32 copy goes through a mask the compiler cannot see through: a plain
    copy loop becomes a string instruction, whose start-up costs more than a
    short row takes."""
    cdef int64_t i
    cdef uint32_t keep = blk_keep()
    cdef const float *x
    if io.f16:
        load_f16(xf, <const uint16_t *>io.x + at, n)
        if bfloat_first:
            for i in range(n):
                xf[i] = blk_bf16(xf[i])
        return
    x = <const float *>io.x + at
    if bfloat_first:
        for i in range(n):
            xf[i] = blk_bf16(x[i])
    else:
        for i in range(n):
            xf[i] = bits_f32(f32_bits(x[i]) & keep)


cdef void blk_store(const BlkIo *io, int64_t at, const float *yf,
                    int64_t n) noexcept nogil:
    """yf[0, n) into y[at, at + n) (rounded to float16 for a float16 y); the
    float32 copy as blk_load's."""
    cdef int64_t i
    cdef uint32_t keep = blk_keep()
    cdef float *y
    if io.f16:
        store_f16(<uint16_t *>io.y + at, yf, n, 0)
        return
    y = <float *>io.y + at
    for i in range(n):
        y[i] = bits_f32(f32_bits(yf[i]) & keep)


# ---------------------------------------------------------------------------
# Work items

cdef int blk_rows(const BlockParams *p, const BlkIo *io, int64_t D, int64_t start,
                  int64_t stop) noexcept nogil:
    """inner == 1: blocks [start, stop) of the lines of D elements, gathered
    into tiles of whole blocks."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xs[BLK_TILE]
    cdef float ys[BLK_TILE]
    cdef float *xf = xs
    cdef float *yf = ys
    cdef int64_t cap = BLK_TILE
    cdef int64_t w = start, o, b, e0, n, off, ln, bb
    if B > BLK_TILE:
        xf = <float *>malloc(<size_t>(2 * B) * sizeof(float))
        if xf == NULL:
            return BLK_NO_MEMORY
        yf = xf + B
        cap = B
    while w < stop:
        o = w // nb
        b = w - o * nb
        e0 = o * D + b * B
        # Whole blocks while they fit the tile (always at least one).
        n = 0
        bb = b
        while w < stop:
            ln = D - bb * B if D - bb * B < B else B
            if n + ln > cap:
                break
            n += ln
            w += 1
            bb += 1
            if bb == nb:
                bb = 0
        blk_load(io, e0, xf, n, p.bfloat_first)
        if n <= BLK_TILE and (p.kind == EXTQL_BLOCK_MX
                              or (p.kind == EXTQL_BLOCK_BFP and not p.compiler)):
            blk_tile_fast(p, xf, yf, n, D, b, nb)
            blk_store(io, e0, yf, n)
            continue
        off = 0
        bb = b
        while off < n:
            ln = D - bb * B if D - bb * B < B else B
            blk_block(p, xf + off, yf + off, ln)
            off += ln
            bb += 1
            if bb == nb:
                bb = 0
        blk_store(io, e0, yf, n)
    if xf != xs:
        free(xf)
    return BLK_OK


cdef inline void cols_apply_bfp(const BlkIo *io, int64_t e, int64_t rows, int64_t inner,
                                int64_t W, int bfloat_first, float *xf, float *yf,
                                const float *p1, const float *p2, const float *s,
                                const float *lo, const float *hi, int mode) noexcept nogil:
    cdef int64_t r, c
    for r in range(rows):
        blk_load(io, e + r * inner, xf, W, bfloat_first)
        for c in range(W):
            yf[c] = bfp_elem(xf[c], p1[c], p2[c], s[c], lo[c], hi[c], mode)
        blk_store(io, e + r * inner, yf, W)


cdef void cols_bfp(const BlockParams *p, const BlkIo *io, int64_t e, int64_t rows,
                   int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                   int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float s[BLK_COLS]
    cdef float lo[BLK_COLS]
    cdef float hi[BLK_COLS]
    cdef int bump[BLK_COLS]
    cdef int64_t r, c
    for c in range(W):
        bfp_params(E[c], p.mbits, &p1[c], &p2[c], &s[c], &lo[c], &hi[c])
    if p.compiler:
        for c in range(W):
            bump[c] = 0
        for r in range(rows):
            blk_load(io, e + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                bump[c] |= bfp_bumps(xf[c], p1[c], p2[c], E[c], mode)
        for c in range(W):
            bfp_compiler_params(E[c], p.mbits, bump[c], &p1[c], &p2[c], &s[c], &lo[c],
                                &hi[c])
    cols_apply_bfp(io, e, rows, inner, W, p.bfloat_first, xf, yf, p1, p2, s, lo, hi, mode)


cdef void cols_prime(const BlockParams *p, const BlkIo *io, int64_t e, int64_t rows,
                     int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                     int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float step[BLK_COLS]
    cdef uint32_t nanmask[BLK_COLS]
    cdef uint32_t Ej[BLK_COLS]
    cdef int cap = blk_shift_cap(p)
    cdef float rmax = <float>((1 << p.mbits) - 1)
    cdef int64_t r, c, j = 0, jn
    cdef uint32_t f
    for c in range(W):
        nanmask[c] = 0u - <uint32_t>(E[c] == 255)
    while j < rows:
        jn = j + p.sub_block if j + p.sub_block < rows else rows
        for c in range(W):
            Ej[c] = 0
        for r in range(j, jn):
            blk_load(io, e + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                f = blk_field(xf[c])
                Ej[c] = f if f > Ej[c] else Ej[c]
        for c in range(W):
            prime_params(E[c], Ej[c], cap, p.mbits, &p1[c], &p2[c], &step[c])
        for r in range(j, jn):
            blk_load(io, e + r * inner, xf, W, p.bfloat_first)
            for c in range(W):
                yf[c] = prime_elem(xf[c], p1[c], p2[c], step[c], rmax, mode, nanmask[c])
            blk_store(io, e + r * inner, yf, W)
        j = jn


cdef void cols_mx(const BlockParams *p, const BlkIo *io, int64_t e, int64_t rows,
                  int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                  int mode) noexcept nogil:
    cdef float p1[BLK_COLS]
    cdef float p2[BLK_COLS]
    cdef float X[BLK_COLS]
    cdef int64_t r, c
    cdef uint32_t emin
    for c in range(W):
        mx_params(E[c], p.emax, &p1[c], &p2[c], &X[c])
    if p.ebits == 0:
        for r in range(rows):
            blk_load(io, e + r * inner, xf, W, 0)
            for c in range(W):
                yf[c] = mx_int_elem(xf[c], p1[c], p2[c], X[c], mode)
            blk_store(io, e + r * inner, yf, W)
    else:
        emin = mx_emin(p)
        for r in range(rows):
            blk_load(io, e + r * inner, xf, W, 0)
            for c in range(W):
                yf[c] = mx_float_elem(xf[c], p1[c], p2[c], X[c], emin, p.mbits, p.largest)
            blk_store(io, e + r * inner, yf, W)


cdef inline void cols_mode(const BlockParams *p, const BlkIo *io, int64_t e, int64_t rows,
                           int64_t inner, int64_t W, float *xf, float *yf, uint32_t *E,
                           int mode) noexcept nogil:
    if p.kind == EXTQL_BLOCK_BFP:
        cols_bfp(p, io, e, rows, inner, W, xf, yf, E, mode)
    elif p.kind == EXTQL_BLOCK_BFP_PRIME:
        cols_prime(p, io, e, rows, inner, W, xf, yf, E, mode)
    else:
        cols_mx(p, io, e, rows, inner, W, xf, yf, E, mode)


cdef int blk_cols(const BlockParams *p, const BlkIo *io, int64_t D, int64_t inner,
                  int64_t start, int64_t stop) noexcept nogil:
    """inner > 1: block-rows [start, stop), each in chunks of up to BLK_COLS
    columns: the columns' largest exponents over the block's rows, their
    parameters, then the rows."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xf[BLK_COLS]
    cdef float yf[BLK_COLS]
    cdef uint32_t E[BLK_COLS]
    cdef int64_t w, o, b, rows, c0, W, r, c
    cdef uint32_t f
    cdef int64_t e
    for w in range(start, stop):
        o = w // nb
        b = w - o * nb
        rows = D - b * B if D - b * B < B else B
        c0 = 0
        while c0 < inner:
            W = inner - c0 if inner - c0 < BLK_COLS else BLK_COLS
            e = (o * D + b * B) * inner + c0
            for c in range(W):
                E[c] = 0
            for r in range(rows):
                blk_load(io, e + r * inner, xf, W, p.bfloat_first)
                if p.kind == EXTQL_BLOCK_BFP_PRIME:
                    for c in range(W):
                        f = blk_field(xf[c])
                        E[c] = f if f > E[c] else E[c]
                else:
                    for c in range(W):
                        f = blk_field_finite(xf[c])
                        E[c] = f if f > E[c] else E[c]
            if p.rounding == 0:
                cols_mode(p, io, e, rows, inner, W, xf, yf, E, 0)
            elif p.rounding == 1:
                cols_mode(p, io, e, rows, inner, W, xf, yf, E, 1)
            else:
                cols_mode(p, io, e, rows, inner, W, xf, yf, E, 2)
            c0 += W
    return BLK_OK


cdef int blk_cols_narrow(const BlockParams *p, const BlkIo *io, int64_t D,
                         int64_t inner, int64_t start, int64_t stop) noexcept nogil:
    """inner < BLK_NARROW with block * inner <= BLK_TILE (a convolution's
    3x3 weights along axis 1, say): each block-row turned into a tile of
    ``inner`` contiguous blocks -- column c's block at c * rows -- done as
    contiguous blocks are, and turned back.  Column-wise, rows this short
    would spend more on each row's set-up than on its elements."""
    cdef int64_t B = p.block
    cdef int64_t nb = (D + B - 1) // B
    cdef float xf[BLK_TILE]
    cdef float yf[BLK_TILE]
    cdef float row[BLK_NARROW]
    cdef int64_t w, o, b, rows, r, c, c0
    cdef int64_t e
    cdef bint fast = p.kind == EXTQL_BLOCK_MX or (p.kind == EXTQL_BLOCK_BFP and not p.compiler)
    for w in range(start, stop):
        o = w // nb
        b = w - o * nb
        rows = D - b * B if D - b * B < B else B
        e = (o * D + b * B) * inner
        for r in range(rows):
            blk_load(io, e + r * inner, row, inner, p.bfloat_first)
            for c in range(inner):
                xf[c * rows + r] = row[c]
        if fast:
            blk_tile_fast(p, xf, yf, rows * inner, rows, 0, 1)
        else:
            c0 = 0
            while c0 < rows * inner:
                blk_block(p, xf + c0, yf + c0, rows)
                c0 += rows
        for r in range(rows):
            for c in range(inner):
                row[c] = yf[c * rows + r]
            blk_store(io, e + r * inner, row, inner)
    return BLK_OK


cdef int blk_typed_range(const BlockParams *p, const BlkIo *io, int64_t outer, int64_t D,
                         int64_t inner, int64_t start, int64_t stop) noexcept nogil:
    cdef float v
    if outer * D * inner == 1:
        # One element passes through (after the bfloat16 pre-rounding).
        if start < stop:
            blk_load(io, 0, &v, 1, p.bfloat_first)
            blk_store(io, 0, &v, 1)
        return BLK_OK
    if inner == 1:
        return blk_rows(p, io, D, start, stop)
    if inner < BLK_NARROW and p.block * inner <= BLK_TILE:
        return blk_cols_narrow(p, io, D, inner, start, stop)
    return blk_cols(p, io, D, inner, start, stop)


# ---------------------------------------------------------------------------
# Entry points

cdef public int64_t block_items "EXTQL_ISA_FN(extql_block_items)"(
        const BlockParams *p, int64_t outer, int64_t D, int64_t inner) noexcept nogil:
    """The number of work items of a tensor seen as [outer, D, inner]: one
    per block-row, outer * ceil(D / block) (0 for an empty tensor)."""
    if outer <= 0 or D <= 0 or inner <= 0:
        return 0
    return outer * ((D + p.block - 1) // p.block)


cdef public int64_t block_item_size "EXTQL_ISA_FN(extql_block_item_size)"(
        const BlockParams *p, int64_t inner) noexcept nogil:
    """Elements per work item (at most): what a thread split weighs."""
    return p.block * inner


cdef public int block_range "EXTQL_ISA_FN(extql_block_range)"(
        const BlockParams *p, int xtype, const void *x, void *y, int64_t outer, int64_t D,
        int64_t inner, int64_t start, int64_t stop) noexcept nogil:
    """Work items [start, stop) of BFPQuantizeDequantize / MXQuantizeDequantize
    (``p``: the checked attributes) on x of ONNX type ``xtype`` (1 float32,
    10 float16), seen as [outer, D, inner] with the blocks along D, into y of
    the same type and shape (y may be x).  A tensor of one element is copied
    (bfloat16-rounded first when p.bfloat_first).  Returns 0, BLK_BAD_TYPE
    for another type, BLK_NO_MEMORY when a block longer than BLK_TILE
    elements (inner == 1) finds no memory for its buffer."""
    cdef BlkIo io
    if xtype != EXTQL_FLOAT32 and xtype != EXTQL_FLOAT16:
        return BLK_BAD_TYPE
    io.x = <const char *>x
    io.y = <char *>y
    io.f16 = xtype == EXTQL_FLOAT16
    return blk_typed_range(p, &io, outer, D, inner, start, stop)
