/* Transformer kernels of the tile runtime (tile_kernels_seq.c): embedding, layer norm, softmax, unary
 * maps, batched matmul on strided views, where, conversion to float32, and the copy of a reshape that
 * cannot view its input. Rows are written by pathweave/tiles/bind_transformer.py.
 *
 * Unlike the other kernels, these read shapes and strides padded at the FRONT to 4 dims (dim 3 is
 * always the tensor's last); SQ_RANK says how many dims are real. S_OSHAPE and the tile box stay as the
 * tile graph pads them (at the end) and are shifted by the kernels.
 */
#ifndef PW_TILE_KERNELS_SEQ_H
#define PW_TILE_KERNELS_SEQ_H

#include "tile_kernels.h"

/* slots of these kernels beyond the shared ones (S_OP, S_ACT, S_OUT, S_X, S_Y, S_BIAS, S_SCALAR, ...);
 * they reuse the numbers of the window slots, which only the convolution and pooling kernels read */
enum {
    SQ_Z = S_W,           /* a third tensor: where's condition, matmul's added term (addmm's self) */
    SQ_YSCALAR = S_ALPHA, /* double bits: where's y when it is a scalar; matmul: beta of the added term */
    SQ_XOUTER = 20,       /* copy: 2 dims of x before S_XSHAPE's 4 (sizes, then strides; sizes 1 if none) */
    SQ_ZSTRIDE = 28,      /* 4: strides of the third tensor over the output's index space */
    SQ_RANK = 32,         /* rank of the output, 1..4 */
    SQ_DTYPE = 33,        /* element type of x (convert, embedding indices) or of the condition (where) */
    SQ_K = 34,            /* matmul: the contraction size */
    SQ_ROWS = 35,         /* embedding: rows of the table */
    SQ_LAYOUT_A = 36,     /* matmul: how sgemm reads A (PW_GEMM_*) */
    SQ_LAYOUT_B = 37      /* matmul: how sgemm reads B */
};

/* element types (SQ_DTYPE) */
enum { PW_DT_F32 = 0, PW_DT_I64 = 1, PW_DT_I32 = 2, PW_DT_U8 = 3 };

/* how sgemm reads an operand: rows of unit stride (ld = row stride), transposed (ld = column stride), or
 * packed into scratch first (any strides) */
enum { PW_GEMM_ROWS = 0, PW_GEMM_TRANS = 1, PW_GEMM_PACK = 2 };

/* activations of these kernels (S_ACT): the shared ones and GPT-2's tanh form of GELU */
enum { PW_ACT_GELU_TANH = 4 };

int pw_embedding_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
int pw_layernorm_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
int pw_softmax_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
int pw_map_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
/* stamp tells inferences apart: the packed rows of A a worker keeps (products with a constant B) are
 * reused by its next tile over the same rows of the same layer in the same inference */
int pw_matmul_tile(const int64_t *L, const int32_t *lo, const int32_t *hi, float *scratch, pw_sgemm_fn sgemm,
                   int64_t stamp);
int pw_where_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
int pw_convert_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);
int pw_copy_tile(const int64_t *L, const int32_t *lo, const int32_t *hi);

#endif
