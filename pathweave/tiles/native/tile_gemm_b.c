/* 1x1 convolution tiles on channel-blocked activations (PW_PACK_BLOCKED; see tile_gemm.h), and windows.
 *
 * pw_gemm_packed's vectors run along a row of B (positions) and broadcast the weights: per k it loads a
 * new row of B, a plane away from the last (12.5 KB at 56x56), and its epilogue writes C and reads the
 * residual a plane apart per channel. Here an activation may be kept in blocks of 8 channels
 * ([C/8][H][W][8], oneDNN's nChw8c) between layers: the Python side (tiles/blocked.py) keeps a value
 * blocked where its producer and every reader are 1x1 layers of this kernel. The vectors run along the
 * output channels: per k, 3 vectors of weights (packed per channel range in groups of 24, [K][24]; the
 * last 32 as 16 + 16, pw_block_group) and 4 positions' input values broadcast from one 128-byte run of
 * the blocked input. The sums leave the registers as 4 positions x 8 channels: stored as they are into a
 * blocked output, or transposed into 8 NCHW rows of 4 positions; the residual is read in either layout
 * (the same in-register transpose, which is its own inverse). An NCHW input is first copied into blocks
 * for the tile (pw_block_input), kept in the worker's scratch for the layer's other channel tiles over
 * the same rows.
 *
 * A kh x kw window runs on the same sums: tile_kernels.c's conv_window copies its input rows into blocks
 * of zero-padded rows, each tap reads a shift of the copy (io->toff), per 8 input channels the taps in
 * turn (weights [C8/8][taps][8][24]); each position has a pointer of its own.
 *
 * The weight vectors are pinned in registers (an empty asm on each load): GCC folded their loads into
 * each multiply-add (up to 16 loads per 12 FMAs, more than the 2 loads a cycle Zen 3 takes). Unpinned,
 * Inception-v3's windows ran 5% slower than on the transposed kernel, pinned 1.3x faster; pinned in the
 * 1x1 sums too, ResNet-50 ran 1.05x (2 workers) and 1.07x (1 worker) faster (paired A/B, Zen 3).
 *
 * AVX2 only (Python picks this path where the kernels run at AVX2); at any other level the same sums in
 * C, for a program built at AVX2 and run after the level was lowered.
 */
#include <stddef.h>
#include <string.h>

#include "tile_gemm.h"
#include "tile_kernels.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the activations the store applies in registers; any other runs after it, over the stored values
 * (tile_kernels.c's conv_tile, pw_depthwise_blocked), in either layout */
enum { PW_CLAMP_NONE = 0, PW_CLAMP_RELU = 1, PW_CLAMP_RELU6 = 2 };

static inline int clamp_of(int64_t act) {
    return act == PW_ACT_RELU ? PW_CLAMP_RELU : act == PW_ACT_RELU6 ? PW_CLAMP_RELU6 : PW_CLAMP_NONE;
}

/* x clamped as `clamp` says, a NaN kept (the C loops) */
static inline float clamp_s(float x, int clamp) {
    if (clamp) x = x > 0.0f ? x : (x != x ? x : 0.0f);
    return clamp == PW_CLAMP_RELU6 && x > 6.0f ? 6.0f : x;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_B_X86 1
#define PW_VW 8
#include "tile_simd.h"

PW_VT static void block_input_8(int64_t K, int64_t P, const float *b, int64_t ldb, float *x) {
    const int64_t P4 = pw_blocked_positions(P);
    for (int64_t k0 = 0; k0 < K; k0 += 8) {
        const int64_t kn = min64(8, K - k0);
        float *xb = x + k0 * P4;
        int64_t p = 0;
        if (kn == 8)
            for (; p + 8 <= P; p += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(b + (k0 + i) * ldb + p);
                transpose_8(r);
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(xb + (p + i) * 8, r[i]);
            }
        for (; p < P4; p++)
            for (int64_t i = 0; i < 8; i++) xb[p * 8 + i] = i < kn && p < P ? b[(k0 + i) * ldb + p] : 0.0f;
    }
}

/* one row's columns c0 .. c0 + 8 n - 1 of 8 channels (rows ld apart) into blocks: 8 columns at a time */
PW_VT static void block_row_8(const float *x, int64_t ld, int64_t n, float *out) {
    for (int64_t c = 0; c < n; c++) {
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(x + i * ld + 8 * c);
        transpose_8(r);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(out + (8 * c + i) * 8, r[i]);
    }
}

/* 4 x 4 transposes in each 128-bit half: a[q] holding position q's 8 channels becomes a[j] holding
 * channel j's 4 positions (low half) and channel j + 4's (high half); applied twice it is the identity */
PW_VTI void transpose_4x2(__m256 a[4]) {
    const __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
    const __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
    a[0] = _mm256_shuffle_ps(t0, t2, 0x44), a[1] = _mm256_shuffle_ps(t0, t2, 0xee);
    a[2] = _mm256_shuffle_ps(t1, t3, 0x44), a[3] = _mm256_shuffle_ps(t1, t3, 0xee);
}

/* 8 channels x 4 positions of an NCHW tensor (rows ld apart), as transpose_4x2 leaves them */
PW_VTI void load_rows_4(const float *r, int64_t ld, __m256 a[4]) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) a[j] = _mm256_loadu2_m128(r + (j + 4) * ld, r + j * ld);
}

/* a clamped as `clamp` says: max(0, NaN) and min(6, NaN) are NaN, the second operand */
PW_VTI __m256 clamp_v(__m256 a, int clamp) {
    if (clamp) a = _mm256_max_ps(_mm256_setzero_ps(), a);
    return clamp == PW_CLAMP_RELU6 ? _mm256_min_ps(_mm256_set1_ps(6.0f), a) : a;
}

/* the 4 x 8 sums a[q] (positions p0 + q, channels ch .. ch + 7 of the tile) with the bias, residual and
 * clamp (PW_CLAMP_*: ReLU, ReLU6) into C: blocked (c: the channel block's first position; res likewise when
 * res_blk) or NCHW rows (c, res: channel ch's row at position p0; ldc, lr apart); only the first nq
 * positions */
PW_VTI void store_quad(__m256 a[4], int nq, float *c, int64_t ldc, int c_blk, const float *bias, const float *res,
                       int64_t lr, int res_blk, int clamp) {
    /* the clamps written out, not clamp_v / clamp_s: with them GCC spilled more of group_3_0's sums (objdump) */
    const __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
    if (bias) {
        const __m256 bv = _mm256_loadu_ps(bias);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) a[q] = _mm256_add_ps(a[q], bv);
    }
    if (nq == 4) {
        __m256 r[4];
        if (res && res_blk) {
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) r[q] = _mm256_loadu_ps(res + q * 8);
            if (!c_blk) transpose_4x2(r);
        } else if (res) {
            load_rows_4(res, lr, r);
            if (c_blk) transpose_4x2(r);
        }
        if (!c_blk) transpose_4x2(a);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            if (res) a[q] = _mm256_add_ps(a[q], r[q]);
            if (clamp) a[q] = _mm256_max_ps(zero, a[q]); /* max(0, NaN) is NaN: the second operand */
            if (clamp == PW_CLAMP_RELU6) a[q] = _mm256_min_ps(six, a[q]); /* min(6, NaN) too */
            if (c_blk) {
                _mm256_storeu_ps(c + q * 8, a[q]);
            } else {
                _mm_storeu_ps(c + q * ldc, _mm256_castps256_ps128(a[q]));
                _mm_storeu_ps(c + (q + 4) * ldc, _mm256_extractf128_ps(a[q], 1));
            }
        }
        return;
    }
    float s[4][8];
    for (int q = 0; q < 4; q++) _mm256_storeu_ps(s[q], a[q]);
    for (int q = 0; q < nq; q++)
        for (int i = 0; i < 8; i++) {
            float x = s[q][i] + (res ? res_blk ? res[q * 8 + i] : res[i * lr + q] : 0.0f);
            if (clamp) x = x > 0.0f ? x : (x != x ? x : 0.0f);
            if (clamp == PW_CLAMP_RELU6 && x > 6.0f) x = 6.0f;
            c[c_blk ? q * 8 + i : i * ldc + q] = x;
        }
}

/* the nv weight vectors of one k, pinned in registers by an empty asm: GCC folded their loads into each
 * multiply-add (see the top of this file) */
PW_VTI void load_pinned(const int nv, const float *wk, __m256 wv[3]) {
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
        wv[v] = _mm256_loadu_ps(wk + 8 * v);
        __asm__("" : "+x"(wv[v]));
    }
}

/* the sums of one quad of positions (at x + qo[q] within each block of 8 input channels, xs apart) for nv
 * vectors of channels (weights w: [K8][8 nv]; a window's [K8 / 8][taps][8][8 nv], its taps reading the
 * block at toff[t] on) */
PW_VTI void sums_body(const int nv, const int regular, const int window, const int gather, int64_t K8,
                      int64_t taps, const int64_t *toff, const int64_t *koff, const float *w, const float *x,
                      int64_t xs, const int64_t *qo, __m256 *out) {
    const int64_t ws = 8 * nv;
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[q][v] = _mm256_setzero_ps();
    if (window) { /* each position through a pointer of its own, the block's and tap's offset o added */
        const float *x0 = x + qo[0], *x1 = x + qo[1], *x2 = x + qo[2], *x3 = x + qo[3];
        const float *wk = w;
        for (int64_t kb = 0; kb < K8 / 8; kb++)
            for (int64_t t = 0; t < taps; t++, wk += 8 * ws) {
                const int64_t o = kb * xs + toff[t];
                /* the next tap's input lines (its first and last position's): a tap of a 7x1 window is
                 * rows away from the last, its lines evicted by the weights streaming through L1 (in the
                 * model, 1 worker, paired: Inception-v3's 1x7 and 7x1 layers 0.92-1.00x the time,
                 * ResNet-50's stride-2 3x3 ones 0.94x, its 7x7 ones unchanged; AVX2 Zen 3) */
                if (kb + 1 < K8 / 8 || t + 1 < taps) {
                    const int64_t on = t + 1 < taps ? o - toff[t] + toff[t + 1] : (kb + 1) * xs + toff[0];
                    _mm_prefetch((const char *)(x0 + on), _MM_HINT_T0);
                    _mm_prefetch((const char *)(x3 + on + 7), _MM_HINT_T0);
                }
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    __m256 wv[3];
                    load_pinned(nv, wk + j * ws, wv);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++) {
                        const float *xq = q == 0 ? x0 : q == 1 ? x1 : q == 2 ? x2 : x3;
                        const __m256 b = _mm256_broadcast_ss(xq + o + j);
#pragma GCC unroll 3
                        for (int v = 0; v < nv; v++) acc[q][v] = _mm256_fmadd_ps(b, wv[v], acc[q][v]);
                    }
                }
            }
    } else if (gather) { /* a folded window: term k of each position at koff[k] from its pointer */
        const float *x0 = x + qo[0], *x1 = x + qo[1], *x2 = x + qo[2], *x3 = x + qo[3];
        for (int64_t kb = 0; kb < K8 / 8; kb++) {
            const float *wk = w + kb * 8 * ws;
            const int64_t *ok = koff + kb * 8;
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m256 wv[3];
                load_pinned(nv, wk + j * ws, wv);
                const int64_t o = ok[j];
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    const float *xq = q == 0 ? x0 : q == 1 ? x1 : q == 2 ? x2 : x3;
                    const __m256 b = _mm256_broadcast_ss(xq + o);
#pragma GCC unroll 3
                    for (int v = 0; v < nv; v++) acc[q][v] = _mm256_fmadd_ps(b, wv[v], acc[q][v]);
                }
            }
        }
    } else
    for (int64_t kb = 0; kb < K8 / 8; kb++) {
        const float *xb = x + kb * xs, *wk = w + kb * 8 * ws;
        if (regular) { /* the next 8 positions' 8 channels (elsewhere the lines ahead are not these) */
            _mm_prefetch((const char *)(xb + 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(xb + 80), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256 wv[3];
            load_pinned(nv, wk + j * ws, wv);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) { /* regular: the 4 positions 8 floats apart (constant offsets) */
                const __m256 xq = _mm256_broadcast_ss(xb + (regular ? q * 8 : qo[q]) + j);
#pragma GCC unroll 3
                for (int v = 0; v < nv; v++) acc[q][v] = _mm256_fmadd_ps(xq, wv[v], acc[q][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) out[q * 3 + v] = acc[q][v];
}

/* the sums of one quad of positions (at x + qo[q] within each block of 8 input channels, xs apart; regular:
 * qo = 0, 8, 16, 24) for nv vectors of channels (weights w: [K8][8 nv]), then their store */
PW_VTI void quad_8(const int nv, const int regular, const int mode, int64_t K8, const float *w, const float *x,
                   int64_t xs, const int64_t qo[4], int nq, int64_t lane0, int64_t p, const pw_blocked_io *io,
                   int clamp, float *part, int phase) {
    __m256 sums[12];
    sums_body(nv, regular, mode == 2, mode == 3, K8, io->taps, io->toff, io->koff, w, x, xs, qo, sums);
    if (phase) { /* a share of the input channels (gemm_blocked_8): the sums so far kept in part */
        float *keep = part + p / 4 * 96;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) {
                const int i = q * 3 + v;
                if (phase > 1) sums[i] = _mm256_add_ps(_mm256_loadu_ps(keep + 8 * i), sums[i]);
                if (phase < 3) _mm256_storeu_ps(keep + 8 * i, sums[i]);
            }
        if (phase < 3) return;
    }
    const int c_blk = io->layout & PW_BLK_OUT, r_blk = io->layout & PW_BLK_RES;
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
        const int64_t ch = lane0 + 8 * v;
        float *c = c_blk ? io->c + (ch / 8) * io->cs + p * 8 : io->c + ch * io->cs + p;
        const float *res = !io->res ? NULL : r_blk ? io->res + (ch / 8) * io->rs + p * 8 : io->res + ch * io->rs + p;
        __m256 a[4] = {sums[v], sums[3 + v], sums[6 + v], sums[9 + v]};
        store_quad(a, nq, c, io->cs, c_blk, io->bias ? io->bias + ch : NULL, res, io->rs, r_blk, clamp);
    }
}

/* one group of nv vectors of channels (from channel lane0 of the tile) over every position; mode 0: the
 * positions follow each other in x, 1: each through its row and column (stride), 2: as 1, with taps, 3:
 * as 1 in an NCHW copy, its terms at io->koff (a folded window) */
PW_VTI void group_8(const int nv, const int mode, int64_t lane0, int64_t P, int64_t K8, const float *w,
                    const pw_blocked_io *io, int clamp, float *part, int phase) {
    const int c_blk = io->layout & PW_BLK_OUT, r_blk = io->layout & PW_BLK_RES;
    const int64_t full[4] = {0, 8, 16, 24}; /* what the regular case's constant offsets are */
    for (int64_t p = 0; p < P; p += 4) {
        const int nq = (int)min64(4, P - p);
        /* NCHW: the lines of C and the residual 4 quads on, where this pass stores */
        if (!c_blk && (phase == 0 || phase == 3) && p % 16 == 0 && p + 16 < P)
            for (int64_t i = lane0; i < lane0 + 8 * nv; i++) {
                if (io->res && !r_blk) _mm_prefetch((const char *)(io->res + i * io->rs + p + 16), _MM_HINT_T0);
                __builtin_prefetch(io->c + i * io->cs + p + 16, 1, 3);
            }
        if (mode) { /* each position's input through its row and column */
            int64_t at[4];
            for (int q = 0; q < 4; q++) {
                const int64_t o = io->pos0 + p + min64(q, nq - 1);
                at[q] = ((o / io->ow) * io->w + o % io->ow) * io->stride * (mode == 3 ? 1 : 8);
            }
            quad_8(nv, 0, mode, K8, w, io->x, io->xs, at, nq, lane0, p, io, clamp, part, phase);
        } else if (nq == 4) {
            quad_8(nv, 1, 0, K8, w, io->x + p * 8, io->xs, full, nq, lane0, p, io, clamp, part, phase);
        } else { /* the last positions: no read past them (the blocked input may end there) */
            const int64_t tail[4] = {0, 8 * min64(1, nq - 1), 8 * min64(2, nq - 1), 8 * min64(3, nq - 1)};
            quad_8(nv, 0, 0, K8, w, io->x + p * 8, io->xs, tail, nq, lane0, p, io, clamp, part, phase);
        }
    }
}

/* each case a function of its own: inlined into one function with the loops over groups, GCC ran out of
 * registers in the sums (12 accumulators, 3 weight vectors and a broadcast are AVX2's 16) and read the
 * weights from memory at every multiply-add: ResNet-50's 1x1 shapes alone at ~0.65x the speed */
#define PW_GROUP_FN(NV, S)                                                                                   \
    __attribute__((noinline)) PW_VT static void group_##NV##_##S(int64_t lane0, int64_t P, int64_t K8,          \
                                                                 const float *w, const pw_blocked_io *io,       \
                                                                 int clamp, float *part, int phase) {           \
        group_8(NV, S, lane0, P, K8, w, io, clamp, part, phase);                                                \
    }
PW_GROUP_FN(1, 0) PW_GROUP_FN(1, 1) PW_GROUP_FN(1, 2) PW_GROUP_FN(1, 3) PW_GROUP_FN(2, 0) PW_GROUP_FN(2, 1)
PW_GROUP_FN(2, 2) PW_GROUP_FN(2, 3) PW_GROUP_FN(3, 0) PW_GROUP_FN(3, 1) PW_GROUP_FN(3, 2) PW_GROUP_FN(3, 3)
#undef PW_GROUP_FN
typedef void (*pw_group_fn)(int64_t, int64_t, int64_t, const float *, const pw_blocked_io *, int, float *, int);

/* A window whose group of 24 channels has more weights than PW_SHARE_BYTES takes its input channels in
 * shares of about that many bytes: each quad's sums over one share are kept in io->part (the tile's
 * positions x 24 floats of the worker's scratch) and added to by the next share, the bias, residual and
 * ReLU applied after the last. Whole, a quad's sums had read all the group's weights: 442 KB at ResNet-50's
 * 512-channel 3x3 layers, more than L2 beside the input copy, so every quad read them from L3. In the
 * model, 1 worker, alternating (Zen 3, AVX2): those three layers 4.36, 3.94, 4.00 -> 3.70, 3.52, 3.50 ms,
 * the 256-channel 3x3/2 3.51 -> 3.39; shares of 32 or 64 KB ran the same as 128 KB; the same shares for
 * 1x1 layers (K = 1024, 2048) changed nothing measurable; Inception-v3 and GoogLeNet the same. */
#define PW_SHARE_BYTES 131072
PW_VT static void gemm_blocked_8(int64_t rows, int64_t P, int64_t K, const float *wp, const pw_blocked_io *io,
                                 int clamp) {
    static const pw_group_fn fns[3][4] = {{group_1_0, group_1_1, group_1_2, group_1_3},
                                          {group_2_0, group_2_1, group_2_2, group_2_3},
                                          {group_3_0, group_3_1, group_3_2, group_3_3}};
    const int64_t K8 = (K + 7) / 8 * 8, taps = io->taps > 1 ? io->taps : 1;
    const int mode = io->koff ? 3 : io->taps ? 2 : io->stride > 1;
    const int64_t bytes = K8 * taps * PW_BLOCK_GROUP * (int64_t)sizeof(float); /* one group's weights */
    const int64_t blocks = K8 / 8;
    const int split = mode == 2 && io->part && bytes > PW_SHARE_BYTES;
    const int64_t shares = split ? (bytes + PW_SHARE_BYTES - 1) / PW_SHARE_BYTES : 1;
    const int64_t per = (blocks + shares - 1) / shares;
    for (int64_t lane0 = 0, nv; lane0 < rows; lane0 += 8 * nv) {
        nv = pw_block_group(rows - lane0) / 8;
        const float *w = wp + lane0 * K8 * taps;
        for (int64_t kb0 = 0; kb0 < blocks; kb0 += per) { /* one pass (phase 0) or the shares (1, 2, 3) */
            const int64_t kb1 = min64(blocks, kb0 + per);
            pw_blocked_io share = *io;
            share.x = io->x + kb0 * io->xs;
            const int phase = kb1 == blocks ? (kb0 == 0 ? 0 : 3) : (kb0 == 0 ? 1 : 2);
            fns[nv - 1][mode](lane0, P, (kb1 - kb0) * 8, w + kb0 * taps * 64 * nv, &share, clamp, io->part, phase);
        }
    }
}

/* one block of 8 channels of a depthwise window over blocked rows: output rows oh0 .. oh1, each position's
 * taps inside the input summed in a vector (w: [taps][8]); inside columns 4 positions at a time */
PW_VT static void depthwise_block_8(const float *x, int64_t H, int64_t W, float *out, int64_t OW, int64_t oh0,
                                    int64_t oh1, const float *w, const float *bias, int64_t kh, int64_t kw,
                                    int64_t st, int64_t ph, int64_t pw, int clamp) {
    const __m256 b = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    /* the output columns whose windows lie inside the input's columns */
    int64_t a = (pw + st - 1) / st, e = W - kw + pw >= 0 ? (W - kw + pw) / st + 1 : 0;
    e = e < OW ? e : OW, a = a < e ? a : e;
    for (int64_t oh = oh0; oh < oh1; oh++) {
        const int64_t i0 = ph - oh * st > 0 ? ph - oh * st : 0, i1 = H + ph - oh * st < kh ? H + ph - oh * st : kh;
        const int64_t ih0 = oh * st - ph; /* input row of tap row 0 (rows i0 .. i1 lie inside) */
        float *o = out + oh * OW * 8;
        for (int64_t ow = 0; ow < OW;) {
            if (ow >= a && ow + 4 <= e) { /* 4 positions, every tap inside */
                __m256 s0 = b, s1 = b, s2 = b, s3 = b;
                for (int64_t i = i0; i < i1; i++) {
                    const float *xi = x + ((ih0 + i) * W + ow * st - pw) * 8;
                    for (int64_t j = 0; j < kw; j++) {
                        const __m256 wv = _mm256_loadu_ps(w + (i * kw + j) * 8);
                        const float *xj = xi + j * 8;
                        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(xj), wv, s0);
                        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(xj + st * 8), wv, s1);
                        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(xj + 2 * st * 8), wv, s2);
                        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(xj + 3 * st * 8), wv, s3);
                    }
                }
                const __m256 r[4] = {s0, s1, s2, s3};
                for (int q = 0; q < 4; q++) _mm256_storeu_ps(o + (ow + q) * 8, clamp_v(r[q], clamp));
                ow += 4;
                continue;
            }
            __m256 sum = b; /* a position at an edge: its taps inside the input only */
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = 0; j < kw; j++) {
                    const int64_t iw = ow * st - pw + j;
                    if (iw >= 0 && iw < W)
                        sum = _mm256_fmadd_ps(_mm256_loadu_ps(x + ((ih0 + i) * W + iw) * 8),
                                              _mm256_loadu_ps(w + (i * kw + j) * 8), sum);
                }
            _mm256_storeu_ps(o + ow * 8, clamp_v(sum, clamp));
            ow++;
        }
    }
}

/* pw_block_scale's copy, 8 lanes a vector */
PW_VT static void block_scale_8(int64_t K, int64_t P, const float *src, int64_t sx, const float *s, float *x) {
    const int64_t P4 = pw_blocked_positions(P);
    for (int64_t kb = 0; kb < K / 8; kb++) {
        const __m256 g = _mm256_loadu_ps(s + kb * 8);
        const float *b = src + kb * sx;
        float *xb = x + kb * P4 * 8;
        for (int64_t p = 0; p < P; p++) _mm256_storeu_ps(xb + p * 8, _mm256_mul_ps(_mm256_loadu_ps(b + p * 8), g));
        for (int64_t p = P; p < P4; p++) _mm256_storeu_ps(xb + p * 8, _mm256_setzero_ps());
    }
}

/* pw_blocked_mean's sums, 8 lanes a vector, 4 vectors of partial sums */
PW_VT static void blocked_mean_8(const float *x, int64_t HW, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t p = 0;
    for (; p + 4 <= HW; p += 4) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + p * 8));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + p * 8 + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + p * 8 + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + p * 8 + 24));
    }
    for (; p < HW; p++) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + p * 8));
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    _mm256_storeu_ps(out, _mm256_div_ps(sum, _mm256_set1_ps((float)HW)));
}
#endif

int64_t pw_blocked_scratch(int64_t K, int64_t P) { return pw_blocked_floats(K, P); }

void pw_block_scale(int64_t K, int64_t P, const float *src, int64_t sx, const float *s, float *x) {
#ifdef PW_B_X86
    if (pw_vec_width() == 8 && K % 8 == 0) {
        block_scale_8(K, P, src, sx, s, x);
        return;
    }
#endif
    const int64_t P4 = pw_blocked_positions(P);
    for (int64_t kb = 0; kb < (K + 7) / 8; kb++) /* any other level: the same products in C */
        for (int64_t p = 0; p < P4; p++)
            for (int64_t i = 0; i < 8; i++) {
                const int64_t k = kb * 8 + i;
                x[(kb * P4 + p) * 8 + i] = k < K && p < P ? src[kb * sx + p * 8 + i] * s[k] : 0.0f;
            }
}

void pw_blocked_mean(const float *x, int64_t HW, float *out) {
#ifdef PW_B_X86
    if (pw_vec_width() == 8) {
        blocked_mean_8(x, HW, out);
        return;
    }
#endif
    for (int64_t i = 0; i < 8; i++) { /* any other level: 4 partial sums per channel, as the vectors' */
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t p = 0;
        for (; p + 4 <= HW; p += 4)
            for (int q = 0; q < 4; q++) a[q] += x[(p + q) * 8 + i];
        for (; p < HW; p++) a[0] += x[p * 8 + i];
        out[i] = ((a[0] + a[1]) + (a[2] + a[3])) / (float)HW;
    }
}

void pw_block_input_strided(int64_t K, int64_t P, const float *b, int64_t ldb, int64_t w, int64_t ow, int64_t pos0,
                            int64_t stride, float *x) {
    const int64_t P4 = pw_blocked_positions(P);
    for (int64_t k = 0; k < (K + 7) / 8 * 8; k++)
        for (int64_t p = 0; p < P4; p++) {
            const int64_t o = pos0 + p, at = ((o / ow) * w + o % ow) * stride;
            x[((k / 8) * P4 + p) * 8 + k % 8] = k < K && p < P ? b[k * ldb + at] : 0.0f;
        }
}

void pw_block_padded(int64_t C, int64_t H, int64_t W, const float *x, int64_t r0, int64_t rows, int64_t pad,
                     int64_t used, int64_t Wp, float *out) {
    const int64_t plane = rows * Wp * 8;
    for (int64_t cb = 0; cb < (C + 7) / 8; cb++)
        for (int64_t r = 0; r < rows; r++) {
            float *d = out + cb * plane + r * Wp * 8;
            const int64_t ih = r0 + r;
            if (ih < 0 || ih >= H) {
                memset(d, 0, sizeof(float) * Wp * 8);
                continue;
            }
            const int64_t lead = pad < Wp ? pad : Wp; /* a padding wider than every window: all zeros */
            memset(d, 0, sizeof(float) * lead * 8);
            const float *src = x + (cb * 8 * H + ih) * W;
            int64_t c = 0;
#ifdef PW_B_X86
            if (pw_vec_width() == 8 && cb * 8 + 8 <= C) {
                block_row_8(src, H * W, used / 8, d + pad * 8);
                c = used / 8 * 8;
            }
#endif
            for (; c < used; c++)
                for (int64_t i = 0; i < 8; i++) d[(pad + c) * 8 + i] = cb * 8 + i < C ? src[i * H * W + c] : 0.0f;
            memset(d + (lead + used) * 8, 0, sizeof(float) * (Wp - lead - used) * 8);
        }
}

void pw_block_input(int64_t K, int64_t P, const float *b, int64_t ldb, float *x) {
#ifdef PW_B_X86
    if (pw_vec_width() == 8) {
        block_input_8(K, P, b, ldb, x);
        return;
    }
#endif
    pw_block_input_strided(K, P, b, ldb, P, P, 0, 1, x); /* any CPU: position p is b's p */
}

void pw_gemm_blocked(int64_t rows, int64_t P, int64_t K, const float *wp, const pw_blocked_io *io, int act) {
    const int clamp = clamp_of(act);
#ifdef PW_B_X86
    if (pw_vec_width() == 8) {
        gemm_blocked_8(rows, P, K, wp, io, clamp);
        return;
    }
#endif
    /* any other level: the same sums in C */
    const int64_t K8 = (K + 7) / 8 * 8, taps = io->taps > 1 ? io->taps : 1;
    const int c_blk = io->layout & PW_BLK_OUT, r_blk = io->layout & PW_BLK_RES;
    for (int64_t r = 0, g = 0, gw = pw_block_group(rows); r < rows; r++) {
        if (r == g + gw) g = r, gw = pw_block_group(rows - r);
        const float *w = wp + g * K8 * taps + (r - g);
        for (int64_t p = 0; p < P; p++) {
            float s = 0.0f;
            const int64_t o = io->pos0 + p, by_pos = io->taps || io->koff || io->stride > 1;
            const int64_t at = by_pos ? ((o / io->ow) * io->w + o % io->ow) * io->stride * (io->koff ? 1 : 8) : p * 8;
            for (int64_t k = 0; k < K; k++)
                for (int64_t t = 0; t < taps; t++)
                    s += w[(((k / 8) * taps + t) * 8 + k % 8) * gw] *
                         (io->koff ? io->x[at + io->koff[k]]
                                   : io->x[(k / 8) * io->xs + at + (io->taps ? io->toff[t] : 0) + k % 8]);
            s += io->bias ? io->bias[r] : 0.0f;
            if (io->res) s += r_blk ? io->res[(r / 8) * io->rs + p * 8 + r % 8] : io->res[r * io->rs + p];
            io->c[c_blk ? (r / 8) * io->cs + p * 8 + r % 8 : r * io->cs + p] = clamp_s(s, clamp);
        }
    }
}

int pw_depthwise_blocked(const int64_t *L, const int32_t *lo, const int32_t *hi) {
    const int64_t C = L[S_XSHAPE + 1], H = L[S_XSHAPE + 2], W = L[S_XSHAPE + 3];
    const int64_t OH = L[S_OSHAPE + 2], OW = L[S_OSHAPE + 3], kh = L[S_KH], kw = L[S_KW], st = L[S_SH];
    const int64_t ph = L[S_PH], pw = L[S_PW], taps = kh * kw;
    const int64_t act = L[S_ACT];
    const int clamp = clamp_of(act);
    const float *x = in_f(L[S_X]), *wp = in_f(L[S_WPACK]), *bias = in_f(L[S_BIAS]);
    float *out = out_f(L[S_OUT]);
    const int after = act != PW_ACT_NONE && !clamp; /* SiLU, hard swish, ...: over the stored rows */
    if (lo[1] % 8 || hi[1] % 8 || C % 8 || L[S_Y]) return 1;
    for (int64_t n = lo[0]; n < hi[0]; n++)
        for (int64_t cb = lo[1] / 8; cb < hi[1] / 8; cb++) {
            const float *xb = x + (n * C + cb * 8) * H * W, *w = wp + cb * taps * 8;
            const float *bb = bias ? bias + cb * 8 : NULL;
            float *ob = out + (n * C + cb * 8) * OH * OW;
#ifdef PW_B_X86
            if (pw_vec_width() == 8)
                depthwise_block_8(xb, H, W, ob, OW, lo[2], hi[2], w, bb, kh, kw, st, ph, pw, clamp);
            else
#endif
            for (int64_t oh = lo[2]; oh < hi[2]; oh++) /* any other level: the same sums in C */
                for (int64_t ow = 0; ow < OW; ow++)
                    for (int64_t l = 0; l < 8; l++) {
                        float s = bb ? bb[l] : 0.0f;
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                const int64_t ih = oh * st - ph + i, iw = ow * st - pw + j;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    s += xb[(ih * W + iw) * 8 + l] * w[(i * kw + j) * 8 + l];
                            }
                        ob[(oh * OW + ow) * 8 + l] = clamp_s(s, clamp);
                    }
            if (after) pw_activate(ob + lo[2] * OW * 8, (hi[2] - lo[2]) * OW * 8, (int)act);
        }
    return 0;
}
