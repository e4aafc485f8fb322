/* 3x3 stride-1 pooling with padding 1 in vectors (GoogLeNet's inception-branch max pools, Inception-v3's
 * avg pools): max, or avg with one divisor for every output (count_include_pad).
 *
 * The plane-at-a-time loops of tile_kernels.c (pool_plane_s1) spent most of their time in the overhead of
 * seven short loops per plane on 14x14 and 17x17 maps (GoogLeNet's 512 x 14 x 14 pools ~0.14 ms each in
 * the model). Here PW_VW outputs of a row are one vector: the window's three rows are combined (masked
 * loads, -inf or 0 outside the row), then each column with its neighbours, shifted in from the previous
 * and next vectors of the row. The max keeps NaN as torch does; the avg adds the nine taps and divides,
 * as the plane loops did. One source for AVX-512 and AVX2 (tile_simd.h: the vector section at the end of
 * the file is included once per width).
 *
 * At AVX2, planes whose rows lie end to end (row stride W) and are at least a vector wide run pool3_flat
 * instead: vectors over the plane's flat positions, not over each row, so no lane is left empty at a row's
 * end (a 17-wide row filled 3 vectors of 8), the column edges masked per lane. On a Zen 3, alone, it took
 * 0.52-0.88x the time of the row kernel on Inception-v3's and GoogLeNet's maps and row pieces (768 x 17 x
 * 17 avg, whole planes: 110 vs 197 us); in the models at 1 worker Inception-v3's avg pools 3.43 -> 2.58 ms,
 * GoogLeNet's max pools (strided ones included) 2.14 -> 1.81 ms. AVX-512 keeps the row kernel (not measured
 * on an AVX-512 machine yet).
 */
#ifndef PW_VW /* the file's body; the vector kernel is at its end */
#include <math.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_POOL3_X86 1
#define PW_VW 16
#include "tile_pool_s1.c" /* the kernel below for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_pool_s1.c" /* and for AVX2 */
#undef PW_VW
#endif

int pw_pool3_s1(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t oh_lo, int64_t oh_hi,
                int is_max, float div) {
#ifdef PW_POOL3_X86
    const int vw = pw_vec_width(); /* the level the matrix kernels run (PATHWEAVE_ISA may lower it) */
    if (vw == 8 && RS == W && W >= 8 && H * W + 16 < (int64_t)1 << 31) { /* flat indices in 32-bit lanes */
        pool3_flat_8(xc, H, W, oc, oh_lo, oh_hi, is_max, div);
        return 0;
    }
    if (vw && W + 2 * vw < (int64_t)1 << 31) { /* column indices in 32-bit lanes */
        (vw == 16 ? pool3_16 : pool3_8)(xc, RS, H, W, oc, oh_lo, oh_hi, is_max, div);
        return 0;
    }
#endif
    (void)xc, (void)RS, (void)H, (void)W, (void)oc, (void)oh_lo, (void)oh_hi, (void)is_max, (void)div;
    return 1;
}

#else /* PW_VW: the kernel of one vector width, included twice by the body above */
#include "tile_simd.h"

PW_VTI vf PW_V(combine)(vf a, vf b, int is_max) { return is_max ? PW_V(vmax_nan)(a, b) : VADD(a, b); }

/* columns [c0, c0 + PW_VW) of output row oh's window rows combined (fill outside the input); a vector
 * inside the row loads plainly (AVX2's masked load and blend, on the critical path, took ~25% of the time) */
PW_VTI vf PW_V(rows3)(const float *xc, int64_t RS, int64_t H, int64_t W, int64_t oh, int64_t c0, vf fill,
                      int is_max) {
    const int full = c0 + PW_VW <= W;
    const vmask m = full ? VMASK_ALL : PW_V(inside)(c0, W);
    vf acc = fill;
    for (int64_t ih = oh - 1; ih <= oh + 1; ih++)
        if (ih >= 0 && ih < H) {
            const float *p = xc + ih * RS + c0;
            acc = PW_V(combine)(acc, full ? VLOAD(p) : VLOADF_M(fill, m, p), is_max);
        }
    return acc;
}

/* per output row: the window's rows combined PW_VW columns at a time, then each column with its left and
 * right neighbours, taken across vector boundaries from the previous, current and next vector */
PW_VT static void PW_V(pool3)(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t oh_lo,
                              int64_t oh_hi, int is_max, float div) {
    const vf fill = VSET1(is_max ? -INFINITY : 0.0f), d = VSET1(div);
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        vf prev = fill, cur = PW_V(rows3)(xc, RS, H, W, oh, 0, fill, is_max);
        for (int64_t c0 = 0; c0 < W; c0 += PW_VW) {
            const vf next = c0 + PW_VW < W ? PW_V(rows3)(xc, RS, H, W, oh, c0 + PW_VW, fill, is_max) : fill;
            const vf left = PW_V(left_in)(prev, cur), right = PW_V(right_in)(cur, next);
            vf x = PW_V(combine)(PW_V(combine)(left, cur, is_max), right, is_max);
            if (!is_max) x = VDIV(x, d);
            if (c0 + PW_VW <= W)
                VSTORE(oc + oh * W + c0, x);
            else
                VSTORE_M(oc + oh * W + c0, PW_V(inside)(c0, W), x);
            prev = cur, cur = next;
        }
    }
}

#if PW_VW == 8
/* the window's three rows combined for the PW_VW flat positions from q (rows lie end to end: the rows above
 * and below are W floats away), reading only [lo, hi): the input rows the tile depends on; fill outside */
PW_VTI vf PW_V(flat_rows3)(const float *xc, int64_t q, int64_t W, int64_t lo, int64_t hi, vf fill, int is_max) {
    vf acc = fill;
    if (q - W >= lo && q + W + PW_VW <= hi) {
        acc = PW_V(combine)(acc, VLOAD(xc + q - W), is_max);
        acc = PW_V(combine)(acc, VLOAD(xc + q), is_max);
        return PW_V(combine)(acc, VLOAD(xc + q + W), is_max);
    }
    acc = PW_V(combine)(acc, VLOADF_M(fill, PW_V(inside)(q - W - lo, hi - lo), xc + q - W), is_max);
    acc = PW_V(combine)(acc, VLOADF_M(fill, PW_V(inside)(q - lo, hi - lo), xc + q), is_max);
    return PW_V(combine)(acc, VLOADF_M(fill, PW_V(inside)(q + W - lo, hi - lo), xc + q + W), is_max);
}

/* output rows [oh_lo, oh_hi) of a plane whose rows lie end to end, PW_VW flat positions a vector (W >=
 * PW_VW): the rows combined, then each position with its flat neighbours (shifted in from the previous
 * and next vectors), fill in for the left neighbour of column 0 and the right one of column W - 1. The
 * same combines in the same order as pool3, so the same results bit for bit. */
PW_VTI void PW_V(pool3_flat_as)(const float *xc, int64_t H, int64_t W, float *oc, int64_t oh_lo, int64_t oh_hi,
                                 int is_max, float div) {
    const vf fill = VSET1(is_max ? -INFINITY : 0.0f), d = VSET1(div);
    const int64_t p0 = oh_lo * W, p1 = oh_hi * W;
    const int64_t lo = oh_lo > 0 ? p0 - W : 0, hi = oh_hi < H ? p1 + W : H * W;
    vf prev = PW_V(flat_rows3)(xc, p0 - PW_VW, W, lo, hi, fill, is_max);
    vf cur = PW_V(flat_rows3)(xc, p0, W, lo, hi, fill, is_max);
    /* each lane's column, kept in [0, W) as the vectors advance (p0 starts a row, and W >= PW_VW: the first
     * vector's columns are its lanes, and each step wraps at most once) */
    const __m256i w = _mm256_set1_epi32((int)W), last = _mm256_set1_epi32((int)W - 1), step = _mm256_set1_epi32(PW_VW);
    __m256i col = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t q = p0; q < p1; q += PW_VW) {
        const vf next = PW_V(flat_rows3)(xc, q + PW_VW, W, lo, hi, fill, is_max);
        const vf left = VBLEND_M(_mm256_cmpeq_epi32(col, _mm256_setzero_si256()), PW_V(left_in)(prev, cur), fill);
        const vf right = VBLEND_M(_mm256_cmpeq_epi32(col, last), PW_V(right_in)(cur, next), fill);
        vf x = PW_V(combine)(PW_V(combine)(left, cur, is_max), right, is_max);
        if (!is_max) x = VDIV(x, d);
        if (q + PW_VW <= p1)
            VSTORE(oc + q, x);
        else
            VSTORE_M(oc + q, VMASK_N(p1 - q), x);
        prev = cur, cur = next;
        col = _mm256_add_epi32(col, step);
        col = _mm256_sub_epi32(col, _mm256_andnot_si256(_mm256_cmpgt_epi32(w, col), w));
    }
}

/* max and avg each as its own loop (is_max a constant in each) */
PW_VT static void PW_V(pool3_flat)(const float *xc, int64_t H, int64_t W, float *oc, int64_t oh_lo, int64_t oh_hi,
                                   int is_max, float div) {
    if (is_max)
        PW_V(pool3_flat_as)(xc, H, W, oc, oh_lo, oh_hi, 1, div);
    else
        PW_V(pool3_flat_as)(xc, H, W, oc, oh_lo, oh_hi, 0, div);
}
#endif
#endif /* PW_VW */
