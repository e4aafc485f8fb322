/* Depthwise convolution tiles (PW_K_DEPTHWISE): each output channel o reads input channel o / (O / C) alone
 * (groups == C), any window, stride, dilation and padding (MobileNet's, EfficientNet's and NASNet's
 * 3x3, 5x5 and 7x7 layers).
 *
 * tile_kernels.c's depthwise_rows ran one short loop per tap and output row (384 x 14 x 14, 3x3: ~2.7k
 * loops of 14 floats, most of their time in loop overhead; ~1 ms per layer against ATen's 0.1). Here the
 * tile's input rows of one channel are copied once into a zero-padded buffer, its columns split by phase
 * (column q of the padded row goes to phase q % stride, position q / stride), so that every tap of every
 * stride reads PW_VW adjacent outputs' inputs with one unaligned load and no test. Outputs are computed
 * PW_DW_ROWS rows at a time, one accumulator each, so that the taps' multiply-adds of different rows
 * overlap (one chain of 9 dependent FMAs per vector left the FMA units idle). Bias, residual, ReLU and
 * ReLU6 are applied in the store, other activations over the channel's rows right after (in cache).
 * One source for AVX-512 and AVX2 (tile_simd.h); a scalar path where neither runs (PATHWEAVE_ISA=generic).
 */
#ifndef PW_VW /* the file's body; the vector kernels are at its end */
#include <string.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

/* output rows per block (independent accumulators) */
#define PW_DW_ROWS 8


/* the geometry of one tile's padded copy */
typedef struct {
    int64_t rows;   /* input rows the tile's outputs read */
    int64_t phase;  /* floats per phase row (ceil(Wp / stride) + slack) */
    int64_t row;    /* floats per copied row: stride phases */
    int64_t first;  /* the input row of copied row 0 (may be negative: padding) */
} dw_geom;

static dw_geom geometry(const int64_t *L, int64_t oh0, int64_t oh1) {
    const int64_t W = L[S_XSHAPE + 3], kh = L[S_KH], sh = L[S_SH], sw = L[S_SW];
    const int64_t ph = L[S_PH], pw = L[S_PW], dh = L[S_DH];
    dw_geom g;
    g.rows = (oh1 - oh0 - 1) * sh + (kh - 1) * dh + 1;
    g.phase = (W + 2 * pw + sw - 1) / sw + PW_DW_SLACK;
    g.row = g.phase * sw;
    g.first = oh0 * sh - ph;
    return g;
}

int64_t pw_depthwise_scratch(const int64_t *L, int64_t rows) {
    const dw_geom g = geometry(L, 0, rows);
    return g.rows * g.row + g.row + 4 * PW_DW_SLACK; /* the copy, one padded row before its split, slack */
}

/* input row ih of channel xc as the copied row d: zero padding around it, its columns split by phase
 * (tmp: a padded row before the split, for strides above 1); the vector kernels' copy_rows does the
 * same for rows inside the input at strides 1 and 2 */
static void copy_row(const int64_t *L, const float *xc, int64_t ih, const dw_geom *g, float *d, float *tmp) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], pw = L[S_PW], sw = L[S_SW];
    if (ih < 0 || ih >= H) {
        memset(d, 0, sizeof(float) * g->row);
        return;
    }
    const int64_t Wp = W + 2 * pw;
    float *p = sw == 1 ? d : tmp;
    memset(p, 0, sizeof(float) * pw);
    memcpy(p + pw, xc + ih * W, sizeof(float) * W);
    memset(p + pw + W, 0, sizeof(float) * (sw == 1 ? g->row - pw - W : pw + 2 * PW_DW_SLACK));
    if (sw == 1) return;
    for (int64_t q = 0; q < Wp; q++) d[(q % sw) * g->phase + q / sw] = tmp[q];
    for (int64_t r = 0; r < sw; r++) { /* each phase's tail: zeros, so no load reads stale values */
        const int64_t n = (Wp - r + sw - 1) / sw;
        memset(d + r * g->phase + n, 0, sizeof(float) * (g->phase - n));
    }
}

/* where each tap reads in the copy, relative to an output's first input (row major over the window) */
static void tap_offsets(const int64_t *L, const dw_geom *g, int64_t *off) {
    const int64_t kh = L[S_KH], kw = L[S_KW], sw = L[S_SW], dh = L[S_DH], dw = L[S_DW];
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) off[i * kw + j] = i * dh * g->row + (j * dw % sw) * g->phase + j * dw / sw;
}

/* output rows [oh0, oh1) of one channel from its copy (scalar; PATHWEAVE_ISA=generic) */
static void plane_generic(const int64_t *L, const float *copy, const dw_geom *g, const int64_t *off,
                          const float *wc, float b, const float *rc, float *oc, int64_t oh0, int64_t oh1) {
    const int64_t OW = L[S_OSHAPE + 3], taps = L[S_KH] * L[S_KW], sh = L[S_SH];
    const int relu = L[S_ACT] == PW_ACT_RELU;
    for (int64_t oh = oh0; oh < oh1; oh++) {
        const float *src = copy + (oh - oh0) * sh * g->row;
        for (int64_t ow = 0; ow < OW; ow++) {
            float acc = b;
            for (int64_t t = 0; t < taps; t++) acc += wc[t] * src[off[t] + ow];
            if (rc) acc += rc[oh * OW + ow];
            if (relu && acc < 0.0f) acc = 0.0f; /* NaN stays */
            oc[oh * OW + ow] = acc;
        }
    }
}

typedef void (*plane_fn)(const int64_t *, const float *, const dw_geom *, const int64_t *, const float *, float,
                         const float *, float *, int64_t, int64_t);
typedef void (*copy_fn)(const int64_t *, const float *, const dw_geom *, float *, float *);

static void copy_generic(const int64_t *L, const float *xc, const dw_geom *g, float *copy, float *tmp) {
    for (int64_t r = 0; r < g->rows; r++) copy_row(L, xc, g->first + r, g, copy + r * g->row, tmp);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_DW_X86 1
#define PW_VW 16
#include "tile_depthwise.c" /* the kernels below for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_depthwise.c" /* and for AVX2 */
#undef PW_VW
#endif

int pw_depthwise_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch) {
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]), *res = in_f(L[S_Y]);
    float *out = (float *)(intptr_t)L[S_OUT];
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t O = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int64_t taps = L[S_KH] * L[S_KW], og = O / C, act = L[S_ACT];
    const int64_t oh0 = lo[2], oh1 = hi[2];
    if (lo[3] != 0 || hi[3] != OW || taps > 64 || L[S_GROUPS] != C) return 1;
    /* the copy goes where another convolution's im2col may be kept: forget it */
    memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float));
    const dw_geom g = geometry(L, oh0, oh1);
    float *copy = scratch + PW_SCRATCH_HEADER, *tmp = copy + g.rows * g.row;
    int64_t off[64];
    tap_offsets(L, &g, off);
    plane_fn plane = plane_generic;
    copy_fn copy_rows = copy_generic;
#ifdef PW_DW_X86
    const int vw = pw_vec_width(); /* the level the matrix kernels run (PATHWEAVE_ISA may lower it) */
    if (vw == 16) plane = plane_16, copy_rows = copy_rows_16;
    if (vw == 8) plane = plane_8, copy_rows = copy_rows_8;
#endif
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t o = lo[1]; o < hi[1]; o++) {
            const int64_t c = o / og;
            if (o == lo[1] || c != (o - 1) / og) /* a new input channel: copy its rows */
                copy_rows(L, x + (n * C + c) * H * W, &g, copy, tmp);
            float *oc = out + (n * O + o) * OH * OW;
            const float *rc = res ? res + (n * O + o) * OH * OW : NULL;
            plane(L, copy, &g, off, w + o * taps, bias ? bias[o] : 0.0f, rc, oc, oh0, oh1);
            if (act != PW_ACT_NONE && act != PW_ACT_RELU && (act != PW_ACT_RELU6 || plane == plane_generic))
                pw_activate(oc + oh0 * OW, (oh1 - oh0) * OW, (int)act);
        }
    return 0;
}

#else /* PW_VW: the kernels of one vector width, included twice by the body above */
#include "tile_simd.h"

/* the even and odd columns of a padded row (n of each), as phases 0 and 1 of a copied row; whole vectors,
 * tmp being zero past the row and each phase holding PW_DW_SLACK floats more than n */
PW_VTI void PW_V(split2)(const float *tmp, int64_t n, float *d, int64_t phase) {
    for (int64_t k = 0; k < n; k += PW_VW) {
        const vf a = VLOAD(tmp + 2 * k), b = VLOAD(tmp + 2 * k + PW_VW);
        VSTORE(d + k, PW_V(even)(a, b));
        VSTORE(d + phase + k, PW_V(odd)(a, b));
    }
    VSTORE(d + n, VZERO()), VSTORE(d + phase + n, VZERO()); /* the phases' tails */
}

/* the tile's input rows of channel xc as copied rows (copy_row's layout): the row's values stored at pw
 * with masked loads, zero vectors before and after them, then for stride 2 the split of tmp by phase
 * (one libc call per row and padding cost more than the channel's sums on 14x14 maps). The last zero
 * vector may pass the row's end: into the next row (written after) or the scratch's slack. */
PW_VT static void PW_V(copy_rows)(const int64_t *L, const float *xc, const dw_geom *g, float *copy, float *tmp) {
    const int64_t H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], pw = L[S_PW], sw = L[S_SW];
    const int64_t Wp = W + 2 * pw;
    for (int64_t r = 0; r < g->rows; r++) {
        float *d = copy + r * g->row, *p = sw == 1 ? d : tmp;
        const int64_t ih = g->first + r, span = sw == 1 ? g->row : Wp + 2 * PW_DW_SLACK;
        if (ih < 0 || ih >= H || sw > 2) {
            copy_row(L, xc, ih, g, d, tmp);
            continue;
        }
        for (int64_t q = 0; q < pw; q += PW_VW) VSTORE(p + q, VZERO());
        const float *xr = xc + ih * W;
        for (int64_t c = 0; c < W; c += PW_VW) {
            const vmask m = VMASK_N(W - c);
            VSTORE_M(p + pw + c, m, VLOADZ_M(m, xr + c));
        }
        for (int64_t q = pw + W; q < span; q += PW_VW) VSTORE(p + q, VZERO());
        if (sw == 2) PW_V(split2)(tmp, (Wp + 1) / 2, d, g->phase);
    }
}

/* R output rows (from oh) by PW_VW columns (from ow): one accumulator per row over every tap */
PW_VTI void PW_V(block)(const float *src, int64_t rstep, const int64_t *off, int64_t taps, const float *wc,
                        float b, const float *rc, float *oc, int64_t OW, int64_t ow, vmask m, int act,
                        const int R) {
    vf acc[PW_DW_ROWS];
    for (int r = 0; r < R; r++) acc[r] = VSET1(b);
    for (int64_t t = 0; t < taps; t++) {
        const vf wt = VSET1(wc[t]);
        const float *s = src + off[t] + ow;
        for (int r = 0; r < R; r++) acc[r] = VFMA(VLOAD(s + r * rstep), wt, acc[r]);
    }
    for (int r = 0; r < R; r++) {
        vf v = acc[r];
        if (rc) v = VADD(v, VLOADZ_M(m, rc + r * OW + ow));
        if (act == PW_ACT_RELU || act == PW_ACT_RELU6) v = PW_V(vmax_nan)(VZERO(), v); /* NaN stays */
        if (act == PW_ACT_RELU6) /* min(v, 6) as -max(-6, -v), NaN kept */
            v = VSUB(VZERO(), PW_V(vmax_nan)(VSET1(-6.0f), VSUB(VZERO(), v)));
        VSTORE_M(oc + r * OW + ow, m, v);
    }
}

/* rows [oh, oh + R) of one column vector, R a constant in each case (its accumulators in registers);
 * 3x3 windows with their tap count a constant too (the tap loop unrolled) */
PW_VTI void PW_V(rows)(const float *src, int64_t rstep, const int64_t *off, int64_t taps, const float *wc, float b,
                       const float *rc, float *oc, int64_t OW, int64_t ow, vmask m, int act, int64_t R) {
#define PW_DW_CASE(r)                                                                                        \
    case r:                                                                                                  \
        if (taps == 9)                                                                                       \
            PW_V(block)(src, rstep, off, 9, wc, b, rc, oc, OW, ow, m, act, r);                               \
        else                                                                                                 \
            PW_V(block)(src, rstep, off, taps, wc, b, rc, oc, OW, ow, m, act, r);                            \
        break;
    switch (R) {
        PW_DW_CASE(1) PW_DW_CASE(2) PW_DW_CASE(3) PW_DW_CASE(4) PW_DW_CASE(5) PW_DW_CASE(6) PW_DW_CASE(7)
        PW_DW_CASE(8)
    }
#undef PW_DW_CASE
}

/* output rows [oh0, oh1) of one channel: per column vector, blocks of up to PW_DW_ROWS rows, the rows
 * left split evenly (14 rows: 7 + 7, never 8 + 2 + 2 + 2 of short dependent chains) */
PW_VT static void PW_V(plane)(const int64_t *L, const float *copy, const dw_geom *g, const int64_t *off,
                              const float *wc, float b, const float *rc, float *oc, int64_t oh0, int64_t oh1) {
    const int64_t OW = L[S_OSHAPE + 3], taps = L[S_KH] * L[S_KW], rstep = L[S_SH] * g->row;
    const int act = (int)L[S_ACT];
    const int64_t blocks = (oh1 - oh0 + PW_DW_ROWS - 1) / PW_DW_ROWS;
    for (int64_t ow = 0; ow < OW; ow += PW_VW) {
        const vmask m = VMASK_N(OW - ow);
        for (int64_t k = 0; k < blocks; k++) {
            const int64_t a = oh0 + (oh1 - oh0) * k / blocks, e = oh0 + (oh1 - oh0) * (k + 1) / blocks;
            PW_V(rows)(copy + (a - oh0) * rstep, rstep, off, taps, wc, b, rc ? rc + a * OW : NULL, oc + a * OW,
                       OW, ow, m, act, e - a);
        }
    }
}
#endif /* PW_VW */
