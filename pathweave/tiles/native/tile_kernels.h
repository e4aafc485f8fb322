/* Layer kernels of the tile runtime: one call computes one tile (a box of a layer's output).
 *
 * A layer is described by PW_SLOTS int64 values (a row of a numpy array written by the binders in
 * pathweave/tiles/bind_*.py; pathweave/tiles/abi.py names the same slots and codes): op code, epilogue
 * activation, buffer addresses, shapes, strides and op parameters. Buffers are float32. Shapes are padded
 * to 4 dims at the end with size 1, as the tile graph pads them; a tile is the box [lo, hi) of the output.
 */
#ifndef PW_TILE_KERNELS_H
#define PW_TILE_KERNELS_H

#include <stdint.h>
#include <string.h>

/* a layer row's slots hold buffer addresses and, bit for bit, doubles: read them as such */
static inline const float *in_f(int64_t v) { return (const float *)(intptr_t)v; }
static inline float *out_f(int64_t v) { return (float *)(intptr_t)v; }
static inline double bits_double(int64_t v) {
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

/* Hot loops are compiled for AVX-512 (x86-64-v4), AVX2+FMA (x86-64-v3) and baseline x86-64, and each call
 * runs the copy of the level the matrix kernels run (pw_hot_level: PATHWEAVE_ISA and use_gemm_isa lower it,
 * so that a forced level holds for every kernel; GCC's target_clones picked by CPU alone). Written as
 *   PW_HOT_FN(static, int, name, (const int64_t *L, int n), (L, n)) { body }
 * the body is inlined (with the static inline helpers it calls) into one wrapper per level, and `name`
 * dispatches to them. */
int pw_hot_level(void); /* 2: x86-64-v4, 1: x86-64-v3, 0: baseline (tile_gemm.c) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PW_HOT_FN(link, ret, name, params, args)                                                          \
    static inline __attribute__((always_inline)) ret name##_body params;                                 \
    __attribute__((target("arch=x86-64-v4"))) static ret name##_v4 params { return name##_body args; }   \
    __attribute__((target("arch=x86-64-v3"))) static ret name##_v3 params { return name##_body args; }   \
    static ret name##_v1 params { return name##_body args; }                                             \
    link ret name params {                                                                               \
        const int level = pw_hot_level();                                                                \
        return level == 2 ? name##_v4 args : level == 1 ? name##_v3 args : name##_v1 args;               \
    }                                                                                                    \
    static inline __attribute__((always_inline)) ret name##_body params
#else
#define PW_HOT_FN(link, ret, name, params, args) link ret name params
#endif

#define PW_SLOTS 48
/* floats at the start of a worker's scratch that remember what its im2col buffer holds */
#define PW_SCRATCH_HEADER 16

/* op codes (slot S_OP); 0 is the runtime's checking kernel */
enum {
    PW_K_CONV = 1,     /* conv2d (+bias, +residual, +act): im2col + GEMM per tile */
    PW_K_MAXPOOL = 2,  /* max_pool2d */
    PW_K_AVGPOOL = 3,  /* avg_pool2d */
    PW_K_ADAPTIVE = 4, /* adaptive_avg_pool2d */
    PW_K_LINEAR = 5,   /* linear (+bias, +act): GEMM with the weight transposed */
    PW_K_EWISE = 6,    /* element-wise: act(x op y), y a broadcast tensor or a scalar */
    PW_K_CAT = 7,      /* concatenation: copies from the inputs listed in an aux array */
    PW_K_AFFINE = 8,   /* act(x * scale + shift), scale and shift broadcast (inference batch norm) */
    PW_K_PAD = 9,      /* constant padding: x placed at offsets S_KH..S_KH+3 (per dim), the rest a value */
    /* 10: was sum over up to 2 dims, now PW_K_REDUCE's */
    /* transformer kernels (tile_kernels_seq.c; their slots in tile_kernels_seq.h), numbered apart */
    PW_K_EMBEDDING = 32, /* gather table rows by int64/int32 indices */
    PW_K_LAYERNORM = 33, /* layer norm over the last dim */
    PW_K_SOFTMAX = 34,   /* softmax over the last dim */
    PW_K_MAP = 35,       /* unary activation of a strided tensor (GELU in both forms, relu, tanh) */
    PW_K_MATMUL = 36,    /* batched matmul / addmm on strided views (+bias, +act), sgemm per batch */
    PW_K_WHERE = 37,     /* where / masked_fill with a bool condition */
    PW_K_CONVERT = 38,   /* int64 / int32 / bool / float32 to float32 */
    PW_K_COPY = 39,      /* a reshape that copies (flatten of a transposed tensor) */
    /* reductions, group norm and roll (tile_reduce.c; their slots below), 40..44 */
    PW_K_REDUCE = 40,    /* sum / mean / amax / amin / var / std over up to 4 dims (SR_KIND) */
    PW_K_GROUPNORM = 41, /* group norm of an (N, C, ...) tensor, statistics of each group whole */
    PW_K_ROLL = 42,      /* torch.roll: out[i] = x[(i - shift) mod n] along each dim */
    PW_K_COMPARE = 43    /* comparisons and logic of float32 or bool tensors into a bool (1 byte) output */
};
/* resizing kernels (tile_resize.c), codes 45..49 */
enum {
    PW_K_NEAREST = 45,  /* upsample_nearest2d: source rows and columns from a table (S_AUX) */
    PW_K_BILINEAR = 46, /* upsample_bilinear2d: source pairs (S_AUX) and weights (S_W) from tables */
    PW_K_SHUFFLE = 47   /* pixel_shuffle by S_KH */
};
/* depthwise convolution (tile_depthwise.c), codes 50..54: a convolution's slots, groups == input channels */
enum {
    PW_K_DEPTHWISE = 50,
    PW_K_DWPW = 51 /* a depthwise convolution and the 1x1 convolution that alone reads it, in one tile */
};
/* floats after each phase row of a depthwise tile's padded copy that its vector loads may read */
#define PW_DW_SLACK 16

/* packed convolution weights (slot S_WPACK_T): panels of PW_MR rows, or of PW_TR rows for the transposed
 * micro-kernel over an im2col or the input as it lies, or over the input copied with zero padding
 * (stride 1, no dilation: B's rows are shifted views of it, no im2col), or in groups of 24 rows per
 * channel range for 1x1 layers on channel-blocked activations (tile_gemm_b.c; layouts in S_LAYOUT) */
enum { PW_PACK_PANELS = 0, PW_PACK_TRANSPOSED = 1, PW_PACK_PADDED = 2, PW_PACK_WINOGRAD = 3, PW_PACK_BLOCKED = 4 };

/* epilogue activations (slot S_ACT); from PW_ACT_SILU on tile_act.c's (pw_act_row) */
enum { PW_ACT_NONE = 0, PW_ACT_RELU = 1, PW_ACT_GELU = 2, PW_ACT_TANH = 3, PW_ACT_SIGMOID = 5 }; /* 4: seq */

/* How eager's GELU (erf form) rounds at the edges, which depends on ATen's CPU capability, so the runtime
 * sets this from a probe of eager when it loads (runtime.py; tile_kernels.c holds it). PW_GELU_POSINF_NAN:
 * +inf gives NaN (AVX-512's vector erf) rather than +inf (AVX2, scalar); PW_GELU_HALVE_FIRST: x / 2 (1 + erf),
 * finite up to FLT_MAX (AVX2), rather than x (1 + erf) / 2, +inf above FLT_MAX / 2 (AVX-512). -inf always
 * gives NaN (-inf * 0). */
enum { PW_GELU_POSINF_NAN = 1, PW_GELU_HALVE_FIRST = 2 };
extern int pw_gelu_eager;
enum {
    PW_ACT_SILU = 6, PW_ACT_HARDSWISH = 7, PW_ACT_HARDSIGMOID = 8, PW_ACT_RELU6 = 9,
    /* with parameters (slots S_ACT_P..): the element-wise kernel's only */
    PW_ACT_CLAMP = 10,      /* lo, hi */
    PW_ACT_LEAKY_RELU = 11, /* negative slope */
    PW_ACT_ELU = 12,        /* alpha, scale, input scale */
    PW_ACT_POW = 13,        /* exponent */
    /* maths of one argument */
    PW_ACT_NEG = 14, PW_ACT_ABS, PW_ACT_EXP, PW_ACT_LOG, PW_ACT_SQRT, PW_ACT_RSQRT, PW_ACT_RECIPROCAL,
    PW_ACT_SQUARE, PW_ACT_ERF, PW_ACT_SIN, PW_ACT_COS, PW_ACT_SIGN
};

/* element-wise binary ops (slot S_BINOP); maximum and minimum give NaN where either operand is NaN */
enum { PW_BIN_NONE = 0, PW_BIN_ADD = 1, PW_BIN_SUB = 2, PW_BIN_MUL = 3, PW_BIN_DIV = 4, PW_BIN_RSUB = 5 };
enum { PW_BIN_MAX = 6, PW_BIN_MIN = 7 };

/* slots */
enum {
    S_OP = 0, S_ACT = 1, S_OUT = 2, S_X = 3, S_Y = 4, S_W = 5, S_BIAS = 6, S_SCALAR = 7, /* double bits */
    S_OSHAPE = 8,  /* 4: output shape */
    S_XSTRIDE = 12, /* 4: x strides over the output's index space (0 where broadcast) */
    S_XSHAPE = 16,  /* 4: x shape (conv, pool: N, C, H, W) */
    S_YSTRIDE = 20, /* 4: y strides over the output's index space */
    S_BINOP = 24, S_ALPHA = 25, /* double bits: y is scaled by alpha (add/sub) */
    S_LAYOUT = 26, /* conv (PW_PACK_BLOCKED): PW_BLK_* bits, which of x, out and the residual are blocked;
                    * K_ADAPTIVE: PW_BLK_IN where x is blocked (global pooling only) */
    S_SCALE = 27,  /* conv (PW_PACK_BLOCKED, 1x1): 0, or the address of a gate [N][C] multiplying x's channels */
    S_KH = 28, S_KW, S_SH, S_SW, S_PH, S_PW, S_DH, S_DW, S_GROUPS, /* conv and pool windows */
    S_POINTWISE = 37, /* conv: 1x1 stride 1 on the input as it lies, no im2col (decided in Python) */
    S_COUNT_PAD = 38, S_DIVISOR = 39,
    S_AUX = 40, S_NAUX = 41, /* cat: address and count of (addr, offset, size, stride0..3) records */
    S_WPACK = 42, /* conv: 0, or the weights packed in panels per group (tile_gemm.h), used instead of sgemm */
    S_WPACK_T = 43, /* conv: PW_PACK_*: how the packed weights are used */
    S_ACT_P = 44,   /* 3: the activation's parameters (double bits; element-wise kernel) */
    S_PROFILE = 47 /* 0, or the address of int64 [ns, tiles, hot, warm runs] the kernel adds each tile's
                    * time to; hot != 0: each tile is run once untimed first (warm runs counted) */
};

/* slots of tile_reduce.c's kernels beyond the shared ones (S_OP, S_OUT, S_X, S_W, S_BIAS, S_SCALAR,
 * S_OSHAPE, S_XSTRIDE: x's strides over the output's dims, end-padded like the tile box); they reuse the
 * numbers of the window slots. K_REDUCE's correction (var, std) and K_GROUPNORM's eps: S_SCALAR. */
enum {
    SR_KIND = 24,    /* K_REDUCE: PW_RED_* */
    SR_RSHAPE = 28,  /* 4: K_REDUCE: sizes of the reduced dims, padded at the front with 1 (innermost last) */
    SR_RSTRIDE = 32, /* 4: K_REDUCE: x's strides along them; K_ROLL: the shift per output dim, in [0, n) */
    SR_GROUPS = 36,  /* K_GROUPNORM: the number of groups along dim 1 */
    SR_DTYPE = 37    /* K_COMPARE: x's and y's element type (PW_DT_F32 or PW_DT_U8, tile_kernels_seq.h) */
};

/* what K_REDUCE computes; var and std divide by max(0, count - correction) */
enum { PW_RED_SUM = 0, PW_RED_MEAN = 1, PW_RED_AMAX = 2, PW_RED_AMIN = 3, PW_RED_VAR = 4, PW_RED_STD = 5 };

/* what K_COMPARE computes (SR_KIND): x op y, y a tensor (S_Y, S_YSTRIDE) or a number (S_SCALAR); the logic
 * ops take nonzero as true (NaN too, as torch); PW_CMP_NOT is x == 0 (logical_not, bitwise_not of bool) */
enum {
    PW_CMP_EQ = 0, PW_CMP_NE = 1, PW_CMP_LT = 2, PW_CMP_LE = 3, PW_CMP_GT = 4, PW_CMP_GE = 5,
    PW_CMP_AND = 6, PW_CMP_OR = 7, PW_CMP_NOT = 8
};

/* one tile of PW_K_REDUCE .. PW_K_COMPARE (tile_reduce.c); 1 for another code */
int pw_reduce_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);

/* cblas_sgemm's signature (row-major, no-trans/trans as CBLAS enum values) */
typedef void (*pw_sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Compute one tile; scratch holds PW_SCRATCH_HEADER floats plus the layer's im2col size, stamp tells
 * inferences apart (a cached im2col of an earlier one is stale). 0 on success. */
int pw_tile_kernel(const int64_t *layer, const int32_t *lo, const int32_t *hi, float *scratch,
                   pw_sgemm_fn sgemm, int64_t stamp);

/* one tile of a resizing layer (PW_K_NEAREST, PW_K_BILINEAR, PW_K_SHUFFLE) (tile_resize.c); 0 on success */
int pw_resize_tile(const int64_t *layer, const int32_t *lo, const int32_t *hi);

/* one tile of PW_K_DEPTHWISE (tile_depthwise.c): whole output rows; 0 on success */
int pw_depthwise_tile(const int64_t *layer, const int32_t *lo, const int32_t *hi, float *scratch);

/* the scratch floats (after the header) a PW_K_DEPTHWISE tile of at most rows output rows needs */
int64_t pw_depthwise_scratch(const int64_t *layer, int64_t rows);

/* One tile of PW_K_DWPW (tile_depthwise.c): whole output rows of every output channel. Its row is the 1x1
 * convolution's (output, residual, bias, act, packed weights: panels of PW_MR or, S_WPACK_T
 * PW_PACK_TRANSPOSED, of PW_TR; S_XSHAPE its input's shape, the depthwise output's) with S_AUX the address
 * of the depthwise convolution's row (a PW_K_DEPTHWISE row without output or residual) and S_KH the
 * output rows per block: each block's depthwise rows of every channel go to the scratch, and the
 * product reads them there. 0 on success. */
int pw_dwpw_tile(const int64_t *layer, const int32_t *lo, const int32_t *hi, float *scratch);

/* the scratch floats (after the header) a PW_K_DWPW tile of at most rows output rows needs; dw: its
 * depthwise row */
int64_t pw_dwpw_scratch(const int64_t *layer, const int64_t *dw, int64_t rows);

/* any epilogue activation without parameters (PW_ACT_*) over n values in place (tile_kernels.c) */
void pw_activate(float *d, int64_t n, int act);

/* act (PW_ACT_SILU or later) over n values in place; p: its parameters (3 floats; NULL for those that
 * take none) (tile_act.c) */
void pw_act_row(float *d, int64_t n, int act, const float *p);

/* kh x kw (kw 2 or 3) stride-2 max pooling of one channel plane (rows RS apart) over output rows
 * [oh_lo, oh_hi) and columns [ow_lo, ow_hi), padding ph, pw (tile_pool_s2.c); 1 where this CPU lacks
 * AVX-512 */
int pw_pool_s2_max(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t OW, int64_t oh_lo,
                   int64_t oh_hi, int64_t ow_lo, int64_t ow_hi, int64_t kh, int64_t kw, int64_t ph, int64_t pw);

/* 3x3 stride-1 pooling with padding 1 of one channel plane (rows RS apart, the output W wide) over output
 * rows [oh_lo, oh_hi): max, or avg divided by div (tile_pool_s1.c); 1 where this CPU lacks AVX-512 */
int pw_pool3_s1(const float *xc, int64_t RS, int64_t H, int64_t W, float *oc, int64_t oh_lo, int64_t oh_hi,
                int is_max, float div);

/* Winograd F(2x2, 3x3) of one tile (tile_winograd.c): a 3x3 stride-1 convolution without dilation, one
 * group, padding 0 or 1; S_WPACK holds U = G g G^T per point of the transform (16 blocks of panels of
 * PW_MR output channels, each k-major over the input channels). Output rows [oh0, oh1), channels
 * [o0, o1) of image n; xn, on, rn (or NULL): the image's input, output and residual; bias and a ReLU
 * (S_ACT) applied in the store, other activations left to the caller. 2x2 blocks whose input holds +-inf
 * are computed directly from the weights as they are (S_W), as eager's sums give them. */
void pw_conv_winograd(const int64_t *L, const float *xn, float *scratch, int64_t stamp, int64_t n, int64_t oh0,
                      int64_t oh1, int64_t o0, int64_t o1, float *on, const float *rn);

/* the scratch floats (after the header) pw_conv_winograd needs for C input channels, tiles of at most
 * rows output rows and channels output channels, OW output columns */
int64_t pw_winograd_scratch(int64_t C, int64_t rows, int64_t channels, int64_t OW);

#endif
