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
/* floats ahead of the input row being copied that its copy prefetches (the next rows of the channel) */
#define PW_DW_AHEAD 128
/* 0: the copy takes every vector of a row with a masked load, as it did (A/B in one process: MobileNetV2
 * 1.036x slower on 1 worker, 1.049x on 2, AVX2 Zen 3) */
int pw_dw_plain = 1;
/* Maps at most 16 wide with windows up to PW_DW_FLAT_KW, and up to PW_DW_FLAT_MAX wide with 3-wide ones;
 * stride 1, no dilation, as wide as their input (2 pw = kw - 1): each channel's rows as one flat run
 * (PW_V(channels_flat)); 0 in pw_dw_flat: the padded copy's path (A/B). Alone, one worker, AVX2 Zen 3,
 * flat against padded: 3x3 over 7x7, 14x14, 28x28 maps 2.1x, 1.4x, 1.1x, over 56x56 0.83x; 5x5 over 7x7,
 * 14x14, 28x28 1.44x, 1.1x, 0.96x; a 7x7 window over 16x16 0.84x (6 of its 7 columns masked) */
#define PW_DW_FLAT_MAX 32
#define PW_DW_FLAT_KW 5
int pw_dw_flat = 1;

/* the activations the kernels apply in their store (PW_V(clamp)); the others run over the rows after */
static inline int in_store(int64_t act) {
    return act == PW_ACT_NONE || act == PW_ACT_RELU || act == PW_ACT_RELU6;
}

static inline int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

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

/* output rows [oh0, oh1) of one channel from its copy (scalar; PATHWEAVE_ISA=generic); oc and rc point at
 * row oh0 */
static void plane_generic(const int64_t *L, const float *copy, const dw_geom *g, const int64_t *off,
                          const float *wc, float b, const float *rc, float *oc, int64_t oh0, int64_t oh1) {
    const int64_t OW = L[S_OSHAPE + 3], taps = L[S_KH] * L[S_KW], sh = L[S_SH];
    const int relu = L[S_ACT] == PW_ACT_RELU || L[S_ACT] == PW_ACT_RELU6, relu6 = L[S_ACT] == PW_ACT_RELU6;
    for (int64_t oh = oh0; oh < oh1; oh++) {
        const float *src = copy + (oh - oh0) * sh * g->row;
        for (int64_t ow = 0; ow < OW; ow++) {
            float acc = b;
            for (int64_t t = 0; t < taps; t++) acc += wc[t] * src[off[t] + ow];
            if (rc) acc += rc[(oh - oh0) * OW + ow];
            if (relu && acc < 0.0f) acc = 0.0f; /* NaN stays */
            if (relu6 && acc > 6.0f) acc = 6.0f;
            oc[(oh - oh0) * OW + ow] = acc;
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

static int flat_fits(const int64_t *L, int64_t oh0, int64_t oh1) {
    const int64_t W = L[S_XSHAPE + 3], kw = L[S_KW];
    return pw_dw_flat && pw_vec_width() && L[S_SH] == 1 && L[S_SW] == 1 && L[S_DH] == 1 && L[S_DW] == 1 &&
           kw <= PW_DW_FLAT_KW && 2 * L[S_PW] == kw - 1 && L[S_OSHAPE + 3] == W && W <= PW_DW_FLAT_MAX &&
           (W <= 16 || kw <= 3) && oh1 > oh0;
}

/* the kernels of the level the matrix kernels run (PATHWEAVE_ISA may lower it) */
static void pick(plane_fn *plane, copy_fn *copy_rows) {
    *plane = plane_generic, *copy_rows = copy_generic;
#ifdef PW_DW_X86
    const int vw = pw_vec_width();
    if (vw == 16) *plane = plane_16, *copy_rows = copy_rows_16;
    if (vw == 8) *plane = plane_8, *copy_rows = copy_rows_8;
#endif
}

/* Output rows [oh0, oh1) of channels [o0, o1) of image n: channel o's rows at out + (o - o0) * cstride,
 * one after another (OW apart), and its residual's likewise at res (or NULL); work: the padded copy's
 * scratch (pw_depthwise_scratch floats for oh1 - oh0 rows). */
static void channels(const int64_t *L, int64_t n, int64_t o0, int64_t o1, int64_t oh0, int64_t oh1, float *out,
                     const float *res, int64_t cstride, float *work) {
#ifdef PW_DW_X86
    if (flat_fits(L, oh0, oh1)) {
        (pw_vec_width() == 16 ? channels_flat_16 : channels_flat_8)(L, n, o0, o1, oh0, oh1, out, res, cstride, work);
        return;
    }
#endif
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]);
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], O = L[S_OSHAPE + 1];
    const int64_t OW = L[S_OSHAPE + 3], taps = L[S_KH] * L[S_KW], og = O / C, act = L[S_ACT];
    const dw_geom g = geometry(L, oh0, oh1);
    float *copy = work, *tmp = copy + g.rows * g.row;
    int64_t off[64];
    tap_offsets(L, &g, off);
    plane_fn plane;
    copy_fn copy_rows;
    pick(&plane, &copy_rows);
    for (int64_t o = o0; o < o1; o++) {
        const int64_t c = o / og;
        if (o == o0 || c != (o - 1) / og) /* a new input channel: copy its rows */
            copy_rows(L, x + (n * C + c) * H * W, &g, copy, tmp);
        float *oc = out + (o - o0) * cstride;
        plane(L, copy, &g, off, w + o * taps, bias ? bias[o] : 0.0f, res ? res + (o - o0) * cstride : NULL, oc,
              oh0, oh1);
        if (!in_store(act)) pw_activate(oc, (oh1 - oh0) * OW, (int)act);
    }
}

int pw_depthwise_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch) {
    if (L[S_LAYOUT] & PW_BLK_OUT) return pw_depthwise_blocked(L, lo, hi); /* tile_gemm_b.c */
    const float *res = in_f(L[S_Y]);
    float *out = (float *)(intptr_t)L[S_OUT];
    const int64_t C = L[S_XSHAPE + 1], O = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int64_t taps = L[S_KH] * L[S_KW];
    if (lo[3] != 0 || hi[3] != OW || taps > 64 || L[S_GROUPS] != C) return 1;
    /* the copy goes where another convolution's im2col may be kept: forget it */
    memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float));
    for (int64_t n = lo[0]; n < hi[0]; n++) {
        const int64_t at = (n * O + lo[1]) * OH * OW + lo[2] * OW;
        channels(L, n, lo[1], hi[1], lo[2], hi[2], out + at, res ? res + at : NULL, OH * OW,
                 scratch + PW_SCRATCH_HEADER);
    }
    return 0;
}

/* floats rounded up to whole 64-byte lines */
static inline int64_t lines(int64_t floats) { return (floats + 15) / 16 * 16; }

int64_t pw_dwpw_scratch(const int64_t *L, const int64_t *D, int64_t rows) {
    const int64_t block = L[S_KH] < rows ? L[S_KH] : rows, P = block * L[S_OSHAPE + 3];
    const int64_t sums = L[S_WPACK_T] == PW_PACK_TRANSPOSED ? P * lines(L[S_OSHAPE + 1]) : 0;
    return lines(D[S_OSHAPE + 1] * P) + lines(pw_depthwise_scratch(D, block)) + sums;
}

int pw_dwpw_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch) {
    const int64_t *D = (const int64_t *)(intptr_t)L[S_AUX];
    const float *res = in_f(L[S_Y]), *bias = in_f(L[S_BIAS]), *wp = in_f(L[S_WPACK]);
    float *out = (float *)(intptr_t)L[S_OUT];
    const int64_t K = D[S_OSHAPE + 1], O = L[S_OSHAPE + 1], OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3];
    const int64_t block = L[S_KH], act = L[S_ACT];
    if (!D || !wp || lo[1] != 0 || hi[1] != O || lo[3] != 0 || hi[3] != OW || block < 1) return 1;
    if (D[S_KH] * D[S_KW] > 64 || D[S_GROUPS] != D[S_XSHAPE + 1] || D[S_Y]) return 1;
    memset(scratch, 0xff, PW_SCRATCH_HEADER * sizeof(float)); /* no im2col kept here */
    const int64_t rows = hi[2] - lo[2] < block ? hi[2] - lo[2] : block;
    float *mid = scratch + PW_SCRATCH_HEADER, *work = mid + lines(K * rows * OW);
    float *sums = work + lines(pw_depthwise_scratch(D, rows));
    const int transposed = L[S_WPACK_T] == PW_PACK_TRANSPOSED;
    const int64_t blocks = (hi[2] - lo[2] + block - 1) / block; /* of even size: 14 rows as 7 + 7 */
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t i = 0; i < blocks; i++) {
            const int64_t a = lo[2] + (hi[2] - lo[2]) * i / blocks, e = lo[2] + (hi[2] - lo[2]) * (i + 1) / blocks;
            const int64_t P = (e - a) * OW;
            /* the depthwise rows of every channel, then the pointwise product over them while they are
             * in cache: mid is [K][P], B of the product */
            channels(D, n, 0, K, a, e, mid, NULL, P, work);
            float *c = out + n * O * OH * OW + a * OW;
            const float *r = res ? res + n * O * OH * OW + a * OW : NULL;
            if (transposed)
                pw_gemm_packed_t(O, P, K, wp, 0, mid, P, c, OH * OW, bias, r, (int)act, sums);
            else
                pw_gemm_packed(O, P, K, wp, 0, mid, P, c, OH * OW, bias, r, (int)act);
            if (act != PW_ACT_NONE && act != PW_ACT_RELU) /* the rest after the store */
                for (int64_t o = 0; o < O; o++) pw_activate(c + o * OH * OW, P, (int)act);
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
        int64_t c = 0;
        /* whole vectors with plain loads, prefetching the rows ahead; the masked load (vmaskmovps at AVX2)
         * on every vector held the copy at a third of the depthwise layers' kernel time */
        for (; pw_dw_plain && c + PW_VW <= W; c += PW_VW) {
            _mm_prefetch((const char *)(xr + c + PW_DW_AHEAD), _MM_HINT_T0);
            VSTORE(p + pw + c, VLOAD(xr + c));
        }
        for (; c < W; c += PW_VW) {
            const vmask m = VMASK_N(W - c);
            VSTORE_M(p + pw + c, m, VLOADZ_M(m, xr + c));
        }
        for (int64_t q = pw + W; q < span; q += PW_VW) VSTORE(p + q, VZERO());
        if (sw == 2) PW_V(split2)(tmp, (Wp + 1) / 2, d, g->phase);
    }
}

/* the activations applied in the store: ReLU, and ReLU6 as min(max(0, v), 6) with min(v, 6) as
 * -max(-6, -v); NaN kept by both */
PW_VTI vf PW_V(clamp)(vf v, int act) {
    if (act == PW_ACT_RELU || act == PW_ACT_RELU6) v = PW_V(vmax_nan)(VZERO(), v);
    if (act == PW_ACT_RELU6) v = VSUB(VZERO(), PW_V(vmax_nan)(VSET1(-6.0f), VSUB(VZERO(), v)));
    return v;
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
        VSTORE_M(oc + r * OW + ow, m, PW_V(clamp)(v, act));
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

/* output rows [oh0, oh1) of one channel (oc, rc at row oh0): per column vector, blocks of up to PW_DW_ROWS rows, the rows
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
            PW_V(rows)(copy + (a - oh0) * rstep, rstep, off, taps, wc, b, rc ? rc + (a - oh0) * OW : NULL,
                       oc + (a - oh0) * OW, OW, ow, m, act, e - a);
        }
    }
}

#if PW_VW == 16
#define PW_DW_AND(a, m) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(m)))
#else
#define PW_DW_AND(a, m) _mm256_and_ps(a, m)
#endif

/* vectors of outputs from..from + nv of the flat run (nv constant in each call: its accumulators in
 * registers), every tap a load at its offset, the columns it must not see (another row's, the padding's)
 * zeroed by its mask */
PW_VTI void PW_V(flat_block)(const float *src, int64_t W, int64_t kh, int64_t kw, int64_t pw, const float *wc,
                             float b, const vf (*masks)[PW_DW_FLAT_KW], int64_t period, int64_t from, const int nv,
                             int64_t P, const float *rc, float *oc, int act) {
    vf acc[4];
    const vf *mask[4]; /* the masks repeat every period vectors: (q + lane) % W */
    for (int v = 0; v < nv; v++) mask[v] = masks[(from + v) % period];
    for (int v = 0; v < nv; v++) acc[v] = VSET1(b);
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            const vf wt = VSET1(wc[i * kw + j]);
            const float *s = src + (from * PW_VW) + i * W + j - pw;
            for (int v = 0; v < nv; v++) {
                vf x = VLOAD(s + v * PW_VW);
                if (j != pw) x = PW_DW_AND(x, mask[v][j]);
                acc[v] = VFMA(x, wt, acc[v]);
            }
        }
    for (int v = 0; v < nv; v++) {
        const int64_t q = (from + v) * PW_VW, left = P - q;
        const vmask m = VMASK_N(left < PW_VW ? left : PW_VW);
        vf x = acc[v];
        if (rc) x = VADD(x, left >= PW_VW ? VLOAD(rc + q) : VLOADZ_M(m, rc + q));
        x = PW_V(clamp)(x, act);
        if (left >= PW_VW)
            VSTORE(oc + q, x);
        else
            VSTORE_M(oc + q, m, x);
    }
}

/* channels() for maps flat_fits takes: output rows [oh0, oh1) of a channel are P = (oh1 - oh0) W
 * consecutive floats, and so are the input rows they read (stride 1, as wide as the output); the input
 * rows are copied once per channel (one run: the rows inside the input) between zeros that stand for the
 * padding rows and margins, and every output vector reads each tap at a constant offset from its
 * position, with the lanes whose column would fall outside the row masked to zero. No per-row loops,
 * masks or padded rows: 7x7 and 14x14 maps spent most of their time in those. */
PW_VT static void PW_V(channels_flat)(const int64_t *L, int64_t n, int64_t o0, int64_t o1, int64_t oh0, int64_t oh1,
                                      float *out, const float *res, int64_t cstride, float *work) {
    const float *x = in_f(L[S_X]), *w = in_f(L[S_W]), *bias = in_f(L[S_BIAS]);
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], O = L[S_OSHAPE + 1];
    const int64_t kh = L[S_KH], kw = L[S_KW], ph = L[S_PH], pw = L[S_PW], og = O / C, act = L[S_ACT];
    const int64_t P = (oh1 - oh0) * W, nvec = (P + PW_VW - 1) / PW_VW, rows = oh1 - oh0 + kh - 1;
    const int64_t front = pw + PW_VW, first = oh0 - ph; /* copied row r is input row first + r */
    const int64_t lo = first > 0 ? first : 0, hi = first + rows < H ? first + rows : H;
    /* the margins and the rows outside the input stay zero for every channel: zeroed once */
    memset(work, 0, sizeof(float) * (front + rows * W + pw + 2 * PW_VW));
    float *src = work + front;
    const int64_t period = W / gcd64(W, PW_VW); /* vectors after which the columns repeat */
    vf mask[PW_DW_FLAT_MAX][PW_DW_FLAT_KW];
    for (int64_t v = 0; v < period; v++)
        for (int64_t j = 0; j < kw; j++) {
            float lanes[PW_VW];
            for (int l = 0; l < PW_VW; l++) {
                const int64_t col = (v * PW_VW + l) % W + j - pw;
                uint32_t bits = col >= 0 && col < W ? 0xffffffffu : 0u;
                memcpy(&lanes[l], &bits, sizeof bits);
            }
            mask[v][j] = VLOAD(lanes);
        }
    for (int64_t o = o0; o < o1; o++) {
        const int64_t c = o / og;
        if (hi > lo && (o == o0 || c != (o - 1) / og)) /* a new input channel: its rows inside the input */
            memcpy(src + (lo - first) * W, x + ((n * C + c) * H + lo) * W, sizeof(float) * (hi - lo) * W);
        float *oc = out + (o - o0) * cstride;
        const float *rc = res ? res + (o - o0) * cstride : NULL, *wc = w + o * kh * kw;
        const float b = bias ? bias[o] : 0.0f;
        int64_t v = 0;
        for (; v + 4 <= nvec; v += 4) PW_V(flat_block)(src, W, kh, kw, pw, wc, b, mask, period, v, 4, P, rc, oc, (int)act);
        if (nvec - v == 3) PW_V(flat_block)(src, W, kh, kw, pw, wc, b, mask, period, v, 3, P, rc, oc, (int)act);
        if (nvec - v == 2) PW_V(flat_block)(src, W, kh, kw, pw, wc, b, mask, period, v, 2, P, rc, oc, (int)act);
        if (nvec - v == 1) PW_V(flat_block)(src, W, kh, kw, pw, wc, b, mask, period, v, 1, P, rc, oc, (int)act);
        if (!in_store(act)) pw_activate(oc, P, (int)act);
    }
}
#undef PW_DW_AND
#endif /* PW_VW */
