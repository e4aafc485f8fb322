/* Transformer kernels of the tile runtime (see tile_kernels_seq.h). Each computes one tile: a box of a
 * layer's float32 output, taken as rows along the last dim. Inputs are read through strides (views of
 * other layers' buffers); reductions (layer norm, softmax) read whole rows and write the box's part.
 * Matrix products go to the sgemm passed in, with leading dimensions and transposes instead of copies
 * wherever the strides allow. The hot loops (GELU, e^x, row sums) avoid libm calls and keep sums in 8
 * lanes, so that GCC vectorises them without -ffast-math. */
#if defined(__GNUC__) && !defined(__clang__)
/* nothing here (tile_math.h included) uses floating-point traps; without them GCC if-converts the
 * clamps and vectorises */
#pragma GCC optimize("no-trapping-math")
#endif

#include "tile_kernels_seq.h"

#include "tile_gemm.h"
#include "tile_math.h"

#include <math.h>
#include <string.h>

/* the loops over rows come compiled for AVX2 + FMA and AVX-512 too (PW_HOT_FN, tile_kernels.h: GELU and
 * e^x 2.2x faster with AVX2 than with the SSE2 baseline on this AMD EPYC) */

#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112
/* accumulators of the row loops: one AVX-512 vector (softmax over 4x4x256x256 on one worker 0.70 -> 0.52 ms
 * with 8; the same at AVX2) */
#define LANES 16


/* The tile's box and the output's shape, padded at the front to 4 dims (dim 3 is the last). */
typedef struct {
    int64_t l[4], h[4], os[4];
} box4;

static box4 front_box(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    box4 b;
    const int pad = 4 - (int)L[SQ_RANK];
    for (int d = 0; d < 4; d++) {
        const int s = d - pad;
        b.l[d] = s >= 0 ? lo[s] : 0;
        b.h[d] = s >= 0 ? hi[s] : 1;
        b.os[d] = s >= 0 ? L[S_OSHAPE + s] : 1;
    }
    return b;
}

/* element offset of (i0, i1, i2, i3) in the contiguous output */
static inline int64_t out_at(const box4 *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return ((i0 * b->os[1] + i1) * b->os[2] + i2) * b->os[3] + i3;
}

static inline int64_t at(const int64_t *s, int64_t i0, int64_t i1, int64_t i2) {
    return i0 * s[0] + i1 * s[1] + i2 * s[2];
}

/* ---- maths (exp_approx, erf_approx: tile_math.h) ------------------------------------------------ */

/* GELU's tanh form as x * sigmoid(2u) (the same function: 0.5 (1 + tanh u) = sigmoid(2u)); -inf gives
 * NaN as torch's 0.5 x (1 + tanh u) does (-inf * 0), where the clamped e^x would give -inf */
static inline float gelu_tanh(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    /* below u = -9.5 float's tanh u is -1, so eager's 1 + tanh u is 0 and the answer -0; x / (1 + e^-2u)
     * with e^x clamped at e^88 gave -1.8 at x = -3e38 */
    return x == -INFINITY ? NAN : u < -9.5f ? x * 0.0f : x / (1.0f + exp_approx(-2.0f * u));
}

PW_HOT_FN(static, void, act_row, (float *d, int64_t n, int act), (d, n, act)) {
    switch (act) {
    case PW_ACT_RELU:
        for (int64_t i = 0; i < n; i++) d[i] = d[i] > 0.0f || d[i] != d[i] ? d[i] : 0.0f; /* NaN stays */
        break;
    case PW_ACT_GELU: { /* the edges as eager's (pw_gelu_eager, tile_kernels.h); a multiplication by 1 is exact */
        const float posinf = pw_gelu_eager & PW_GELU_POSINF_NAN ? NAN : INFINITY;
        const float pre = pw_gelu_eager & PW_GELU_HALVE_FIRST ? 0.5f : 1.0f, post = 0.5f / pre;
        for (int64_t i = 0; i < n; i++) {
            const float y = d[i] * pre * (1.0f + erf_approx(d[i] * 0.70710678118654752f)) * post;
            d[i] = d[i] == INFINITY ? posinf : d[i] == -INFINITY ? NAN : y;
        }
        break;
    }
    case PW_ACT_TANH:
        for (int64_t i = 0; i < n; i++) d[i] = tanhf(d[i]);
        break;
    case PW_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; i++) d[i] = gelu_tanh(d[i]);
        break;
    case PW_ACT_NONE:
        break;
    default: /* tile_act.c's (a fused linear's epilogue) */
        pw_act_row(d, n, act, NULL);
    }
}

PW_HOT_FN(static, float, sum_row, (const float *x, int64_t n), (x, n)) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += x[i];
    for (int j = 0; j < LANES; j++) s += acc[j];
    return s;
}

/* sum of (x - mean)^2 */
PW_HOT_FN(static, float, sq_dev_row, (const float *x, int64_t n, float mean), (x, n, mean)) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += (x[i + j] - mean) * (x[i + j] - mean);
    float s = 0.0f;
    for (; i < n; i++) s += (x[i] - mean) * (x[i] - mean);
    for (int j = 0; j < LANES; j++) s += acc[j];
    return s;
}

/* the largest value (a NaN in the row needs no care: e^(NaN - m) makes the sum, so the whole row, NaN,
 * as torch gives) */
PW_HOT_FN(static, float, max_row, (const float *x, int64_t n), (x, n)) {
    float acc[LANES];
    int64_t i = 0;
    float m = -INFINITY;
    for (int j = 0; j < LANES; j++) acc[j] = -INFINITY;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int j = 0; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    return m;
}

/* d[i] = e^(x[i] - m); returns their sum */
PW_HOT_FN(static, float, exp_row, (float *d, const float *x, int64_t n, float m), (d, x, n, m)) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            d[i + j] = exp_approx(x[i + j] - m);
            acc[j] += d[i + j];
        }
    float s = 0.0f;
    for (; i < n; i++) {
        d[i] = exp_approx(x[i] - m);
        s += d[i];
    }
    for (int j = 0; j < LANES; j++) s += acc[j];
    return s;
}

/* a row of x (stride sx) into a contiguous buffer */
static void gather_row(float *d, const float *x, int64_t sx, int64_t n) {
    if (sx == 1) {
        memcpy(d, x, sizeof(float) * n);
    } else {
        for (int64_t i = 0; i < n; i++) d[i] = x[i * sx];
    }
}

/* ---- embedding ------------------------------------------------------------------------------------ */

/* out[..., :] = table[indices[...], :]; indices (int64 or int32) are read at S_XSTRIDE over the output's
 * dims (dim 3 is the feature: stride 0). An index outside the table fails the tile (torch raises). */
int pw_embedding_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const box4 b = front_box(L, lo, hi);
    const float *table = in_f(L[S_W]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, rows = L[SQ_ROWS], width = b.os[3], n = b.h[3] - b.l[3];
    const int wide = L[SQ_DTYPE] == PW_DT_I64;
    const int64_t *ids64 = (const int64_t *)(intptr_t)L[S_X];
    const int32_t *ids32 = (const int32_t *)(intptr_t)L[S_X];
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                const int64_t k = at(xs, i0, i1, i2);
                const int64_t row = wide ? ids64[k] : ids32[k];
                if (row < 0 || row >= rows) return 3;
                memcpy(out + out_at(&b, i0, i1, i2, b.l[3]), table + row * width + b.l[3], sizeof(float) * n);
            }
    return 0;
}

/* ---- layer norm and softmax over the last dim ----------------------------------------------------- */

/* (x - mean) / sqrt(var + eps) * weight + bias over the last dim, statistics of the whole row in two
 * passes; x at S_XSTRIDE, weight (S_W) and bias (S_BIAS) optional, eps at S_SCALAR. */
PW_HOT_FN(, int, pw_layernorm_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const box4 b = front_box(L, lo, hi);
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, D = b.os[3], j0 = b.l[3], j1 = b.h[3];
    const float eps = (float)bits_double(L[S_SCALAR]);
    if (xs[3] != 1 && D > 1) return 1; /* Python gives the last dim unit stride */
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                const float *xr = x + at(xs, i0, i1, i2);
                float *d = out + out_at(&b, i0, i1, i2, 0);
                const float mean = sum_row(xr, D) / (float)D;
                const float var = sq_dev_row(xr, D, mean) / (float)D;
                /* a variance past float's range: PyTorch's moments give NaN for the row, not 0 */
                const float rstd = isinf(var) ? NAN : 1.0f / sqrtf(var + eps);
                if (w && bias) {
                    for (int64_t j = j0; j < j1; j++) d[j] = (xr[j] - mean) * rstd * w[j] + bias[j];
                } else {
                    for (int64_t j = j0; j < j1; j++)
                        d[j] = (xr[j] - mean) * rstd * (w ? w[j] : 1.0f) + (bias ? bias[j] : 0.0f);
                }
            }
    return 0;
}

/* softmax over the last dim; x at S_XSTRIDE. A tile spanning whole rows of unit stride computes each e^x
 * once, in place; otherwise the row's max and sum are computed whole and the box's part written. */
PW_HOT_FN(, int, pw_softmax_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const box4 b = front_box(L, lo, hi);
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, D = b.os[3], j0 = b.l[3], j1 = b.h[3];
    const int whole = j0 == 0 && j1 == D && (xs[3] == 1 || D == 1);
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                const float *xr = x + at(xs, i0, i1, i2);
                float *d = out + out_at(&b, i0, i1, i2, 0);
                if (whole) {
                    const float inv = 1.0f / exp_row(d, xr, D, max_row(xr, D));
                    for (int64_t j = 0; j < D; j++) d[j] *= inv;
                    continue;
                }
                const int64_t sx = xs[3];
                float m = -INFINITY, s = 0.0f;
                for (int64_t j = 0; j < D; j++) m = xr[j * sx] > m ? xr[j * sx] : m; /* a NaN: see max_row */
                for (int64_t j = 0; j < D; j++) s += exp_approx(xr[j * sx] - m);
                for (int64_t j = j0; j < j1; j++) d[j] = exp_approx(xr[j * sx] - m) / s;
            }
    return 0;
}

/* ---- element-wise --------------------------------------------------------------------------------- */

/* out = act(x), x at S_XSTRIDE (broadcast where 0), the activation at S_ACT */
int pw_map_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const box4 b = front_box(L, lo, hi);
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, n = b.h[3] - b.l[3];
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                float *d = out + out_at(&b, i0, i1, i2, b.l[3]);
                gather_row(d, x + at(xs, i0, i1, i2) + b.l[3] * xs[3], xs[3], n);
                act_row(d, n, (int)L[S_ACT]);
            }
    return 0;
}

/* out = cond ? x : y; cond (bool bytes) at SQ_Z / SQ_ZSTRIDE, x and y tensors (S_X, S_Y) or scalars
 * (S_SCALAR, SQ_YSCALAR) where their address is 0 */
int pw_where_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const box4 b = front_box(L, lo, hi);
    const uint8_t *c = (const uint8_t *)(intptr_t)L[SQ_Z];
    const float *x = in_f(L[S_X]), *y = in_f(L[S_Y]);
    float *out = out_f(L[S_OUT]);
    const int64_t *cs = L + SQ_ZSTRIDE, *xs = L + S_XSTRIDE, *ys = L + S_YSTRIDE;
    const float xv = (float)bits_double(L[S_SCALAR]), yv = (float)bits_double(L[SQ_YSCALAR]);
    if (L[SQ_DTYPE] != PW_DT_U8) return 1;
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                float *d = out + out_at(&b, i0, i1, i2, 0);
                const uint8_t *cr = c + at(cs, i0, i1, i2);
                const float *xr = x ? x + at(xs, i0, i1, i2) : NULL, *yr = y ? y + at(ys, i0, i1, i2) : NULL;
                for (int64_t j = b.l[3]; j < b.h[3]; j++) {
                    const float a = xr ? xr[j * xs[3]] : xv, e = yr ? yr[j * ys[3]] : yv;
                    d[j] = cr[j * cs[3]] ? a : e;
                }
            }
    return 0;
}

/* out = (float)x for x of type SQ_DTYPE at S_XSTRIDE */
int pw_convert_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const box4 b = front_box(L, lo, hi);
    const void *x = (const void *)(intptr_t)L[S_X];
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE;
    const int64_t dtype = L[SQ_DTYPE];
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                float *d = out + out_at(&b, i0, i1, i2, 0);
                const int64_t k = at(xs, i0, i1, i2);
                for (int64_t j = b.l[3]; j < b.h[3]; j++) {
                    const int64_t e = k + j * xs[3];
                    switch (dtype) {
                    case PW_DT_F32: d[j] = ((const float *)x)[e]; break;
                    case PW_DT_I64: d[j] = (float)((const int64_t *)x)[e]; break;
                    case PW_DT_I32: d[j] = (float)((const int32_t *)x)[e]; break;
                    case PW_DT_U8: d[j] = (float)((const uint8_t *)x)[e]; break;
                    default: return 1;
                    }
                }
            }
    return 0;
}

/* The copy's walk over x's 6 dims (SQ_XOUTER's 2, then S_XSHAPE's 4): sizes, strides, the position of
 * the current element and its offset. Seeking divides; stepping from one run to the next only carries,
 * which matters where the last dim is short (MobileViT's fold reads runs of 2). */
typedef struct {
    int64_t n[6], s[6], c[6], at;
} copy_walk;

static void copy_seek(copy_walk *w, const int64_t *L, int64_t f) {
    const int64_t *outer = L + SQ_XOUTER, *sh = L + S_XSHAPE, *xs = L + S_XSTRIDE;
    const int64_t n[6] = {outer[0], outer[1], sh[0], sh[1], sh[2], sh[3]};
    const int64_t s[6] = {outer[2], outer[3], xs[0], xs[1], xs[2], xs[3]};
    w->at = 0;
    for (int k = 5; k >= 0; k--) {
        w->n[k] = n[k] > 1 ? n[k] : 1; /* a row written without the outer dims holds 0 there */
        w->s[k] = s[k];
        w->c[k] = f % w->n[k];
        f /= w->n[k];
        w->at += w->c[k] * s[k];
    }
}

/* from the end of a run of the last dim to the start of the next */
static void copy_next_run(copy_walk *w) {
    w->at -= w->c[5] * w->s[5];
    w->c[5] = 0;
    for (int k = 4; k >= 0; k--) {
        w->at += w->s[k];
        if (++w->c[k] < w->n[k]) return;
        w->at -= w->n[k] * w->s[k];
        w->c[k] = 0;
    }
}

/* A reshape that cannot view its input: the output, contiguous, holds the input's elements in row-major
 * order of the input's shape (SQ_XOUTER's 2 dims, then S_XSHAPE's 4, front-padded) read at its strides
 * (SQ_XOUTER's, then S_XSTRIDE). Runs along the input's last dim are copied at once. */
int pw_copy_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const box4 b = front_box(L, lo, hi);
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    copy_walk w;
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++)
            for (int64_t i2 = b.l[2]; i2 < b.h[2]; i2++) {
                int64_t f = out_at(&b, i0, i1, i2, b.l[3]);
                const int64_t end = f + b.h[3] - b.l[3];
                copy_seek(&w, L, f);
                for (;;) {
                    const int64_t left = w.n[5] - w.c[5];
                    const int64_t run = left < end - f ? left : end - f;
                    gather_row(out + f, x + w.at, w.s[5], run);
                    f += run;
                    if (f >= end) break;
                    copy_next_run(&w);
                }
            }
    return 0;
}

/* ---- matrix products ------------------------------------------------------------------------------ */

/* One operand's pointer and leading dimension for sgemm: a [rows, cols] block at p with strides
 * (sr, sc); packed into buf when its layout is PW_GEMM_PACK. Returns the CBLAS transpose flag. */
static int operand(int64_t layout, const float **p, int64_t sr, int64_t sc, int64_t rows, int64_t cols,
                   float *buf, int *ld) {
    if (layout == PW_GEMM_ROWS) {
        *ld = (int)sr;
        return CBLAS_NO_TRANS;
    }
    if (layout == PW_GEMM_TRANS) {
        *ld = (int)sc;
        return CBLAS_TRANS;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) buf[r * cols + c] = (*p)[r * sr + c * sc];
    *p = buf;
    *ld = (int)(cols > 0 ? cols : 1);
    return CBLAS_NO_TRANS;
}

/* out[b, m, n] = alpha * sum_k A[b, m, k] B[b, k, n] + beta * Z[b, m, n] + bias[n], then the activation.
 * Batch dims (0 and 1 after front padding) are looped over; A (S_X) has strides [b0, b1, m, k] at
 * S_XSTRIDE, B (S_Y) [b0, b1, k, n] at S_YSTRIDE, Z (SQ_Z, optional) [b0, b1, m, n] at SQ_ZSTRIDE; zero
 * strides broadcast. An operand that sgemm cannot read in place is packed into the scratch (after the
 * header; the conv kernel's cached im2col is then marked stale). */
/* rows x K of a (strides sr, sc) into panels of PW_MR rows, k-major, zero rows past the end */
PW_HOT_FN(static, void, pack_panels, (const float *a, int64_t sr, int64_t sc, int64_t rows, int64_t K, float *pa), (a, sr, sc, rows, K, pa)) {
    for (int64_t r0 = 0; r0 < rows; r0 += PW_MR) {
        float *panel = pa + r0 * K;
        const int64_t n = rows - r0 < PW_MR ? rows - r0 : PW_MR;
        for (int64_t k = 0; k < K; k++) {
            float *d = panel + k * PW_MR;
            for (int64_t i = 0; i < n; i++) d[i] = a[(r0 + i) * sr + k * sc];
            for (int64_t i = n; i < PW_MR; i++) d[i] = 0.0f;
        }
    }
}

/* A product with a constant B (a linear's weight), laid out at build time as one block of K contiguous
 * rows per column piece of the layer's grid: the tile's rows of A are packed into panels and the
 * micro-kernels of tile_gemm.c stream B in order (OpenBLAS packs both operands on every call). The added
 * term, bias and activation follow as in the sgemm path. */
static int matmul_packed(const int64_t *L, const box4 *b, float *scratch, int64_t stamp) {
    const float *x = in_f(L[S_X]), *bp = in_f(L[S_WPACK]), *z = in_f(L[SQ_Z]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, *zs = L + SQ_ZSTRIDE;
    const int64_t K = L[SQ_K], rows = b->h[2] - b->l[2], cols = b->h[3] - b->l[3], N = b->os[3];
    const float beta = (float)bits_double(L[SQ_YSCALAR]);
    float *pa = scratch + PW_SCRATCH_HEADER;
    const int multi = b->h[0] - b->l[0] > 1 || b->h[1] - b->l[1] > 1;
    for (int64_t i0 = b->l[0]; i0 < b->h[0]; i0++)
        for (int64_t i1 = b->l[1]; i1 < b->h[1]; i1++) {
            const float *a = x + i0 * xs[0] + i1 * xs[1] + b->l[2] * xs[2];
            float *c = out + out_at(b, i0, i1, b->l[2], b->l[3]);
            if (L[S_WPACK_T]) { /* B in panels of PW_TR columns, A read in place (bind_transformer) */
                pw_gemm_rows(rows, cols, K, a, xs[2], bp + K * b->l[3], c, N);
            } else {
                /* the worker's last packed A is kept, as conv_tile keeps its im2col: the next tile over
                 * the same rows (another piece of the columns) skips the packing; the key shares the
                 * header */
                int64_t *key = (int64_t *)scratch;
                const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, i0, i1, b->l[2], b->h[2]};
                if (multi || memcmp(key, want, sizeof want)) {
                    pack_panels(a, xs[2], xs[3], rows, K, pa);
                    memcpy(key, want, sizeof want);
                }
                /* B's columns [l3, h3): one block of K rows of `cols` floats (bind_transformer._pack_b) */
                pw_gemm_packed(rows, cols, K, pa, 0, bp + K * b->l[3], cols, c, N, NULL, NULL, PW_ACT_NONE);
            }
            const float *zr = z ? z + i0 * zs[0] + i1 * zs[1] + b->l[2] * zs[2] + b->l[3] * zs[3] : NULL;
            for (int64_t r = 0; r < rows; r++) {
                float *d = c + r * N;
                if (zr)
                    for (int64_t j = 0; j < cols; j++) d[j] += beta * zr[r * zs[2] + j * zs[3]];
                if (bias)
                    for (int64_t j = 0; j < cols; j++) d[j] += bias[b->l[3] + j];
                act_row(d, cols, (int)L[S_ACT]);
            }
        }
    return 0;
}

int pw_matmul_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch, pw_sgemm_fn sgemm,
                   int64_t stamp) {
    const box4 b = front_box(L, lo, hi);
    if (L[S_WPACK]) return matmul_packed(L, &b, scratch, stamp);
    const float *x = in_f(L[S_X]), *y = in_f(L[S_Y]), *z = in_f(L[SQ_Z]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t *xs = L + S_XSTRIDE, *ys = L + S_YSTRIDE, *zs = L + SQ_ZSTRIDE;
    const int64_t K = L[SQ_K], rows = b.h[2] - b.l[2], cols = b.h[3] - b.l[3], N = b.os[3];
    const float alpha = (float)bits_double(L[S_SCALAR]), beta = (float)bits_double(L[SQ_YSCALAR]);
    float *pack_a = scratch + PW_SCRATCH_HEADER, *pack_b = pack_a + rows * K;
    if (L[SQ_LAYOUT_A] == PW_GEMM_PACK || L[SQ_LAYOUT_B] == PW_GEMM_PACK)
        memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float)); /* no im2col cached any more */
    for (int64_t i0 = b.l[0]; i0 < b.h[0]; i0++)
        for (int64_t i1 = b.l[1]; i1 < b.h[1]; i1++) {
            const float *a = x + i0 * xs[0] + i1 * xs[1] + b.l[2] * xs[2];
            const float *bb = y + i0 * ys[0] + i1 * ys[1] + b.l[3] * ys[3];
            float *c = out + out_at(&b, i0, i1, b.l[2], b.l[3]);
            int lda, ldb;
            const int ta = operand(L[SQ_LAYOUT_A], &a, xs[2], xs[3], rows, K, pack_a, &lda);
            const int tb = operand(L[SQ_LAYOUT_B], &bb, ys[2], ys[3], K, cols, pack_b, &ldb);
            float beta_c = 0.0f;
            if (z) { /* the added term first, then sgemm adds the product to it */
                const float *zr = z + i0 * zs[0] + i1 * zs[1] + b.l[2] * zs[2] + b.l[3] * zs[3];
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = 0; j < cols; j++) c[r * N + j] = beta * zr[r * zs[2] + j * zs[3]];
                beta_c = 1.0f;
            }
            if (K > 0) {
                sgemm(CBLAS_ROW_MAJOR, ta, tb, (int)rows, (int)cols, (int)K, alpha, a, lda, bb, ldb, beta_c,
                      c, (int)N);
            } else if (!z) {
                for (int64_t r = 0; r < rows; r++) memset(c + r * N, 0, sizeof(float) * cols);
            }
            for (int64_t r = 0; r < rows; r++) {
                float *d = c + r * N;
                if (bias)
                    for (int64_t j = 0; j < cols; j++) d[j] += bias[b.l[3] + j];
                act_row(d, cols, (int)L[S_ACT]);
            }
        }
    return 0;
}
