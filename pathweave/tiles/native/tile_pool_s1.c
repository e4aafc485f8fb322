/* 3x3 stride-1 pooling with padding 1 with AVX-512 (GoogLeNet's inception-branch max pools, Inception-v3's
 * avg pools): max, or avg with one divisor for every output (count_include_pad).
 *
 * The plane-at-a-time loops of tile_kernels.c (pool_plane_s1) spent most of their time in the overhead of
 * seven short loops per plane on 14x14 and 17x17 maps (GoogLeNet's 512 x 14 x 14 pools ~0.14 ms each in
 * the model). Here 16 outputs of a row are one vector: the window's three rows are combined (masked
 * loads, -inf or 0 outside the row), then each column with its neighbours, rotated in from the previous
 * and next vectors of the row. The max keeps NaN as torch does; the avg adds the nine taps and divides,
 * as the plane loops did.
 */
#include "tile_kernels.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "tile_simd.h"

__attribute__((target("avx512f"), always_inline)) static inline __m512 combine(__m512 a, __m512 b, int is_max) {
    return is_max ? vmax_nan(a, b) : _mm512_add_ps(a, b);
}

/* columns [c0, c0 + 16) of output row oh's window rows combined (fill outside the input) */
__attribute__((target("avx512f"), always_inline)) static inline __m512
rows3(const float *xc, int64_t RS, int64_t H, int64_t W, int64_t oh, int64_t c0, __m512 fill, int is_max) {
    const __mmask16 m = inside(c0, W);
    __m512 acc = fill;
    for (int64_t ih = oh - 1; ih <= oh + 1; ih++)
        if (ih >= 0 && ih < H) acc = combine(acc, _mm512_mask_loadu_ps(fill, m, xc + ih * RS + c0), is_max);
    return acc;
}

/* per output row: the window's rows combined 16 columns at a time, then each column with its left and
 * right neighbours, taken across vector boundaries with lane rotations of the previous, current and next
 * vector */
__attribute__((target("avx512f"))) static void pool3(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc,
                                                     int64_t oh_lo, int64_t oh_hi, int is_max, float div) {
    const __m512 fill = _mm512_set1_ps(is_max ? -INFINITY : 0.0f), d = _mm512_set1_ps(div);
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        __m512 prev = fill, cur = rows3(xc, RS, H, W, oh, 0, fill, is_max);
        for (int64_t c0 = 0; c0 < W; c0 += 16) {
            const __m512 next = c0 + 16 < W ? rows3(xc, RS, H, W, oh, c0 + 16, fill, is_max) : fill;
            const __m512 left = _mm512_castsi512_ps(
                _mm512_alignr_epi32(_mm512_castps_si512(cur), _mm512_castps_si512(prev), 15));
            const __m512 right = _mm512_castsi512_ps(
                _mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(cur), 1));
            __m512 x = combine(combine(left, cur, is_max), right, is_max);
            if (!is_max) x = _mm512_div_ps(x, d);
            _mm512_mask_storeu_ps(oc + oh * W + c0, inside(c0, W), x);
            prev = cur, cur = next;
        }
    }
}
#define PW_POOL3_WIDE 1
#endif

int pw_pool3_s1(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t oh_lo, int64_t oh_hi,
                int is_max, float div) {
#ifdef PW_POOL3_WIDE
    static int wide = -1; /* threads racing here compute the same answer */
    if (__atomic_load_n(&wide, __ATOMIC_RELAXED) < 0) {
        __builtin_cpu_init();
        __atomic_store_n(&wide, __builtin_cpu_supports("avx512f") ? 1 : 0, __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(&wide, __ATOMIC_RELAXED) && W + 17 < (int64_t)1 << 31) {
        pool3(xc, RS, H, W, oc, oh_lo, oh_hi, is_max, div);
        return 0;
    }
#endif
    (void)xc, (void)RS, (void)H, (void)W, (void)oc, (void)oh_lo, (void)oh_hi, (void)is_max, (void)div;
    return 1;
}
