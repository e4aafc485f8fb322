/* Matrix products of convolution tiles with weights packed once, at program build time.
 *
 * C[r][p] = sum_k W[r][k] * B[k][p] for rows r of one tile (output channels) and columns p (output
 * positions), B read where it lies (an im2col buffer, or the input itself for a 1x1 convolution) with
 * row stride ldb, C and the residual with row stride ldc. Nothing of B is copied: OpenBLAS re-packs B
 * on every call, which on tiles of 64 channels cost as much as the product.
 *
 * Packed weights: panels of PW_MR rows, each stored k-major ([K][PW_MR], rows past the end zero), so a
 * micro-kernel reads the PW_MR weights of one k as one short contiguous run. The epilogue (bias,
 * residual, ReLU) is applied in registers before the only store of the result.
 */
#ifndef PW_TILE_GEMM_H
#define PW_TILE_GEMM_H

#include <stdint.h>

#define PW_MR 8

/* rows: C rows to compute; row_skip: where the first one sits in the first panel (0..PW_MR-1); wp: that
 * panel. bias (per row, from the first row), res (as C) may be NULL; act: PW_ACT_* (ReLU in registers,
 * the others after the store). */
void pw_gemm_packed(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip, const float *b,
                    int64_t ldb, float *c, int64_t ldc, const float *bias, const float *res, int act);

/* pw_gemm_packed's micro-kernels prefetch the lines of C and of the residual their epilogues write and
 * read: bit 1 at AVX2 (the default, 1), bit 2 at AVX-512; 0: neither (A/B in one process) */
extern int pw_prefetch_out;

/* which kernel pw_gemm_packed runs on this CPU: "avx512", "avx2" or "generic" */
const char *pw_gemm_isa(void);

/* use the kernel of "avx512", "avx2" or "generic" from now on (tests); 1 if this CPU lacks it */
int pw_gemm_force(const char *isa);

/* Tiles of few positions (tile_gemm_t.c): the same product from weights packed in panels of PW_TR rows
 * (k-major, [K][PW_TR]), vectors along the channels; t: scratch of cols x (row_skip + rows rounded up to
 * PW_TR) floats. row_skip in 0..PW_TR-1. */
#define PW_TR 16
void pw_gemm_packed_t(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip, const float *b,
                      int64_t ldb, float *c, int64_t ldc, const float *bias, const float *res, int act, float *t);

/* The products of pw_gemm_packed_t without the write to C: the sums stay in t, position p's channels at
 * t[p * tld + row_skip ..] with tld = (row_skip + rows) rounded up to PW_TR (Winograd's output
 * transform reads them there, along the channels). */
void pw_gemm_packed_t_sums(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip,
                           const float *b, int64_t ldb, float *t);

/* Where the transposed kernel finds B's positions and puts the sums: runs of width positions, run r at
 * b + r * bpitch, positions step floats apart (1 or 2), B's row k at koff[k] (NULL: k * ldb; else K +
 * PW_KOFF_PAD entries); the sums
 * of run r at position r * width of t. C's rows take segs pieces of seg positions from t's positions
 * s * pitch. A plain product is one run of all positions, one segment. A convolution over a zero-padded
 * copy of its input (rows of Wp) is a run per output row (step: the stride), its sums contiguous (pitch
 * OW); the kernel's chunks of positions cross from one run into the next. */
/* entries after koff's K that the caller fills (copies of the last): the kernel reads ahead for its B
 * prefetch */
#define PW_KOFF_PAD 8
typedef struct {
    int64_t runs, width, step, bpitch;
    const int64_t *koff;
    int64_t segs, seg, pitch;
} pw_truns;
void pw_gemm_packed_t_runs(int64_t rows, int64_t K, const float *wp, int64_t row_skip, const float *b,
                           int64_t ldb, const pw_truns *u, float *c, int64_t ldc, const float *bias,
                           const float *res, int act, float *t);

/* C[r][p] = sum_k A[r][k] * B[k][p] for rows r of A read in place (rows lda apart, k contiguous) and B
 * packed in panels of PW_TR columns (k-major, [K][PW_TR], the last padded with zeros): vectors along
 * C's rows, one element of A broadcast per row and k, nothing of A packed (linear layers: A the tokens,
 * B the weight). C written with row stride ldc, nothing added. */
void pw_gemm_rows(int64_t rows, int64_t cols, int64_t K, const float *a, int64_t lda, const float *wp, float *c,
                  int64_t ldc);

/* 1x1 tiles on channel-blocked activations (tile_gemm_b.c, PW_PACK_BLOCKED): blocked tensors lie as
 * [C/8][H][W][8] per image (C a multiple of 8). x: the input's 8-channel blocks xs floats apart, the
 * tile's first position at x (a blocked layer input, or pw_block_input's copy of an NCHW one: [(K + 7) /
 * 8][pw_blocked_positions(P)][8], zeros past K and P, pw_blocked_floats(K, P) floats). c and res: the
 * tile's first channel and position, blocked (layout bit PW_BLK_OUT / PW_BLK_RES: channel blocks cs / rs
 * floats apart) or NCHW rows (cs / rs apart). pw_gemm_blocked computes pw_gemm_packed's C with its bias,
 * residual and ReLU for rows C rows (a multiple of 8) whose weights wp are packed for them alone: groups
 * of rows (pw_block_group: 24, the last 32 as 16 + 16, a range of 8 or 16 one group), each [K8][width]
 * with K8 = K rounded up to 8 (zeros past K), the group from row r at wp + r K8 (times the taps of a
 * window). */
enum { PW_BLK_IN = 1, PW_BLK_OUT = 2, PW_BLK_RES = 4 };
/* S_LAYOUT of a window with fewer than 8 input channels (a stem): its channels, rows and columns folded into
 * one sum of C kh kw terms, each position's read at koff[k] from it in a zero-padded NCHW copy */
enum { PW_WINDOW_FOLD = 8 };
typedef struct {
    const float *x;
    int64_t xs;
    int64_t stride, w, ow, pos0; /* stride 2: x is the image's first position, the tile's first output
                                  * position pos0, the input w and the output ow wide; else stride 1 */
    float *c;
    int64_t cs;
    const float *bias, *res;
    int64_t rs;
    int layout;
    int64_t taps;        /* a window (pw_conv_window): its taps, read at x + toff[t] on; 0 for a 1x1 layer */
    const int64_t *toff;
    float *part; /* a window's sums between shares of its input channels: pw_blocked_positions(P) x 24
                  * floats of the worker's scratch; NULL: one pass */
    const int64_t *koff; /* a folded window (PW_WINDOW_FOLD; taps 0): term k of a position at koff[k] from
                          * x + its input position (NCHW, not blocked; rows w wide); entries past K
                          * point at zeros. NULL otherwise */
} pw_blocked_io;
static inline int64_t pw_blocked_positions(int64_t P) { return (P + 3) / 4 * 4; }
static inline int64_t pw_blocked_floats(int64_t K, int64_t P) { return (K + 7) / 8 * 8 * pw_blocked_positions(P); }
int64_t pw_blocked_scratch(int64_t K, int64_t P); /* pw_blocked_floats, for Python */
void pw_block_input(int64_t K, int64_t P, const float *b, int64_t ldb, float *x);
/* the same copy for a strided layer: b the image's first position (rows w wide), output position pos0 +
 * p (rows ow wide) reading input row and column stride times its own */
void pw_block_input_strided(int64_t K, int64_t P, const float *b, int64_t ldb, int64_t w, int64_t ow, int64_t pos0,
                            int64_t stride, float *x);
void pw_gemm_blocked(int64_t rows, int64_t P, int64_t K, const float *wp, const pw_blocked_io *io, int act);
/* a tile's input rows for pw_gemm_blocked scaled by a squeeze-excitation gate: x (pw_blocked_floats(K, P))
 * = src times s[k] per channel k, src blocked ([K / 8] blocks sx floats apart, P positions of 8 lanes; x
 * itself allowed: sx = 8 pw_blocked_positions(P)), zeros past K and P */
void pw_block_scale(int64_t K, int64_t P, const float *src, int64_t sx, const float *s, float *x);
/* the means over HW positions of one block of 8 channels ([HW][8]) into out[8] */
void pw_blocked_mean(const float *x, int64_t HW, float *out);
/* a depthwise tile (PW_K_DEPTHWISE with S_LAYOUT's PW_BLK_IN | PW_BLK_OUT) on blocked input and output, channels
 * lo[1] .. hi[1] (multiples of 8), rows lo[2] .. hi[2]; weights [C / 8][kh kw][8]; ReLU or ReLU6 or none;
 * no residual. 1: a layer it does not take */
int pw_depthwise_blocked(const int64_t *L, const int32_t *lo, const int32_t *hi);
/* output channels per group of its packed weights (3 vectors of 8) */
#define PW_BLOCK_GROUP 24
/* the width of the group from a channel range's row with `left` rows left: 24, but the last 32 as 16 + 16
 * (a group of 8 has 4 accumulators, too few to hide the multiply-adds' latency); bind_cnn.py packs so */
static inline int64_t pw_block_group(int64_t left) { return left == 32 ? 16 : left < 24 ? left : 24; }
/* a window's input rows r0 .. r0 + rows - 1 of an NCHW image (C channels, H x W; rows outside [0, H) zero)
 * as blocks of zero-padded rows, [(C + 7) / 8][rows][Wp][8]: column c holds input column c - pad, zero
 * outside [0, used) and past C; used <= Wp - pad, and 0 where pad >= Wp */
/* the most taps of a window on this kernel (Python checks) */
#define PW_WINDOW_TAPS 64
void pw_block_padded(int64_t C, int64_t H, int64_t W, const float *x, int64_t r0, int64_t rows, int64_t pad,
                     int64_t used, int64_t Wp, float *out);


/* floats of a zero-padded input copy of C planes, rounded up to 16 (what follows is 64-byte aligned) */
static inline int64_t pw_padded_floats(int64_t C, int64_t plane) { return (C * plane + 15) / 16 * 16; }

/* floats per vector of the chosen kernels: 16 (AVX-512), 8 (AVX2) or 0 (the generic C loops) */
int pw_vec_width(void);

#endif
