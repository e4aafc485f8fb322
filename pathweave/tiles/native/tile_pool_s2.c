/* kh x 3 and kh x 2 stride-2 max pooling in vectors (GoogLeNet's four pools, ResNet's stem pool).
 *
 * The separable loops of tile_kernels.c spent ~300 cycles per output row in short loops and their
 * remainders (GoogLeNet's 832 x 14 x 14 pool: 0.48 ms). Here PW_VW outputs of a row take 2 PW_VW + 1
 * input columns: two vectors and one float per input row, loaded with the columns outside the input as
 * -inf, combined over the window's rows, then split into the even, odd and next-even columns; the max
 * keeps NaN as torch does. Only the columns the stored outputs read are loaded. One source for AVX-512
 * and AVX2 (tile_simd.h: the vector section at the end of the file is included once per width).
 *
 * A window whose three rows all lie inside the input (every row but the edges) combines them unrolled, no
 * -inf to start from: alone on a Zen 3 (AVX2, the planes of a layer one after another) the 64x147x147,
 * 192x71x71 and 64x112x112 pools took 0.73-0.78x the time of the row loop, 288x35x35 to 768x17x17
 * 0.82-0.91x, 832x14x14 1.05x.
 */
#ifndef PW_VW /* the file's body; the vector kernel is at its end */
#include <math.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

/* floats ahead along each window row that the kernel prefetches (settable for A/B): 64 (4 lines), alone on a
 * Zen 3 the 64x147x147 and 192x56x56 pools 0.91x of the time with the prefetch 0 floats ahead (32 to 256 alike) */
int pw_pool_prefetch = 64;

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_POOL_S2_X86 1
#define PW_VW 16
#include "tile_pool_s2.c" /* the kernel below for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_pool_s2.c" /* and for AVX2 */
#undef PW_VW
#endif

int pw_pool_s2_max(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t OW, int64_t oh_lo,
                   int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int64_t kh, int64_t kw, int64_t ph, int64_t pw) {
#ifdef PW_POOL_S2_X86
    const int vw = pw_vec_width(); /* the level the matrix kernels run (PATHWEAVE_ISA may lower it) */
    if (vw) {
        (vw == 16 ? pool_s2_16 : pool_s2_8)(xc, RS, H, W, oc, OW, oh_lo, oh_hi, ow_lo, ow_hi, kh, kw, ph, pw);
        return 0;
    }
#endif
    (void)xc, (void)RS, (void)H, (void)W, (void)oc, (void)OW, (void)oh_lo, (void)oh_hi, (void)ow_lo, (void)ow_hi;
    (void)kh, (void)kw, (void)ph, (void)pw;
    return 1;
}

#else /* PW_VW: the kernel of one vector width, included twice by the body above */
#include "tile_simd.h"

/* columns [c, c + PW_VW) of row r, -inf outside [0, end); plainly where all lie inside (AVX2's masked
 * load and blend cost ~1.5x) */
PW_VTI vf PW_V(load_row)(const float *r, int64_t c, int64_t end) {
    if (c >= 0 && c + PW_VW <= end) return VLOAD(r + c);
    return VLOADF_M(VSET1(-INFINITY), PW_V(inside)(c, end), r + c);
}

PW_VT static void PW_V(pool_s2)(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t OW,
                                int64_t oh_lo, int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int64_t kh, int64_t kw,
                                int64_t ph, int64_t pw) {
    const int64_t ahead = pw_pool_prefetch; /* read once: a global is reloaded at every use otherwise */
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        const int64_t hs = oh * 2 - ph;
        const int64_t h0 = hs > 0 ? hs : 0, h1 = hs + kh < H ? hs + kh : H;
        for (int64_t ow0 = ow_lo; ow0 < ow_hi; ow0 += PW_VW) {
            const int64_t n = ow_hi - ow0 < PW_VW ? ow_hi - ow0 : PW_VW, c = ow0 * 2 - pw;
            /* only the columns these outputs read: others may be another tile's, written meanwhile */
            const int64_t end = c + 2 * n + kw - 2 < W ? c + 2 * n + kw - 2 : W;
            vf a = VSET1(-INFINITY), b = a, last = a; /* last: column c + 2 PW_VW in every lane */
            const int third = kw == 3 && c + 2 * PW_VW >= 0 && c + 2 * PW_VW < end;
            if (h1 - h0 == 3) { /* three rows inside the input (a 3-row window but the edges): unrolled */
                const float *r0 = xc + h0 * RS, *r1 = r0 + RS, *r2 = r1 + RS;
                _mm_prefetch((const char *)(r0 + c + ahead), _MM_HINT_T0);
                _mm_prefetch((const char *)(r1 + c + ahead), _MM_HINT_T0);
                _mm_prefetch((const char *)(r2 + c + ahead), _MM_HINT_T0);
                /* a NaN anywhere reaches the result in any order (vmax_nan), so no -inf to start from */
                a = PW_V(vmax_nan)(PW_V(vmax_nan)(PW_V(load_row)(r0, c, end), PW_V(load_row)(r1, c, end)),
                                   PW_V(load_row)(r2, c, end));
                b = PW_V(vmax_nan)(
                    PW_V(vmax_nan)(PW_V(load_row)(r0, c + PW_VW, end), PW_V(load_row)(r1, c + PW_VW, end)),
                    PW_V(load_row)(r2, c + PW_VW, end));
                if (third)
                    last = PW_V(vmax_nan)(PW_V(vmax_nan)(VSET1(r0[c + 2 * PW_VW]), VSET1(r1[c + 2 * PW_VW])),
                                          VSET1(r2[c + 2 * PW_VW]));
            } else
            for (int64_t ih = h0; ih < h1; ih++) {
                const float *r = xc + ih * RS;
                _mm_prefetch((const char *)(r + c + ahead), _MM_HINT_T0);
                a = PW_V(vmax_nan)(a, PW_V(load_row)(r, c, end));
                b = PW_V(vmax_nan)(b, PW_V(load_row)(r, c + PW_VW, end));
                /* in vectors: a scalar compare here was a branch on the data, mispredicted half the time */
                if (third) last = PW_V(vmax_nan)(last, VSET1(r[c + 2 * PW_VW]));
            }
            const vf even = PW_V(even)(a, b);
            vf out = PW_V(vmax_nan)(even, PW_V(odd)(a, b));
            if (kw == 3) out = PW_V(vmax_nan)(out, PW_V(right_in)(even, last)); /* columns 2 i + 2 */
            VSTORE_M(oc + oh * OW + ow0, VMASK_N(n), out);
        }
    }
}
#endif /* PW_VW */
