/* Float maths without libm calls, so that loops over it vectorise (GCC, no -ffast-math; the files that
 * include this compile with no-trapping-math so that the selects become blends). Each function takes
 * NaN to NaN unless it says otherwise; the accuracy is stated per function. */
#ifndef PW_TILE_MATH_H
#define PW_TILE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float pw_bits_float(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline int32_t pw_float_bits(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

/* e^r - 1 for |r| <= ln2/2 by its Taylor series to degree 8 (remainder below 6e-9, relative) */
static inline float pw_expm1_reduced(float r) {
    float p = 1.0f / 40320.0f;
    p = p * r + 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    return p * r;
}

/* x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts; n rounded with 1.5 * 2^23), for |x| <= 150 */
static inline float pw_reduce_ln2(float x, float *n) {
    *n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    return (x - *n * 0.693359375f) - *n * -2.12194440e-4f;
}

/* e^x, relative error about 1e-7: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor series to degree 7
 * (remainder below 6e-9), 2^n put into the exponent bits. Below -87 it gives ~1.6e-38 instead of less,
 * above 88 e^88 instead of more (the softmax's and GELU's range). */
static inline float exp_approx(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n;
    const float r = pw_reduce_ln2(x, &n);
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * pw_bits_float(((int32_t)n + 127) << 23);
}

/* e^x over float's whole range, as torch's exp gives it: +inf above 88.72, subnormals down to -103.9
 * and 0 below; relative error about 1e-7. 2^n is put in as two factors so that n may reach -150. */
static inline float pw_exp(float x) {
    x = x < -104.0f ? -104.0f : x;
    x = x > 89.0f ? 89.0f : x;
    float n;
    const float r = pw_reduce_ln2(x, &n);
    const int32_t k = (int32_t)n, k1 = k / 2, k2 = k - k1;
    const float p = 1.0f + pw_expm1_reduced(r);
    return p * pw_bits_float((k1 + 127) << 23) * pw_bits_float((k2 + 127) << 23);
}

/* e^x - 1 for x <= 0 (ELU's negative side), relative error about 2e-7 also near 0, -1 below -87 */
static inline float pw_expm1_neg(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n;
    const float r = pw_reduce_ln2(x, &n);
    const float s = pw_bits_float(((int32_t)n + 127) << 23);
    return (s - 1.0f) + s * pw_expm1_reduced(r);
}

/* ln x, relative error about 2e-7: x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23
 * first), ln m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^9. Negative
 * gives NaN, +-0 -inf, +inf +inf. */
static inline float pw_log(float x) {
    const int tiny = x < 1.17549435e-38f;
    const int32_t i = pw_float_bits(tiny ? x * 8388608.0f : x) & 0x7fffffff;
    const int32_t k = (i - 0x3f3504f3) >> 23;
    const float m = pw_bits_float(i - k * (1 << 23));
    const float s = (m - 1.0f) / (m + 1.0f), z = s * s;
    float p = 2.0f / 9.0f;
    p = p * z + 2.0f / 7.0f;
    p = p * z + 2.0f / 5.0f;
    p = p * z + 2.0f / 3.0f;
    p = p * z + 2.0f;
    const float e = (float)k - (tiny ? 23.0f : 0.0f);
    const float y = e * 0.693359375f + (s * p + e * -2.12194440e-4f);
    const float fixed = x == 0.0f ? -INFINITY : (x < 0.0f ? NAN : y);
    return x == INFINITY || x != x ? x : fixed;
}

/* erf by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7, about float rounding for GELU):
 * 1 - t (a1 + t (a2 + ...)) e^(-x^2) with t = 1 / (1 + p |x|), the sign of x put back */
static inline float erf_approx(float x) {
    const float a = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return copysignf(1.0f - p * t * exp_approx(-a * a), x);
}

/* erf with a relative error about 3e-7 near 0 too: below |x| = 1 its Taylor series x P(x^2) to x^23
 * (remainder below 1e-10), from 1 on erf_approx (absolute 1.5e-7 on values above 0.84) */
static inline float pw_erf(float x) {
    const float z = x * x;
    float p = -1.22905553e-09f; /* 2/sqrt(pi) (-1)^n / (n! (2n + 1)), n = 11 down to 0 */
    p = p * z + 1.48071928e-08f;
    p = p * z - 1.63658447e-07f;
    p = p * z + 1.64621144e-06f;
    p = p * z - 1.49256504e-05f;
    p = p * z + 1.20553330e-04f;
    p = p * z - 8.54832702e-04f;
    p = p * z + 5.22397763e-03f;
    p = p * z - 2.68661706e-02f;
    p = p * z + 1.12837917e-01f;
    p = p * z - 3.76126389e-01f;
    p = p * z + 1.12837917e+00f;
    return fabsf(x) < 1.0f ? x * p : erf_approx(x);
}

/* sin (cos: quarter 1) of x = q pi/2 + r, |r| <= pi/4, the reduction in double (exact for |x| below
 * 1e5; larger |x| is the caller's, with libm); r's sine and cosine by Taylor series to r^11 and r^12 */
static inline float pw_sin_quarter(float x, int quarter) {
    const double xd = (double)x;
    const double shifted = xd * 0.63661977236758134 + 6755399441055744.0; /* 1.5 * 2^52: q in the low bits */
    const double q = shifted - 6755399441055744.0;
    const float r = (float)((xd - q * 1.5707963267341256) - q * 6.077100506506192e-11);
    const float z = r * r;
    float s = -2.5052108e-08f;
    s = s * z + 2.7557319e-06f;
    s = s * z - 1.9841270e-04f;
    s = s * z + 8.3333333e-03f;
    s = s * z - 1.6666667e-01f;
    s = r + r * z * s;
    float c = -1.1470746e-11f;
    c = c * z + 2.0876757e-09f;
    c = c * z - 2.7557319e-07f;
    c = c * z + 2.4801587e-05f;
    c = c * z - 1.3888889e-03f;
    c = c * z + 4.1666667e-02f;
    c = c * z - 0.5f;
    c = 1.0f + z * c;
    int64_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    const int k = (int)(bits & 3) + quarter;
    const float y = (k & 1) ? c : s;
    return (k & 2) ? -y : y;
}

#endif
