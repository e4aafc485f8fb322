/* kh x 3 and kh x 2 stride-2 max pooling with AVX-512 (GoogLeNet's four pools, ResNet's stem pool).
 *
 * The separable loops of tile_kernels.c spent ~300 cycles per output row in short loops and their
 * remainders (GoogLeNet's 832 x 14 x 14 pool: 0.48 ms). Here 16 outputs of a row take 33 input columns:
 * two vectors and one float per input row, loaded with the columns outside the input as -inf, combined
 * over the window's rows, then split into the even, odd and next-even columns with two-source
 * permutes; the max keeps NaN as torch does. Only the columns the stored outputs read are loaded.
 */
#include "tile_kernels.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "tile_simd.h"

/* columns [c, c + 16) of row r, -inf outside [0, end) */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load_row(const float *r, int64_t c,
                                                                                  int64_t end) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), inside(c, end), r + c);
}

__attribute__((target("avx512f"))) static void pool_s2(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc,
                                                       int64_t OW, int64_t oh_lo, int64_t oh_hi, int64_t ow_lo,
                                                       int64_t ow_hi, int64_t kh, int64_t kw, int64_t ph,
                                                       int64_t pw) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i next = _mm512_add_epi32(even, _mm512_set1_epi32(2)); /* lane 15 reads 32: set after */
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        const int64_t hs = oh * 2 - ph;
        const int64_t h0 = hs > 0 ? hs : 0, h1 = hs + kh < H ? hs + kh : H;
        for (int64_t ow0 = ow_lo; ow0 < ow_hi; ow0 += 16) {
            const int64_t n = ow_hi - ow0 < 16 ? ow_hi - ow0 : 16, c = ow0 * 2 - pw;
            /* only the columns these outputs read: others may be another tile's, written meanwhile */
            const int64_t end = c + 2 * n + kw - 2 < W ? c + 2 * n + kw - 2 : W;
            __m512 a = _mm512_set1_ps(-INFINITY), b = a;
            float last = -INFINITY; /* column c + 32 */
            for (int64_t ih = h0; ih < h1; ih++) {
                const float *r = xc + ih * RS;
                a = vmax_nan(a, load_row(r, c, end));
                b = vmax_nan(b, load_row(r, c + 16, end));
                if (kw == 3 && c + 32 >= 0 && c + 32 < end) {
                    const float v = r[c + 32];
                    last = (v > last) | (v != v) ? v : last;
                }
            }
            __m512 out = vmax_nan(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
            if (kw == 3) {
                __m512 nx = _mm512_permutex2var_ps(a, next, b);
                nx = _mm512_mask_blend_ps((__mmask16)0x8000, nx, _mm512_set1_ps(last));
                out = vmax_nan(out, nx);
            }
            _mm512_mask_storeu_ps(oc + oh * OW + ow0, (__mmask16)((1u << n) - 1), out);
        }
    }
}

int pw_pool_s2_max(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t OW, int64_t oh_lo,
                   int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int64_t kh, int64_t kw, int64_t ph, int64_t pw) {
    static int have = -1; /* threads racing here store the same answer */
    int known = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") != 0;
        __atomic_store_n(&have, known, __ATOMIC_RELAXED);
    }
    if (!known) return 1;
    pool_s2(xc, RS, H, W, oc, OW, oh_lo, oh_hi, ow_lo, ow_hi, kh, kw, ph, pw);
    return 0;
}
#else
int pw_pool_s2_max(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t OW, int64_t oh_lo,
                   int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int64_t kh, int64_t kw, int64_t ph, int64_t pw) {
    (void)xc, (void)RS, (void)H, (void)W, (void)oc, (void)OW, (void)oh_lo, (void)oh_hi, (void)ow_lo, (void)ow_hi;
    (void)kh, (void)kw, (void)ph, (void)pw;
    return 1;
}
#endif
