/* Resizing kernels of the tile runtime: nearest and bilinear upsampling (upsample_nearest2d,
 * upsample_bilinear2d) and pixel_shuffle. All three are copies or 2x2 blends of a strided 4-D input.
 *
 * The source rows and columns, and the bilinear weights, come as tables made by the binder
 * (pathweave/tiles/bind_cnn.py) with eager's float32 arithmetic, so that every output reads the source
 * positions eager reads: a kernel that recomputed them here could round a coordinate the other way
 * (one contraction into an FMA moves an index by one where it lies on an integer).
 */
#include <string.h>

#include "tile_kernels.h"


/* out[n, c, h, w] = x[n, c, ih[h], iw[w]]; S_AUX: int64 ih[OH] then iw[OW] */
static int nearest_tile(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE;
    const int64_t *ih = (const int64_t *)(intptr_t)L[S_AUX], *iw = ih + os[2];
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++)
            for (int64_t h = lo[2]; h < hi[2]; h++) {
                const float *src = x + n * xs[0] + c * xs[1] + ih[h] * xs[2];
                float *d = out + ((n * os[1] + c) * os[2] + h) * os[3];
                for (int64_t w = lo[3]; w < hi[3]; w++) d[w] = src[iw[w] * xs[3]];
            }
    return 0;
}

/* out = (x[i0h, i0w] * l0w + x[i0h, i1w] * l1w) * l0h + (x[i1h, i0w] * l0w + x[i1h, i1w] * l1w) * l1h,
 * eager's order of the sums (its NCHW float kernel); S_AUX: int64 (i0, i1) per output row then per output
 * column; S_W: float32 (l0, l1) the same way */
PW_HOT_FN(static, int, bilinear_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE;
    const int64_t *ih = (const int64_t *)(intptr_t)L[S_AUX], *iw = ih + 2 * os[2];
    const float *lh = in_f(L[S_W]), *lw = lh + 2 * os[2];
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++) {
            const float *xc = x + n * xs[0] + c * xs[1];
            for (int64_t h = lo[2]; h < hi[2]; h++) {
                const float *r0 = xc + ih[2 * h] * xs[2], *r1 = xc + ih[2 * h + 1] * xs[2];
                const float l0h = lh[2 * h], l1h = lh[2 * h + 1];
                float *d = out + ((n * os[1] + c) * os[2] + h) * os[3];
                for (int64_t w = lo[3]; w < hi[3]; w++) {
                    const int64_t a = iw[2 * w] * xs[3], b = iw[2 * w + 1] * xs[3];
                    const float l0w = lw[2 * w], l1w = lw[2 * w + 1];
                    const float top = r0[a] * l0w + r0[b] * l1w, bottom = r1[a] * l0w + r1[b] * l1w;
                    d[w] = top * l0h + bottom * l1h;
                }
            }
        }
    return 0;
}

/* pixel_shuffle by r = S_KH: out[n, c, h, w] = x[n, (c * r + h % r) * r + w % r, h / r, w / r]; a row
 * interleaves r source rows (no division per value: a division per value cost 5x the copy) */
PW_HOT_FN(static, int, shuffle_tile, (const int64_t *L, const int32_t *lo, const int32_t *hi), (L, lo, hi)) {
    const float *x = in_f(L[S_X]);
    float *out = out_f(L[S_OUT]);
    const int64_t *os = L + S_OSHAPE, *xs = L + S_XSTRIDE, r = L[S_KH];
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t c = lo[1]; c < hi[1]; c++)
            for (int64_t h = lo[2]; h < hi[2]; h++) {
                const float *src = x + n * xs[0] + (c * r + h % r) * r * xs[1] + (h / r) * xs[2];
                float *d = out + ((n * os[1] + c) * os[2] + h) * os[3];
                int64_t w = lo[3], j = w / r, i = w % r;
                for (; w < hi[3] && i; w++) /* a tile starting inside a group (4-D tiles span whole rows today) */
                    d[w] = src[i * xs[1] + j * xs[3]], i = (i + 1) % r, j += i == 0;
                if (r == 2 && xs[3] == 1) {
                    const float *p0 = src, *p1 = src + xs[1];
                    for (; w + 1 < hi[3]; w += 2, j++) d[w] = p0[j], d[w + 1] = p1[j];
                } else {
                    for (; w + r <= hi[3]; w += r, j++)
                        for (int64_t k = 0; k < r; k++) d[w + k] = src[k * xs[1] + j * xs[3]];
                }
                for (int64_t k = 0; w < hi[3]; w++, k++) d[w] = src[k * xs[1] + j * xs[3]];
            }
    return 0;
}

int pw_resize_tile(const int64_t *layer, const int32_t *lo, const int32_t *hi) {
    switch (layer[S_OP]) {
    case PW_K_NEAREST: return nearest_tile(layer, lo, hi);
    case PW_K_BILINEAR: return bilinear_tile(layer, lo, hi);
    case PW_K_SHUFFLE: return shuffle_tile(layer, lo, hi);
    default: return 1;
    }
}
