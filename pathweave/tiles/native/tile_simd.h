/* Vectors of one width for the kernels written once for every x86 level (x86-64, GCC).
 *
 * A kernel file includes its vector code twice, once with PW_VW 16 (AVX-512) and once with PW_VW 8
 * (AVX2 + FMA), each time after this header, which (re)defines for that width: vf (a vector of PW_VW
 * floats), vmask (which lanes a masked load or store touches), PW_VT (the functions' target attribute),
 * PW_V(name) (name suffixed with the width, so that both copies live in one file) and the operations
 * below. The helpers that are more than one instruction (transpose, NaN-keeping max, lane shifts) are
 * defined once per width under their suffixed names. Nothing here chooses a level: the files dispatch
 * on pw_gemm_isa() at run time.
 */
#include <immintrin.h>
#include <stdint.h>

#ifndef PW_VW
#error "define PW_VW (16 or 8) before including tile_simd.h"
#endif

#undef vf
#undef vmask
#undef PW_VT
#undef PW_VTI
#undef VZERO
#undef VSET1
#undef VLOAD
#undef VSTORE
#undef VADD
#undef VSUB
#undef VDIV
#undef VFMA
#undef VMAX
#undef VMASK_N
#undef VMASK_ALL
#undef VLOADZ_M
#undef VLOADF_M
#undef VSTORE_M
#undef VBLEND_M

#define PW_VCAT2(a, b) a##_##b
#define PW_VCAT(a, b) PW_VCAT2(a, b)
#define PW_V(name) PW_VCAT(name, PW_VW)

#if PW_VW == 16
#define vf __m512
#define vmask __mmask16
#define PW_VT __attribute__((target("avx512f")))
#define PW_VTI __attribute__((target("avx512f"), always_inline)) static inline
#define VZERO() _mm512_setzero_ps()
#define VSET1(x) _mm512_set1_ps(x)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, x) _mm512_storeu_ps(p, x)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMAX(a, b) _mm512_max_ps(a, b) /* NaN in either: the second operand, as _mm256_max_ps */
#define VMASK_N(n) ((__mmask16)((n) >= 16 ? 0xFFFF : (1u << (n)) - 1))
#define VMASK_ALL ((__mmask16)0xFFFF)
#define VLOADZ_M(m, p) _mm512_maskz_loadu_ps(m, p)
#define VLOADF_M(fill, m, p) _mm512_mask_loadu_ps(fill, m, p)
#define VSTORE_M(p, m, x) _mm512_mask_storeu_ps(p, m, x)
#define VBLEND_M(m, a, b) _mm512_mask_blend_ps(m, a, b) /* b in the lanes of m, a elsewhere */
#elif PW_VW == 8
#define vf __m256
#define vmask __m256i
#define PW_VT __attribute__((target("avx2,fma")))
#define PW_VTI __attribute__((target("avx2,fma"), always_inline)) static inline
#define VZERO() _mm256_setzero_ps()
#define VSET1(x) _mm256_set1_ps(x)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, x) _mm256_storeu_ps(p, x)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VMASK_N(n) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define VMASK_ALL _mm256_set1_epi32(-1)
#define VLOADZ_M(m, p) _mm256_maskload_ps(p, m) /* masked lanes are neither read nor faulted */
#define VLOADF_M(fill, m, p) _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m))
#define VSTORE_M(p, m, x) vstore_m_8(p, m, x) /* vmaskmovps stores are microcoded on AMD: see there */
#define VBLEND_M(m, a, b) _mm256_blendv_ps(a, b, _mm256_castsi256_ps(m))
#else
#error "PW_VW is 16 or 8"
#endif

/* ---- helpers, once per width ------------------------------------------------------------------------ */

#if PW_VW == 16 && !defined(PW_VEC_HELPERS_16)
#define PW_VEC_HELPERS_16

/* r[i][j] <- r[j][i] for 16 x 16 floats: pairs, then quads, then 128-bit lanes of two steps */
PW_VTI void transpose_16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
    }
}

/* NaN wins, as max_nan in tile_kernels.c */
PW_VTI __m512 vmax_nan_16(__m512 acc, __m512 v) {
    const __mmask16 take = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take, acc, v);
}

/* lanes whose column c + lane lies in [0, end) (32-bit column indices) */
PW_VTI __mmask16 inside_16(int64_t c, int64_t end) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i col = _mm512_add_epi32(_mm512_set1_epi32((int)c), lanes);
    return _mm512_cmp_epi32_mask(col, _mm512_setzero_si512(), _MM_CMPINT_NLT) &
           _mm512_cmp_epi32_mask(col, _mm512_set1_epi32((int)end), _MM_CMPINT_LT);
}

/* [prev[15], cur[0 .. 14]]: each lane's left neighbour along a row of vectors */
PW_VTI __m512 left_in_16(__m512 prev, __m512 cur) {
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(cur), _mm512_castps_si512(prev), 15));
}

/* [cur[1 .. 15], next[0]]: each lane's right neighbour */
PW_VTI __m512 right_in_16(__m512 cur, __m512 next) {
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(cur), 1));
}

/* the even and the odd lanes of the 32 floats (a, b), in order */
PW_VTI __m512 even_16(__m512 a, __m512 b) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(a, even, b);
}
PW_VTI __m512 odd_16(__m512 a, __m512 b) {
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_permutex2var_ps(a, odd, b);
}
#endif

#if PW_VW == 8 && !defined(PW_VEC_HELPERS_8)
#define PW_VEC_HELPERS_8

/* r[i][j] <- r[j][i] for 8 x 8 floats: pairs, quads, then the 128-bit halves */
PW_VTI void transpose_8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* p[i] = x[i] where m's lane i is set. AVX2's masked store (vmaskmovps) is microcoded on AMD CPUs: ~17
 * cycles each on Zen 3 against under 1 for a plain store, a third of ResNet-50's 1x1 products of k = 64.
 * So a whole mask (most stores, often known at compile time) stores plainly, a prefix of lanes (the
 * column tails) in 4-, 2- and 1-float pieces, and only other masks take vmaskmovps. */
PW_VTI void vstore_m_8(float *p, __m256i m, __m256 x) {
    unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m));
    if (bits == 0xFF) {
        _mm256_storeu_ps(p, x);
        return;
    }
    if (bits & (bits + 1)) { /* not lanes 0 .. n - 1 */
        _mm256_maskstore_ps(p, m, x);
        return;
    }
    int n = __builtin_popcount(bits);
    __m128 h = _mm256_castps256_ps128(x);
    if (n >= 4) {
        _mm_storeu_ps(p, h);
        h = _mm256_extractf128_ps(x, 1), p += 4, n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)p, h);
        h = _mm_movehl_ps(h, h), p += 2, n -= 2;
    }
    if (n) _mm_store_ss(p, h);
}

/* v where v > acc or v is NaN, else acc (vmax_nan_16's rule): maxps(v, acc) is v > acc ? v : acc, and
 * the NaN test reads v alone, so the chain through acc is two instructions, not four */
PW_VTI __m256 vmax_nan_8(__m256 acc, __m256 v) {
    return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

PW_VTI __m256i inside_8(int64_t c, int64_t end) {
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32((int)c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpgt_epi32(col, _mm256_set1_epi32(-1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)end), col));
}

/* [prev[7], cur[0 .. 6]]: the halves (prev's high, cur's low) then a byte shift within each half */
PW_VTI __m256 left_in_8(__m256 prev, __m256 cur) {
    const __m256 mid = _mm256_permute2f128_ps(prev, cur, 0x21);
    return _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(cur), _mm256_castps_si256(mid), 12));
}

/* [cur[1 .. 7], next[0]] */
PW_VTI __m256 right_in_8(__m256 cur, __m256 next) {
    const __m256 mid = _mm256_permute2f128_ps(cur, next, 0x21);
    return _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(mid), _mm256_castps_si256(cur), 4));
}

/* the even and the odd lanes of the 16 floats (a, b), in order: per half, then the halves' 64-bit
 * pieces back in order */
PW_VTI __m256 even_8(__m256 a, __m256 b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
}
PW_VTI __m256 odd_8(__m256 a, __m256 b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}
#endif
