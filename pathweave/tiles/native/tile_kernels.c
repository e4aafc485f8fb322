/* Layer kernels of the tile runtime (see tile_kernels.h). The matrix products go to the sgemm passed
 * in (OpenBLAS, single-threaded: the runtime's workers are the parallelism); everything around them
 * (im2col, epilogues, pooling, element-wise, copies) is plain C that the compiler vectorises. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "tile_kernels.h"
#include "tile_gemm.h"
#include "tile_kernels_seq.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112


/* The activation over n values in place, one loop per kind so that each vectorises (a switch inside
 * the loop made the residual epilogue 4x slower than the GEMM before it). */
int pw_gelu_eager = PW_GELU_POSINF_NAN;

static inline void activate(float *d, int64_t n, int act) {
    switch (act) {
    case PW_ACT_RELU:
        for (int64_t i = 0; i < n; i++) d[i] = ((d[i] > 0.0f) | (d[i] != d[i])) ? d[i] : 0.0f; /* NaN stays */
        break;
    case PW_ACT_GELU: { /* the edges as eager's (pw_gelu_eager); a multiplication by 1 is exact */
        const float posinf = pw_gelu_eager & PW_GELU_POSINF_NAN ? NAN : INFINITY;
        const float pre = pw_gelu_eager & PW_GELU_HALVE_FIRST ? 0.5f : 1.0f, post = 0.5f / pre;
        for (int64_t i = 0; i < n; i++)
            d[i] = d[i] == INFINITY    ? posinf
                   : d[i] == -INFINITY ? NAN
                                       : d[i] * pre * (1.0f + erff(d[i] * 0.70710678118654752f)) * post;
        break;
    }
    case PW_ACT_TANH:
        for (int64_t i = 0; i < n; i++) d[i] = tanhf(d[i]);
        break;
    case PW_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) d[i] = 1.0f / (1.0f + expf(-d[i]));
        break;
    case PW_ACT_NONE:
        break;
    default: /* tile_act.c's; those with parameters come from the element-wise kernel alone */
        pw_act_row(d, n, act, NULL);
    }
}

void pw_activate(float *d, int64_t n, int act) { activate(d, n, act); }

/* ---- convolution ---------------------------------------------------------------------------------- */

/* col[(c * kh + i) * kw + j][p] for output rows [oh0, oh1) and all OW columns of image n, input
 * channels [c0, c0 + cg). */
PW_HOT_FN(static, void, im2col, (const float *x, const int64_t *L, int64_t c0, int64_t cg, int64_t oh0, int64_t oh1, float *col), (x, L, c0, cg, oh0, oh1, col)) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], OW = L[S_OSHAPE + 3];
    const int64_t kh = L[S_KH], kw = L[S_KW], sh = L[S_SH], sw = L[S_SW];
    const int64_t ph = L[S_PH], pw = L[S_PW], dh = L[S_DH], dw = L[S_DW];
    const int64_t P = (oh1 - oh0) * OW;
    for (int64_t c = 0; c < cg; c++) {
        const float *xc = x + (c0 + c) * H * W;
        for (int64_t i = 0; i < kh; i++) {
            for (int64_t j = 0; j < kw; j++) {
                float *row = col + ((c * kh + i) * kw + j) * P;
                for (int64_t oh = oh0; oh < oh1; oh++) {
                    float *dst = row + (oh - oh0) * OW;
                    const int64_t ih = oh * sh - ph + i * dh;
                    if (ih < 0 || ih >= H) {
                        memset(dst, 0, sizeof(float) * OW);
                        continue;
                    }
                    const float *src = xc + ih * W;
                    const int64_t off = j * dw - pw; /* iw = ow * sw + off */
                    if (sw == 1) {
                        int64_t a = off < 0 ? -off : 0;           /* first ow with iw >= 0 */
                        int64_t b = W - off < OW ? W - off : OW;  /* first ow with iw >= W */
                        if (b < a) b = a;
                        if (a > OW) a = OW, b = OW;
                        memset(dst, 0, sizeof(float) * a);
                        memcpy(dst + a, src + a + off, sizeof(float) * (b - a));
                        memset(dst + b, 0, sizeof(float) * (OW - b));
                    } else { /* ow in [a, b) reads inside the row: no test in that loop */
                        int64_t a = off < 0 ? (-off + sw - 1) / sw : 0;
                        int64_t b = W - off > 0 ? (W - off + sw - 1) / sw : 0;
                        b = b < OW ? b : OW, a = a < b ? a : b;
                        for (int64_t ow = 0; ow < a; ow++) dst[ow] = 0.0f;
                        for (int64_t ow = a; ow < b; ow++) dst[ow] = src[ow * sw + off];
                        for (int64_t ow = b; ow < OW; ow++) dst[ow] = 0.0f;
                    }
                }
            }
        }
    }
}

/* out[o][p] += bias[o] (+ residual), then the activation, over channels [o0, o1) and positions
 * [p0, p1) of one image; out and res point at that image, rows of length HW. */
PW_HOT_FN(static, void, epilogue, (float *out, const float *res, const float *bias, int64_t o0, int64_t o1, int64_t p0, int64_t p1, int64_t HW, int act), (out, res, bias, o0, o1, p0, p1, HW, act)) {
    for (int64_t o = o0; o < o1; o++) {
        float *d = out + o * HW + p0;
        const int64_t n = p1 - p0;
        const float b = bias ? bias[o] : 0.0f;
        if (res) {
            const float *r = res + o * HW + p0;
            for (int64_t p = 0; p < n; p++) d[p] += b + r[p];
        } else if (bias) {
            for (int64_t p = 0; p < n; p++) d[p] += b;
        }
        activate(d, n, act);
    }
}

/* A convolution whose groups each read one input channel (depthwise, cg == 1), computed directly:
 * per output row, each tap adds w * (a shifted input row) over the output columns whose input column
 * lies inside the row, so the inner loop has no test (stride 1: contiguous, vectorised). im2col + a
 * 1-row sgemm per channel cost ~9 copies of the input for 2 FLOPs per copied element. */
PW_HOT_FN(static, void, depthwise_rows, (const float *xc, const float *wc, float *oc, const int64_t *L, int64_t oh0, int64_t oh1), (xc, wc, oc, L, oh0, oh1)) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], OW = L[S_OSHAPE + 3];
    const int64_t kh = L[S_KH], kw = L[S_KW], sh = L[S_SH], sw = L[S_SW];
    const int64_t ph = L[S_PH], pw = L[S_PW], dh = L[S_DH], dw = L[S_DW];
    for (int64_t oh = oh0; oh < oh1; oh++) {
        float *d = oc + oh * OW;
        for (int64_t ow = 0; ow < OW; ow++) d[ow] = 0.0f;
        for (int64_t i = 0; i < kh; i++) {
            const int64_t ih = oh * sh - ph + i * dh;
            if (ih < 0 || ih >= H) continue;
            const float *xr = xc + ih * W;
            for (int64_t j = 0; j < kw; j++) {
                const int64_t off = j * dw - pw; /* iw = ow * sw + off */
                int64_t a = off < 0 ? (-off + sw - 1) / sw : 0;
                int64_t b = W - off > 0 ? (W - off + sw - 1) / sw : 0;
                b = b < OW ? b : OW, a = a < b ? a : b;
                const float wt = wc[i * kw + j];
                if (sw == 1)
                    for (int64_t ow = a; ow < b; ow++) d[ow] += wt * xr[ow + off];
                else
                    for (int64_t ow = a; ow < b; ow++) d[ow] += wt * xr[ow * sw + off];
            }
        }
    }
}

/* the input columns some window reads (stride 2 may leave the last one; none where the padding is wider than
 * every window): only those are copied, as the tile graph orders a tile after the writes of those only */
static inline int64_t window_used(int64_t W, int64_t Wp, int64_t pw) {
    return W < Wp - pw ? W : Wp - pw > 0 ? Wp - pw : 0;
}

/* C channels' rows ih0 .. ih0 + rows of an NCHW input copied into rows of Wp floats, `lead` zeros, the
 * `used` input columns, zeros to the row's end; rows outside the input all zeros; channel c at c * plane */
static void pad_rows(const float *xn, int64_t C, int64_t H, int64_t W, int64_t ih0, int64_t rows, int64_t lead,
                     int64_t used, int64_t Wp, int64_t plane, float *xp) {
    for (int64_t ci = 0; ci < C; ci++)
        for (int64_t r = 0; r < rows; r++) {
            float *d = xp + ci * plane + r * Wp;
            const int64_t ih = ih0 + r;
            if (ih < 0 || ih >= H || used <= 0) {
                memset(d, 0, sizeof(float) * Wp);
                continue;
            }
            memset(d, 0, sizeof(float) * lead);
            memcpy(d + lead, xn + (ci * H + ih) * W, sizeof(float) * used);
            memset(d + lead + used, 0, sizeof(float) * (Wp - lead - used));
        }
}

/* term k = (c, i, j) of a window over such a copy at koff[k] = c * plane + i * Wp + j from its position;
 * returns the count C kh kw (the callers pad the table past it) */
static int64_t window_offsets(int64_t C, int64_t kh, int64_t kw, int64_t plane, int64_t Wp, int64_t *koff) {
    int64_t k = 0;
    for (int64_t ci = 0; ci < C; ci++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) koff[k++] = ci * plane + i * Wp + j;
    return k;
}

/* A convolution of stride 1 or 2 without im2col. The tile's input rows are copied once with their zero
 * padding (rows of Wp = W + 2 pw) so that B's row for (c, i, j) is the copy shifted by c * plane + i * Wp
 * + j; a stride-2 convolution without padding reads its input as it lies (ResNet's 1x1 downsampling).
 * Each output row is a run over its window's first row (stride 2: every second position); the
 * kernel's chunks of positions cross from row to row, so no padded column is summed. The copy and the
 * row offsets are kept as an im2col is, for the tiles of other channels over the same rows. */
static void conv_padded(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                        int64_t oh1, int64_t o0, int64_t o1, float *c, const float *bias, const float *res) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3], kh = L[S_KH], kw = L[S_KW];
    const int64_t ph = L[S_PH], pw = L[S_PW], st = L[S_SH], K = C * kh * kw;
    const int copy = ph || pw || st == 1;
    const int64_t Wp = W + 2 * pw, rows = (oh1 - oh0 - 1) * st + kh, plane = copy ? rows * Wp : H * W;
    const int64_t used = window_used(W, (OW - 1) * st + kw, pw);
    float *xp = scratch + PW_SCRATCH_HEADER;
    int64_t *koff = (int64_t *)(xp + (copy ? pw_padded_floats(C, plane) : 0));
    float *t = (float *)(koff + K + PW_KOFF_PAD);
    int64_t *key = (int64_t *)scratch;
    const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, -1, oh0, oh1};
    if (memcmp(key, want, sizeof want)) {
        if (copy) pad_rows(xn, C, H, W, oh0 * st - ph, rows, pw, used, Wp, plane, xp);
        window_offsets(C, kh, kw, plane, Wp, koff);
        for (int64_t k = K; k < K + PW_KOFF_PAD; k++) koff[k] = koff[K - 1]; /* read by the prefetch */
        memcpy(key, want, sizeof want);
    }
    const int64_t out_rows = oh1 - oh0;
    /* a run per output row, read from the copy's rows (stride 1) or every other one (stride 2): the sums
     * are the outputs, in order (products() chunks across rows, so no column of discarded sums) */
    const pw_truns u = {out_rows, OW, st, st * Wp, koff, out_rows, OW, OW};
    pw_gemm_packed_t_runs(o1 - o0, K, in_f(L[S_WPACK]) + (o0 / PW_TR) * K * PW_TR, o0 % PW_TR,
                          copy ? xp : xn + oh0 * st * W, 0, &u, c, OH * OW, bias, res, (int)L[S_ACT], t);
}

/* a 1x1 tile on channel-blocked activations (tile_gemm_b.c): the input, the output and the residual each
 * blocked or NCHW as S_LAYOUT says; an NCHW input is copied into blocks once per worker for the layer's
 * channel tiles over the same rows */
static void conv_blocked(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                         int64_t oh1, int64_t o0, int64_t o1, float *on, const float *rn) {
    const int64_t C = L[S_XSHAPE + 1], XHW = L[S_XSHAPE + 2] * L[S_XSHAPE + 3], XW = L[S_XSHAPE + 3];
    const int64_t HW = L[S_OSHAPE + 2] * L[S_OSHAPE + 3], OW = L[S_OSHAPE + 3], st = L[S_SH];
    const int64_t P = (oh1 - oh0) * OW, K8 = (C + 7) / 8 * 8;
    const int lay = (int)L[S_LAYOUT];
    const float *bias = in_f(L[S_BIAS]);
    /* a squeeze-excitation gate (fuse_scale; stride 1, Python checks): the input's copy scaled by it */
    const float *gate = L[S_SCALE] ? in_f(L[S_SCALE]) + n * C : NULL;
    pw_blocked_io io = {NULL, 0, 1, XW, OW, oh0 * OW, NULL, 0, bias ? bias + o0 : NULL, NULL, 0, lay, 0, NULL, NULL};
    if (lay & PW_BLK_IN && !gate) {
        io.x = st > 1 ? xn : xn + oh0 * OW * 8, io.xs = XHW * 8, io.stride = st;
    } else {
        int64_t *key = (int64_t *)scratch;
        const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, 0, oh0, -2 - oh1};
        float *xb = scratch + PW_SCRATCH_HEADER;
        const int64_t xs = pw_blocked_positions(P) * 8;
        if (memcmp(key, want, sizeof want)) { /* kept for the layer's other channel tiles */
            if (lay & PW_BLK_IN)
                pw_block_scale(C, P, xn + oh0 * OW * 8, XHW * 8, gate, xb);
            else if (st > 1)
                pw_block_input_strided(C, P, xn, XHW, XW, OW, oh0 * OW, st, xb);
            else
                pw_block_input(C, P, xn + oh0 * OW, XHW, xb);
            if (gate && !(lay & PW_BLK_IN)) pw_block_scale(C, P, xb, xs, gate, xb);
            memcpy(key, want, sizeof want);
        }
        io.x = xb, io.xs = xs;
    }
    /* a blocked tensor's channel block o0 / 8 starts at o0 HW, as an NCHW one's channel o0 */
    io.c = on + o0 * HW + oh0 * OW * (lay & PW_BLK_OUT ? 8 : 1), io.cs = lay & PW_BLK_OUT ? HW * 8 : HW;
    if (rn) io.res = rn + o0 * HW + oh0 * OW * (lay & PW_BLK_RES ? 8 : 1), io.rs = lay & PW_BLK_RES ? HW * 8 : HW;
    pw_gemm_blocked(o1 - o0, P, C, in_f(L[S_WPACK]) + o0 * K8, &io, (int)L[S_ACT]);
}

/* A window of fewer than 8 input channels (PW_WINDOW_FOLD: a stem's 3): blocked, its channels would fill 3
 * of 8 lanes; folded, each position's C kh kw terms run as one sum over a zero-padded NCHW copy of the tile's
 * input rows (as conv_padded's), term k read at koff[k] from the position, the terms past C kh kw at a plane
 * of zeros after the copy (their weights are zero, and 0 x inf would be NaN); the output NCHW, or blocked
 * with PW_BLK_OUT */
static void conv_folded(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                        int64_t oh1, int64_t o0, int64_t o1, float *on, const float *rn) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t HW = L[S_OSHAPE + 2] * L[S_OSHAPE + 3], OW = L[S_OSHAPE + 3], st = L[S_SH];
    const int64_t kh = L[S_KH], kw = L[S_KW], ph = L[S_PH], pw = L[S_PW], K = C * kh * kw, K8 = (K + 7) / 8 * 8;
    const int64_t Wp = (OW - 1) * st + kw, rows = (oh1 - oh0 - 1) * st + kh, plane = rows * Wp;
    const int64_t used = window_used(W, Wp, pw);
    int64_t *key = (int64_t *)scratch;
    const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, -4, oh0, oh1};
    float *xp = scratch + PW_SCRATCH_HEADER;
    int64_t *koff = (int64_t *)(xp + pw_padded_floats(C + 1, plane));
    if (memcmp(key, want, sizeof want)) { /* kept for the layer's other channel tiles */
        pad_rows(xn, C, H, W, oh0 * st - ph, rows, pw < Wp ? pw : Wp, used, Wp, plane, xp);
        memset(xp + C * plane, 0, sizeof(float) * plane);
        for (int64_t k = window_offsets(C, kh, kw, plane, Wp, koff); k < K8; k++) koff[k] = C * plane;
        memcpy(key, want, sizeof want);
    }
    const float *bias = in_f(L[S_BIAS]);
    /* the output blocked where S_LAYOUT says (a stem whose readers read blocks, blocked.stem_capable) */
    const int blk = (int)(L[S_LAYOUT] & PW_BLK_OUT), v = blk ? 8 : 1;
    pw_blocked_io io = {xp, 0, st, Wp, OW, 0, on + o0 * HW + oh0 * OW * v, HW * v, bias ? bias + o0 : NULL,
                        rn ? rn + o0 * HW + oh0 * OW : NULL, HW, blk, 0, NULL, NULL, koff};
    pw_gemm_blocked(o1 - o0, (oh1 - oh0) * OW, K, in_f(L[S_WPACK]) + o0 * K8, &io, (int)L[S_ACT]);
}

/* a kh x kw window (stride st both ways) by the same kernel, vectors along the output channels: the tile's
 * input rows copied once per worker into channel blocks of zero-padded rows (pw_block_padded, kept for the
 * layer's other channel tiles over the same rows), each tap a shift of that copy; the output NCHW. The
 * scratch after the copy holds the sums between shares of the input channels (io.part) */
static void conv_window(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                        int64_t oh1, int64_t o0, int64_t o1, float *on, const float *rn) {
    if (L[S_LAYOUT] & PW_WINDOW_FOLD) {
        conv_folded(L, xn, scratch, stamp, n, oh0, oh1, o0, o1, on, rn);
        return;
    }
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t HW = L[S_OSHAPE + 2] * L[S_OSHAPE + 3], OW = L[S_OSHAPE + 3], st = L[S_SH];
    const int64_t kh = L[S_KH], kw = L[S_KW], ph = L[S_PH], pw = L[S_PW], taps = kh * kw;
    const int64_t Wp = (OW - 1) * st + kw, rows = (oh1 - oh0 - 1) * st + kh, C8 = (C + 7) / 8 * 8;
    const int64_t used = window_used(W, Wp, pw);
    int64_t toff[PW_WINDOW_TAPS];
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) toff[i * kw + j] = (i * Wp + j) * 8;
    int64_t *key = (int64_t *)scratch;
    const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, -3, oh0, oh1};
    float *xb = scratch + PW_SCRATCH_HEADER;
    if (memcmp(key, want, sizeof want)) { /* kept for the layer's other channel tiles */
        pw_block_padded(C, H, W, xn, oh0 * st - ph, rows, pw, used, Wp, xb);
        memcpy(key, want, sizeof want);
    }
    const float *bias = in_f(L[S_BIAS]);
    pw_blocked_io io = {xb, rows * Wp * 8, st, Wp, OW, 0, on + o0 * HW + oh0 * OW, HW, bias ? bias + o0 : NULL,
                        rn ? rn + o0 * HW + oh0 * OW : NULL, HW, 0, taps, toff, xb + C8 * rows * Wp};
    pw_gemm_blocked(o1 - o0, (oh1 - oh0) * OW, C, in_f(L[S_WPACK]) + o0 * C8 * taps, &io, (int)L[S_ACT]);
}

static int conv_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch,
                     pw_sgemm_fn sgemm, int64_t stamp) {
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]), *res = in_f(L[S_Y]);
    float *out = out_f(L[S_OUT]);
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t O = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int64_t kh = L[S_KH], kw = L[S_KW], groups = L[S_GROUPS];
    const int64_t cg = C / groups, og = O / groups, K = cg * kh * kw;
    const int64_t oh0 = lo[2], oh1 = hi[2], P = (oh1 - oh0) * OW;
    if (lo[3] != 0 || hi[3] != OW) return 1; /* tiles span whole output rows */
    const int pointwise = (int)L[S_POINTWISE];
    const float *wpack = in_f(L[S_WPACK]);
    const int64_t panels = (og + PW_MR - 1) / PW_MR; /* per group */
    if (cg == 1 && !pointwise && !wpack) { /* depthwise: output channel o reads input channel o / og */
        for (int64_t n = lo[0]; n < hi[0]; n++) {
            float *on = out + n * O * OH * OW;
            for (int64_t o = lo[1]; o < hi[1]; o++)
                depthwise_rows(x + (n * C + o / og) * H * W, w + o * kh * kw, on + o * OH * OW, L, oh0, oh1);
            epilogue(on, res ? res + n * O * OH * OW : NULL, bias, lo[1], hi[1], oh0 * OW, oh1 * OW, OH * OW,
                     (int)L[S_ACT]);
        }
        return 0;
    }
    for (int64_t n = lo[0]; n < hi[0]; n++) {
        const float *xn = x + n * C * H * W;
        float *on = out + n * O * OH * OW;
        const float *rn = res ? res + n * O * OH * OW : NULL;
        for (int64_t g = lo[1] / og; g * og < hi[1]; g++) {
            const int64_t o0 = lo[1] > g * og ? lo[1] : g * og;
            const int64_t o1 = hi[1] < (g + 1) * og ? hi[1] : (g + 1) * og;
            if (wpack && L[S_WPACK_T] == PW_PACK_WINOGRAD) { /* one group (Python checks) */
                pw_conv_winograd(L, xn, scratch, stamp, n, oh0, oh1, o0, o1, on, rn);
                continue;
            }
            if (wpack && L[S_WPACK_T] == PW_PACK_BLOCKED && kh * kw > 1) { /* one group (Python checks) */
                conv_window(L, xn, scratch, stamp, n, oh0, oh1, o0, o1, on, rn);
                continue;
            }
            if (wpack && L[S_WPACK_T] == PW_PACK_BLOCKED) { /* 1x1, one group (Python checks) */
                conv_blocked(L, xn, scratch, stamp, n, oh0, oh1, o0, o1, on, rn);
                continue;
            }
            if (wpack && L[S_WPACK_T] == PW_PACK_PADDED) { /* one group (Python checks) */
                conv_padded(L, xn, scratch, stamp, n, oh0, oh1, o0, o1, on + o0 * OH * OW + oh0 * OW,
                            bias ? bias + o0 : NULL, rn ? rn + o0 * OH * OW + oh0 * OW : NULL);
                continue;
            }
            const float *b;
            int64_t ldb;
            if (pointwise) {
                b = xn + g * cg * H * W + oh0 * W, ldb = H * W;
            } else {
                /* the worker's last im2col is kept: tiles of other channels over the same rows (run one
                 * after another when the runtime goes depth first) reuse it within this inference */
                int64_t *key = (int64_t *)scratch;
                const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, g, oh0, oh1};
                float *col = scratch + PW_SCRATCH_HEADER;
                if (memcmp(key, want, sizeof want)) {
                    im2col(xn, L, g * cg, cg, oh0, oh1, col);
                    memcpy(key, want, sizeof want);
                }
                b = col, ldb = P;
            }
            float *c = on + o0 * OH * OW + oh0 * OW;
            if (wpack && L[S_WPACK_T]) { /* narrow tiles: sums by channel vectors, after the im2col */
                const int64_t r = o0 - g * og, tpanels = (og + PW_TR - 1) / PW_TR;
                if (pointwise) /* the sums go where an im2col of another layer may be kept */
                    memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float));
                pw_gemm_packed_t(o1 - o0, P, K, wpack + (g * tpanels + r / PW_TR) * K * PW_TR, r % PW_TR, b, ldb,
                                 c, OH * OW, bias ? bias + o0 : NULL, rn ? rn + o0 * OH * OW + oh0 * OW : NULL,
                                 (int)L[S_ACT], scratch + PW_SCRATCH_HEADER + (pointwise ? 0 : K * P));
                continue;
            }
            if (wpack) { /* the packed micro-kernels, epilogue included */
                const int64_t r = o0 - g * og; /* row in the group */
                pw_gemm_packed(o1 - o0, P, K, wpack + (g * panels + r / PW_MR) * K * PW_MR, r % PW_MR, b, ldb, c,
                               OH * OW, bias ? bias + o0 : NULL, rn ? rn + o0 * OH * OW + oh0 * OW : NULL,
                               (int)L[S_ACT]);
                continue;
            }
            sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, (int)(o1 - o0), (int)P, (int)K, 1.0f,
                  w + o0 * K, (int)K, b, (int)ldb, 0.0f, c, (int)(OH * OW));
        }
        if (!wpack) epilogue(on, rn, bias, lo[1], hi[1], oh0 * OW, oh1 * OW, OH * OW, (int)L[S_ACT]);
        else if (L[S_ACT] != PW_ACT_NONE && L[S_ACT] != PW_ACT_RELU &&
                 !(L[S_WPACK_T] == PW_PACK_BLOCKED && L[S_ACT] == PW_ACT_RELU6)) { /* the rest after the store */
            const int64_t v = L[S_LAYOUT] & PW_BLK_OUT ? 8 : 1; /* blocked: a plane of HW x 8 per 8 channels */
            epilogue(on, NULL, NULL, lo[1] / v, hi[1] / v, oh0 * OW * v, oh1 * OW * v, OH * OW * v, (int)L[S_ACT]);
        }
    }
    return 0;
}

/* ---- pooling ------------------------------------------------------------------------------------ */

/* the widest padded input row the separable pooling path takes (floats on the worker's stack) */
#define PW_POOL_ROW 4096

/* NaN wins; the bitwise or keeps it branch-free (with || gcc branched, and random data mispredicts) */
static inline float max_nan(float acc, float v) { return ((v > acc) | (v != v)) ? v : acc; }

/* d[ow] = the max or sum of row[sw ow + j] over the kw taps j; inlined, so that a constant stride (2)
 * gets loops the compiler vectorises with shuffles */
__attribute__((always_inline)) static inline void taps(float *restrict d, const float *restrict row, int64_t ow_lo,
                                                       int64_t ow_hi, int64_t kw, int64_t sw, int is_max) {
    for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] = row[ow * sw];
    for (int64_t j = 1; j < kw; j++) {
        const float *r = row + j;
        if (is_max)
            for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] = max_nan(d[ow], r[ow * sw]);
        else
            for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] += r[ow * sw];
    }
}

/* Pooling without dilation, separably: the window's rows are combined element-wise into one padded row
 * (contiguous, vectorised), then each output takes the max or sum of kw neighbours of that row. Padding
 * is -inf for max and 0 for sums, so neither loop branches; the avg divisor is torch's rule. */
PW_HOT_FN(static, void, pool_separable, (const float *xc, float *oc, const int64_t *L, int64_t oh_lo, int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int is_max, float *row), (xc, oc, L, oh_lo, oh_hi, ow_lo, ow_hi, is_max, row)) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], OW = L[S_OSHAPE + 3], RS = L[S_XSTRIDE + 2];
    const int64_t kh = L[S_KH], kw = L[S_KW], sh = L[S_SH], sw = L[S_SW], ph = L[S_PH], pw = L[S_PW];
    const int64_t count_pad = L[S_COUNT_PAD], divisor = L[S_DIVISOR];
    /* padded row positions the tile's outputs read: [q0, span); only the input columns behind them are
     * read (the tile graph's edges cover exactly those; other columns may be another tile's to write) */
    const int64_t q0 = ow_lo * sw, span = (ow_hi - 1) * sw + kw;
    const float fill = is_max ? -INFINITY : 0.0f;
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        const int64_t hs = oh * sh - ph;
        const int64_t h0 = hs > 0 ? hs : 0, h1 = hs + kh < H ? hs + kh : H;
        for (int64_t q = q0; q < span; q++) row[q] = fill;
        float *mid = row + pw; /* mid[iw] is input column iw */
        const int64_t wend = W < span - pw ? W : span - pw;
        const int64_t wbeg = q0 - pw > 0 ? q0 - pw : 0;
        if (h0 < h1) {
            const float *x0 = xc + h0 * RS;
            for (int64_t iw = wbeg; iw < wend; iw++) mid[iw] = x0[iw];
        }
        for (int64_t ih = h0 + 1; ih < h1; ih++) {
            const float *xr = xc + ih * RS;
            if (is_max)
                for (int64_t iw = wbeg; iw < wend; iw++) mid[iw] = max_nan(mid[iw], xr[iw]);
            else
                for (int64_t iw = wbeg; iw < wend; iw++) mid[iw] += xr[iw];
        }
        float *d = oc + oh * OW; /* the window's taps one after another, each over all outputs */
        if (sw == 2)
            taps(d, row, ow_lo, ow_hi, kw, 2, is_max);
        else
            taps(d, row, ow_lo, ow_hi, kw, sw, is_max);
        if (is_max) continue;
        const int64_t he = hs + kh < H + ph ? hs + kh : H + ph;
        for (int64_t ow = ow_lo; ow < ow_hi; ow++) {
            const int64_t ws = ow * sw - pw;
            const float acc = d[ow];
            const int64_t we = ws + kw < W + pw ? ws + kw : W + pw;
            const int64_t w0 = ws > 0 ? ws : 0, w1 = we < W ? we : W;
            const int64_t div = divisor ? divisor
                                        : (count_pad ? (he - hs) * (we - ws) : (h1 - h0) * (w1 - w0));
            d[ow] = acc / (float)div;
        }
    }
}

/* Stride-1 pooling whose output is as wide as its input (kw = 2 pw + 1: GoogLeNet's and Inception's 3x3
 * pools), over whole rows of a contiguous input: the window's rows are combined over a chunk of output
 * rows at once (one long loop per tap: row ih of the input is row ih - i + ph of the chunk), then its
 * columns (one long loop per tap over the flat chunk, the few sums that cross a row edge redone after).
 * The row-by-row separable path ran ~6 loops of 28 floats per output row, mostly in scalar remainders
 * (192 x 28 x 28: 0.28 ms). Max, or avg with one divisor for every output (count_include_pad). The
 * edge columns of 3x3 windows take two taps each, without the general loop's tests (GoogLeNet's
 * 512 x 14 x 14 pools 0.13 -> 0.07 ms). */
#define PW_POOL_CHUNK 8192
PW_HOT_FN(static, void, pool_plane_s1, (const float *xc, float *oc, const int64_t *L, int64_t oh_lo, int64_t oh_hi, int is_max, float div, float *buf), (xc, oc, L, oh_lo, oh_hi, is_max, div, buf)) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], kh = L[S_KH], kw = L[S_KW];
    const int64_t ph = L[S_PH], pw = L[S_PW];
    const float fill = is_max ? -INFINITY : 0.0f;
    const int64_t step = PW_POOL_CHUNK / W > 0 ? PW_POOL_CHUNK / W : 1;
    float *v = buf + 16; /* v[-pw .. n + pw): the window's rows combined, edges filled */
    for (int64_t r0 = oh_lo; r0 < oh_hi; r0 += step) {
        const int64_t r1 = r0 + step < oh_hi ? r0 + step : oh_hi, n = (r1 - r0) * W;
        for (int64_t p = -pw; p < n + pw; p++) v[p] = fill;
        for (int64_t i = 0; i < kh; i++) { /* output rows oh read input row oh - ph + i */
            int64_t a = ph - i > r0 ? ph - i : r0, b = H + ph - i < r1 ? H + ph - i : r1;
            if (a >= b) continue;
            const float *xr = xc + (i - ph) * W;
            if (is_max)
                for (int64_t p = a * W; p < b * W; p++) v[p - r0 * W] = max_nan(v[p - r0 * W], xr[p]);
            else
                for (int64_t p = a * W; p < b * W; p++) v[p - r0 * W] += xr[p];
        }
        float *d = oc + r0 * W;
        for (int64_t p = 0; p < n; p++) d[p] = v[p - pw];
        for (int64_t j = 1; j < kw; j++) {
            if (is_max)
                for (int64_t p = 0; p < n; p++) d[p] = max_nan(d[p], v[p - pw + j]);
            else
                for (int64_t p = 0; p < n; p++) d[p] += v[p - pw + j];
        }
        if (kw == 3 && pw == 1 && W > 1) { /* 3x3 windows: each row's two edge columns read two taps */
            for (int64_t r = 0; r < r1 - r0; r++) {
                const float *vr = v + r * W;
                float *dr = d + r * W;
                dr[0] = is_max ? max_nan(vr[0], vr[1]) : vr[0] + vr[1];
                dr[W - 1] = is_max ? max_nan(vr[W - 2], vr[W - 1]) : vr[W - 2] + vr[W - 1];
            }
        } else {
            for (int64_t r = 0; pw > 0 && r < r1 - r0; r++) /* columns whose window crosses the row's edge */
                for (int64_t ow = 0; ow < W; ow = ow + 1 == pw ? (W - pw > pw ? W - pw : pw) : ow + 1) {
                    float acc = fill;
                    for (int64_t j = 0; j < kw; j++) {
                        const int64_t iw = ow - pw + j;
                        if (iw < 0 || iw >= W) continue;
                        acc = is_max ? max_nan(acc, v[r * W + iw]) : acc + v[r * W + iw];
                    }
                    d[r * W + ow] = acc;
                }
        }
        if (!is_max)
            for (int64_t p = 0; p < n; p++) d[p] /= div;
    }
}

PW_HOT_FN(static, int, pool_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi, int is_max), (L, lo, hi, is_max)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t O = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int64_t kh = L[S_KH], kw = L[S_KW], sh = L[S_SH], sw = L[S_SW];
    const int64_t ph = L[S_PH], pw = L[S_PW], dh = L[S_DH], dw = L[S_DW];
    const int64_t count_pad = L[S_COUNT_PAD], divisor = L[S_DIVISOR];
    const int64_t *xs = L + S_XSTRIDE; /* x may be a view: rows xs[2] apart, columns adjacent */
    const int64_t RS = xs[2];
    if (O != C) return 1;
    const int64_t span = (hi[3] - 1) * sw + kw;
    if (is_max && (kw == 2 || kw == 3) && sh == 2 && sw == 2 && dh == 1 && dw == 1 && xs[3] == 1 &&
        W + 64 < (int64_t)1 << 31) { /* column indices in 32-bit lanes */
        int done = 1;
        for (int64_t n = lo[0]; n < hi[0]; n++)
            for (int64_t c = lo[1]; c < hi[1]; c++) {
                done = !pw_pool_s2_max(x + n * xs[0] + c * xs[1], RS, H, W, out + (n * C + c) * OH * OW, OW,
                                       lo[2], hi[2], lo[3], hi[3], kh, kw, ph, pw);
                if (!done) break;
            }
        if (done) return 0;
    }
    const int64_t div = divisor ? divisor : (count_pad ? kh * kw : 0); /* the avg's one divisor, if one */
    if (kh == 3 && kw == 3 && sh == 1 && sw == 1 && ph == 1 && pw == 1 && dh == 1 && dw == 1 && OW == W &&
        OH == H && xs[3] == 1 && lo[3] == 0 && hi[3] == OW && (is_max || div)) { /* 16 outputs a vector */
        int done = 1;
        for (int64_t n = lo[0]; n < hi[0] && done; n++)
            for (int64_t c = lo[1]; c < hi[1] && done; c++)
                done = !pw_pool3_s1(x + n * xs[0] + c * xs[1], RS, H, W, out + (n * C + c) * OH * OW, lo[2],
                                    hi[2], is_max, (float)div);
        if (done) return 0;
    }
    if (sh == 1 && sw == 1 && dh == 1 && dw == 1 && kw == 2 * pw + 1 && OW == W && OH == H + 2 * ph - kh + 1 &&
        RS == W && xs[3] == 1 && lo[3] == 0 && hi[3] == OW && (is_max || div) && pw < 8 && W <= PW_POOL_CHUNK) {
        float buf[PW_POOL_CHUNK + 48];
        for (int64_t n = lo[0]; n < hi[0]; n++)
            for (int64_t c = lo[1]; c < hi[1]; c++)
                pool_plane_s1(x + n * xs[0] + c * xs[1], out + (n * C + c) * OH * OW, L, lo[2], hi[2], is_max,
                              (float)div, buf);
        return 0;
    }
    if (dh == 1 && dw == 1 && span <= PW_POOL_ROW && pw + W <= PW_POOL_ROW && hi[3] > lo[3]) {
        float row[PW_POOL_ROW + 16];
        for (int64_t n = lo[0]; n < hi[0]; n++)
            for (int64_t c = lo[1]; c < hi[1]; c++)
                pool_separable(x + n * xs[0] + c * xs[1], out + (n * C + c) * OH * OW, L, lo[2], hi[2], lo[3],
                               hi[3], is_max, row);
        return 0;
    }
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++) {
            const float *xc = x + n * xs[0] + c * xs[1];
            float *oc = out + (n * C + c) * OH * OW;
            for (int64_t oh = lo[2]; oh < hi[2]; oh++)
                for (int64_t ow = lo[3]; ow < hi[3]; ow++) {
                    const int64_t hs = oh * sh - ph, ws = ow * sw - pw;
                    float acc;
                    /* taps i in [i0, i1) and j in [j0, j1) fall inside the input */
                    const int64_t i0 = hs >= 0 ? 0 : (-hs + dh - 1) / dh;
                    const int64_t j0 = ws >= 0 ? 0 : (-ws + dw - 1) / dw;
                    int64_t i1 = H - hs > 0 ? (H - hs + dh - 1) / dh : 0;
                    int64_t j1 = W - ws > 0 ? (W - ws + dw - 1) / dw : 0;
                    i1 = i1 < kh ? i1 : kh, j1 = j1 < kw ? j1 : kw;
                    if (is_max) {
                        acc = -INFINITY;
                        for (int64_t i = i0; i < i1; i++) {
                            const float *xr = xc + (hs + i * dh) * RS + ws;
                            for (int64_t j = j0; j < j1; j++) {
                                acc = max_nan(acc, xr[j * dw]);
                            }
                        }
                    } else { /* torch's avg_pool2d divisor rule */
                        int64_t he = hs + kh < H + ph ? hs + kh : H + ph;
                        int64_t we = ws + kw < W + pw ? ws + kw : W + pw;
                        const int64_t pool = (he - hs) * (we - ws);
                        const int64_t h0 = hs > 0 ? hs : 0, w0 = ws > 0 ? ws : 0;
                        he = he < H ? he : H, we = we < W ? we : W;
                        float s = 0.0f;
                        for (int64_t ih = h0; ih < he; ih++)
                            for (int64_t iw = w0; iw < we; iw++) s += xc[ih * RS + iw];
                        const int64_t div = divisor ? divisor : (count_pad ? pool : (he - h0) * (we - w0));
                        acc = s / (float)div;
                    }
                    oc[oh * OW + ow] = acc;
                }
        }
    return 0;
}

/* the epilogue of an avg pool commuted with the 1x1 convolution before it (tiles/commute_pool.py): the
 * convolution's bias per channel (S_BIAS; 0: none), then the activation (S_ACT), over the tile's outputs
 * while they are in cache, in eager's order (pool, + bias, act) */
static void pool_epilogue(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const float *bias = in_f(L[S_BIAS]); /* NULL where 0 */
    const int act = (int)L[S_ACT];
    if (!bias && act == PW_ACT_NONE) return;
    float *out = out_f(L[S_OUT]);
    const int64_t C = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int whole = lo[3] == 0 && hi[3] == OW; /* the tile's rows lie end to end in each plane */
    const int64_t n_rows = whole ? 1 : hi[2] - lo[2], len = whole ? (hi[2] - lo[2]) * OW : hi[3] - lo[3];
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++)
            for (int64_t r = 0; r < n_rows; r++) {
                float *d = out + ((n * C + c) * OH + lo[2] + r) * OW + lo[3];
                if (bias)
                    for (int64_t i = 0; i < len; i++) d[i] += bias[c];
                activate(d, len, act);
            }
}

/* the mean of n contiguous values: PW_POOL_LANES partial sums (one per lane, so that the loop vectorises
 * without reordering a sum), then added pairwise. One running sum per channel was a chain of dependent
 * adds: EfficientNet's squeeze-excitation pools (1152 x 7 x 7) 3x slower than ATen's. */
#define PW_POOL_LANES 16
static inline __attribute__((always_inline)) float plane_mean(const float *x, int64_t n) {
    float acc[PW_POOL_LANES] = {0};
    int64_t i = 0;
    for (; i + PW_POOL_LANES <= n; i += PW_POOL_LANES)
        for (int j = 0; j < PW_POOL_LANES; j++) acc[j] += x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += x[i];
    for (int w = PW_POOL_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0] / (float)n;
}

PW_HOT_FN(static, int, adaptive_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    if (L[S_LAYOUT] & PW_BLK_IN) { /* a blocked input ([C / 8][H][W][8]): global pooling only (Python checks) */
        if (OH != 1 || OW != 1 || C % 8) return 1;
        for (int64_t n = lo[0]; n < hi[0]; n++)
            for (int64_t cb = lo[1] / 8; cb * 8 < hi[1]; cb++) {
                float m[8];
                pw_blocked_mean(x + (n * C + cb * 8) * H * W, H * W, m);
                for (int64_t c = cb * 8 > lo[1] ? cb * 8 : lo[1]; c < cb * 8 + 8 && c < hi[1]; c++)
                    out[n * C + c] = m[c - cb * 8];
            }
        return 0;
    }
    if (OH == 1 && OW == 1) { /* global pooling (squeeze-excitation, classifier heads) */
        for (int64_t n = lo[0]; n < hi[0]; n++)
            for (int64_t c = lo[1]; c < hi[1]; c++) out[n * C + c] = plane_mean(x + (n * C + c) * H * W, H * W);
        return 0;
    }
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++) {
            const float *xc = x + (n * C + c) * H * W;
            for (int64_t oh = lo[2]; oh < hi[2]; oh++) {
                const int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
                for (int64_t ow = lo[3]; ow < hi[3]; ow++) {
                    const int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
                    float s = 0.0f;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) s += xc[ih * W + iw];
                    out[((n * C + c) * OH + oh) * OW + ow] = s / (float)((h1 - h0) * (w1 - w0));
                }
            }
        }
    return 0;
}

/* ---- linear ------------------------------------------------------------------------------------- */

/* out[..., rows, o] = x[..., rows, :] @ w[o, :]^T + bias[o], act. Output dims: the last is the feature,
 * the one before it the rows of one GEMM, the ones before that (up to two) are looped over. */
PW_HOT_FN(static, int, linear_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi, pw_sgemm_fn sgemm), (L, lo, hi, sgemm)) {
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t nd = L[S_GROUPS]; /* rank of the output, 2..4 */
    const int64_t K = L[S_XSHAPE + 0];
    const int64_t *shape = L + S_OSHAPE;
    const int64_t O = shape[nd - 1], R = shape[nd - 2];
    const int r = (int)nd - 2, f = (int)nd - 1;
    const int64_t a_n = nd >= 4 ? shape[1] : 1;
    for (int64_t i0 = nd >= 3 ? lo[0] : 0; i0 < (nd >= 3 ? hi[0] : 1); i0++)
        for (int64_t i1 = nd >= 4 ? lo[1] : 0; i1 < (nd >= 4 ? hi[1] : 1); i1++) {
            const int64_t batch = i0 * a_n + i1; /* index over the looped dims */
            const int64_t row0 = batch * R + lo[r], rows = hi[r] - lo[r];
            float *c = out + row0 * O;
            sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, (int)(hi[f] - lo[f]), (int)K, 1.0f,
                  x + row0 * K, (int)K, w + lo[f] * K, (int)K, 0.0f, c + lo[f], (int)O);
            for (int64_t q = 0; q < rows; q++) {
                float *d = c + q * O + lo[f];
                if (bias)
                    for (int64_t o = 0; o < hi[f] - lo[f]; o++) d[o] += bias[lo[f] + o];
                activate(d, hi[f] - lo[f], (int)L[S_ACT]);
            }
        }
    return 0;
}

/* ---- element-wise and copies ---------------------------------------------------------------------- */

/* The two common layouts get loops of their own that GCC vectorises: x contiguous with y one value for
 * the row (a scalar, or a broadcast y: squeeze-excitation's per-channel scale, softmax's row maximum), and
 * both contiguous; the strided loop ran them 2-5x slower than ATen. */
#define PW_BINARY_LOOP(EXPR)                                                                           \
    if (sx == 1 && (!yr || sy == 0)) {                                                                 \
        const float b = yr ? yr[0] : scalar;                                                           \
        for (int64_t e = 0; e < n; e++) {                                                              \
            const float a = xr[e];                                                                     \
            d[e] = (EXPR);                                                                             \
        }                                                                                              \
    } else if (sx == 1 && sy == 1) {                                                                   \
        for (int64_t e = 0; e < n; e++) {                                                              \
            const float a = xr[e], b = yr[e];                                                          \
            d[e] = (EXPR);                                                                             \
        }                                                                                              \
    } else {                                                                                           \
        for (int64_t e = 0; e < n; e++) {                                                              \
            const float a = xr[e * sx], b = yr ? yr[e * sy] : scalar;                                   \
            d[e] = (EXPR);                                                                             \
        }                                                                                              \
    }

/* act(x op alpha * y) for n values; y a row of a tensor (stride sy, 0 when broadcast) or a scalar */
static void binary_row(float *d, const float *xr, int64_t sx, const float *yr, int64_t sy, float scalar, float alpha,
                       int op, int64_t n) {
    if (yr && alpha != 1.0f) {
        for (int64_t e = 0; e < n; e++) d[e] = alpha * yr[e * sy]; /* scaled y first, then the op */
        yr = d, sy = 1;
    }
    switch (op) {
    case PW_BIN_ADD: PW_BINARY_LOOP(a + b) break;
    case PW_BIN_SUB: PW_BINARY_LOOP(a - b) break;
    case PW_BIN_MUL: PW_BINARY_LOOP(a * b) break;
    case PW_BIN_DIV: PW_BINARY_LOOP(a / b) break;
    case PW_BIN_RSUB: PW_BINARY_LOOP(b - a) break;
    case PW_BIN_MAX: PW_BINARY_LOOP(a != a || b != b ? a + b : (a > b ? a : b)) break;
    case PW_BIN_MIN: PW_BINARY_LOOP(a != a || b != b ? a + b : (a < b ? a : b)) break;
    default:
        for (int64_t e = 0; e < n; e++) d[e] = xr[e * sx];
    }
}

/* An element-wise layer's tile with the output's trailing dims of extent 1 moved to the front, so that
 * its last real dim is dim 3: shapes are padded at the end, and a [rows, cols] tensor (padded to
 * [rows, cols, 1, 1]) ran one value per call (x * 2 over 2048 x 512: 16 ms against eager's 0.1). The
 * output's offsets are unchanged (leading dims of extent 1). */
typedef struct {
    int64_t os[4], xs[4], ys[4];
    int32_t lo[4], hi[4];
} ew_box;

static ew_box ew_align(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    ew_box b;
    int k = 3;
    while (k > 0 && L[S_OSHAPE + k] == 1) k--;
    const int shift = 3 - k;
    for (int d = 0; d < 4; d++) {
        const int s = d - shift;
        b.os[d] = s >= 0 ? L[S_OSHAPE + s] : 1;
        b.xs[d] = s >= 0 ? L[S_XSTRIDE + s] : 0;
        b.ys[d] = s >= 0 ? L[S_YSTRIDE + s] : 0;
        b.lo[d] = s >= 0 ? lo[s] : 0;
        b.hi[d] = s >= 0 ? hi[s] : 1;
    }
    return b;
}

/* Whether the tile's rows along dim 3 are whole and lie back to back in a tensor read with strides st
 * (dim 2 steps over one full row): then the tile's rows of one (dim 0, dim 1) are a single row, and a
 * small feature map (7 x 7) is one loop instead of seven. */
static inline int whole_rows(const ew_box *b, const int64_t *st) {
    return b->lo[3] == 0 && b->hi[3] == b->os[3] && st[2] == st[3] * b->os[3];
}

PW_HOT_FN(static, int, ewise_tile, (const int64_t *L, const int32_t *tlo, const int32_t *thi), (L, tlo, thi)) {
    const ew_box b = ew_align(L, tlo, thi);
    const float *x = in_f(L[S_X]), *y = in_f(L[S_Y]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = b.os, *xs = b.xs, *ys = b.ys;
    const int32_t *lo = b.lo, *hi = b.hi;
    const int op = (int)L[S_BINOP], act = (int)L[S_ACT];
    const float alpha = (float)bits_double(L[S_ALPHA]), scalar = (float)bits_double(L[S_SCALAR]);
    const float params[3] = {(float)bits_double(L[S_ACT_P]), (float)bits_double(L[S_ACT_P + 1]),
                             (float)bits_double(L[S_ACT_P + 2])};
    int64_t n = hi[3] - lo[3], c_end = hi[2];
    if (whole_rows(&b, xs) && (!y || whole_rows(&b, ys))) n *= hi[2] - lo[2], c_end = lo[2] + 1;
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b1 = lo[1]; b1 < hi[1]; b1++)
            for (int64_t c = lo[2]; c < c_end; c++) {
                float *d = out + ((a * os[1] + b1) * os[2] + c) * os[3] + lo[3];
                const float *xr = x + a * xs[0] + b1 * xs[1] + c * xs[2] + lo[3] * xs[3];
                const float *yr = y ? y + a * ys[0] + b1 * ys[1] + c * ys[2] + lo[3] * ys[3] : NULL;
                binary_row(d, xr, xs[3], yr, ys[3], scalar, alpha, op, n);
                if (act >= PW_ACT_SILU)
                    pw_act_row(d, n, act, params);
                else
                    activate(d, n, act);
            }
    return 0;
}

/* act(x * scale + shift): scale at S_Y and shift at S_BIAS, both read with the strides S_YSTRIDE */
PW_HOT_FN(static, int, affine_tile, (const int64_t *L, const int32_t *tlo, const int32_t *thi), (L, tlo, thi)) {
    const ew_box b = ew_align(L, tlo, thi);
    const float *x = in_f(L[S_X]), *scale = in_f(L[S_Y]), *shift = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = b.os, *xs = b.xs, *ys = b.ys;
    const int32_t *lo = b.lo, *hi = b.hi;
    const int64_t sx = xs[3], sy = ys[3];
    int64_t n = hi[3] - lo[3], c_end = hi[2];
    if (whole_rows(&b, xs) && whole_rows(&b, ys)) n *= hi[2] - lo[2], c_end = lo[2] + 1;
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b1 = lo[1]; b1 < hi[1]; b1++)
            for (int64_t c = lo[2]; c < c_end; c++) {
                float *d = out + ((a * os[1] + b1) * os[2] + c) * os[3] + lo[3];
                const float *xr = x + a * xs[0] + b1 * xs[1] + c * xs[2] + lo[3] * sx;
                const int64_t at = a * ys[0] + b1 * ys[1] + c * ys[2] + lo[3] * sy;
                const float *sr = scale + at, *hr = shift + at;
                if (sy == 0) { /* one channel along the row (NCHW): two scalars */
                    const float m = sr[0], k = hr[0];
                    for (int64_t e = 0; e < n; e++) d[e] = xr[e * sx] * m + k;
                } else {
                    for (int64_t e = 0; e < n; e++) d[e] = xr[e * sx] * sr[e * sy] + hr[e * sy];
                }
                activate(d, n, (int)L[S_ACT]);
            }
    return 0;
}

/* out[i] = x[i - before] where that is inside x, else the value (S_SCALAR); `before` per dim in the slots
 * from S_KH (negative: cropping); x read through its strides */
PW_HOT_FN(static, int, pad_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE, *xn = L + S_XSHAPE, *before = L + S_KH;
    const float value = (float)bits_double(L[S_SCALAR]);
    /* the output columns [e0, e1) that read x, clipped to the tile */
    int64_t e0 = before[3] > lo[3] ? before[3] : lo[3], e1 = before[3] + xn[3] < hi[3] ? before[3] + xn[3] : hi[3];
    if (e1 < e0) e0 = e1 = lo[3];
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
            for (int64_t c = lo[2]; c < hi[2]; c++) {
                float *d = out + ((a * os[1] + b) * os[2] + c) * os[3];
                const int64_t ia = a - before[0], ib = b - before[1], ic = c - before[2];
                if (ia < 0 || ia >= xn[0] || ib < 0 || ib >= xn[1] || ic < 0 || ic >= xn[2]) {
                    for (int64_t e = lo[3]; e < hi[3]; e++) d[e] = value;
                    continue;
                }
                const float *src = x + ia * xs[0] + ib * xs[1] + ic * xs[2] - before[3] * xs[3];
                for (int64_t e = lo[3]; e < e0; e++) d[e] = value;
                for (int64_t e = e0; e < e1; e++) d[e] = src[e * xs[3]];
                for (int64_t e = e1; e < hi[3]; e++) d[e] = value;
            }
    return 0;
}

/* aux records: (address, offset along dim S_GROUPS, size along it, stride0..3) per input */
PW_HOT_FN(static, int, cat_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const int64_t *aux = (const int64_t *)(intptr_t)L[S_AUX];
    float *out = out_f(L[S_OUT]);
    /* tile_fuse's cat_batch_norm_act: act(x * scale[channel] + shift[channel]) on the way, channel = dim 1 */
    const float *bn_scale = in_f(L[S_Y]), *bn_shift = in_f(L[S_BIAS]);
    const int act = (int)L[S_ACT];
    const int64_t *os = L + S_OSHAPE;
    const int64_t dim = L[S_GROUPS];
    for (int64_t k = 0; k < L[S_NAUX]; k++) {
        const int64_t *rec = aux + 7 * k;
        const float *src = in_f(rec[0]);
        const int64_t off = rec[1], size = rec[2], *st = rec + 3;
        int64_t l[4] = {lo[0], lo[1], lo[2], lo[3]}, h[4] = {hi[0], hi[1], hi[2], hi[3]};
        if (l[dim] < off) l[dim] = off;
        if (h[dim] > off + size) h[dim] = off + size;
        if (l[dim] >= h[dim]) continue;
        int64_t shift[4] = {0, 0, 0, 0};
        shift[dim] = off;
        /* whole rows of a source whose rows follow each other: the tile's rows of one (a, b) are one run
         * (DenseNet's concatenations of 7x7 to 56x56 maps: one call per row cost more than the copy) */
        const int runs = dim < 2 && st[3] == 1 && st[2] == os[3] && l[3] == 0 && h[3] == os[3];
        const int64_t c_end = runs ? l[2] + 1 : h[2], e_end = runs ? (h[2] - l[2]) * os[3] : h[3];
        const int unit = st[3] == 1 && dim != 3; /* a row's columns adjacent in the source */
        for (int64_t a = l[0]; a < h[0]; a++)
            for (int64_t b = l[1]; b < h[1]; b++)
                for (int64_t c = l[2]; c < c_end; c++) {
                    float *d = out + ((a * os[1] + b) * os[2] + c) * os[3];
                    const float *s = src + (a - shift[0]) * st[0] + (b - shift[1]) * st[1] + (c - shift[2]) * st[2];
                    if (bn_scale) {
                        const float m = bn_scale[b], k = bn_shift[b];
                        if (unit)
                            for (int64_t e = l[3]; e < e_end; e++) d[e] = s[e] * m + k;
                        else
                            for (int64_t e = l[3]; e < e_end; e++) d[e] = s[(e - shift[3]) * st[3]] * m + k;
                        activate(d + l[3], e_end - l[3], act);
                    } else if (unit) {
                        memcpy(d + l[3], s + l[3], sizeof(float) * (e_end - l[3]));
                    } else {
                        for (int64_t e = l[3]; e < e_end; e++) d[e] = s[(e - shift[3]) * st[3]];
                    }
                }
    }
    return 0;
}

static int dispatch(const int64_t *layer, const int32_t *lo, const int32_t *hi, float *scratch,
                    pw_sgemm_fn sgemm, int64_t stamp) {
    switch (layer[S_OP]) {
    case PW_K_CONV: return sgemm ? conv_tile(layer, lo, hi, scratch, sgemm, stamp) : 2;
    case PW_K_MAXPOOL: return pool_tile(layer, lo, hi, 1);
    case PW_K_AVGPOOL: {
        const int rc = pool_tile(layer, lo, hi, 0);
        if (!rc) pool_epilogue(layer, lo, hi);
        return rc;
    }
    case PW_K_ADAPTIVE: return adaptive_tile(layer, lo, hi);
    case PW_K_LINEAR: return sgemm ? linear_tile(layer, lo, hi, sgemm) : 2;
    case PW_K_EWISE: return ewise_tile(layer, lo, hi);
    case PW_K_CAT: return cat_tile(layer, lo, hi);
    case PW_K_AFFINE: return affine_tile(layer, lo, hi);
    case PW_K_PAD: return pad_tile(layer, lo, hi);
    case PW_K_EMBEDDING: return pw_embedding_tile(layer, lo, hi);
    case PW_K_LAYERNORM: return pw_layernorm_tile(layer, lo, hi);
    case PW_K_SOFTMAX: return pw_softmax_tile(layer, lo, hi);
    case PW_K_MAP: return pw_map_tile(layer, lo, hi);
    case PW_K_MATMUL: return sgemm ? pw_matmul_tile(layer, lo, hi, scratch, sgemm, stamp) : 2;
    case PW_K_WHERE: return pw_where_tile(layer, lo, hi);
    case PW_K_CONVERT: return pw_convert_tile(layer, lo, hi);
    case PW_K_COPY: return pw_copy_tile(layer, lo, hi);
    case PW_K_DEPTHWISE: return pw_depthwise_tile(layer, lo, hi, scratch);
    case PW_K_DWPW: return pw_dwpw_tile(layer, lo, hi, scratch);
    case PW_K_NEAREST: case PW_K_BILINEAR: case PW_K_SHUFFLE: return pw_resize_tile(layer, lo, hi);
    case PW_K_REDUCE ... PW_K_COMPARE: return pw_reduce_tile(layer, lo, hi);
    default: return 1;
    }
}

static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int pw_tile_kernel(const int64_t *layer, const int32_t *lo, const int32_t *hi, float *scratch,
                   pw_sgemm_fn sgemm, int64_t stamp) {
    int64_t *profile = (int64_t *)(intptr_t)layer[S_PROFILE];
    if (!profile) return dispatch(layer, lo, hi, scratch, sgemm, stamp);
    if (profile[2]) { /* hot: the tile once untimed (its data now in cache), its kept copies dropped */
        const int rc = dispatch(layer, lo, hi, scratch, sgemm, stamp);
        if (rc) return rc;
        memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float));
        __atomic_fetch_add(&profile[3], 1, __ATOMIC_RELAXED);
    }
    const int64_t t0 = now_ns();
    const int rc = dispatch(layer, lo, hi, scratch, sgemm, stamp);
    __atomic_fetch_add(&profile[0], now_ns() - t0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&profile[1], 1, __ATOMIC_RELAXED);
    return rc;
}
