/* Reductions, group norm, roll and comparisons of the tile runtime (slots and codes in tile_kernels.h, rows written by
 * pathweave/tiles/bind_reduce.py). Each call computes one tile: a box of a layer's float32 output, shapes
 * and strides padded at the end to 4 dims as the tile graph pads them. Inputs are read through strides.
 *
 * Sums keep LANES partial sums so that GCC vectorises them without -ffast-math; a maximum or minimum is
 * one blend per value, with a NaN kept once met (eager's amax / amin give NaN for a slice holding one).
 * var and std take two passes (the mean, then the squared deviations), as group norm's statistics do. */
#if defined(__GNUC__) && !defined(__clang__)
/* nothing here uses floating-point traps: without them GCC if-converts the max / min blends and vectorises */
#pragma GCC optimize("no-trapping-math")
#endif

#include "tile_kernels.h"
#include "tile_kernels_seq.h" /* the element types (PW_DT_*) */

#include <math.h>
#include <string.h>

#define LANES 16
/* output values per block of the column-wise reduction (its accumulators live on the stack) */
#define BLOCK 256
/* helpers inlined into each per-level copy of the PW_HOT_FN kernels */
#define PW_INLINE __attribute__((always_inline)) static inline


/* v replaces acc where it is larger (smaller for is_max 0) or NaN; a NaN acc stays */
PW_INLINE float pick(float acc, float v, int is_max) {
    const int better = is_max ? v > acc : v < acc;
    return (better | (v != v)) ? v : acc;
}

/* ---- one run of values (stride s) ---------------------------------------------------------------- */

PW_INLINE float run_sum(const float *x, int64_t n, int64_t s) {
    float acc[LANES] = {0};
    int64_t i = 0;
    if (s == 1)
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
    float t = 0.0f;
    for (; i < n; i++) t += x[i * s];
    for (int j = 0; j < LANES; j++) t += acc[j];
    return t;
}

/* sum of (x - mean)^2 */
PW_INLINE float run_sq_dev(const float *x, int64_t n, int64_t s, float mean) {
    float acc[LANES] = {0};
    int64_t i = 0;
    if (s == 1)
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += (x[i + j] - mean) * (x[i + j] - mean);
    float t = 0.0f;
    for (; i < n; i++) t += (x[i * s] - mean) * (x[i * s] - mean);
    for (int j = 0; j < LANES; j++) t += acc[j];
    return t;
}

/* GCC's vector extensions: one zmm, two ymm or four xmm per vector, by the target clone compiled (the
 * lanes-of-an-array form that the sums use left the max / min blends scalar) */
typedef float vfloat __attribute__((vector_size(64)));
typedef int32_t vint __attribute__((vector_size(64)));
#define VLANES 16

/* the largest (smallest for is_max 0) of n values at stride s, or NaN where one is; acc0 to start from */
PW_INLINE float run_pick(const float *x, int64_t n, int64_t s, float acc0, int is_max) {
    vfloat acc = (vfloat){0} + acc0;
    vint nan = {0};
    int64_t i = 0;
    if (s == 1)
        for (; i + VLANES <= n; i += VLANES) {
            vfloat v;
            memcpy(&v, x + i, sizeof v);
            const vint take = is_max ? v > acc : v < acc;
            acc = (vfloat)((take & (vint)v) | (~take & (vint)acc));
            nan |= v != v;
        }
    float t = acc0;
    for (; i < n; i++) t = pick(t, x[i * s], is_max);
    for (int j = 0; j < VLANES; j++) t = pick(t, nan[j] ? NAN : acc[j], is_max);
    return t;
}

/* ---- reductions ---------------------------------------------------------------------------------- */

/* the reduced dims: sizes n[0..3] and strides s[0..3], the innermost last (SR_RSHAPE, SR_RSTRIDE) */
typedef struct {
    int64_t n[4], s[4], count;
} reduced;

/* what the kind divides the sum by: the count (mean), count - correction at least 0 (var, std), or 1 */
static inline double divisor(int kind, const reduced *r, double correction) {
    if (kind == PW_RED_MEAN) return (double)r->count;
    if (kind == PW_RED_VAR || kind == PW_RED_STD) return fmax(0.0, (double)r->count - correction);
    return 1.0;
}

/* the reduction of the values at base + the reduced dims' offsets into one value */
PW_INLINE float reduce_one(const float *base, const reduced *r, int kind, double correction) {
    const int picks = kind == PW_RED_AMAX || kind == PW_RED_AMIN, is_max = kind == PW_RED_AMAX;
    float m = is_max ? -INFINITY : INFINITY;
    double total = 0.0;
    for (int64_t i0 = 0; i0 < r->n[0]; i0++)
        for (int64_t i1 = 0; i1 < r->n[1]; i1++)
            for (int64_t i2 = 0; i2 < r->n[2]; i2++) {
                const float *p = base + i0 * r->s[0] + i1 * r->s[1] + i2 * r->s[2];
                if (picks)
                    m = pick(m, run_pick(p, r->n[3], r->s[3], m, is_max), is_max);
                else
                    total += run_sum(p, r->n[3], r->s[3]);
            }
    if (picks) return m;
    if (kind == PW_RED_SUM) return (float)total;
    if (kind == PW_RED_MEAN) return (float)(total / (double)r->count);
    const float mean = (float)(total / (double)r->count);
    double dev = 0.0;
    for (int64_t i0 = 0; i0 < r->n[0]; i0++)
        for (int64_t i1 = 0; i1 < r->n[1]; i1++)
            for (int64_t i2 = 0; i2 < r->n[2]; i2++)
                dev += run_sq_dev(base + i0 * r->s[0] + i1 * r->s[1] + i2 * r->s[2], r->n[3], r->s[3], mean);
    const double var = dev / divisor(kind, r, correction);
    return (float)(kind == PW_RED_STD ? sqrt(var) : var);
}

/* acc[e] = pick(acc[e], p[e]) for e in [0, m): a loop GCC turns into compares and blends (with explicit
 * vectors and a run-time is_max it ran ~20x slower: a channel amax of 256 x 56 x 56 took 0.92 ms) */
PW_INLINE void pick_columns(float *restrict acc, const float *restrict p, int64_t m, int is_max) {
    if (is_max)
        for (int64_t e = 0; e < m; e++) acc[e] = (p[e] > acc[e] || p[e] != p[e]) ? p[e] : acc[e];
    else
        for (int64_t e = 0; e < m; e++) acc[e] = (p[e] < acc[e] || p[e] != p[e]) ? p[e] : acc[e];
}

/* d[e] = the reduction at x + e for e in [0, m), m <= BLOCK: the output's values side by side in x (unit
 * stride), each reduced slice added one vector of them at a time (a channel mean of NCHW) */
PW_INLINE void reduce_columns(float *d, const float *x, int64_t m, const reduced *r, int kind, double correction) {
    const int picks = kind == PW_RED_AMAX || kind == PW_RED_AMIN, is_max = kind == PW_RED_AMAX;
    const int var = kind == PW_RED_VAR || kind == PW_RED_STD;
    float acc[BLOCK], mean[BLOCK];
    for (int64_t e = 0; e < m; e++) acc[e] = picks ? (is_max ? -INFINITY : INFINITY) : 0.0f;
    for (int64_t i0 = 0; i0 < r->n[0]; i0++)
        for (int64_t i1 = 0; i1 < r->n[1]; i1++)
            for (int64_t i2 = 0; i2 < r->n[2]; i2++)
                for (int64_t i3 = 0; i3 < r->n[3]; i3++) {
                    const float *p = x + i0 * r->s[0] + i1 * r->s[1] + i2 * r->s[2] + i3 * r->s[3];
                    if (picks)
                        pick_columns(acc, p, m, is_max);
                    else
                        for (int64_t e = 0; e < m; e++) acc[e] += p[e];
                }
    if (!var) {
        const float div = (float)divisor(kind, r, correction);
        for (int64_t e = 0; e < m; e++) d[e] = kind == PW_RED_MEAN ? acc[e] / div : acc[e];
        return;
    }
    for (int64_t e = 0; e < m; e++) mean[e] = acc[e] / (float)r->count, acc[e] = 0.0f;
    for (int64_t i0 = 0; i0 < r->n[0]; i0++)
        for (int64_t i1 = 0; i1 < r->n[1]; i1++)
            for (int64_t i2 = 0; i2 < r->n[2]; i2++)
                for (int64_t i3 = 0; i3 < r->n[3]; i3++) {
                    const float *p = x + i0 * r->s[0] + i1 * r->s[1] + i2 * r->s[2] + i3 * r->s[3];
                    for (int64_t e = 0; e < m; e++) acc[e] += (p[e] - mean[e]) * (p[e] - mean[e]);
                }
    const double div = divisor(kind, r, correction);
    for (int64_t e = 0; e < m; e++) {
        const double v = (double)acc[e] / div;
        d[e] = (float)(kind == PW_RED_STD ? sqrt(v) : v);
    }
}

/* the tile's outputs of one kind (a constant where inlined: each kind's loops compile on their own) */
PW_INLINE void reduce_box(const int64_t *L, const int32_t *lo, const int32_t *hi, const reduced *r, int kind,
                          double correction) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE;
    /* the output's last dim steps through x one by one while the reduced values do not: reduce whole
     * vectors of outputs; otherwise one output at a time over runs of the innermost reduced dim */
    const int columns = xs[3] == 1 && r->s[3] != 1 && hi[3] - lo[3] > 1;
    /* whole output rows that lie back to back in x too (a channel mean of NCHW): the tile's rows of one
     * (a, b) are one run of outputs */
    const int runs = columns && lo[3] == 0 && hi[3] == os[3] && xs[2] == os[3];
    const int64_t c_end = runs ? lo[2] + 1 : hi[2], e_end = runs ? (hi[2] - lo[2]) * os[3] : hi[3];
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
            for (int64_t c = lo[2]; c < c_end; c++) {
                float *d = out + ((a * os[1] + b) * os[2] + c) * os[3];
                const float *xr = x + a * xs[0] + b * xs[1] + c * xs[2];
                if (columns) {
                    for (int64_t e = lo[3]; e < e_end; e += BLOCK) {
                        const int64_t m = e_end - e < BLOCK ? e_end - e : BLOCK;
                        reduce_columns(d + e, xr + e, m, r, kind, correction);
                    }
                } else {
                    for (int64_t e = lo[3]; e < hi[3]; e++) d[e] = reduce_one(xr + e * xs[3], r, kind, correction);
                }
            }
}

/* out = the reduction (SR_KIND) of x over the dims SR_RSHAPE / SR_RSTRIDE, x's other dims read at the
 * strides S_XSTRIDE over the output's; the correction of var and std at S_SCALAR */
PW_HOT_FN(static, int, reduce_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const double correction = bits_double(L[S_SCALAR]);
    reduced r = {.count = 1};
    for (int k = 0; k < 4; k++) r.n[k] = L[SR_RSHAPE + k], r.s[k] = L[SR_RSTRIDE + k], r.count *= r.n[k];
    switch (L[SR_KIND]) {
    case PW_RED_SUM: reduce_box(L, lo, hi, &r, PW_RED_SUM, correction); return 0;
    case PW_RED_MEAN: reduce_box(L, lo, hi, &r, PW_RED_MEAN, correction); return 0;
    case PW_RED_AMAX: reduce_box(L, lo, hi, &r, PW_RED_AMAX, correction); return 0;
    case PW_RED_AMIN: reduce_box(L, lo, hi, &r, PW_RED_AMIN, correction); return 0;
    case PW_RED_VAR: reduce_box(L, lo, hi, &r, PW_RED_VAR, correction); return 0;
    case PW_RED_STD: reduce_box(L, lo, hi, &r, PW_RED_STD, correction); return 0;
    default: return 1;
    }
}

/* ---- group norm ---------------------------------------------------------------------------------- */

/* mean and 1 / sqrt(var + eps) of channels [c0, c1) of one image (x at image n), all positions */
PW_INLINE void group_moments(const float *xn, const int64_t *xs, const int64_t *os, int64_t c0, int64_t c1,
                             float eps, float *mean, float *rstd) {
    const int64_t H = os[2], W = os[3], count = (c1 - c0) * H * W;
    /* channels whose positions lie back to back (contiguous NCHW): one run per group */
    const int flat = xs[3] == 1 && xs[2] == W && xs[1] == H * W;
    const int64_t rows = flat ? 1 : H, run = flat ? count : W, channels = flat ? 1 : c1 - c0;
    double total = 0.0, dev = 0.0;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t h = 0; h < rows; h++) total += run_sum(xn + (c0 + c) * xs[1] + h * xs[2], run, xs[3]);
    const float m = (float)(total / (double)count);
    for (int64_t c = 0; c < channels; c++)
        for (int64_t h = 0; h < rows; h++) dev += run_sq_dev(xn + (c0 + c) * xs[1] + h * xs[2], run, xs[3], m);
    const float var = (float)(dev / (double)count);
    *mean = m;
    *rstd = 1.0f / sqrtf(var + eps);
}

/* x * (rstd * weight[c]) + (bias[c] - mean * rstd * weight[c]) per channel c, the statistics of c's
 * group (SR_GROUPS groups along dim 1) computed over the whole group; weight (S_W), bias (S_BIAS) optional,
 * eps at S_SCALAR. A tile holding part of a group computes its statistics whole too. */
PW_HOT_FN(static, int, group_norm_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE, groups = L[SR_GROUPS];
    const float eps = (float)bits_double(L[S_SCALAR]);
    if (groups < 1 || os[1] % groups) return 1;
    const int64_t per = os[1] / groups;
    for (int64_t n = lo[0]; n < hi[0]; n++) {
        const float *xn = x + n * xs[0];
        for (int64_t g = lo[1] / per; g * per < hi[1]; g++) {
            float mean, rstd;
            group_moments(xn, xs, os, g * per, (g + 1) * per, eps, &mean, &rstd);
            const int64_t c0 = g * per > lo[1] ? g * per : lo[1], c1 = (g + 1) * per < hi[1] ? (g + 1) * per : hi[1];
            for (int64_t c = c0; c < c1; c++) {
                const float scale = rstd * (w ? w[c] : 1.0f), shift = (bias ? bias[c] : 0.0f) - mean * scale;
                for (int64_t h = lo[2]; h < hi[2]; h++) {
                    float *d = out + ((n * os[1] + c) * os[2] + h) * os[3];
                    const float *xr = xn + c * xs[1] + h * xs[2];
                    if (xs[3] == 1)
                        for (int64_t e = lo[3]; e < hi[3]; e++) d[e] = xr[e] * scale + shift;
                    else
                        for (int64_t e = lo[3]; e < hi[3]; e++) d[e] = xr[e * xs[3]] * scale + shift;
                }
            }
        }
    }
    return 0;
}

/* ---- roll ---------------------------------------------------------------------------------------- */

/* i - shift wrapped into [0, n) for i in [0, n), shift in [0, n) */
static inline int64_t back(int64_t i, int64_t shift, int64_t n) { return i >= shift ? i - shift : i - shift + n; }

/* out[i] = x[(i - shift) mod n] along each dim (shifts at SR_RSTRIDE, in [0, n)); along the last dim
 * the box's part is at most two runs of x */
PW_HOT_FN(static, int, roll_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE, *sh = L + SR_RSTRIDE;
    const int64_t W = os[3], s3 = sh[3];
    for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
            for (int64_t c = lo[2]; c < hi[2]; c++) {
                float *d = out + ((a * os[1] + b) * os[2] + c) * os[3];
                const float *xr = x + back(a, sh[0], os[0]) * xs[0] + back(b, sh[1], os[1]) * xs[1] +
                                  back(c, sh[2], os[2]) * xs[2];
                /* outputs [lo3, split) read x from column lo3 - s3 + W, those from split on from column - s3 */
                const int64_t split = s3 < lo[3] ? lo[3] : (s3 > hi[3] ? hi[3] : s3);
                if (xs[3] == 1) {
                    memcpy(d + lo[3], xr + lo[3] - s3 + W, sizeof(float) * (split - lo[3]));
                    memcpy(d + split, xr + split - s3, sizeof(float) * (hi[3] - split));
                } else {
                    for (int64_t e = lo[3]; e < split; e++) d[e] = xr[(e - s3 + W) * xs[3]];
                    for (int64_t e = split; e < hi[3]; e++) d[e] = xr[(e - s3) * xs[3]];
                }
            }
    return 0;
}

/* ---- comparisons and logic ------------------------------------------------------------------------ */

/* d[e] = EXPR of a = x[e] and b = y[e] (or the number yv where yr is NULL) over n values (x and y of the caller's type): one
 * loop per op, so that each vectorises */
#define PW_COMPARE_LOOP(EXPR)                                                                              \
    if (!yr && sx == 1) { /* a number: the loops without y vectorise */                                   \
        for (int64_t e = 0; e < n; e++) {                                                                  \
            const float a = (float)xr[e], b = yv;                                                          \
            d[e] = (EXPR);                                                                                 \
            (void)b; /* logical_not reads x only */                                                        \
        }                                                                                                  \
    } else if (yr && sx == 1 && sy == 1) {                                                                 \
        for (int64_t e = 0; e < n; e++) {                                                                  \
            const float a = (float)xr[e], b = (float)yr[e];                                                \
            d[e] = (EXPR);                                                                                 \
            (void)b; /* logical_not reads x only */                                                        \
        }                                                                                                  \
    } else {                                                                                               \
        for (int64_t e = 0; e < n; e++) {                                                                  \
            const float a = (float)xr[e * sx], b = yr ? (float)yr[e * sy] : yv;                            \
            d[e] = (EXPR);                                                                                 \
            (void)b; /* logical_not reads x only */                                                        \
        }                                                                                                  \
    }                                                                                                      \
    break;

#define PW_COMPARE_ROW                                                                                     \
    switch (op) {                                                                                          \
    case PW_CMP_EQ: PW_COMPARE_LOOP(a == b)                                                             \
    case PW_CMP_NE: PW_COMPARE_LOOP(a != b)                                                             \
    case PW_CMP_LT: PW_COMPARE_LOOP(a < b)                                                              \
    case PW_CMP_LE: PW_COMPARE_LOOP(a <= b)                                                             \
    case PW_CMP_GT: PW_COMPARE_LOOP(a > b)                                                              \
    case PW_CMP_GE: PW_COMPARE_LOOP(a >= b)                                                             \
    case PW_CMP_AND: PW_COMPARE_LOOP((a != 0.0f) & (b != 0.0f))                                         \
    case PW_CMP_OR: PW_COMPARE_LOOP((a != 0.0f) | (b != 0.0f))                                          \
    default: PW_COMPARE_LOOP(a == 0.0f)                                                                    \
    }

PW_INLINE void compare_f32(uint8_t *d, const float *xr, int64_t sx, const float *yr, int64_t sy, float yv, int op,
                           int64_t n) {
    PW_COMPARE_ROW
}

PW_INLINE void compare_u8(uint8_t *d, const uint8_t *xr, int64_t sx, const uint8_t *yr, int64_t sy, float yv,
                          int op, int64_t n) {
    PW_COMPARE_ROW
}

/* out (bool bytes) = x op y (SR_KIND: PW_CMP_*), x and y of the element type SR_DTYPE at the strides
 * S_XSTRIDE and S_YSTRIDE over the output's dims (0 where they broadcast); y a number (S_SCALAR) where
 * S_Y is 0 */
PW_HOT_FN(static, int, compare_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    uint8_t *out = (uint8_t *)(intptr_t)L[S_OUT];
    const int op = (int)L[SR_KIND], u8 = L[SR_DTYPE] == PW_DT_U8, size = u8 ? 1 : 4;
    const float yv = (float)bits_double(L[S_SCALAR]);
    const char *x = (const char *)(intptr_t)L[S_X], *y = (const char *)(intptr_t)L[S_Y];
    if (op < PW_CMP_EQ || op > PW_CMP_NOT || (!u8 && L[SR_DTYPE] != PW_DT_F32)) return 1;
    /* the tensor's last dim of size > 1 moved to dim 3 (the padding's dims of size 1 to the front), so
     * that the inner loop runs along it: a 2-D tensor padded at the end had rows of one value */
    int shift = 0;
    while (shift < 3 && L[S_OSHAPE + 3 - shift] == 1) shift++;
    int64_t l[4], h[4], os[4], xs[4], ys[4];
    for (int d = 0; d < 4; d++) {
        const int k = d - shift, real = k >= 0;
        l[d] = real ? lo[k] : 0, h[d] = real ? hi[k] : 1, os[d] = real ? L[S_OSHAPE + k] : 1;
        xs[d] = real ? L[S_XSTRIDE + k] : 0, ys[d] = real ? L[S_YSTRIDE + k] : 0;
    }
    const int64_t n = h[3] - l[3];
    for (int64_t a = l[0]; a < h[0]; a++)
        for (int64_t b = l[1]; b < h[1]; b++)
            for (int64_t c = l[2]; c < h[2]; c++) {
                uint8_t *d = out + ((a * os[1] + b) * os[2] + c) * os[3] + l[3];
                const char *xr = x + size * (a * xs[0] + b * xs[1] + c * xs[2] + l[3] * xs[3]);
                const char *yr = y ? y + size * (a * ys[0] + b * ys[1] + c * ys[2] + l[3] * ys[3]) : NULL;
                if (u8)
                    compare_u8(d, (const uint8_t *)xr, xs[3], (const uint8_t *)yr, ys[3], yv, op, n);
                else
                    compare_f32(d, (const float *)xr, xs[3], (const float *)yr, ys[3], yv, op, n);
            }
    return 0;
}

int pw_reduce_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    switch (L[S_OP]) {
    case PW_K_REDUCE: return reduce_tile(L, lo, hi);
    case PW_K_GROUPNORM: return group_norm_tile(L, lo, hi);
    case PW_K_ROLL: return roll_tile(L, lo, hi);
    case PW_K_COMPARE: return compare_tile(L, lo, hi);
    default: return 1;
    }
}
