/* Experiment (issue 21), compiled by tiles_blocked_1x1.py: a 1x1 convolution on a channel-blocked
 * input ([K/8][P][8], oneDNN's nChw8c), vectors along the output channels, 4 positions x 3 vectors of 8
 * channels per micro-tile, the weights packed [O/24][K][24]. Two stores: blocked ([O/8][P][8], what a
 * layout kept blocked between layers would write) and NCHW (the 4 x 8 sums transposed into 8 rows of 4
 * positions, what the tiles' NCHW buffers need). Not part of the package. AVX2 + FMA. */
#include <immintrin.h>
#include <stdint.h>

/* x: [K/8][P][8] (K a multiple of 8); y: blocked [O/8][P][8] if nchw == 0, else rows of ldy floats */
__attribute__((target("avx2,fma"))) void blocked_1x1(int64_t O, int64_t P, int64_t K, const float *x,
                                                      const float *w, float *y, int64_t ldy, int nchw) {
    for (int64_t g = 0; g < O / 24; g++) {
        const float *wg = w + g * K * 24;
        for (int64_t p = 0; p + 4 <= P; p += 4) {
            __m256 acc[4][3];
            for (int q = 0; q < 4; q++)
                for (int v = 0; v < 3; v++) acc[q][v] = _mm256_setzero_ps();
            for (int64_t kb = 0; kb < K / 8; kb++) {
                const float *xb = x + (kb * P + p) * 8, *wk = wg + kb * 8 * 24;
                _mm_prefetch((const char *)(xb + 64), _MM_HINT_T0);
                _mm_prefetch((const char *)(xb + 80), _MM_HINT_T0);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const __m256 w0 = _mm256_loadu_ps(wk + j * 24), w1 = _mm256_loadu_ps(wk + j * 24 + 8);
                    const __m256 w2 = _mm256_loadu_ps(wk + j * 24 + 16);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++) {
                        const __m256 b = _mm256_broadcast_ss(xb + q * 8 + j);
                        acc[q][0] = _mm256_fmadd_ps(b, w0, acc[q][0]);
                        acc[q][1] = _mm256_fmadd_ps(b, w1, acc[q][1]);
                        acc[q][2] = _mm256_fmadd_ps(b, w2, acc[q][2]);
                    }
                }
            }
            for (int v = 0; v < 3; v++) {
                if (!nchw) {
                    for (int q = 0; q < 4; q++) _mm256_storeu_ps(y + ((g * 3 + v) * P + p + q) * 8, acc[q][v]);
                    continue;
                }
                const __m256 t0 = _mm256_unpacklo_ps(acc[0][v], acc[1][v]), t1 = _mm256_unpackhi_ps(acc[0][v], acc[1][v]);
                const __m256 t2 = _mm256_unpacklo_ps(acc[2][v], acc[3][v]), t3 = _mm256_unpackhi_ps(acc[2][v], acc[3][v]);
                const __m256 r[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee),
                                     _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xee)};
                for (int j = 0; j < 4; j++) { /* r[j]: channel j's 4 positions, then channel j + 4's */
                    float *lo = y + (g * 24 + v * 8 + j) * ldy + p;
                    _mm_storeu_ps(lo, _mm256_castps256_ps128(r[j]));
                    _mm_storeu_ps(lo + 4 * ldy, _mm256_extractf128_ps(r[j], 1));
                }
            }
        }
    }
}
