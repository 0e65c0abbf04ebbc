// Grid-stride launch helpers of the elementwise kernels. A kernel body is a functor called with
// each flat index i (launch_flat) or with i and the offsets of N operands (launch_strided, over
// a StridedLayout). Indices are 32-bit when the element count allows, where coordinates come
// from multiply-shift division; above 2^31 elements they are 64-bit with plain division.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/strided.h"

namespace merak::cuda_kernels {

// Division by a divisor fixed at launch, for index type I.
template <typename I>
struct Divider;

// 32-bit: n / d as (mulhi(n, mul) + n) >> shift (Granlund & Montgomery, "Division by invariant
// integers using multiplication", 1994), exact for every n < 2^32 and 1 <= d <= 2^31, with
// shift = ceil(log2 d) and mul = floor(2^32 (2^shift - d) / d) + 1 (fits 32 bits).
template <>
struct Divider<uint32_t> {
  uint32_t d = 1, mul = 1, shift = 0;
  Divider() = default;
  explicit Divider(uint32_t divisor) : d(divisor) {
    while ((uint64_t(1) << shift) < divisor) ++shift;
    mul = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor) / divisor + 1);
  }
  __host__ __device__ uint32_t div(uint32_t n) const {
    const uint32_t hi = uint32_t((uint64_t(n) * mul) >> 32);
    return uint32_t((uint64_t(hi) + n) >> shift);
  }
};

template <>
struct Divider<int64_t> {
  int64_t d = 1;
  Divider() = default;
  explicit Divider(int64_t divisor) : d(divisor) {}
  __host__ __device__ int64_t div(int64_t n) const { return n / d; }
};

// The offsets of N operands at flat index i of a layout.
template <int N, typename I>
struct Offsets {
  int rank = 1;
  Divider<I> size[kMaxDims];
  I stride[N][kMaxDims] = {};

  explicit Offsets(const StridedLayout& l) : rank(l.rank) {
    for (int d = 0; d < l.rank; ++d) {
      size[d] = Divider<I>(I(l.size[d]));
      for (int k = 0; k < N; ++k) stride[k][d] = I(l.stride[k][d]);
    }
  }

  // Innermost dim first; the outermost coordinate is what is left, so a one-dim (flat) layout
  // divides nothing.
  __host__ __device__ void at(I i, I (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const I q = size[d].div(i);
      const I c = i - q * size[d].d;
      for (int k = 0; k < N; ++k) off[k] += c * stride[k][d];
      i = q;
    }
    for (int k = 0; k < N; ++k) off[k] += i * stride[k][0];
  }
};

// The grid-stride loops. In the 32-bit form i + the grid's size stays below 2^32: n < 2^31 and
// blocks_for caps the grid at 2^28 threads.
template <typename I, typename F>
__global__ void flat_kernel(I n, F f) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x)
    f(i);
}

template <int N, typename I, typename F>
__global__ void strided_kernel(Offsets<N, I> layout, I n, F f) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[N];
    layout.at(i, off);
    f(i, off);
  }
}

// f(i) for i < n; F has `template <typename I> __device__ void operator()(I i) const`.
template <typename F>
void launch_flat(int64_t n, const F& f, cudaStream_t stream) {
  if (n <= 0) return;
  if (n <= INT32_MAX) {
    flat_kernel<uint32_t, F><<<blocks_for(n), kThreads, 0, stream>>>(uint32_t(n), f);
  } else {
    flat_kernel<int64_t, F><<<blocks_for(n), kThreads, 0, stream>>>(n, f);
  }
}

// f(i, off) for the n elements of `layout`, off[k] the offset of operand k; F has
// `template <typename I> __device__ void operator()(I i, const I (&off)[N]) const`. Every
// operand's offsets must stay below n (true of operands broadcast to an n-element output).
template <int N, typename F>
void launch_strided(const StridedLayout& layout, int64_t n, const F& f, cudaStream_t stream) {
  if (n <= 0) return;
  if (n <= INT32_MAX) {
    strided_kernel<N, uint32_t, F><<<blocks_for(n), kThreads, 0, stream>>>(
        Offsets<N, uint32_t>(layout), uint32_t(n), f);
  } else {
    strided_kernel<N, int64_t, F><<<blocks_for(n), kThreads, 0, stream>>>(
        Offsets<N, int64_t>(layout), n, f);
  }
}

}  // namespace merak::cuda_kernels
