/* Micro-kernels for convolution tiles (see tile_gemm.h), one per instruction set, picked at run time.
 *
 * A micro-kernel computes PW_MR rows x up to 3 vectors of columns over a block of k: per k it loads the
 * columns of B (contiguous in a row of B), broadcasts each row's weight and accumulates with FMAs, all
 * in registers (AVX-512: 8 x 3 accumulators of 16 floats; AVX2: 4 x 3 of 8, twice per panel). Column
 * tails use masked loads and stores, so any tile width runs the same code. Columns and k are blocked
 * (PW_NC, PW_KC) so that a block of B stays in L2 while every panel of the tile passes over it.
 * Software prefetches run ahead on the weights (they stream from memory: ResNet-50 reads 100 MB of them
 * per inference) and on the rows of B; in ResNet-50 they took the products in place from ~115 to
 * ~170 GFLOP/s per core.
 */
#include "tile_gemm.h"

#include <stddef.h>
#include <string.h>

#include "tile_kernels.h"

#define PW_KC 384 /* k per block */
#define PW_NC 240 /* columns per block: a block of B (PW_KC x PW_NC) stays in L2 */
#define PW_PREFETCH_A 128 /* k ahead: the weights stream from memory once per inference */
#define PW_PREFETCH_B 8   /* rows of B ahead */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_X86 1
#include <immintrin.h>

/* ---- AVX-512 -------------------------------------------------------------------------------------- */

__attribute__((target("avx512f"), always_inline)) static inline void
kernel512(const int nv, __mmask16 tail, int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
          int64_t ldc, int i0, int i1, int first, int last, const float *bias, const float *res, int relu) {
    __m512 acc[PW_MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < PW_MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 bv[3];
        const float *bk = b + k * ldb;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++)
            bv[v] = v == nv - 1 ? _mm512_maskz_loadu_ps(tail, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
        const float *ak = a + k * PW_MR;
        _mm_prefetch((const char *)(ak + PW_PREFETCH_A * PW_MR), _MM_HINT_T0);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) _mm_prefetch((const char *)(bk + PW_PREFETCH_B * ldb + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < PW_MR; i++) {
            const __m512 w = _mm512_set1_ps(ak[i]);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(w, bv[v], acc[i][v]);
        }
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < PW_MR; i++) {
        if (i < i0 || i >= i1) continue;
        float *cr = c + (int64_t)(i - i0) * ldc;
        const float *rr = res ? res + (int64_t)(i - i0) * ldc : NULL;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) {
            const __mmask16 m = v == nv - 1 ? tail : (__mmask16)0xFFFF;
            __m512 x = acc[i][v];
            if (!first) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, cr + 16 * v));
            if (last) {
                if (bias) x = _mm512_add_ps(x, _mm512_set1_ps(bias[i - i0]));
                if (rr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, rr + 16 * v));
                if (relu) x = _mm512_max_ps(zero, x); /* max(0, NaN) is NaN: the second operand */
            }
            _mm512_mask_storeu_ps(cr + 16 * v, m, x);
        }
    }
}

__attribute__((target("avx512f"))) static void
panel_pass512(int64_t cols, int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
              int i0, int i1, int first, int last, const float *bias, const float *res, int relu) {
    for (int64_t p = 0; p < cols; p += 48) {
        const int64_t n = min64(48, cols - p);
        const int nv = (int)((n + 15) / 16);
        const int rem = (int)(n - 16 * (nv - 1));
        const __mmask16 tail = (__mmask16)(rem == 16 ? 0xFFFF : (1u << rem) - 1);
        const float *rp = res ? res + p : NULL;
        if (nv == 3)
            kernel512(3, tail, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
        else if (nv == 2)
            kernel512(2, tail, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
        else
            kernel512(1, tail, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
    }
}

/* ---- AVX2 + FMA ----------------------------------------------------------------------------------- */

__attribute__((target("avx2,fma"))) static inline __m256i tail_mask256(int rem) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), lanes);
}

/* rows h*4 .. h*4+3 of the panel */
__attribute__((target("avx2,fma"), always_inline)) static inline void
kernel256(const int nv, __m256i tail, int h, int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
          int64_t ldc, int i0, int i1, int first, int last, const float *bias, const float *res, int relu) {
    __m256 acc[4][3];
    const __m256i all = _mm256_set1_epi32(-1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[i][v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 bv[3];
        const float *bk = b + k * ldb;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++)
            bv[v] = v == nv - 1 ? _mm256_maskload_ps(bk + 8 * v, tail) : _mm256_loadu_ps(bk + 8 * v);
        const float *ak = a + k * PW_MR + 4 * h;
        _mm_prefetch((const char *)(ak + PW_PREFETCH_A * PW_MR), _MM_HINT_T0);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) _mm_prefetch((const char *)(bk + PW_PREFETCH_B * ldb + 8 * v), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256 w = _mm256_broadcast_ss(ak + i);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[i][v] = _mm256_fmadd_ps(w, bv[v], acc[i][v]);
        }
    }
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const int lane = 4 * h + i;
        if (lane < i0 || lane >= i1) continue;
        float *cr = c + (int64_t)(lane - i0) * ldc;
        const float *rr = res ? res + (int64_t)(lane - i0) * ldc : NULL;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) {
            const __m256i m = v == nv - 1 ? tail : all;
            __m256 x = acc[i][v];
            if (!first) x = _mm256_add_ps(x, _mm256_maskload_ps(cr + 8 * v, m));
            if (last) {
                if (bias) x = _mm256_add_ps(x, _mm256_set1_ps(bias[lane - i0]));
                if (rr) x = _mm256_add_ps(x, _mm256_maskload_ps(rr + 8 * v, m));
                if (relu) x = _mm256_max_ps(zero, x);
            }
            _mm256_maskstore_ps(cr + 8 * v, m, x);
        }
    }
}

__attribute__((target("avx2,fma"))) static void
panel_pass256(int64_t cols, int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
              int i0, int i1, int first, int last, const float *bias, const float *res, int relu) {
    for (int64_t p = 0; p < cols; p += 24) {
        const int64_t n = min64(24, cols - p);
        const int nv = (int)((n + 7) / 8);
        const __m256i tail = tail_mask256((int)(n - 8 * (nv - 1)));
        const float *rp = res ? res + p : NULL;
        for (int h = 0; h < 2; h++) {
            if (4 * h + 4 <= i0 || 4 * h >= i1) continue;
            if (nv == 3)
                kernel256(3, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
            else if (nv == 2)
                kernel256(2, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
            else
                kernel256(1, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp, relu);
        }
    }
}

#endif /* x86-64 */

/* ---- any CPU -------------------------------------------------------------------------------------- */

static void panel_pass_generic(int64_t cols, int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
                               int64_t ldc, int i0, int i1, int first, int last, const float *bias,
                               const float *res, int relu) {
    for (int i = i0; i < i1; i++) {
        float *cr = c + (int64_t)(i - i0) * ldc;
        for (int64_t p = 0; p < cols; p++) {
            float x = 0.0f;
            for (int64_t k = 0; k < kc; k++) x += a[k * PW_MR + i] * b[k * ldb + p];
            if (!first) x += cr[p];
            if (last) {
                if (bias) x += bias[i - i0];
                if (res) x += res[(int64_t)(i - i0) * ldc + p];
                if (relu) x = x > 0.0f ? x : (x != x ? x : 0.0f);
            }
            cr[p] = x;
        }
    }
}

typedef void (*panel_fn)(int64_t, int64_t, const float *, const float *, int64_t, float *, int64_t, int, int, int,
                         int, const float *, const float *, int);

static panel_fn pick(const char **isa) {
#ifdef PW_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return *isa = "avx512", panel_pass512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return *isa = "avx2", panel_pass256;
#endif
    return *isa = "generic", panel_pass_generic;
}

static panel_fn chosen;
static const char *chosen_isa = "generic";

const char *pw_gemm_isa(void) {
    panel_fn fn = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (!fn) { /* threads racing here compute the same choice */
        const char *isa;
        fn = pick(&isa);
        __atomic_store_n(&chosen_isa, isa, __ATOMIC_RELAXED);
        __atomic_store_n(&chosen, fn, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&chosen_isa, __ATOMIC_RELAXED);
}

int pw_gemm_wide(void) { return pw_gemm_isa()[0] == 'a' && pw_gemm_isa()[3] == '5'; }

int pw_gemm_force(const char *isa) {
    panel_fn fn = NULL;
    const char *name = NULL;
#ifdef PW_X86
    __builtin_cpu_init();
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) fn = panel_pass512, name = "avx512";
    if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fn = panel_pass256, name = "avx2";
#endif
    if (!strcmp(isa, "generic")) fn = panel_pass_generic, name = "generic";
    if (!fn) return 1;
    __atomic_store_n(&chosen_isa, name, __ATOMIC_RELAXED);
    __atomic_store_n(&chosen, fn, __ATOMIC_RELEASE);
    return 0;
}

void pw_gemm_packed(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip, const float *b,
                    int64_t ldb, float *c, int64_t ldc, const float *bias, const float *res, int act) {
    pw_gemm_isa();
    const panel_fn pass = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    const int relu = act == PW_ACT_RELU;
    const int64_t end = row_skip + rows; /* rows counted from the first panel's first row */
    for (int64_t p0 = 0; p0 < cols; p0 += PW_NC) {
        const int64_t nc = min64(PW_NC, cols - p0);
        for (int64_t k0 = 0; k0 < K; k0 += PW_KC) {
            const int64_t kc = min64(PW_KC, K - k0);
            const int first = k0 == 0, last = k0 + kc >= K;
            for (int64_t panel = 0; panel * PW_MR < end; panel++) {
                const int64_t r0 = max64(panel * PW_MR, row_skip), r1 = min64(panel * PW_MR + PW_MR, end);
                const int64_t row = r0 - row_skip; /* the C row of lane r0 - panel * PW_MR */
                const int i0 = (int)(r0 - panel * PW_MR), i1 = (int)(r1 - panel * PW_MR);
                pass(nc, kc, wp + (panel * K + k0) * PW_MR, b + k0 * ldb + p0, ldb, c + row * ldc + p0, ldc, i0, i1,
                     first, last, bias ? bias + row : NULL, res ? res + row * ldc + p0 : NULL, relu);
            }
        }
    }
}
