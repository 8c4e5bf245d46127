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
#   direction the int16 weights transposed to [input, 4H] and [H, 4H] (so
#   that a step's dot products run along contiguous rows of 4H gates, one
#   multiply-add per gate and weight, which vectorises) and the gate
#   constants qc;
# * lstm_range: work items [start, stop), an item being one batch element in
#   one direction, each run over its whole sequence on its own (the batch-1
#   case), so that a thread pool splits a call between threads.
#
# The dot products run in float64 lanes: a product of two int16 values is
# below 2^30 in magnitude and a sum of fewer than 2^22 of them is below 2^52,
# so every partial sum is an exact integer whatever the order (lstm_params
# refuses an input or hidden size of 2^22 or more).  The gates call the C
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


cdef inline int64_t lstm_dir_bytes(const ExtqlLstmParams *p) noexcept nogil:
    """Bytes of one direction's part of the prepared buffer: Wt [input][4H] and
    Rt [H][4H] int16, qc [4H] int32, each aligned."""
    cdef int64_t G = 4 * p.hidden
    return (lstm_aligned(p.input * G * 2) + lstm_aligned(p.hidden * G * 2)
            + lstm_aligned(G * 4))


cdef public int64_t lstm_prepared_size "EXTQL_ISA_FN(extql_lstm_prepared_size)"(
        const ExtqlLstmParams *p) noexcept nogil:
    """Bytes of the buffer extql_lstm_prepare fills (aligned parts; the buffer
    itself needs no alignment beyond int32's)."""
    return p.dirs * lstm_dir_bytes(p)


cdef inline int16_t *lstm_wt(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    return <int16_t *>(<char *>prep + d * lstm_dir_bytes(p))


cdef inline int16_t *lstm_rt(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    return <int16_t *>(<char *>prep + d * lstm_dir_bytes(p)
                       + lstm_aligned(p.input * 4 * p.hidden * 2))


cdef inline int32_t *lstm_qc(const ExtqlLstmParams *p, const void *prep, int d) noexcept nogil:
    cdef int64_t G = 4 * p.hidden
    return <int32_t *>(<char *>prep + d * lstm_dir_bytes(p)
                       + lstm_aligned(p.input * G * 2) + lstm_aligned(p.hidden * G * 2))


cdef void lstm_transpose_q(const float *src, int16_t *dst, int64_t rows, int64_t cols,
                           float s, int64_t zp, double *sums) noexcept nogil:
    """src [rows, cols] quantized into dst [cols, rows] (int16 values), and the
    row sums of the int16 values (in double, in index order) into sums."""
    cdef int64_t i, j
    cdef int16_t q
    cdef double acc
    for i in range(rows):
        acc = 0.0
        for j in range(cols):
            q = lstm_quantize(src[i * cols + j], s, zp)
            dst[j * rows + i] = q
            acc = acc + <double>q
        sums[i] = acc


cdef public int lstm_prepare "EXTQL_ISA_FN(extql_lstm_prepare)"(
        const ExtqlLstmParams *p, const float *w, const float *r, const float *b,
        void *prepared) noexcept nogil:
    """W [dirs, 4H, input], R [dirs, 4H, H] and B [dirs, 8H] (NULL: zeros)
    quantized into `prepared` (extql_lstm_prepared_size bytes): per direction
    the transposed int16 weights and the gate constants qc (the page's
    "Parameters", left to right as written).  Returns 0, or -2 when the row
    sums find no memory."""
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
        lstm_transpose_q(w + d * G * n_in, lstm_wt(p, prepared, d), G, n_in, p.scale[1],
                         p.zero_point[1], sw)
        lstm_transpose_q(r + d * G * H, lstm_rt(p, prepared, d), G, H, p.scale[2],
                         p.zero_point[2], sr)
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

cdef struct LstmScratch:
    double *xd     # x_t's int16 values [input]
    double *hd     # h's int16 values [H]
    double *ax     # Σ_j x_t[j] W[i][j] [4H]
    double *ah     # Σ_j h[j] R[i][j] [4H]
    int32_t *g     # the gate sums [4H]
    int16_t *h     # h [H]
    float *c       # c [H]


cdef inline void lstm_dots(const int16_t *wt, const double *v, int64_t n, int64_t G,
                           double *acc) noexcept nogil:
    """acc[i] = Σ_j v[j] * wt[j][i] over the n rows of wt [n][G] (exact)."""
    cdef int64_t i, j
    cdef double vj
    cdef const int16_t *row
    for i in range(G):
        acc[i] = 0.0
    for j in range(n):
        vj = v[j]
        if vj == 0.0:
            continue
        row = wt + j * G
        for i in range(G):
            acc[i] = acc[i] + vj * <double>row[i]


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
    cdef int64_t step, t, j, k, sum_x, sum_h, sx, sh, v, hi
    cdef const float *xt
    cdef float *yt
    cdef int16_t q
    cdef float xs_ = p.scale[0], ys = p.scale[4]
    cdef int64_t xzp = p.zero_point[0], yzp = p.zero_point[4]
    cdef int xw = p.xw, xwq = p.xwq, hr = p.hr, hrq = p.hrq, oh = p.oh
    cdef int64_t qx = p.qx, qh = p.qh, ohs = p.ohs
    cdef int64_t ohz_sh = <int64_t>p.ohz * ((<int64_t>1) << oh)
    cdef float vi, vo, vf, vc, ck, hf
    for k in range(H):
        s.h[k] = <int16_t>p.ohz
        s.c[k] = 0.0
    for step in range(seq):
        t = seq - 1 - step if rev else step
        xt = x + ((n * seq + t) if layout == 1 else (t * batch + n)) * n_in
        sum_x = 0
        for j in range(n_in):
            q = lstm_quantize(xt[j], xs_, xzp)
            s.xd[j] = <double>q
            sum_x = sum_x + q
        sum_h = 0
        for k in range(H):
            s.hd[k] = <double>s.h[k]
            sum_h = sum_h + s.h[k]
        lstm_dots(wt, s.xd, n_in, G, s.ax)
        lstm_dots(rt, s.hd, H, G, s.ah)
        sx = lstm_srs(sum_x * p.qa, p.xs)
        sh = lstm_srs(sum_h * p.qb, p.hs)
        for k in range(G):
            v = (lstm_srs(lstm_srs(<int64_t>s.ax[k], xw) * qx, xwq)
                 + lstm_srs(lstm_srs(<int64_t>s.ah[k], hr) * qh, hrq) - sx - sh + qc[k])
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
    mem = <char *>malloc((p.input + H + 2 * G) * sizeof(double) + G * sizeof(int32_t)
                         + H * sizeof(float) + H * sizeof(int16_t))
    if mem == NULL:
        return LSTM_NO_MEMORY
    s.xd = <double *>mem
    s.hd = s.xd + p.input
    s.ax = s.hd + H
    s.ah = s.ax + G
    s.g = <int32_t *>(s.ah + G)
    s.c = <float *>(s.g + G)
    s.h = <int16_t *>(s.c + H)
    for item in range(start, stop):
        lstm_item(p, prepared, x, y, y_h, y_c, seq, batch, layout, item // p.dirs,
                  <int>(item % p.dirs), &s)
    free(mem)
    return EXTQL_LSTM_OK
