// Vectorisable building blocks of the CPU neural-network kernels (softmax, layer norm, cross
// entropy), usable by any CPU kernel: an f32 exp and deterministic row reductions. Everything is
// inline so that loops calling these compile to AVX-512 code under plain -O3 -march=native (no
// -ffast-math).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/vec_math.h"

namespace merak::cpu::nn {

// Every exp in these kernels takes a shifted argument (<= 0), so they use exp_bounded.

// Enough elements per parallel chunk that a chunk's work outweighs waking a thread; the rows
// of length row_len a chunk of a row-wise kernel takes.
constexpr int64_t kGrainElems = 32768;
inline int64_t grain_rows(int64_t row_len) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, row_len));
}

// One register of T as a GCC vector type, as wide as the build's vectors: arithmetic on it is
// always vector code, and accumulators of this type stay in registers. Wider than the registers
// (64 bytes on an AVX2 build) GCC splits each operation into halves moved through the stack:
// layer_norm ran at a third of its speed on a Zen 3.
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(kVecBytes)));
  static constexpr int kWidth = int(kVecBytes / sizeof(T));
};

template <typename T>
inline typename Vec<T>::type load_vec(const T* p) {
  typename Vec<T>::type v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename V>
inline auto lane_sum(const V& v) {
  auto s = v[0];
  for (int j = 1; j < int(sizeof(V) / sizeof(v[0])); ++j) s += v[j];
  return s;
}

// y[i] = exp(x[i] - shift).
template <typename T>
inline void exp_shifted(const T* x, T shift, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_bounded(x[i] - shift);
}

// exp_shifted, and returns the max of next[0, n) (n >= 1): a row-wise kernel takes the next
// row's max while this row's exponentials keep the core busy, so the loads from memory overlap
// arithmetic instead of stalling a separate pass.
template <typename T>
inline T exp_shifted_max_next(const T* x, T shift, T* y, const T* next, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth, kBlock = 2 * W;
  const int64_t body = n - n % kBlock;
  T m = next[0];
  if (body > 0) {
    V a0 = load_vec(next), a1 = a0;
    for (int64_t i = 0; i < body; i += kBlock) {
      for (int j = 0; j < kBlock; ++j) y[i + j] = exp_bounded(x[i + j] - shift);
      const V v0 = load_vec(next + i), v1 = load_vec(next + i + W);
      a0 = a0 < v0 ? v0 : a0;
      a1 = a1 < v1 ? v1 : a1;
    }
    a0 = a0 < a1 ? a1 : a0;
    for (int j = 0; j < W; ++j) m = m < a0[j] ? a0[j] : m;
  }
  for (int64_t i = body; i < n; ++i) {
    y[i] = exp_bounded(x[i] - shift);
    m = m < next[i] ? next[i] : m;
  }
  return m;
}

// Reductions over a row. Strict IEEE order forbids the compiler from vectorising `s += x[i]`, so
// these keep vector accumulators, combine them lane by lane in a fixed order and add the tail:
// the same order every time, hence deterministic.
template <typename T>
inline T row_sum(const T* x, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  V a0 = {}, a1 = {};
  const int64_t body2 = n - n % (2 * W), body = n - n % W;
  for (int64_t i = 0; i < body2; i += 2 * W) {
    a0 += load_vec(x + i);
    a1 += load_vec(x + i + W);
  }
  for (int64_t i = body2; i < body; i += W) a0 += load_vec(x + i);
  T s = lane_sum(a0 + a1);
  for (int64_t i = body; i < n; ++i) s += x[i];
  return s;
}

// sum of x[i] * y[i]
template <typename T>
inline T row_dot(const T* x, const T* y, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  V a0 = {}, a1 = {};
  const int64_t body2 = n - n % (2 * W), body = n - n % W;
  for (int64_t i = 0; i < body2; i += 2 * W) {
    a0 += load_vec(x + i) * load_vec(y + i);
    a1 += load_vec(x + i + W) * load_vec(y + i + W);
  }
  for (int64_t i = body2; i < body; i += W) a0 += load_vec(x + i) * load_vec(y + i);
  T s = lane_sum(a0 + a1);
  for (int64_t i = body; i < n; ++i) s += x[i] * y[i];
  return s;
}

// sum of (x[i] - c)^2
template <typename T>
inline T row_sq_dev(const T* x, T c, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  V a0 = {}, a1 = {};
  const int64_t body2 = n - n % (2 * W), body = n - n % W;
  for (int64_t i = 0; i < body2; i += 2 * W) {
    const V d0 = load_vec(x + i) - c, d1 = load_vec(x + i + W) - c;
    a0 += d0 * d0;
    a1 += d1 * d1;
  }
  for (int64_t i = body2; i < body; i += W) {
    const V d = load_vec(x + i) - c;
    a0 += d * d;
  }
  T s = lane_sum(a0 + a1);
  for (int64_t i = body; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

// sum of exp(x[i] - shift), without storing the exponentials: each block of them goes through
// a small buffer in L1 and is added to vector accumulators.
template <typename T>
inline T row_sum_exp(const T* x, T shift, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth, kBlock = 4 * W;
  alignas(64) T e[kBlock];
  V a = {};
  const int64_t body = n - n % kBlock;
  for (int64_t i = 0; i < body; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) e[j] = exp_bounded(x[i + j] - shift);
    for (int j = 0; j < kBlock; j += W) a += load_vec(e + j);
  }
  T s = lane_sum(a);
  for (int64_t i = body; i < n; ++i) s += exp_bounded(x[i] - shift);
  return s;
}

// max of a row of n >= 1 values (NaN-propagation is not guaranteed).
template <typename T>
inline T row_max(const T* x, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  const int64_t body = n - n % W;
  T m = x[0];
  if (body > 0) {
    V a = load_vec(x);
    for (int64_t i = W; i < body; i += W) {
      const V v = load_vec(x + i);
      a = a < v ? v : a;
    }
    for (int j = 0; j < W; ++j) m = m < a[j] ? a[j] : m;
  }
  for (int64_t i = body; i < n; ++i) m = m < x[i] ? x[i] : m;
  return m;
}

}  // namespace merak::cpu::nn
