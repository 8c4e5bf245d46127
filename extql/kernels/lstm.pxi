# ExtendedLSTM: Quark's DPU emulation of a bidirectional LSTM in 16-bit fixed point.
#
# The math of docs/operators/extended_lstm.rst, written once: C functions
# over raw pointers (noexcept nogil, no Python object, no module global), so
# that the Python extension and the Python-free onnxruntime library call the
# same code.
#
# A call has three stages:
#
# * lstm_params: the node's fixed-point parameters from its attributes and
#   sizes (the page's "Parameters"), with the refusal of the shifts C leaves
#   undefined;
# * lstm_prepare: W, R and B quantized once into one buffer per call, per
#   direction the int16 weights in the dot products' layout (below) and the
#   gate constants qc;
# * lstm_range: work items [start, stop), an item being one batch element in
#   one direction, each run over its whole sequence on its own (the batch-1
#   case), so that a thread pool splits a call between threads.
#
# The dot products are exact integer sums, so the order of their additions
# does not change them.  Each int16 weight w is split into w = 256 hi + lo
# (lo in [0, 255], hi in [-128, 127]); a step multiplies the int16 values of
# x_t (or h) by the lo and the hi parts, two inputs at a time (a
# multiply-add of int16 pairs into int32, one instruction for 16 gates
# where AVX-512 has it), and sums them in int32: a pair's products are
# below 2^24 in magnitude, so LSTM_PAIRS_BLOCK = 128 pairs stay below 2^31.
# Each block is then added to the int64 sums as 256 hi + lo.  The layout
# (extql_lstm_dots): per input pair p, per gate i, the two inputs' parts
# side by side, lo[(p * 4H + i) * 2 + r] for input 2p + r (an odd size ends
# with a zero row).  lstm_params refuses an input or hidden size of 2^22 or
# more, which keeps every sum far inside int64.  The gates call the C
# library's tanhf as it is (what Quark's library calls).
#
# What the including unit (dispatch.pyx) provides: ExtqlLstmParams and the
# int types (externs.pxi).

from libc.math cimport tanhf, log2, ceil, fabs, ldexp

# lstm_params's refusals are EXTQL_LSTM_* (extql/_entrypoints.py's LSTM_CODES);
# a range or preparation without memory returns -2.
cdef enum:
    LSTM_NO_MEMORY = -2

# The constants are C constants (the library never imports this unit, so a
# Cython global would never be set): sizes below LSTM_MAX_SIZE keep every
# float64 partial sum of a dot product exact; LSTM_ALIGN is the alignment of
# the prepared buffer's parts; LSTM_SG is s_g = 2^24, the gates' scale.
cdef enum:
    LSTM_MAX_SIZE = 4194304
    LSTM_ALIGN = 64

cdef extern from *:
    """
    #define EXTQL_LSTM_SG 16777216.0
    """
    const double LSTM_SG "EXTQL_LSTM_SG"


# ---------------------------------------------------------------------------
# Fixed-point helpers (the page's Notation)

cdef inline int64_t lstm_clamp(int64_t v, int64_t lo, int64_t hi) noexcept nogil:
    return lo if v < lo else (hi if v > hi else v)


cdef inline int64_t lstm_wrap16(int64_t v) noexcept nogil:
    return ((v + 32768) & 0xFFFF) - 32768


cdef inline int64_t lstm_half(int k) noexcept nogil:
    """2^(k-1) as Quark's C int ``1 << (k - 1)``: -2^31 for k = 32, 0 for k = 0."""
    if k == 0:
        return 0
    if k == 32:
        return -2147483648
    return (<int64_t>1) << (k - 1)


cdef inline int64_t lstm_srs_mag(int64_t v, int k) noexcept nogil:
    """sign(v) * ((|v| + 2^(k-1)) >> k), unclamped (an arithmetic shift)."""
    cdef int64_t mag = ((v if v >= 0 else -v) + lstm_half(k)) >> k
    return -mag if v < 0 else mag


cdef inline int64_t lstm_srs(int64_t v, int k) noexcept nogil:
    """srs: round half away from zero, shift right, clamp to int32."""
    return lstm_clamp(lstm_srs_mag(v, k), -2147483648, 2147483647)


cdef inline int64_t lstm_srs16(int64_t v, int k) noexcept nogil:
    """srs16: the same clamped to [-2^16, 2^16 - 1], then wrapped to int16."""
    return lstm_wrap16(lstm_clamp(lstm_srs_mag(v, k), -65536, 65535))


cdef inline int64_t lstm_srs_flat(int64_t v, int k, int64_t half) noexcept nogil:
    """lstm_srs(v, k) with half = lstm_half(k), written without branches (the
    sign as a mask, the clamp as min / max) so that a loop of them
    vectorises; |v| < 2^62 (every value the step gives)."""
    cdef int64_t sg = v >> 63
    cdef int64_t mag = ((((v ^ sg) - sg) + half) >> k)
    mag = (mag ^ sg) - sg
    mag = mag if mag > -2147483648 else -2147483648
    return mag if mag < 2147483647 else 2147483647


cdef inline int64_t lstm_round(double d, int64_t lo, int64_t hi) noexcept nogil:
    """sign(d) * trunc(|d| + 0.5) (the addition in double), clamped to [lo, hi];
    NaN (which the page's formulas never reach) gives 0."""
    cdef double x = fabs(d) + 0.5
    if d < 0:
        x = -x
    if x != x:
        return 0
    if x < <double>lo:
        return lo
    if x > <double>hi:
        return hi
    return <int64_t>x


cdef inline int64_t lstm_round32(double d) noexcept nogil:
    return lstm_round(d, -2147483648, 2147483647)


cdef inline int64_t lstm_round16(double d) noexcept nogil:
    return lstm_wrap16(lstm_round(d, -65536, 65535))


cdef inline double lstm_pow2(int a) noexcept nogil:
    """2^a as Quark's C int ``1 << a`` gives it for a = 31 (-2^31), else exact."""
    if a == 31:
        return -2147483648.0
    return ldexp(1.0, a)


cdef inline int lstm_ceil_log2(double d) noexcept nogil:
    return <int>ceil(log2(d))


cdef inline void lstm_fix(double d, int *q, int *a) noexcept nogil:
    """(q, a): a = 15 - ceil(log2 |d|), q = round16(2^a * d); (0, 0) for d = 0."""
    if d == 0:
        q[0] = 0
        a[0] = 0
        return
    a[0] = 15 - lstm_ceil_log2(fabs(d))
    q[0] = <int>lstm_round16(lstm_pow2(a[0]) * d)


cdef inline int16_t lstm_quantize(float v, float s, int64_t zp) noexcept nogil:
    """clamp(round_half_even(v / s) + zp, 0, 65535) - 32768: ExtendedQuantizeLinear
    uint16 (one float32 division; NaN gives 0, +inf 65535), moved to int16."""
    cdef float r = rint(v / s)
    cdef double t = <double>r + <double>zp
    if t != t or t < 0:
        return -32768
    if t > 65535:
        return 32767
    return <int16_t>(<int64_t>t - 32768)


cdef inline bint lstm_shift_ok(int k, int hi) noexcept nogil:
    return 0 <= k <= hi


# ---------------------------------------------------------------------------
# Entry points: parameters and preparation

cdef public int lstm_params "EXTQL_ISA_FN(extql_lstm_params)"(
        ExtqlLstmParams *p, const float *scales, const int *zero_points,
        int64_t input, int64_t hidden, int dirs, int reverse) noexcept nogil:
    """The node's parameters into p.  scales / zero_points: x, w, r, b, y (the
    zero points as uint16 values, checked by the caller).  Every member is
    filled before the shifts are checked, so that a refusal's message can
    name the value.  Returns 0, or the EXTQL_LSTM_BAD_* code of the first shift
    outside its range (EXTQL_LSTM_BAD_SIZE: an input or hidden size of 2^22 or
    more, where the float64 dot products would no longer be exact)."""
    cdef int i, ax, ah
    cdef double qo
    cdef int ao
    p.input = input
    p.hidden = hidden
    p.dirs = dirs
    p.reverse = reverse
    for i in range(5):
        p.scale[i] = scales[i]
        p.zero_point[i] = zero_points[i]
    p.qxf = <double>(scales[0] * scales[1]) * LSTM_SG
    p.qhf = <double>(scales[4] * scales[2]) * LSTM_SG
    p.qaf = p.qxf * <double>(zero_points[1] - 32768)
    p.qbf = p.qhf * <double>(zero_points[2] - 32768)
    p.xw = lstm_ceil_log2(<double>input) if input > 0 else 0
    p.hr = lstm_ceil_log2(<double>hidden) if hidden > 0 else 0
    lstm_fix(p.qxf, &p.qx, &ax)
    lstm_fix(p.qhf, &p.qh, &ah)
    lstm_fix(p.qaf, &p.qa, &p.xs)
    lstm_fix(p.qbf, &p.qb, &p.hs)
    p.ax = ax
    p.ah = ah
    p.xwq = ax - p.xw
    p.hrq = ah - p.hr
    qo = 1.0 / <double>scales[4]
    ao = 16 - lstm_ceil_log2(qo)
    p.ohs = <int>(lstm_round16(ldexp(1.0, ao) * qo) & 0xFFFF)
    p.ohz = <int>lstm_wrap16(<int64_t>(<double>(zero_points[4] - 32768) + 1e-9))
    p.oh = 24 + ao
    if input < 1 or hidden < 1 or input >= LSTM_MAX_SIZE or hidden >= LSTM_MAX_SIZE:
        return EXTQL_LSTM_BAD_SIZE
    if not lstm_shift_ok(ax, 31):
        return EXTQL_LSTM_BAD_AX
    if not lstm_shift_ok(ah, 31):
        return EXTQL_LSTM_BAD_AH
    if not lstm_shift_ok(p.xwq, 31):
        return EXTQL_LSTM_BAD_XWQ
    if not lstm_shift_ok(p.hrq, 31):
        return EXTQL_LSTM_BAD_HRQ
    if not lstm_shift_ok(p.xs, 31):
        return EXTQL_LSTM_BAD_XS
    if not lstm_shift_ok(p.hs, 31):
        return EXTQL_LSTM_BAD_HS
    if not lstm_shift_ok(p.oh, 32):
        return EXTQL_LSTM_BAD_OH
    return EXTQL_LSTM_OK


cdef inline int64_t lstm_aligned(int64_t n) noexcept nogil:
    return (n + LSTM_ALIGN - 1) // LSTM_ALIGN * LSTM_ALIGN


cdef inline int64_t lstm_pairs(int64_t n) noexcept nogil:
    return (n + 1) // 2


cdef inline int64_t lstm_part_bytes(int64_t n, int64_t G) noexcept nogil:
    """Bytes of one weight's lo or hi part: [pairs(n)][G][2] int16, aligned."""
    return lstm_aligned(lstm_pairs(n) * G * 4)


cdef inline int64_t lstm_dir_bytes(const ExtqlLstmParams *p) noexcept nogil:
    """Bytes of one direction's part of the prepared buffer: W's lo and hi
    parts, R's lo and hi parts (extql_lstm_dots's layout), qc [4H] int32."""
    cdef int64_t G = 4 * p.hidden
    return (2 * lstm_part_bytes(p.input, G) + 2 * lstm_part_bytes(p.hidden, G)
            + lstm_aligned(G * 4))


cdef public int64_t lstm_prepared_size "EXTQL_ISA_FN(extql_lstm_prepared_size)"(
        const ExtqlLstmParams *p) noexcept nogil:
    """Bytes of the buffer extql_lstm_prepare fills (aligned parts; the buffer
    itself needs no alignment beyond int32's)."""
    return p.dirs * lstm_dir_bytes(p)


cdef inline int16_t *lstm_wt(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    """W's lo part (its hi part follows it)."""
    return <int16_t *>(<char *>prep + d * lstm_dir_bytes(p))


cdef inline int16_t *lstm_rt(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    """R's lo part (its hi part follows it)."""
    return <int16_t *>(<char *>prep + d * lstm_dir_bytes(p)
                       + 2 * lstm_part_bytes(p.input, 4 * p.hidden))


cdef inline int32_t *lstm_qc(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    cdef int64_t G = 4 * p.hidden
    return <int32_t *>(<char *>prep + d * lstm_dir_bytes(p)
                       + 2 * lstm_part_bytes(p.input, G) + 2 * lstm_part_bytes(p.hidden, G))


cdef inline int16_t lstm_quantize_flat(float v, float s, double zp) noexcept nogil:
    """lstm_quantize(v, s, zp) written without branches, so that a loop of
    them vectorises: NaN fails both comparisons and gives 0, as t < 0 does."""
    cdef double t = <double>rint(v / s) + zp
    t = t if t > 0.0 else 0.0
    t = t if t < 65535.0 else 65535.0
    return <int16_t>(<int32_t>t - 32768)


cdef int lstm_split_q(const float *src, int16_t *lo, int64_t rows, int64_t cols,
                      float s, int64_t zp, double *sums) noexcept nogil:
    """src [rows, cols] (gates x inputs) quantized into the lo / hi parts of
    extql_lstm_dots's layout (hi at lo + lstm_part_bytes / 2 elements; the
    zero row of an odd size included), and the row sums of the int16 values
    into sums (exact integers).  Returns 0, or -2 without memory."""
    cdef int64_t i, j, at, acc, n = rows * cols, pairs = cols // 2
    cdef int16_t *hi = lo + lstm_part_bytes(cols, rows) // 2
    cdef int16_t *q = <int16_t *>malloc(n * sizeof(int16_t))
    cdef const int16_t *row
    cdef double zd = <double>zp
    cdef int v0, v1
    if q == NULL:
        return LSTM_NO_MEMORY
    for i in range(n):
        q[i] = lstm_quantize_flat(src[i], s, zd)
    for i in range(rows):
        acc = 0
        row = q + i * cols
        for j in range(cols):
            acc = acc + row[j]
        sums[i] = <double>acc
    # Pair by pair, gate by gate: the writes run along the layout (hi = v >> 8,
    # an arithmetic shift, is (v - lo) / 256).
    for j in range(pairs + cols % 2):
        for i in range(rows):
            v0 = q[i * cols + 2 * j]
            v1 = q[i * cols + 2 * j + 1] if j < pairs else 0
            at = (j * rows + i) * 2
            lo[at] = <int16_t>(v0 & 0xFF)
            lo[at + 1] = <int16_t>(v1 & 0xFF)
            hi[at] = <int16_t>(v0 >> 8)
            hi[at + 1] = <int16_t>(v1 >> 8)
    free(q)
    return EXTQL_LSTM_OK


cdef public int lstm_prepare "EXTQL_ISA_FN(extql_lstm_prepare)"(
        const ExtqlLstmParams *p, const float *w, const float *r, const float *b,
        void *prepared) noexcept nogil:
    """W [dirs, 4H, input], R [dirs, 4H, H] and B [dirs, 8H] (NULL: zeros)
    quantized into `prepared` (extql_lstm_prepared_size bytes): per direction
    the int16 weights in extql_lstm_dots's layout and the gate constants qc (the page's
    "Parameters", left to right as written).  Returns 0, or -2 when the row
    sums or the quantized weights find no memory."""
    cdef int64_t H = p.hidden, G = 4 * p.hidden, n_in = p.input, i
    cdef int d
    cdef double *sw
    cdef double *sr
    cdef double t, bsg = <double>p.scale[3] * LSTM_SG
    cdef double xz = <double>(p.zero_point[0] - 32768), yz = <double>(p.zero_point[4] - 32768)
    cdef double bz = <double>(p.zero_point[3] - 32768)
    cdef double bw, br
    cdef int32_t *qc
    sw = <double *>malloc(2 * G * sizeof(double))
    if sw == NULL:
        return LSTM_NO_MEMORY
    sr = sw + G
    for d in range(p.dirs):
        if (lstm_split_q(w + d * G * n_in, lstm_wt(p, prepared, d), G, n_in, p.scale[1],
                         p.zero_point[1], sw)
                or lstm_split_q(r + d * G * H, lstm_rt(p, prepared, d), G, H, p.scale[2],
                                p.zero_point[2], sr)):
            free(sw)
            return LSTM_NO_MEMORY
        qc = lstm_qc(p, prepared, d)
        for i in range(G):
            if b != NULL:
                bw = <double>lstm_quantize(b[d * 2 * G + i], p.scale[3], p.zero_point[3])
                br = <double>lstm_quantize(b[d * 2 * G + G + i], p.scale[3], p.zero_point[3])
            else:
                bw = <double>lstm_quantize(0.0, p.scale[3], p.zero_point[3])
                br = bw
            t = (<double>n_in * p.qaf) * xz
            t = t + (<double>H * p.qbf) * yz
            t = t - (p.qxf * xz) * sw[i]
            t = t - (p.qhf * yz) * sr[i]
            t = t + bsg * ((bw + br) - 2.0 * bz)
            qc[i] = <int32_t>lstm_round32(t)
    free(sw)
    return EXTQL_LSTM_OK


# ---------------------------------------------------------------------------
# One work item: a batch element in one direction, over its whole sequence

cdef extern from *:
    """
    /* acc[i] = sum_j v[j] * w[j][i] for the G gates i over 2 * pairs inputs j
       (v padded to an even length with 0), w given as its parts lo and hi
       (w = 256 hi + lo) in the layout [pair][G][2] (the unit's comment): per
       block of at most EXTQL_LSTM_PAIRS_BLOCK pairs, int32 sums of the lo and
       the hi products (below 2^31: every pair's are below 2^24), added to
       the int64 sums as 256 hi + lo.  Exact integer arithmetic throughout:
       the same sums in any order, so every version gives the same bits.
       s32: scratch of 2 G int32. */
    #define EXTQL_LSTM_PAIRS_BLOCK 128
    #if defined(__AVX512BW__) || defined(__AVX2__)
    #include <immintrin.h>
    #endif
    #include <string.h>
    static inline void extql_lstm_dots(const int16_t *lo, const int16_t *hi,
                                       const int16_t *v, int64_t pairs, int64_t G,
                                       int64_t *acc, int32_t *s32) {
        int32_t *sl = s32, *sh = s32 + G;
        for (int64_t i = 0; i < G; i++) acc[i] = 0;
        for (int64_t p0 = 0; p0 < pairs; p0 += EXTQL_LSTM_PAIRS_BLOCK) {
            int64_t p1 = pairs - p0 < EXTQL_LSTM_PAIRS_BLOCK ? pairs
                                                              : p0 + EXTQL_LSTM_PAIRS_BLOCK;
            int64_t i = 0;
    #if defined(__AVX512BW__)
            for (; i + 64 <= G; i += 64) {
                __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0;
                __m512i h0 = l0, h1 = l0, h2 = l0, h3 = l0;
                for (int64_t p = p0; p < p1; p++) {
                    int32_t xy;
                    memcpy(&xy, v + 2 * p, 4);
                    __m512i b = _mm512_set1_epi32(xy);
                    const int16_t *a = lo + (p * G + i) * 2, *c = hi + (p * G + i) * 2;
                    l0 = _mm512_add_epi32(l0, _mm512_madd_epi16(_mm512_loadu_si512(a), b));
                    l1 = _mm512_add_epi32(l1, _mm512_madd_epi16(_mm512_loadu_si512(a + 32), b));
                    l2 = _mm512_add_epi32(l2, _mm512_madd_epi16(_mm512_loadu_si512(a + 64), b));
                    l3 = _mm512_add_epi32(l3, _mm512_madd_epi16(_mm512_loadu_si512(a + 96), b));
                    h0 = _mm512_add_epi32(h0, _mm512_madd_epi16(_mm512_loadu_si512(c), b));
                    h1 = _mm512_add_epi32(h1, _mm512_madd_epi16(_mm512_loadu_si512(c + 32), b));
                    h2 = _mm512_add_epi32(h2, _mm512_madd_epi16(_mm512_loadu_si512(c + 64), b));
                    h3 = _mm512_add_epi32(h3, _mm512_madd_epi16(_mm512_loadu_si512(c + 96), b));
                }
                _mm512_storeu_si512(sl + i, l0);
                _mm512_storeu_si512(sl + i + 16, l1);
                _mm512_storeu_si512(sl + i + 32, l2);
                _mm512_storeu_si512(sl + i + 48, l3);
                _mm512_storeu_si512(sh + i, h0);
                _mm512_storeu_si512(sh + i + 16, h1);
                _mm512_storeu_si512(sh + i + 32, h2);
                _mm512_storeu_si512(sh + i + 48, h3);
            }
    #elif defined(__AVX2__)
            for (; i + 32 <= G; i += 32) {
                __m256i l0 = _mm256_setzero_si256(), l1 = l0, l2 = l0, l3 = l0;
                __m256i h0 = l0, h1 = l0, h2 = l0, h3 = l0;
                for (int64_t p = p0; p < p1; p++) {
                    int32_t xy;
                    memcpy(&xy, v + 2 * p, 4);
                    __m256i b = _mm256_set1_epi32(xy);
                    const __m256i *a = (const __m256i *)(lo + (p * G + i) * 2);
                    const __m256i *c = (const __m256i *)(hi + (p * G + i) * 2);
                    l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(_mm256_loadu_si256(a), b));
                    l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(_mm256_loadu_si256(a + 1), b));
                    l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(_mm256_loadu_si256(a + 2), b));
                    l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(_mm256_loadu_si256(a + 3), b));
                    h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(_mm256_loadu_si256(c), b));
                    h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(_mm256_loadu_si256(c + 1), b));
                    h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(_mm256_loadu_si256(c + 2), b));
                    h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(_mm256_loadu_si256(c + 3), b));
                }
                _mm256_storeu_si256((__m256i *)(sl + i), l0);
                _mm256_storeu_si256((__m256i *)(sl + i + 8), l1);
                _mm256_storeu_si256((__m256i *)(sl + i + 16), l2);
                _mm256_storeu_si256((__m256i *)(sl + i + 24), l3);
                _mm256_storeu_si256((__m256i *)(sh + i), h0);
                _mm256_storeu_si256((__m256i *)(sh + i + 8), h1);
                _mm256_storeu_si256((__m256i *)(sh + i + 16), h2);
                _mm256_storeu_si256((__m256i *)(sh + i + 24), h3);
            }
    #endif
            for (int64_t k = i; k < G; k++) {
                sl[k] = 0;
                sh[k] = 0;
            }
            for (int64_t p = p0; p < p1; p++) {
                int32_t x0 = v[2 * p], x1 = v[2 * p + 1];
                const int16_t *a = lo + p * G * 2, *c = hi + p * G * 2;
                for (int64_t k = i; k < G; k++) {
                    sl[k] += x0 * a[2 * k] + x1 * a[2 * k + 1];
                    sh[k] += x0 * c[2 * k] + x1 * c[2 * k + 1];
                }
            }
            for (int64_t k = 0; k < G; k++)
                acc[k] += 256 * (int64_t)sh[k] + (int64_t)sl[k];
        }
    }
    """
    void lstm_dots "extql_lstm_dots"(const int16_t *lo, const int16_t *hi, const int16_t *v,
                                     int64_t pairs, int64_t G, int64_t *acc,
                                     int32_t *s32) noexcept nogil


cdef struct LstmScratch:
    int16_t *xv    # x_t's int16 values [2 pairs(input)], the last 0 for an odd size
    int16_t *hv    # h's int16 values [2 pairs(H)], likewise
    int64_t *ax    # Σ_j x_t[j] W[i][j] [4H]
    int64_t *ah    # Σ_j h[j] R[i][j] [4H]
    int32_t *s32   # extql_lstm_dots's scratch [2 4H]
    int32_t *g     # the gate sums [4H]
    int16_t *h     # h [H]
    float *c       # c [H]


cdef inline float lstm_sigmoid(int32_t g) noexcept nogil:
    """float32(double(tanhf(float32(g / (2 s_g)))) * 0.5 + 0.5)."""
    return <float>(<double>tanhf(<float>(<double>g / (2.0 * LSTM_SG))) * 0.5 + 0.5)


cdef void lstm_item(const ExtqlLstmParams *p, const void *prepared, const float *x,
                    float *y, float *y_h, float *y_c, int64_t seq, int64_t batch, int layout,
                    int64_t n, int d, const LstmScratch *s) noexcept nogil:
    cdef int64_t H = p.hidden, G = 4 * p.hidden, n_in = p.input
    cdef int dirs = p.dirs
    cdef bint rev = p.reverse or d == 1
    cdef const int16_t *wt = lstm_wt(p, prepared, d)
    cdef const int16_t *rt = lstm_rt(p, prepared, d)
    cdef const int32_t *qc = lstm_qc(p, prepared, d)
    cdef int64_t w_part = lstm_part_bytes(p.input, 4 * p.hidden) // 2
    cdef int64_t r_part = lstm_part_bytes(p.hidden, 4 * p.hidden) // 2
    cdef int64_t step, t, j, k, sum_x, sum_h, sx, sh, v, hi
    cdef const float *xt
    cdef float *yt
    cdef int16_t q
    cdef float xs_ = p.scale[0], ys = p.scale[4]
    cdef int64_t xzp = p.zero_point[0], yzp = p.zero_point[4]
    cdef int xw = p.xw, xwq = p.xwq, hr = p.hr, hrq = p.hrq, oh = p.oh
    cdef int64_t qx = p.qx, qh = p.qh, ohs = p.ohs
    cdef int64_t ohz_sh = <int64_t>p.ohz * ((<int64_t>1) << oh)
    cdef int64_t h_xw = lstm_half(xw), h_xwq = lstm_half(xwq)
    cdef int64_t h_hr = lstm_half(hr), h_hrq = lstm_half(hrq)
    cdef float vi, vo, vf, vc, ck, hf
    for k in range(H):
        s.h[k] = <int16_t>p.ohz
        s.c[k] = 0.0
    s.xv[2 * lstm_pairs(n_in) - 1] = 0
    s.hv[2 * lstm_pairs(H) - 1] = 0
    for step in range(seq):
        t = seq - 1 - step if rev else step
        xt = x + ((n * seq + t) if layout == 1 else (t * batch + n)) * n_in
        sum_x = 0
        for j in range(n_in):
            q = lstm_quantize(xt[j], xs_, xzp)
            s.xv[j] = q
            sum_x = sum_x + q
        sum_h = 0
        for k in range(H):
            s.hv[k] = s.h[k]
            sum_h = sum_h + s.h[k]
        lstm_dots(wt, wt + w_part, s.xv, lstm_pairs(n_in), G, s.ax, s.s32)
        lstm_dots(rt, rt + r_part, s.hv, lstm_pairs(H), G, s.ah, s.s32)
        sx = lstm_srs(sum_x * p.qa, p.xs)
        sh = lstm_srs(sum_h * p.qb, p.hs)
        for k in range(G):
            v = (lstm_srs_flat(lstm_srs_flat(s.ax[k], xw, h_xw) * qx, xwq, h_xwq)
                 + lstm_srs_flat(lstm_srs_flat(s.ah[k], hr, h_hr) * qh, hrq, h_hrq)
                 - sx - sh + qc[k])
            s.g[k] = <int32_t><uint32_t>v
        for k in range(H):
            vi = lstm_sigmoid(s.g[k])
            vo = lstm_sigmoid(s.g[H + k])
            vf = lstm_sigmoid(s.g[2 * H + k])
            vc = tanhf(<float>(<double>s.g[3 * H + k] / LSTM_SG))
            ck = vi * vc + vf * s.c[k]
            s.c[k] = ck
            hf = vo * tanhf(ck)
            hi = lstm_round32(<double>hf * LSTM_SG)
            s.h[k] = <int16_t>lstm_srs16(hi * ohs + ohz_sh, oh)
        if y != NULL:
            yt = y + (((n * seq + t) * dirs + d) if layout == 1
                      else ((t * dirs + d) * batch + n)) * H
            for k in range(H):
                yt[k] = <float>(<int64_t>s.h[k] + 32768 - yzp) * ys
    if y_h != NULL:
        yt = y_h + ((n * dirs + d) if layout == 1 else (d * batch + n)) * H
        for k in range(H):
            yt[k] = <float>(<int64_t>s.h[k] + 32768 - yzp) * ys
    if y_c != NULL:
        yt = y_c + ((n * dirs + d) if layout == 1 else (d * batch + n)) * H
        for k in range(H):
            yt[k] = s.c[k]


cdef public int64_t lstm_items "EXTQL_ISA_FN(extql_lstm_items)"(
        const ExtqlLstmParams *p, int64_t batch) noexcept nogil:
    """The work items of a call: one per batch element and direction."""
    return batch * p.dirs if batch > 0 else 0


cdef public int lstm_range "EXTQL_ISA_FN(extql_lstm_range)"(
        const ExtqlLstmParams *p, const void *prepared, const float *x, float *y,
        float *y_h, float *y_c, int64_t seq, int64_t batch, int layout, int64_t start,
        int64_t stop) noexcept nogil:
    """Work items [start, stop) (item = n * dirs + d: batch element n,
    direction d) of a call: X (layout 0 [seq, batch, input], 1 [batch, seq,
    input]) into Y ([seq, dirs, batch, H] / [batch, seq, dirs, H]), Y_h and
    Y_c ([dirs, batch, H] / [batch, dirs, H]); any output may be NULL.
    Returns 0, or -2 when the item's scratch finds no memory."""
    cdef int64_t H = p.hidden, G = 4 * p.hidden, item
    cdef LstmScratch s
    cdef char *mem
    if start >= stop:
        return EXTQL_LSTM_OK
    mem = <char *>malloc(2 * G * sizeof(int64_t) + 4 * G * sizeof(int32_t)
                         + H * sizeof(float) + (2 * lstm_pairs(p.input)
                                                + 2 * lstm_pairs(H) + H) * sizeof(int16_t))
    if mem == NULL:
        return LSTM_NO_MEMORY
    s.ax = <int64_t *>mem
    s.ah = s.ax + G
    s.s32 = <int32_t *>(s.ah + G)
    s.g = s.s32 + 2 * G
    s.c = <float *>(s.g + G)
    s.xv = <int16_t *>(s.c + H)
    s.hv = s.xv + 2 * lstm_pairs(p.input)
    s.h = s.hv + 2 * lstm_pairs(H)
    for item in range(start, stop):
        lstm_item(p, prepared, x, y, y_h, y_c, seq, batch, layout, item // p.dirs,
                  <int>(item % p.dirs), &s)
    free(mem)
    return EXTQL_LSTM_OK
