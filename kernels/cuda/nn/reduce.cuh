// Device helpers shared by the row-wise kernels (softmax, layer norm, cross entropy, embedding):
// a row is covered by a group of threads (one warp for short rows, the whole block for long
// ones) and reduced by a fixed tree, so every result is the same from run to run.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/elem.cuh"

namespace merak::cuda_kernels::nn {

// Rows up to this long go to one warp (8 rows per block); longer ones to a whole block.
constexpr int64_t kWarpRowMax = 1024;

// The launch grid of a grid-stride loop over `items` work items of `per_block` items each.
inline int grid_for(int64_t items, int64_t per_block) {
  const int64_t b = (items + per_block - 1) / per_block;
  return int(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// ---- warp and block reductions ------------------------------------------------------------

// Running max m and sum s of exp(x - m) over a set of values: an online softmax's state.
struct MaxSum {
  float m;
  float s;
};

__device__ inline MaxSum max_sum_empty() { return {-INFINITY, 0.f}; }

// Adds x. A -inf adds nothing (computing it would give exp(-inf - -inf) = NaN); NaN and +inf
// still poison the sum, as they do on the CPU.
__device__ inline MaxSum max_sum_add(MaxSum a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;  // expf(-inf) = 0 when a was empty
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
  return a;
}

struct MergeMaxSum {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, a.s + b.s};  // both empty (or only -inf seen)
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
  }
};

struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
  __device__ float2 operator()(float2 a, float2 b) const { return {a.x + b.x, a.y + b.y}; }
};

__device__ inline float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ inline double shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ inline long long shfl_xor(long long v, int o) {
  return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ inline float2 shfl_xor(float2 v, int o) { return {shfl_xor(v.x, o), shfl_xor(v.y, o)}; }
__device__ inline MaxSum shfl_xor(MaxSum v, int o) { return {shfl_xor(v.m, o), shfl_xor(v.s, o)}; }

// Butterfly over the 32 lanes. Every op here is commutative, so op(a, b) and op(b, a) are the
// same bits and all lanes end with the same value.
template <typename T, typename Op>
__device__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  return v;
}

// Over every thread of the block (all must call it); every thread gets the result.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T part[32];
  v = warp_reduce(v, op);
  const int warps = int(blockDim.x) / 32;
  __syncthreads();  // a previous call may still be reading `part`
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  T r = part[0];
  for (int w = 1; w < warps; ++w) r = op(r, part[w]);
  return r;
}

// ---- rows covered by groups of threads ----------------------------------------------------

// kGroup threads per row: 32 (a warp; kThreads / 32 rows per block) or kThreads (the block).
// Loops over rows are grid-stride; a row's whole group always takes the same iterations.
template <int kGroup>
struct RowGroup {
  static_assert(kGroup == 32 || kGroup == kThreads, "a row is a warp or a block");
  static constexpr int kRowsPerBlock = kThreads / kGroup;

  __device__ static int lane() { return int(threadIdx.x) % kGroup; }
  __device__ static int64_t first_row() {
    return int64_t(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / kGroup;
  }
  __device__ static int64_t row_step() { return int64_t(gridDim.x) * kRowsPerBlock; }

  template <typename T, typename Op>
  __device__ static T reduce(T v, Op op) {
    if constexpr (kGroup == 32) return warp_reduce(v, op);
    else return block_reduce(v, op);
  }

  static int grid(int64_t rows) { return grid_for(rows, kRowsPerBlock); }
};

// Calls f.template operator()<G>() with the row group for rows of length len.
template <typename F>
void with_row_group(int64_t len, F&& f) {
  if (len <= kWarpRowMax) f.template operator()<32>();
  else f.template operator()<kThreads>();
}

// Index element codes of the launchers: 0 i32, 1 i64.
template <typename F>
void with_index(int index, F&& f) {
  if (index == 1) f.template operator()<int64_t>();
  else f.template operator()<int32_t>();
}

}  // namespace merak::cuda_kernels::nn
