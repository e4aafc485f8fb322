/* The activations and unary maps of the element-wise kernel from PW_ACT_SILU on (tile_kernels.h), over a
 * row in place: one loop per code, each as PyTorch's CPU kernel computes it (the same formula, NaN and
 * +-inf giving what eager gives), with tile_math.h's maths instead of libm so that GCC vectorises them. */
#if defined(__GNUC__) && !defined(__clang__)
/* nothing here (tile_math.h included) uses floating-point traps: the clamps become blends (errno is off
 * for the whole library, setup.py: the pragma does not reach the target clones' sqrtf) */
#pragma GCC optimize("no-trapping-math")
#endif

#include "tile_kernels.h"
#include "tile_math.h"

/* helpers inlined into each clone of pw_act_row (a call would run the baseline code) */
#define PW_INLINE __attribute__((always_inline)) static inline

/* values of |x| from which sin and cos take libm's (their double reduction stays exact below) */
#define PW_TRIG_LIBM 1e5f
/* values per block of sin and cos (the inputs are kept to redo the large ones) */
#define PW_TRIG_BLOCK 64

/* x < lo ? lo : x, then > hi ? hi : x: NaN passes, -0 stays -0 (eager's clamp and hardtanh) */
static inline float clamp_nan(float x, float lo, float hi) {
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

/* sin (quarter 0) or cos (quarter 1) of n values in place */
PW_INLINE void trig_row(float *d, int64_t n, int quarter) {
    float keep[PW_TRIG_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += PW_TRIG_BLOCK) {
        const int64_t m = n - i0 < PW_TRIG_BLOCK ? n - i0 : PW_TRIG_BLOCK;
        float *b = d + i0;
        memcpy(keep, b, sizeof(float) * m);
        for (int64_t i = 0; i < m; i++) b[i] = pw_sin_quarter(b[i], quarter);
        for (int64_t i = 0; i < m; i++)
            if (fabsf(keep[i]) >= PW_TRIG_LIBM && fabsf(keep[i]) != INFINITY)
                b[i] = quarter ? cosf(keep[i]) : sinf(keep[i]);
    }
}

/* x ** p for a number p, as torch's pow_tensor_scalar: x * x * x for 3, 1 / (x * x) for -2, else libm's
 * powf (2, 0.5, -0.5, -1 are PW_ACT_SQUARE, SQRT, RSQRT, RECIPROCAL in Python) */
PW_INLINE void pow_row(float *d, int64_t n, float p) {
    if (p == 3.0f) {
        for (int64_t i = 0; i < n; i++) d[i] = d[i] * d[i] * d[i];
    } else if (p == -2.0f) {
        for (int64_t i = 0; i < n; i++) d[i] = 1.0f / (d[i] * d[i]);
    } else {
        for (int64_t i = 0; i < n; i++) d[i] = powf(d[i], p);
    }
}

/* the activations that take parameters (p[0..2]) */
PW_INLINE void param_row(float *d, int64_t n, int act, const float *p) {
    switch (act) {
    case PW_ACT_CLAMP: /* p: lo, hi (+-inf where absent) */
    {
        const float lo = p[0], hi = p[1];
        for (int64_t i = 0; i < n; i++) d[i] = clamp_nan(d[i], lo, hi);
        break;
    }
    case PW_ACT_LEAKY_RELU: /* p: the negative slope */
    {
        const float slope = p[0];
        for (int64_t i = 0; i < n; i++) d[i] = d[i] > 0.0f ? d[i] : d[i] * slope;
        break;
    }
    case PW_ACT_ELU: /* p: alpha, scale, input scale; x <= 0 ? expm1(x * in) * alpha * scale : x * scale */
    {
        const float neg_coef = p[0] * p[1], scale = p[1], in_scale = p[2];
        for (int64_t i = 0; i < n; i++) {
            const float neg = pw_expm1_neg(d[i] * in_scale) * neg_coef;
            d[i] = d[i] <= 0.0f ? neg : d[i] * scale;
        }
        break;
    }
    case PW_ACT_POW:
        pow_row(d, n, p[0]);
        break;
    default:
        break;
    }
}

/* the maths of one argument */
PW_INLINE void math_row(float *d, int64_t n, int act) {
    switch (act) {
    case PW_ACT_NEG: for (int64_t i = 0; i < n; i++) d[i] = -d[i]; break;
    case PW_ACT_ABS: for (int64_t i = 0; i < n; i++) d[i] = fabsf(d[i]); break;
    case PW_ACT_EXP: for (int64_t i = 0; i < n; i++) d[i] = pw_exp(d[i]); break;
    case PW_ACT_LOG: for (int64_t i = 0; i < n; i++) d[i] = pw_log(d[i]); break;
    case PW_ACT_SQRT: for (int64_t i = 0; i < n; i++) d[i] = sqrtf(d[i]); break;
    case PW_ACT_RSQRT: for (int64_t i = 0; i < n; i++) d[i] = 1.0f / sqrtf(d[i]); break;
    case PW_ACT_RECIPROCAL: for (int64_t i = 0; i < n; i++) d[i] = 1.0f / d[i]; break;
    case PW_ACT_SQUARE: for (int64_t i = 0; i < n; i++) d[i] = d[i] * d[i]; break;
    case PW_ACT_ERF: for (int64_t i = 0; i < n; i++) d[i] = pw_erf(d[i]); break;
    case PW_ACT_SIN: trig_row(d, n, 0); break;
    case PW_ACT_COS: trig_row(d, n, 1); break;
    case PW_ACT_SIGN: /* (0 < x) - (x < 0): NaN and -0 give 0, as eager's */
        for (int64_t i = 0; i < n; i++) d[i] = (d[i] > 0.0f ? 1.0f : 0.0f) - (d[i] < 0.0f ? 1.0f : 0.0f);
        break;
    default:
        break;
    }
}

PW_HOT_FN(, void, pw_act_row, (float *d, int64_t n, int act, const float *p), (d, n, act, p)) {
    switch (act) {
    case PW_ACT_SILU: /* x / (1 + e^-x); below -88 e^-x is +inf in eager: -0, and NaN for -inf (x * 0) */
        for (int64_t i = 0; i < n; i++) d[i] = d[i] < -88.0f ? d[i] * 0.0f : d[i] / (1.0f + exp_approx(-d[i]));
        break;
    case PW_ACT_HARDSWISH: /* x * min(max(x + 3, 0), 6) / 6: -inf gives NaN (-inf * 0) */
        for (int64_t i = 0; i < n; i++) d[i] = d[i] * clamp_nan(d[i] + 3.0f, 0.0f, 6.0f) / 6.0f;
        break;
    case PW_ACT_HARDSIGMOID:
        for (int64_t i = 0; i < n; i++) d[i] = clamp_nan(d[i] + 3.0f, 0.0f, 6.0f) / 6.0f;
        break;
    case PW_ACT_RELU6:
        for (int64_t i = 0; i < n; i++) d[i] = clamp_nan(d[i], 0.0f, 6.0f);
        break;
    case PW_ACT_CLAMP:
    case PW_ACT_LEAKY_RELU:
    case PW_ACT_ELU:
    case PW_ACT_POW:
        param_row(d, n, act, p);
        break;
    default:
        math_row(d, n, act);
    }
}
