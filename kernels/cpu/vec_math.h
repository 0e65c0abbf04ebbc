// Vectorisable special functions shared by the CPU kernels (exp, tanh, erf, the normal tail,
// GELU and its derivative), usable by any CPU kernel. The f32 versions are branch-free inline
// code that GCC turns into AVX-512 loops under plain -O3 -march=native (libm's expf, tanhf and
// erff do not vectorise); they are accurate to a few 1e-7 relative, or a few 1e-7 absolute for
// results near 0. The f64 versions call libm: f64 is the checking type, where accuracy matters
// more than speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace merak::cpu {

// e^x for f32 on [-87.6, 88.3] (2^n below needs -126 <= n <= 127), with no range checks:
// e^x = 2^n e^r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split in two so that n ln2 is
// exact), e^r by a degree-6 Chebyshev fit (error < 3e-9 relative), 2^n built in the exponent
// bits. Callers that bound the argument themselves use this lean core.
constexpr float kExpLn2Hi = 0.693145751953125f;       // 16 bits: n * kExpLn2Hi is exact
constexpr float kExpLn2Lo = 1.42860682030941723e-6f;  // ln2 - kExpLn2Hi
inline float exp_core_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;         // 1.5 * 2^23: adding it rounds to an integer
  const float t = std::fma(x, kLog2e, kRound);  // n, in the low mantissa bits of t
  const float n = t - kRound;
  const float r = std::fma(-n, kExpLn2Lo, std::fma(-n, kExpLn2Hi, x));
  float p = 1.3941108434e-3f;
  p = std::fma(p, r, 8.37512639815e-3f);
  p = std::fma(p, r, 4.16663528968e-2f);
  p = std::fma(p, r, 1.66664155147e-1f);
  p = std::fma(p, r, 5.00000004712e-1f);
  p = std::fma(p, r, 1.00000003772f);
  p = std::fma(p, r, 1.0f);
  uint32_t t_bits;  // unsigned: out of range the arithmetic wraps instead of overflowing
  std::memcpy(&t_bits, &t, 4);
  const uint32_t scale_bits = (t_bits - 0x4B400000u + 127u) << 23;  // 2^n as an f32 pattern
  float scale;
  std::memcpy(&scale, &scale_bits, 4);
  return p * scale;
}

// e^x for any f32: 0 below e^-87.33 (subnormal results flush to 0), inf above e^88.72, NaN stays
// NaN. The last stretch below overflow, past the core's range, is 2 e^(x - ln2) (x - kExpLn2Hi is
// exact there; the factor carries kExpLn2Lo). Out of range the core's result is meaningless
// (but harmless) and replaced; clamping x first instead makes GCC emit slower masked code.
inline float exp_sat_f32(float x) {
  const bool top = x > 88.0f;
  const float y = exp_core_f32(top ? x - kExpLn2Hi : x) * (top ? 1.99999714279f : 1.0f);
  return x > 88.72f ? INFINITY : (x < -87.33f ? 0.0f : y);
}

// e^x for f32 arguments known to be at most 88 (softmax's x - max, log-probabilities, scores
// minus their log-sum-exp, -inf for masked ones): results below e^-87.33 flush to 0 and NaN stays
// NaN. Skips exp_sat_f32's overflow handling, which costs ~15% in softmax.
inline float exp_bounded_f32(float x) { return x < -87.33f ? 0.0f : exp_core_f32(x); }
inline float exp_bounded(float x) { return exp_bounded_f32(x); }
inline double exp_bounded(double x) { return std::exp(x); }

inline float exp_sat(float x) { return exp_sat_f32(x); }
inline double exp_sat(double x) { return std::exp(x); }

// |x| capped at `cap` (>= 0), for bounding the arguments of the f32 approximations. The f32 one
// compares bit patterns (for non-negative floats their order as integers): a float min would do,
// but GCC then if-converts everything computed from the capped value into masked constants,
// which costs more than it saves. NaN comes out as `cap`, so callers carry NaN through x itself.
inline float abs_capped(float x, float cap) {
  uint32_t xb, cb;
  std::memcpy(&xb, &x, 4);
  std::memcpy(&cb, &cap, 4);
  xb &= 0x7fffffffu;
  xb = xb < cb ? xb : cb;
  float r;
  std::memcpy(&r, &xb, 4);
  return r;
}
inline double abs_capped(double x, double cap) { return std::min(std::fabs(x), cap); }

// tanh. Near 0, 1 - 2 / (1 + e^(2|x|)) would cancel, so |x| < 0.55 uses x + x^3 q(x^2), q a
// Chebyshev fit to (tanh(x) - x) / x^3 (error < 5e-9 relative); beyond, the exponential form,
// with |x| capped at 10 where the result has long been 1 in f32. NaN takes the first branch.
inline float tanh_f32(float x) {
  const float s = x * x;
  float q = -6.610227831e-3f;
  q = std::fma(q, s, 2.130938866e-2f);
  q = std::fma(q, s, -5.390942883e-2f);
  q = std::fma(q, s, 1.333311373e-1f);
  q = std::fma(q, s, -3.333333201e-1f);
  const float small = std::fma(x * s, q, x);
  const float big = 1.0f - 2.0f / (1.0f + exp_core_f32(2.0f * abs_capped(x, 10.0f)));
  return !(std::fabs(x) >= 0.55f) ? small : std::copysign(big, x);
}

// The standard normal's upper tail Q(x) = P(Z > x) = erfc(x / sqrt 2) / 2 in f32, for
// 0 <= x <= 9 (callers clamp: beyond, Q < 1.2e-19 and the density < 1e-17, which they hold at
// their values at 9 - nothing next to the results they feed). Q = gauss * tail_scaled:
// gauss(x) = exp(-x^2 / 2), and Q(x) / gauss(x) = t U(t) with t = 1 / (1 + 0.3 x), U a degree-7
// Chebyshev fit over [0, 9] (error < 7e-8 relative). Q keeps its relative accuracy in the tail,
// where 1 - Phi would cancel; rounding x^2 costs x^2 * 3e-8 relative there.
inline float gauss_f32(float x) { return exp_core_f32(-0.5f * (x * x)); }
inline float normal_tail_scaled_f32(float x) {
  const float t = 1.0f / (1.0f + 0.3f * x);
  float u = 3.803568224e-2f;
  u = std::fma(u, t, -1.672875523e-1f);
  u = std::fma(u, t, 2.242636357e-1f);
  u = std::fma(u, t, -7.078565432e-2f);
  u = std::fma(u, t, 1.380213060e-1f);
  u = std::fma(u, t, 9.688903899e-2f);
  u = std::fma(u, t, 1.212706208e-1f);
  u = std::fma(u, t, 1.195929515e-1f);
  return t * u;
}

// erf. Near 0, 1 - erfc would cancel, so |x| < 0.5 uses x p(x^2), p a Chebyshev fit to
// erf(x) / x (error < 2e-9 relative); beyond, erf(|x|) = 1 - 2 Q(sqrt(2) |x|).
inline float erf_f32(float x) {
  const float s = x * x;
  float p = 4.719082567e-3f;
  p = std::fma(p, s, -2.675773274e-2f);
  p = std::fma(p, s, 1.128283143e-1f);
  p = std::fma(p, s, -3.761260901e-1f);
  p = std::fma(p, s, 1.128379166f);
  const float small = x * p;
  const float z = abs_capped(x * 1.41421356f, 9.0f);
  const float big = 1.0f - 2.0f * gauss_f32(z) * normal_tail_scaled_f32(z);
  return !(std::fabs(x) >= 0.5f) ? small : std::copysign(big, x);  // NaN: the first branch
}

inline float tanh_of(float x) { return tanh_f32(x); }
inline double tanh_of(double x) { return std::tanh(x); }
inline float erf_of(float x) { return erf_f32(x); }
inline double erf_of(double x) { return std::erf(x); }

// --- GELU ---
// Exact: x Phi(x). GPT-2's tanh form: 0.5 x (1 + tanh(u)), u = k (x + c x^3), k = sqrt(2 / pi),
// which is x sigmoid(2u). Both are written through their odd parts: gelu(x) = relu(x) - |x| Q(|x|)
// with Q(|x|) = 1 - Phi(|x|) (exact) or sigmoid(-2u(|x|)) (tanh form), small and computed with
// full relative accuracy, so nothing cancels for negative x. |x| is capped (at 9 in f32, where
// the tails are below 1e-18, or 20 for the f64 tanh form) so that no intermediate overflows or
// goes subnormal. The derivatives likewise: gelu'(x) = d for x < 0 and 1 - d for x >= 0, with
// d = Q(|x|) - |x| phi(|x|) (exact), or s - |x| w'(|x|) s (1 - s), s = sigmoid(-w), w = 2u (tanh).
constexpr double kGeluK = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // the normal density at 0

inline float exp_in_range(float x) { return exp_core_f32(x); }
inline double exp_in_range(double x) { return std::exp(x); }
template <typename T>
constexpr T gelu_cap() {
  return sizeof(T) == 4 ? T(9) : T(20);
}

template <typename T>
inline T gelu_tanh(T x) {
  const T ax = abs_capped(x, gelu_cap<T>());
  const T w = ax * (T(2 * kGeluK) + T(2 * kGeluK * kGeluC) * ax * ax);  // 2u(|x|) >= 0
  return std::max(x, T(0)) - ax / (T(1) + exp_in_range(w));
}

// s (1 - s) is e s^2 with e = e^w, 1 - s = e s.
template <typename T>
inline T gelu_tanh_grad(T x) {
  const T ax = abs_capped(x, gelu_cap<T>());
  const T a2 = ax * ax;
  const T e = exp_in_range(ax * (T(2 * kGeluK) + T(2 * kGeluK * kGeluC) * a2));
  const T s = T(1) / (T(1) + e);
  const T dw = T(2 * kGeluK) + T(6 * kGeluK * kGeluC) * a2;  // w'(|x|)
  const T d = s * (T(1) - ax * dw * e * s);
  return x < 0 ? d : (x >= 0 ? T(1) - d : x);  // NaN: x
}

inline float gelu_erf(float x) {
  const float ax = abs_capped(x, 9.0f);
  return std::max(x, 0.0f) - ax * gauss_f32(ax) * normal_tail_scaled_f32(ax);
}
inline double gelu_erf(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }

inline float gelu_erf_grad(float x) {
  const float ax = abs_capped(x, 9.0f);
  const float d = gauss_f32(ax) * (normal_tail_scaled_f32(ax) - ax * float(kInvSqrt2Pi));
  return x < 0 ? d : (x >= 0 ? 1.0f - d : x);  // NaN: x
}
inline double gelu_erf_grad(double x) {
  return 0.5 * std::erfc(-x * 0.70710678118654752440) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

}  // namespace merak::cpu
