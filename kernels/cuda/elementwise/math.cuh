// The special functions of the f32 kernels, the same formulas as the CPU's (kernels/cpu/
// vec_math.h: exp, tanh, erf, the normal tail, GELU and its derivative), so both devices share
// their edge cases: e^x flushes to 0 below e^-87.33 and is inf above e^88.72, NaN stays NaN,
// GELU's tails come from small terms that do not cancel. Results agree with the CPU's to a few
// f32 rounding errors (the compilers fuse multiply-adds in different places).
#pragma once

#include <cstdint>
#include <limits>

namespace merak::cuda_kernels::math {

constexpr float kInf = std::numeric_limits<float>::infinity();

// e^x on [-87.6, 88.3] without range checks: 2^n e^r with n = round(x / ln2), ln2 split in two
// so that n ln2 is exact, e^r by a degree-6 polynomial, 2^n built in the exponent bits.
constexpr float kExpLn2Hi = 0.693145751953125f;
constexpr float kExpLn2Lo = 1.42860682030941723e-6f;
__device__ inline float exp_core(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = fmaf(x, kLog2e, kRound);
  const float n = t - kRound;
  const float r = fmaf(-n, kExpLn2Lo, fmaf(-n, kExpLn2Hi, x));
  float p = 1.3941108434e-3f;
  p = fmaf(p, r, 8.37512639815e-3f);
  p = fmaf(p, r, 4.16663528968e-2f);
  p = fmaf(p, r, 1.66664155147e-1f);
  p = fmaf(p, r, 5.00000004712e-1f);
  p = fmaf(p, r, 1.00000003772f);
  p = fmaf(p, r, 1.0f);
  // Unsigned: out of range the arithmetic wraps (the caller replaces that result).
  const uint32_t scale_bits = (__float_as_uint(t) - 0x4B400000u + 127u) << 23;
  return p * __uint_as_float(scale_bits);
}

// e^x for any x: the last stretch below overflow is 2 e^(x - ln2).
__device__ inline float exp_sat(float x) {
  const bool top = x > 88.0f;
  const float y = exp_core(top ? x - kExpLn2Hi : x) * (top ? 1.99999714279f : 1.0f);
  return x > 88.72f ? kInf : (x < -87.33f ? 0.0f : y);
}

// |x| capped at cap; NaN gives cap (callers carry NaN through x itself).
__device__ inline float abs_capped(float x, float cap) { return fminf(fabsf(x), cap); }

// tanh: an odd polynomial below |x| = 0.55 (where 1 - 2 / (1 + e^2|x|) would cancel), the
// exponential form above, |x| capped at 10. NaN takes the first branch.
__device__ inline float tanh(float x) {
  const float s = x * x;
  float q = -6.610227831e-3f;
  q = fmaf(q, s, 2.130938866e-2f);
  q = fmaf(q, s, -5.390942883e-2f);
  q = fmaf(q, s, 1.333311373e-1f);
  q = fmaf(q, s, -3.333333201e-1f);
  const float small = fmaf(x * s, q, x);
  const float big = 1.0f - 2.0f / (1.0f + exp_core(2.0f * abs_capped(x, 10.0f)));
  return !(fabsf(x) >= 0.55f) ? small : copysignf(big, x);
}

// The standard normal's upper tail Q(x) = gauss(x) * tail_scaled(x) for 0 <= x <= 9.
__device__ inline float gauss(float x) { return exp_core(-0.5f * (x * x)); }
__device__ inline float normal_tail_scaled(float x) {
  const float t = 1.0f / (1.0f + 0.3f * x);
  float u = 3.803568224e-2f;
  u = fmaf(u, t, -1.672875523e-1f);
  u = fmaf(u, t, 2.242636357e-1f);
  u = fmaf(u, t, -7.078565432e-2f);
  u = fmaf(u, t, 1.380213060e-1f);
  u = fmaf(u, t, 9.688903899e-2f);
  u = fmaf(u, t, 1.212706208e-1f);
  u = fmaf(u, t, 1.195929515e-1f);
  return t * u;
}

// erf: x p(x^2) below |x| = 0.5, 1 - 2 Q(sqrt(2) |x|) above. NaN takes the first branch.
__device__ inline float erf(float x) {
  const float s = x * x;
  float p = 4.719082567e-3f;
  p = fmaf(p, s, -2.675773274e-2f);
  p = fmaf(p, s, 1.128283143e-1f);
  p = fmaf(p, s, -3.761260901e-1f);
  p = fmaf(p, s, 1.128379166f);
  const float small = x * p;
  const float z = abs_capped(x * 1.41421356f, 9.0f);
  const float big = 1.0f - 2.0f * gauss(z) * normal_tail_scaled(z);
  return !(fabsf(x) >= 0.5f) ? small : copysignf(big, x);
}

// GELU through its odd part: gelu(x) = relu(x) - |x| Q(|x|), Q = 1 - Phi (exact) or
// sigmoid(-w), w = 2 k (|x| + c |x|^3) (GPT-2's tanh form); |x| capped at 9. relu is written
// x < 0 ? 0 : x, as std::max(x, 0) is on the CPU, so that NaN stays NaN.
constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // the normal density at 0
constexpr float kW1 = float(2 * kGeluK);                 // w = |x| (kW1 + kW3 |x|^2)
constexpr float kW3 = float(2 * kGeluK * kGeluC);
constexpr float kDw3 = float(6 * kGeluK * kGeluC);       // w' = kW1 + kDw3 |x|^2

__device__ inline float relu(float x) { return x < 0.0f ? 0.0f : x; }

__device__ inline float gelu_tanh(float x) {
  const float ax = abs_capped(x, 9.0f);
  const float w = ax * (kW1 + kW3 * ax * ax);
  return relu(x) - ax / (1.0f + exp_core(w));
}

// gelu'(x) = d below 0 and 1 - d from 0 up, d = s - |x| w' s (1 - s), s = sigmoid(-w), with
// s (1 - s) = e s^2, e = e^w. NaN gives NaN.
__device__ inline float gelu_tanh_grad(float x) {
  const float ax = abs_capped(x, 9.0f);
  const float a2 = ax * ax;
  const float e = exp_core(ax * (kW1 + kW3 * a2));
  const float s = 1.0f / (1.0f + e);
  const float dw = kW1 + kDw3 * a2;
  const float d = s * (1.0f - ax * dw * e * s);
  return x < 0.0f ? d : (x >= 0.0f ? 1.0f - d : x);
}

__device__ inline float gelu_erf(float x) {
  const float ax = abs_capped(x, 9.0f);
  return relu(x) - ax * gauss(ax) * normal_tail_scaled(ax);
}

// d = Q(|x|) - |x| phi(|x|).
__device__ inline float gelu_erf_grad(float x) {
  const float ax = abs_capped(x, 9.0f);
  const float d = gauss(ax) * (normal_tail_scaled(ax) - ax * kInvSqrt2Pi);
  return x < 0.0f ? d : (x >= 0.0f ? 1.0f - d : x);
}

}  // namespace merak::cuda_kernels::math
