/* Winograd F(2x2, 3x3) convolution tiles (see tile_kernels.h, pw_conv_winograd).
 *
 * Each 2x2 block of outputs comes from a 4x4 block of the (zero-padded) input: V = B^T d B per input
 * channel, then for each of the 16 points of the transform a matrix product over the channels,
 * M[pt] = U[pt] V[pt] with U = G g G^T (the weights, transformed and packed at build time), then
 * y = A^T M A. Per 2x2 block of outputs and (input, output) channel pair the products do 16
 * multiply-adds against the direct 4 x 9 = 36, 2.25x fewer; the transforms only add and subtract.
 *
 * A tile's output rows are taken in pairs from its first row; an odd last row computes a pair whose
 * second row is discarded, reading zeros for the input row below the tile's window (that row enters
 * only the discarded sums: the first output row of a pair never reads the fourth input row). Columns
 * the same: blocks of 2 from column 0, the last one half discarded when the width is odd.
 *
 * The transformed input of a tile's rows is kept, as an im2col is, for the tiles of other channels
 * over the same rows. Layouts: V[pt][c][t], M[pt][o][t] with t = pair * TW + block (TW blocks per row),
 * each point's block PW_WINO_SKEW floats longer than its matrix: the transforms touch all 16 points at
 * once, and points a multiple of 4 KB apart fell into one L1 set (ResNet-50's 56x56 layer in tiles of 8
 * rows, 28 KB apart: 2.5 ms against 1.0 ms).
 *
 * An infinite input would come out as NaN: the transforms subtract it from itself, where the direct sum
 * gives eager's +-inf. So the input transform also notes whether the tile's input rows hold an infinity
 * (one integer scan of rows it has just read), and where they do, the 2x2 blocks whose 4x4 input block
 * holds one are computed again directly. NaN needs nothing: each point of the transforms reaches exactly
 * the outputs whose 3x3 windows hold the input it came from, and NaN stays NaN through sums.
 */
#ifndef PW_VW /* the file's body; the vector output transform is at its end, included once per width */
#include <stdint.h>
#include <string.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

#define PW_WINO_SKEW 16

/* Split padded input rows: for each of R rows of channel c, E[j] = padded[2j] and O[j] = padded[2j + 1]
 * (j = 0..TW), padded[q] = x[row][q - pw] inside the row, 0 outside it and for rows outside
 * [r_lo, r_hi) (the input rows the tile may read). Stored as rows of 2 (TW + 1) floats: E then O. */
PW_HOT_FN(static, void, split_rows, (const float *xc, int64_t H, int64_t W, int64_t ih0, int64_t R, int64_t r_hi, int64_t pw, int64_t TW, float *restrict s), (xc, H, W, ih0, R, r_hi, pw, TW, s)) {
    const int64_t n = TW + 1;
    for (int64_t r = 0; r < R; r++) {
        float *e = s + r * 2 * n, *o = e + n;
        const int64_t ih = ih0 + r;
        if (ih < 0 || ih >= H || ih >= r_hi) {
            memset(e, 0, sizeof(float) * 2 * n);
            continue;
        }
        const float *x = xc + ih * W;
        /* padded[q] with q = 2j (E) or 2j + 1 (O) is x[q - pw]; inside for 0 <= q - pw < W. Both are
         * inside for j in [ja, jb): that loop has no test (a de-interleave the compiler vectorises) */
        const int64_t ja = pw, jb = (W + pw - 1) / 2 < n ? (W + pw - 1) / 2 : n;
        const float *xs = x - pw;
        for (int64_t j = ja; j < jb; j++) e[j] = xs[2 * j], o[j] = xs[2 * j + 1];
        for (int64_t j = 0; j < n; j++) {
            if (j == ja && ja < jb) j = jb;
            if (j >= n) break;
            const int64_t qe = 2 * j - pw, qo = 2 * j + 1 - pw;
            e[j] = qe >= 0 && qe < W ? x[qe] : 0.0f;
            o[j] = qo >= 0 && qo < W ? x[qo] : 0.0f;
        }
    }
}

/* one row i of B^T d B's columns: (E, O) the row's even and odd columns (TW + 1 each), into points
 * 4i .. 4i + 3 (q0 .. q3) */
PW_HOT_FN(static, void, transform_columns, (const float *restrict e, const float *restrict o, int64_t TW, float *restrict q0, float *restrict q1, float *restrict q2, float *restrict q3), (e, o, TW, q0, q1, q2, q3)) {
    for (int64_t j = 0; j < TW; j++) {
        q0[j] = e[j] - e[j + 1], q1[j] = o[j] + e[j + 1];
        q2[j] = e[j + 1] - o[j], q3[j] = o[j] - o[j + 1];
    }
}

/* V[pt][c][p * TW + j] for the pairs of one channel from its split rows (B^T d B: rows, then columns);
 * v: V[0][c], points pt_stride floats apart; t: 8 (TW + 1) floats for the rows' transform */
PW_HOT_FN(static, void, transform_input, (const float *restrict s, int64_t pairs, int64_t TW, float *restrict v, int64_t pt_stride, float *restrict t), (s, pairs, TW, v, pt_stride, t)) {
    const int64_t n = TW + 1, rs = 2 * n;
    for (int64_t p = 0; p < pairs; p++) {
        /* rows: t0 = d0 - d2, t1 = d1 + d2, t2 = d2 - d1, t3 = d1 - d3, over E and O at once */
        const float *d0 = s + 2 * p * rs, *d1 = d0 + rs, *d2 = d1 + rs, *d3 = d2 + rs;
        float *restrict t0 = t, *restrict t1 = t + rs, *restrict t2 = t1 + rs, *restrict t3 = t2 + rs;
        for (int64_t j = 0; j < rs; j++) {
            t0[j] = d0[j] - d2[j], t1[j] = d1[j] + d2[j];
            t2[j] = d2[j] - d1[j], t3[j] = d1[j] - d3[j];
        }
        float *vp = v + p * TW;
        for (int i = 0; i < 4; i++) {
            const float *ti = t + i * rs;
            transform_columns(ti, ti + n, TW, vp + 4 * i * pt_stride, vp + (4 * i + 1) * pt_stride,
                              vp + (4 * i + 2) * pt_stride, vp + (4 * i + 3) * pt_stride);
        }
    }
}

/* y = A^T M A for one output channel and pair: the 2 x 2TW sums of rows 0 and 1 into y0, y1 (m: M[0]'s,
 * points pt_stride floats apart) */
PW_HOT_FN(static, void, transform_output, (const float *restrict m, int64_t pt_stride, int64_t TW, float *restrict y0, float *restrict y1), (m, pt_stride, TW, y0, y1)) {
    const int64_t ps = pt_stride;
    const float *m0 = m, *m1 = m0 + ps, *m2 = m1 + ps, *m3 = m2 + ps, *m4 = m3 + ps, *m5 = m4 + ps;
    const float *m6 = m5 + ps, *m7 = m6 + ps, *m8 = m7 + ps, *m9 = m8 + ps, *m10 = m9 + ps, *m11 = m10 + ps;
    const float *m12 = m11 + ps, *m13 = m12 + ps, *m14 = m13 + ps, *m15 = m14 + ps;
    for (int64_t j = 0; j < TW; j++) {
        /* columns: s_i0 = m_i0 + m_i1 + m_i2, s_i1 = m_i1 - m_i2 - m_i3 for each row i of points */
        const float s00 = m0[j] + m1[j] + m2[j], s01 = m1[j] - m2[j] - m3[j];
        const float s10 = m4[j] + m5[j] + m6[j], s11 = m5[j] - m6[j] - m7[j];
        const float s20 = m8[j] + m9[j] + m10[j], s21 = m9[j] - m10[j] - m11[j];
        const float s30 = m12[j] + m13[j] + m14[j], s31 = m13[j] - m14[j] - m15[j];
        y0[2 * j] = s00 + s10 + s20, y0[2 * j + 1] = s01 + s11 + s21;
        y1[2 * j] = s10 - s20 - s30, y1[2 * j + 1] = s11 - s21 - s31;
    }
}

/* d[q] = act(y[q] + b + r[q]) over q < n (r may be NULL); ReLU here, the other activations after */
PW_HOT_FN(static, void, store_row, (float *restrict d, const float *restrict y, const float *restrict r, float b, int64_t n, int relu), (d, y, r, b, n, relu)) {
    if (r)
        for (int64_t q = 0; q < n; q++) d[q] = y[q] + b + r[q];
    else
        for (int64_t q = 0; q < n; q++) d[q] = y[q] + b;
    if (relu)
        for (int64_t q = 0; q < n; q++) d[q] = ((d[q] > 0.0f) | (d[q] != d[q])) ? d[q] : 0.0f; /* NaN stays */
}

/* whether any of n floats is +-inf; integer compares, so that it vectorises and NaN does not count */
PW_HOT_FN(static, int, any_inf, (const float *x, int64_t n), (x, n)) {
    uint32_t hit = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        hit |= (u & 0x7fffffffu) == 0x7f800000u;
    }
    return hit != 0;
}

/* whether the input block of the 2x2 outputs at (oh, ow) holds an infinity: rows [oh - ph, oh - ph + 4)
 * below r_hi (the tile's window), columns [ow - pw, ow - pw + 4), of any channel */
static int block_has_inf(const float *xn, int64_t C, int64_t H, int64_t W, int64_t ih, int64_t iw,
                         int64_t r_hi) {
    const int64_t end = H < r_hi ? H : r_hi;
    const int64_t r0 = ih < 0 ? 0 : ih, r1 = ih + 4 < end ? ih + 4 : end;
    const int64_t c0 = iw < 0 ? 0 : iw, c1 = iw + 4 < W ? iw + 4 : W;
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = r0; r < r1; r++)
            if (any_inf(xn + (c * H + r) * W + c0, c1 - c0)) return 1;
    return 0;
}

/* output (oh, ow) of channels [o0, o1) as the direct sum over the 3x3 window, then bias, residual and a
 * ReLU that keeps NaN, as store_row does; w: the layer's weights [O][C][3][3] */
static void direct_point(const int64_t *L, const float *xn, int64_t oh, int64_t ow, int64_t o0, int64_t o1,
                         float *on, const float *rn) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t plane = L[S_OSHAPE + 2] * L[S_OSHAPE + 3], at = oh * L[S_OSHAPE + 3] + ow;
    const float *w = (const float *)(intptr_t)L[S_W], *bias = (const float *)(intptr_t)L[S_BIAS];
    for (int64_t o = o0; o < o1; o++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < C; c++)
            for (int64_t u = 0; u < 3; u++) {
                const int64_t ih = oh - L[S_PH] + u;
                for (int64_t v = 0; v < 3 && ih >= 0 && ih < H; v++) {
                    const int64_t iw = ow - L[S_PW] + v;
                    if (iw >= 0 && iw < W) acc += w[((o * C + c) * 3 + u) * 3 + v] * xn[(c * H + ih) * W + iw];
                }
            }
        float y = acc + (bias ? bias[o] : 0.0f);
        if (rn) y += rn[o * plane + at];
        if (L[S_ACT] == PW_ACT_RELU) y = ((y > 0.0f) | (y != y)) ? y : 0.0f;
        on[o * plane + at] = y;
    }
}

/* the 2x2 blocks of output rows [oh0, oh1) whose input block holds an infinity, computed directly */
static void redo_inf_blocks(const int64_t *L, const float *xn, int64_t oh0, int64_t oh1, int64_t o0, int64_t o1,
                            float *on, const float *rn) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3], OW = L[S_OSHAPE + 3];
    const int64_t r_hi = oh1 - L[S_PH] + 2;
    for (int64_t oh = oh0; oh < oh1; oh += 2)
        for (int64_t ow = 0; ow < OW; ow += 2) {
            if (!block_has_inf(xn, C, H, W, oh - L[S_PH], ow - L[S_PW], r_hi)) continue;
            for (int64_t h = oh; h < oh + 2 && h < oh1; h++)
                for (int64_t q = ow; q < ow + 2 && q < OW; q++) direct_point(L, xn, h, q, o0, o1, on, rn);
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_WINO_X86 1
#define PW_VW 16
#include "tile_winograd.c" /* the output transform at the end of this file for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_winograd.c" /* and for AVX2 */
#undef PW_VW
#endif

int64_t pw_winograd_scratch(int64_t C, int64_t rows, int64_t channels, int64_t OW) {
    const int64_t pairs = (rows + 1) / 2, TW = (OW + 1) / 2, T = pairs * TW;
    /* V, M, the split rows of one channel, their row transform, two output rows, pw_gemm_packed_t's sums */
    const int64_t tld = (channels + 2 * PW_TR - 2) / PW_TR * PW_TR; /* the sums' channels, row_skip < PW_TR */
    return 16 * (C * T + PW_WINO_SKEW) + 16 * (tld * T + PW_WINO_SKEW) + (2 * pairs + 2) * 2 * (TW + 1) +
           8 * (TW + 1) + 2 * 2 * TW + T * tld + 32;
}

void pw_conv_winograd(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                      int64_t oh1, int64_t o0, int64_t o1, float *on, const float *rn) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3], ph = L[S_PH], pw = L[S_PW];
    const int64_t pairs = (oh1 - oh0 + 1) / 2, TW = (OW + 1) / 2, T = pairs * TW, R = 2 * pairs + 2;
    const int64_t rows = o1 - o0;
    const float *bias = (const float *)(intptr_t)L[S_BIAS];
    const float *wp = (const float *)(intptr_t)L[S_WPACK];
    const int64_t O = L[S_OSHAPE + 1], panels = (O + PW_TR - 1) / PW_TR;
    const int64_t skip = o0 % PW_TR, tld = (skip + rows + PW_TR - 1) / PW_TR * PW_TR;
    const int64_t vs = C * T + PW_WINO_SKEW, ms = T * tld + PW_WINO_SKEW; /* floats per point */
    float *v = scratch + PW_SCRATCH_HEADER, *m = v + 16 * vs;
    float *s = m + 16 * ms, *t = s + R * 2 * (TW + 1), *y0 = t + 8 * (TW + 1), *y1 = y0 + 2 * TW;
    float *sums = y1 + 2 * TW;
    int64_t *key = (int64_t *)scratch;
    const int64_t want[6] = {(int64_t)(intptr_t)L, stamp, n, -2, oh0, oh1};
    if (memcmp(key, want, sizeof want)) {
        /* the input rows the tile's window reads: [oh0 - ph, oh1 - ph + 2) */
        const int64_t ih0 = oh0 - ph, r_hi = oh1 - ph + 2;
        const int64_t a = ih0 < 0 ? 0 : ih0, b = r_hi < H ? r_hi : H;
        int64_t inf = 0;
        for (int64_t c = 0; c < C; c++) {
            split_rows(xn + c * H * W, H, W, ih0, R, r_hi, pw, TW, s);
            transform_input(s, pairs, TW, v + c * T, vs, t);
            if (!inf && b > a) inf = any_inf(xn + (c * H + a) * W, (b - a) * W);
        }
        memcpy(key, want, sizeof want);
        key[6] = inf; /* kept with the transform: tiles of other channels read both */
    }
    const int relu = L[S_ACT] == PW_ACT_RELU;
    const float *w0 = wp + (o0 / PW_TR) * C * PW_TR;
#ifdef PW_WINO_X86
    const int vw = pw_vec_width();
    if (vw) { /* the sums as they lie, each point's T x tld */
        for (int pt = 0; pt < 16; pt++)
            pw_gemm_packed_t_sums(rows, T, C, w0 + pt * panels * C * PW_TR, skip, v + pt * vs, T, m + pt * ms);
        (vw == 16 ? output_wide_16 : output_wide_8)(m, ms, tld, skip, rows, pairs, TW, oh0, oh1, OW, OH * OW,
                                                    on + o0 * OH * OW, rn ? rn + o0 * OH * OW : NULL,
                                                    bias ? bias + o0 : NULL, relu);
        if (key[6]) redo_inf_blocks(L, xn, oh0, oh1, o0, o1, on, rn);
        return;
    }
#endif
    for (int pt = 0; pt < 16; pt++)
        pw_gemm_packed_t(rows, T, C, w0 + pt * panels * C * PW_TR, skip, v + pt * vs, T, m + pt * ms, T,
                         NULL, NULL, PW_ACT_NONE, sums);
    for (int64_t o = o0; o < o1; o++) {
        const float b = bias ? bias[o] : 0.0f;
        float *oc = on + o * OH * OW;
        const float *rc = rn ? rn + o * OH * OW : NULL;
        for (int64_t p = 0; p < pairs; p++) {
            const int64_t oh = oh0 + 2 * p;
            transform_output(m + (o - o0) * T + p * TW, ms, TW, y0, y1);
            store_row(oc + oh * OW, y0, rc ? rc + oh * OW : NULL, b, OW, relu);
            if (oh + 1 < oh1) store_row(oc + (oh + 1) * OW, y1, rc ? rc + (oh + 1) * OW : NULL, b, OW, relu);
        }
    }
    if (key[6]) redo_inf_blocks(L, xn, oh0, oh1, o0, o1, on, rn);
}

#else /* PW_VW: the output transform of one vector width, included twice by the body above */
#include "tile_simd.h"

/* A^T M A from the products' sums as they lie (position t's channels at m[t * tld + q], points ms
 * floats apart), along PW_VW channels at a time, for both rows of each pair; PW_VW / 2 blocks (PW_VW
 * output columns) of a row are transposed in registers into PW_VW channel rows, then bias, residual,
 * ReLU and a masked store: no pass over M in the channels-major layout. oc, rc: channel o0's plane. */
PW_VT static void PW_V(output_wide)(const float *m, int64_t ms, int64_t tld, int64_t row_skip, int64_t rows,
                                    int64_t pairs, int64_t TW, int64_t oh0, int64_t oh1, int64_t OW, int64_t plane,
                                    float *oc, const float *rc, const float *bias, int relu) {
    const vf zero = VZERO();
    for (int64_t p = 0; p < pairs; p++) {
        const int64_t oh = oh0 + 2 * p, second = oh + 1 < oh1;
        for (int64_t q0 = 0; q0 < row_skip + rows; q0 += PW_VW)
            for (int64_t c0 = 0; c0 < OW; c0 += PW_VW) {
                vf r0[PW_VW], r1[PW_VW];
                for (int jj = 0; jj < PW_VW / 2; jj++) {
                    const int64_t j = c0 / 2 + jj;
                    if (j >= TW) {
                        r0[2 * jj] = r0[2 * jj + 1] = r1[2 * jj] = r1[2 * jj + 1] = zero;
                        continue;
                    }
                    const float *mt = m + (p * TW + j) * tld + q0;
                    vf s[4][2];
                    for (int i = 0; i < 4; i++) {
                        const float *mi = mt + 4 * i * ms;
                        const vf m0 = VLOAD(mi), m1 = VLOAD(mi + ms), m2 = VLOAD(mi + 2 * ms), m3 = VLOAD(mi + 3 * ms);
                        s[i][0] = VADD(VADD(m0, m1), m2);
                        s[i][1] = VSUB(VSUB(m1, m2), m3);
                    }
                    for (int q = 0; q < 2; q++) {
                        r0[2 * jj + q] = VADD(VADD(s[0][q], s[1][q]), s[2][q]);
                        r1[2 * jj + q] = VSUB(VSUB(s[1][q], s[2][q]), s[3][q]);
                    }
                }
                PW_V(transpose)(r0);
                if (second) PW_V(transpose)(r1);
                const int64_t n = OW - c0 < PW_VW ? OW - c0 : PW_VW;
                const vmask mask = VMASK_N(n);
                for (int i = 0; i < PW_VW; i++) {
                    const int64_t row = q0 + i - row_skip;
                    if (row < 0 || row >= rows) continue;
                    const vf b = VSET1(bias ? bias[row] : 0.0f);
                    for (int h = 0; h <= second; h++) {
                        const int64_t at = row * plane + (oh + h) * OW + c0;
                        vf x = VADD(h ? r1[i] : r0[i], b);
                        if (rc) x = VADD(x, VLOADZ_M(mask, rc + at));
                        if (relu) x = VMAX(zero, x); /* max(0, NaN) is NaN: the second operand */
                        VSTORE_M(oc + at, mask, x);
                    }
                }
            }
    }
}
#endif /* PW_VW */
