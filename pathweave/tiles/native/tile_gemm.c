/* Micro-kernels for convolution tiles (see tile_gemm.h), one per instruction set, picked at run time.
 *
 * A micro-kernel computes PW_MR rows x up to 3 vectors of columns over a block of k: per k it loads the
 * columns of B (contiguous in a row of B), broadcasts each row's weight and accumulates with FMAs, all
 * in registers (AVX-512: 8 x 3 accumulators of 16 floats; AVX2: 4 x 3 of 8, twice per panel), one
 * source for both widths (tile_simd.h; the file includes its kernel section once per width). Column
 * tails use masked loads and stores, so any tile width runs the same code. Columns and k are blocked
 * (PW_NC, PW_KC) so that a block of B stays in L2 while every panel of the tile passes over it.
 * Software prefetches run ahead on the weights (they stream from memory: ResNet-50 reads 100 MB of them
 * per inference) and on the rows of B; in ResNet-50 they took the products in place from ~115 to
 * ~170 GFLOP/s per core.
 */
#ifndef PW_VW /* the file's body; the vector kernels are at its end, included once per width */
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

/* the blocking, settable for experiments (A/B in one process) */
int pw_kc = PW_KC, pw_nc = PW_NC;
/* the micro-kernels prefetch the lines of C and of the residual their epilogue writes and reads as their k
 * loop starts (bit 1: at AVX2, the default; bit 2: at AVX-512, not measured there yet). A 1x1 layer's
 * output and residual (3 MB each at 56x56) lie far from cache, and a k loop of 64 is short: on a Zen 3,
 * ResNet-50's kernel time 0.985x (paired A/B per inference, 1 and 2 workers) */
int pw_prefetch_out = 1;

#if defined(__x86_64__) && defined(__GNUC__)
#define PW_X86 1
#define PW_VW 16
#include "tile_gemm.c" /* the kernel below for AVX-512 */
#undef PW_VW
#define PW_VW 8
#include "tile_gemm.c" /* and for AVX2 */
#undef PW_VW
#endif

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
    if (__builtin_cpu_supports("avx512f")) return *isa = "avx512", panel_pass_16;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return *isa = "avx2", panel_pass_8;
#endif
    return *isa = "generic", panel_pass_generic;
}

static panel_fn chosen;
static const char *chosen_isa = "generic";
static int hot_level = -1; /* pw_hot_level's; set with chosen */

/* the PW_HOT_FN copy (tile_kernels.h) for a level: x86-64-v4 needs more than avx512f (BW, DQ, VL, CD) and
 * x86-64-v3 more than avx2 and fma (BMI, MOVBE...): a CPU short of them runs the next copy down */
static int hot_of(const char *isa) {
#ifdef PW_X86
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("x86-64-v4")) return 2;
    if (strcmp(isa, "generic") && __builtin_cpu_supports("x86-64-v3")) return 1;
#endif
    (void)isa;
    return 0;
}

const char *pw_gemm_isa(void) {
    panel_fn fn = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (!fn) { /* threads racing here compute the same choice */
        const char *isa;
        fn = pick(&isa);
        __atomic_store_n(&chosen_isa, isa, __ATOMIC_RELAXED);
        __atomic_store_n(&hot_level, hot_of(isa), __ATOMIC_RELAXED);
        __atomic_store_n(&chosen, fn, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&chosen_isa, __ATOMIC_RELAXED);
}

int pw_hot_level(void) {
    const int level = __atomic_load_n(&hot_level, __ATOMIC_RELAXED);
    if (level >= 0) return level;
    pw_gemm_isa();
    return __atomic_load_n(&hot_level, __ATOMIC_RELAXED);
}

int pw_vec_width(void) {
    const char *isa = pw_gemm_isa();
    return !strcmp(isa, "avx512") ? 16 : !strcmp(isa, "avx2") ? 8 : 0;
}

int pw_gemm_force(const char *isa) {
    panel_fn fn = NULL;
    const char *name = NULL;
#ifdef PW_X86
    __builtin_cpu_init();
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) fn = panel_pass_16, name = "avx512";
    if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fn = panel_pass_8, name = "avx2";
#endif
    if (!strcmp(isa, "generic")) fn = panel_pass_generic, name = "generic";
    if (!fn) return 1;
    __atomic_store_n(&chosen_isa, name, __ATOMIC_RELAXED);
    __atomic_store_n(&hot_level, hot_of(name), __ATOMIC_RELAXED);
    __atomic_store_n(&chosen, fn, __ATOMIC_RELEASE);
    return 0;
}

void pw_gemm_packed(int64_t rows, int64_t cols, int64_t K, const float *wp, int64_t row_skip, const float *b,
                    int64_t ldb, float *c, int64_t ldc, const float *bias, const float *res, int act) {
    pw_gemm_isa();
    const panel_fn pass = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    const int relu = act == PW_ACT_RELU;
    const int64_t end = row_skip + rows; /* rows counted from the first panel's first row */
    const int64_t NC = pw_nc, KC = pw_kc;
    for (int64_t p0 = 0; p0 < cols; p0 += NC) {
        const int64_t nc = min64(NC, cols - p0);
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            const int64_t kc = min64(KC, K - k0);
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

#else /* PW_VW: the micro-kernel of one vector width, included twice by the body above */
#include "tile_simd.h"

/* rows of one register block: AVX-512's 32 registers hold a whole panel (8 rows x 3 vectors of 16
 * accumulators, 3 of B, 1 broadcast), AVX2's 16 half of one (4 x 3 of 8, 3, 1) */
#define PW_RH (PW_VW == 16 ? PW_MR : 4)

/* rows h * PW_RH .. of the panel, nv vectors of columns, the last under the mask tail where masked (whole
 * passes load plain: AVX2's masked load in the k loop, 256 x 1152 x 196 on one core, ~105 -> ~120 GFLOP/s) */
PW_VTI void PW_V(kernel)(const int nv, const int masked, vmask tail, int h, int64_t kc, const float *a,
                         const float *b, int64_t ldb, float *c, int64_t ldc, int i0, int i1, int first, int last,
                         const float *bias, const float *res, int relu) {
    vf acc[PW_RH][3];
#pragma GCC unroll 8
    for (int i = 0; i < PW_RH; i++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[i][v] = VZERO();
    /* the epilogue's lines of C and of the residual, fetched while the k loop runs */
    if (pw_prefetch_out & (PW_VW == 8 ? 1 : 2)) {
#pragma GCC unroll 8
        for (int i = 0; i < PW_RH; i++) {
            const int lane = PW_RH * h + i;
            if (lane < i0 || lane >= i1) continue;
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) {
                __builtin_prefetch(c + (int64_t)(lane - i0) * ldc + PW_VW * v, 1, 3);
                if (last && res) __builtin_prefetch(res + (int64_t)(lane - i0) * ldc + PW_VW * v, 0, 3);
            }
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        vf bv[3];
        const float *bk = b + k * ldb;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++)
            bv[v] = masked && v == nv - 1 ? VLOADZ_M(tail, bk + PW_VW * v) : VLOAD(bk + PW_VW * v);
        const float *ak = a + k * PW_MR + PW_RH * h;
        _mm_prefetch((const char *)(ak + PW_PREFETCH_A * PW_MR), _MM_HINT_T0);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++)
            _mm_prefetch((const char *)(bk + PW_PREFETCH_B * ldb + PW_VW * v), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < PW_RH; i++) {
            const vf w = VSET1(ak[i]);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[i][v] = VFMA(w, bv[v], acc[i][v]);
        }
    }
    const vf zero = VZERO();
#pragma GCC unroll 8
    for (int i = 0; i < PW_RH; i++) {
        const int lane = PW_RH * h + i;
        if (lane < i0 || lane >= i1) continue;
        float *cr = c + (int64_t)(lane - i0) * ldc;
        const float *rr = res ? res + (int64_t)(lane - i0) * ldc : NULL;
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) {
            const vmask m = v == nv - 1 ? tail : VMASK_ALL;
            vf x = acc[i][v];
            if (!first) x = VADD(x, VLOADZ_M(m, cr + PW_VW * v));
            if (last) {
                if (bias) x = VADD(x, VSET1(bias[lane - i0]));
                if (rr) x = VADD(x, VLOADZ_M(m, rr + PW_VW * v));
                if (relu) x = VMAX(zero, x); /* max(0, NaN) is NaN: the second operand */
            }
            VSTORE_M(cr + PW_VW * v, m, x);
        }
    }
}

PW_VT static void PW_V(panel_pass)(int64_t cols, int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
                                   int64_t ldc, int i0, int i1, int first, int last, const float *bias,
                                   const float *res, int relu) {
    for (int64_t p = 0; p < cols; p += 3 * PW_VW) {
        const int64_t n = min64(3 * PW_VW, cols - p);
        const int nv = (int)((n + PW_VW - 1) / PW_VW);
        const vmask tail = VMASK_N(n - PW_VW * (nv - 1));
        const float *rp = res ? res + p : NULL;
        for (int h = 0; h < PW_MR / PW_RH; h++) {
            if (PW_RH * h + PW_RH <= i0 || PW_RH * h >= i1) continue;
            if (n == 3 * PW_VW) /* a whole pass: no masked load in the k loop */
                PW_V(kernel)(3, 0, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp,
                             relu);
            else if (nv == 3)
                PW_V(kernel)(3, 1, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp,
                             relu);
            else if (nv == 2)
                PW_V(kernel)(2, 1, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp,
                             relu);
            else
                PW_V(kernel)(1, 1, tail, h, kc, a, b + p, ldb, c + p, ldc, i0, i1, first, last, bias, rp,
                             relu);
        }
    }
}
#undef PW_RH
#endif /* PW_VW */
