/* The transposed micro-kernel (see tile_gemm.h, pw_gemm_packed_t) for tiles of few positions.
 *
 * pw_gemm_packed's vectors run along a row of C (positions): a tile of 49 positions (a 7x7 map) fills
 * 3 + 1 vectors of 16 and the last, one-column pass costs about a third of a full one (ResNet-50's 7x7
 * layers ran at ~145 GFLOP/s against ~230 for wide tiles). Here the vectors run along a column of C
 * (output channels): per k, one or two vectors of 16 packed weights and up to PW_TJ positions of B, each
 * broadcast, so a narrow tile wastes no lanes and the position tail is a cheaper kernel of fewer
 * broadcasts. The sums land transposed in the worker's scratch (positions x channels, added across k
 * blocks with whole-vector loads) and one pass writes them to C with the bias, residual and ReLU.
 *
 * One source for both x86 widths (tile_simd.h: the kernel section at the end of the file is included
 * once per width). A panel of PW_TR = 16 channels is one vector of AVX-512 and two of AVX2; a micro-tile
 * is at most 2 vectors of channels by PW_TJ_MAX (AVX-512: 28 of 32 registers) or PW_TJ_8 (AVX2: 12 of
 * 16) positions.
 */
#ifndef PW_VW /* the file's body; the vector kernels are at its end */
#include <stddef.h>
#include <string.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

#define PW_TJ 12     /* rows of A per micro-tile of pw_gemm_rows: 2 x 12 accumulators of 16 floats */
#define PW_TJ_MAX 14 /* positions per micro-tile of a run: up to 2 x 14 accumulators */
#define PW_TJ_8 6    /* AVX2: positions (and rows of A) per micro-tile, 2 x 6 accumulators of 8 floats */
#define PW_TKC 512   /* k per block: a block of weights (up to ~128 KB per tile) stays in L2 */
#define PW_TPF 64    /* k ahead for the weight prefetch */
#define PW_TPF_B 6   /* k ahead for B's prefetch (through koff: PW_KOFF_PAD entries follow its end) */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the most positions per micro-tile of a run, PW_TJ_MAX; settable for experiments (A/B in one process) */
int pw_tj_max = PW_TJ_MAX;
/* k per block of the runs' products (at most PW_TKC), settable for experiments */
int pw_tkc = PW_TKC;

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_T_X86 1
#define PW_VW 16
#include "tile_gemm_t.c" /* the kernels at the end of this file for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_gemm_t.c" /* and for AVX2 */
#undef PW_VW
#endif

/* the same sums, any CPU */
static void block_generic(int mv, int nj, int step, int64_t kc, const float *a, int64_t lda, const float *b,
                          int64_t ldb, const int64_t *koff, const int64_t *poff, float *t, int64_t tld, int first) {
    for (int j = 0; j < nj; j++)
        for (int r = 0; r < PW_TR * mv; r++) {
            const float *ar = a + (r / PW_TR) * lda + r % PW_TR;
            const int64_t pj = poff ? poff[j] : j * step;
            float x = 0.0f;
            for (int64_t k = 0; k < kc; k++) x += ar[k * PW_TR] * b[(koff ? koff[k] : k * ldb) + pj];
            t[j * tld + r] = first ? x : t[j * tld + r] + x;
        }
}

typedef void (*block_fn)(int, int, int, int64_t, const float *, int64_t, const float *, int64_t, const int64_t *,
                         const int64_t *, float *, int64_t, int);

/* the chosen width's sums: its block function, the most positions per micro-tile, panels per call */
typedef struct {
    block_fn block;
    int most, panels;
} tkernel;

static tkernel pick_block(void) {
#ifdef PW_T_X86
    switch (pw_vec_width()) {
    case 16: return (tkernel){block_t_16, PW_TJ_MAX, 2};
    case 8: return (tkernel){block_t_8, PW_TJ_8, 1};
    }
#endif
    return (tkernel){block_generic, PW_TJ_MAX, 2};
}

/* the sums of every run into t (positions x tld channels), no writeback. The runs' positions are taken
 * together, in chunks of equal size (+-1) up to pw_tj_max: ResNet's rows of 56, 28 and 14 positions split
 * into whole chunks of 14 where steps of 12 left tails of 8, 4 and 2, and a stride-2 layer's rows of 7 (a
 * run each) do not leave AVX2's 6-wide micro-tiles half empty (2 chunks of 3 and 4 per row). A chunk
 * that crosses from one run into the next reads its positions through offsets (poff); the others at a
 * fixed step. t holds run r's position i at r * width + i. */
static void products(tkernel kern, int64_t rows, int64_t K, const float *wp, int64_t row_skip, const float *b,
                     int64_t ldb, const pw_truns *u, float *t) {
    const int64_t panels = (row_skip + rows + PW_TR - 1) / PW_TR, tld = panels * PW_TR, lda = K * PW_TR;
    const int64_t most = pw_tj_max < 1 ? 1 : pw_tj_max > kern.most ? kern.most : pw_tj_max; /* the kernels' cases */
    const int64_t total = u->runs * u->width, KC = pw_tkc, chunks = (total + most - 1) / most;
    int64_t off[PW_TJ_MAX];
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = min64(KC, K - k0);
        const float *bk = u->koff ? b : b + k0 * ldb;
        for (int64_t i = 0; i < chunks; i++) {
            const int64_t p = i * total / chunks, nj = (i + 1) * total / chunks - p;
            const int64_t r = p / u->width, at = p % u->width;
            const float *bp = bk + r * u->bpitch + at * u->step;
            const int64_t *po = NULL;
            if (at + nj > u->width) { /* into the next run(s) */
                for (int64_t j = 0; j < nj; j++)
                    off[j] = ((p + j) / u->width - r) * u->bpitch + ((p + j) % u->width - at) * u->step;
                po = off;
            }
            for (int64_t q = 0; q < panels; q += kern.panels)
                kern.block((int)min64(kern.panels, panels - q), (int)nj, (int)u->step, kc, wp + q * lda + k0 * PW_TR,
                           lda, bp, ldb, u->koff ? u->koff + k0 : NULL, po, t + p * tld + q * PW_TR, tld, k0 == 0);
        }
    }
}

void pw_gemm_packed_t_sums(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip,
                           const float *b, int64_t ldb, float *t) {
    const pw_truns u = {1, cols, 1, 0, NULL, 1, cols, cols};
    products(pick_block(), rows, K, wp, row_skip, b, ldb, &u, t);
}

void pw_gemm_packed_t_runs(int64_t rows, int64_t K, const float *wp, int64_t row_skip, const float *b,
                           int64_t ldb, const pw_truns *u, float *c, int64_t ldc, const float *bias,
                           const float *res, int act, float *t) {
    const int64_t tld = (row_skip + rows + PW_TR - 1) / PW_TR * PW_TR;
    const tkernel kern = pick_block();
    products(kern, rows, K, wp, row_skip, b, ldb, u, t);
    const int relu = act == PW_ACT_RELU;
    const int64_t segs = u->segs, seg = u->seg, pitch = u->pitch;
#ifdef PW_T_X86
    if (kern.block == block_t_16 || kern.block == block_t_8) {
        (kern.block == block_t_16 ? writeback_t_16 : writeback_t_8)(rows, segs, seg, pitch, row_skip, t, tld, c, ldc,
                                                                     bias, res, relu);
        return;
    }
#endif
    for (int64_t i = 0; i < rows; i++) { /* C's rows from the scratch's columns, epilogue included */
        const float *ti = t + row_skip + i;
        float *ci = c + i * ldc;
        const float *ri = res ? res + i * ldc : NULL;
        const float bi = bias ? bias[i] : 0.0f;
        for (int64_t p = 0; p < segs * seg; p++) {
            float x = ti[((p / seg) * pitch + p % seg) * tld] + bi;
            if (ri) x += ri[p];
            if (relu) x = x > 0.0f ? x : (x != x ? x : 0.0f);
            ci[p] = x;
        }
    }
}

void pw_gemm_packed_t(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip, const float *b,
                      int64_t ldb, float *c, int64_t ldc, const float *bias, const float *res, int act, float *t) {
    const pw_truns u = {1, cols, 1, 0, NULL, 1, cols, cols};
    pw_gemm_packed_t_runs(rows, K, wp, row_skip, b, ldb, &u, c, ldc, bias, res, act, t);
}

static void rows_generic(int mv, int nj, int64_t kc, const float *w, int64_t ldw, const float *a, int64_t lda,
                         float *c, int64_t ldc, int64_t ncol, int first) {
    for (int j = 0; j < nj; j++)
        for (int v = 0; v < mv; v++)
            for (int i = 0; i < min64(PW_TR, ncol - v * PW_TR); i++) {
                float x = 0.0f;
                for (int64_t k = 0; k < kc; k++) x += w[v * ldw + k * PW_TR + i] * a[j * lda + k];
                float *cp = c + j * ldc + PW_TR * v + i;
                *cp = first ? x : *cp + x;
            }
}

void pw_gemm_rows(int64_t rows, int64_t cols, int64_t K, const float *a, int64_t lda, const float *wp, float *c,
                  int64_t ldc) {
    const int64_t panels = (cols + PW_TR - 1) / PW_TR, ldw = K * PW_TR;
    void (*block)(int, int, int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, int64_t,
                  int) = rows_generic;
    int64_t tj = PW_TJ, step = 2; /* rows of A per micro-tile, panels per call */
#ifdef PW_T_X86
    if (pw_vec_width() == 16) block = rows_t_16;
    if (pw_vec_width() == 8) block = rows_t_8, tj = PW_TJ_8, step = 1;
#endif
    /* rows of A a multiple of 4 KiB apart share their L1 sets (K = 3072: ~160 GFLOP/s against ~210):
     * each block of them is copied first to rows PW_TKC + 16 floats apart */
    const int stage = (lda * (int64_t)sizeof(float)) % 4096 == 0 && rows > 1;
    float staged[PW_TJ * (PW_TKC + 16)];
    for (int64_t k0 = 0; k0 < K; k0 += PW_TKC) {
        const int64_t kc = min64(PW_TKC, K - k0);
        for (int64_t t = 0; t < rows; t += tj) {
            const int nj = (int)min64(tj, rows - t);
            const float *at = a + t * lda + k0;
            int64_t ld = lda;
            if (stage) {
                for (int j = 0; j < nj; j++) memcpy(staged + j * (PW_TKC + 16), at + j * lda, sizeof(float) * kc);
                at = staged, ld = PW_TKC + 16;
            }
            for (int64_t q = 0; q < panels; q += step) {
                const int mv = (int)min64(step, panels - q);
                block(mv, nj, kc, wp + q * ldw + k0 * PW_TR, ldw, at, ld, c + t * ldc + q * PW_TR, ldc,
                      cols - q * PW_TR, k0 == 0);
            }
        }
    }
}

#else /* PW_VW: the kernels of one vector width, included twice by the body above */
#include "tile_simd.h"

#define PW_VPP (PW_TR / PW_VW) /* vectors per panel */
#define PW_TJW (PW_VW == 16 ? PW_TJ_MAX : PW_TJ_8)

/* out[j][PW_VW v ..] (+)= sum_k A(k, v) * B(k, j) over kc values of k, for nv vectors of rows of A (vector
 * v: panel v / PW_VPP, lda floats apart, k-major) and nj broadcast operands B(k, j) = b[koff[k] + j * step]
 * (koff NULL: k * ldb). step is a constant (1 or 2: positions of a tile) or 0 for pstride (rows of A read
 * in place by pw_gemm_rows, where k advances by 1 and j by a row). Vector v stores under mask[v]. */
PW_VTI void PW_V(kernel)(const int nv, const int nj, const int step, int64_t kc, const float *a, int64_t lda,
                         const float *b, int64_t ldb, const int64_t *koff, const int64_t *poff, int64_t pstride,
                         float *out, int64_t ldo, const vmask *mask, int first) {
    const int64_t ps = step ? step : pstride;
    int64_t off[PW_TJW]; /* B(k, j) at b + koff[k] + off[j]: j * ps, or poff's (constants fold where it is NULL) */
#pragma GCC unroll 14
    for (int j = 0; j < nj; j++) off[j] = poff ? poff[j] : j * ps;
    vf acc[PW_TJW][2];
#pragma GCC unroll 14
    for (int j = 0; j < nj; j++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) acc[j][v] = VZERO();
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * PW_TR, *bk = b + (koff ? koff[k] : k * ldb);
        if (step) { /* rows of A stream in order: the hardware prefetches them */
            const float *bn = b + (koff ? koff[k + PW_TPF_B] : (k + PW_TPF_B) * ldb);
            _mm_prefetch((const char *)bn, _MM_HINT_T0);
            if (poff || nj * step > 8) _mm_prefetch((const char *)(bn + off[nj - 1]), _MM_HINT_T0);
        }
        vf av[2];
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            const float *ap = ak + (v / PW_VPP) * lda + (v % PW_VPP) * PW_VW;
            av[v] = VLOAD(ap);
            if (v % PW_VPP == 0) _mm_prefetch((const char *)(ap + PW_TPF * PW_TR), _MM_HINT_T0);
        }
#pragma GCC unroll 14
        for (int j = 0; j < nj; j++) {
            const vf bj = VSET1(bk[off[j]]);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) acc[j][v] = VFMA(av[v], bj, acc[j][v]);
        }
    }
#pragma GCC unroll 14
    for (int j = 0; j < nj; j++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            float *op = out + j * ldo + PW_VW * v;
            vf x = acc[j][v];
            if (!first) x = VADD(x, VLOADZ_M(mask[v], op));
            VSTORE_M(op, mask[v], x);
        }
}

/* a case of CASE for every count of broadcast operands, 1 .. PW_TJW, and NV vectors */
#if PW_VW == 16
#define PW_NJ_SWITCH(CASE, NV)                                                                               \
    switch (nj) {                                                                                            \
        CASE(NV, 1) CASE(NV, 2) CASE(NV, 3) CASE(NV, 4) CASE(NV, 5) CASE(NV, 6) CASE(NV, 7) CASE(NV, 8)      \
        CASE(NV, 9) CASE(NV, 10) CASE(NV, 11) CASE(NV, 12) CASE(NV, 13) CASE(NV, 14)                         \
    }
#else
#define PW_NJ_SWITCH(CASE, NV)                                                                               \
    switch (nj) { CASE(NV, 1) CASE(NV, 2) CASE(NV, 3) CASE(NV, 4) CASE(NV, 5) CASE(NV, 6) }
#endif
#define PW_T_CASE(NV, NJ)                                                                                    \
    case NJ:                                                                                                 \
        if (poff) /* with or without koff: B(k, j) at b + (koff ? koff[k] : k ldb) + poff[j] */              \
            PW_V(kernel)(NV, NJ, 1, kc, a, lda, b, ldb, koff, poff, 0, t, tld, all, first);                  \
        else if (!koff)                                                                                      \
            PW_V(kernel)(NV, NJ, 1, kc, a, lda, b, ldb, NULL, NULL, 0, t, tld, all, first);                  \
        else if (step == 1)                                                                                  \
            PW_V(kernel)(NV, NJ, 1, kc, a, lda, b, 0, koff, NULL, 0, t, tld, all, first);                    \
        else                                                                                                 \
            PW_V(kernel)(NV, NJ, 2, kc, a, lda, b, 0, koff, NULL, 0, t, tld, all, first);                    \
        break;

/* mv panels (AVX2: one) of sums for nj positions into t */
PW_VT static void PW_V(block_t)(int mv, int nj, int step, int64_t kc, const float *a, int64_t lda, const float *b,
                                int64_t ldb, const int64_t *koff, const int64_t *poff, float *t, int64_t tld,
                                int first) {
    const vmask all[2] = {VMASK_ALL, VMASK_ALL};
    if (mv * PW_VPP == 2) {
        PW_NJ_SWITCH(PW_T_CASE, 2)
    } else {
        PW_NJ_SWITCH(PW_T_CASE, 1)
    }
}

/* C's rows from the sums, PW_VW x PW_VW at a time through registers (a strided scalar pass took ~12
 * cycles per output: a third of the product on ResNet-50's 7x7 layers of k = 512); segment s of C's row
 * (seg positions) comes from the sums' positions from s * pitch */
PW_VT static void PW_V(writeback_t)(int64_t rows, int64_t segs, int64_t seg, int64_t pitch, int64_t row_skip,
                                    const float *t, int64_t tld, float *c, int64_t ldc, const float *bias,
                                    const float *res, int relu) {
    const vf zero = VZERO();
    for (int64_t s = 0; s < segs; s++)
        for (int64_t p0 = 0; p0 < seg; p0 += PW_VW) {
            const int64_t n = min64(PW_VW, seg - p0), at = s * seg + p0;
            const vmask m = VMASK_N(n);
            for (int64_t q0 = 0; q0 < row_skip + rows; q0 += PW_VW) {
                vf r[PW_VW];
                for (int j = 0; j < PW_VW; j++) r[j] = j < n ? VLOAD(t + (s * pitch + p0 + j) * tld + q0) : zero;
                PW_V(transpose)(r);
                for (int i = 0; i < PW_VW; i++) {
                    const int64_t row = q0 + i - row_skip;
                    if (row < 0 || row >= rows) continue;
                    vf x = r[i];
                    if (bias) x = VADD(x, VSET1(bias[row]));
                    if (res) x = VADD(x, VLOADZ_M(m, res + row * ldc + at));
                    if (relu) x = VMAX(zero, x); /* max(0, NaN) is NaN: the second operand */
                    VSTORE_M(c + row * ldc + at, m, x);
                }
            }
        }
}

#define PW_R_CASE(NV, NJ)                                                                                    \
    case NJ:                                                                                                 \
        PW_V(kernel)(NV, NJ, 0, kc, w, ldw, a, 1, NULL, NULL, lda, c, ldc, m, first);                        \
        break;

/* pw_gemm_rows' micro-tile: mv panels of B (AVX2: one), ncol of C's columns left from the first */
PW_VT static void PW_V(rows_t)(int mv, int nj, int64_t kc, const float *w, int64_t ldw, const float *a,
                               int64_t lda, float *c, int64_t ldc, int64_t ncol, int first) {
    const int64_t nv = min64(mv * PW_VPP, (ncol + PW_VW - 1) / PW_VW); /* vectors holding any column */
    const vmask m[2] = {VMASK_N(min64(PW_VW, ncol)), VMASK_N(ncol > PW_VW ? min64(PW_VW, ncol - PW_VW) : 0)};
    if (nv == 2) {
        PW_NJ_SWITCH(PW_R_CASE, 2)
    } else {
        PW_NJ_SWITCH(PW_R_CASE, 1)
    }
}
#undef PW_NJ_SWITCH
#undef PW_T_CASE
#undef PW_R_CASE
#undef PW_VPP
#undef PW_TJW
#endif /* PW_VW */
