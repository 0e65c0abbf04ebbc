// The multi-tensor optimizer kernels: AdamW, sum of squares, non-finite check. Each block takes
// one chunk descriptor at a time (grid-stride over chunks), so many tensors of any sizes go in
// one launch and the work per block is bounded by the chunk size the host chose.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/nn/reduce.cuh"
#include "kernels/cuda/optim/multi_tensor_kernels.h"

namespace merak::cuda_kernels::optim {
namespace {

using nn::Add;
using nn::block_reduce;

// Chunks are uniform in size, so a grid of this many blocks striding over them keeps every SM
// busy without launching millions of blocks for a large model.
constexpr int64_t kMaxBlocks = int64_t(1) << 16;
int grid_for_chunks(int64_t count) { return int(count < kMaxBlocks ? count : kMaxBlocks); }

// Calls f(static_cast<const S*>(x)) with S the storage type of element code elem (device side;
// the branch is the same for the whole block).
template <typename F>
__device__ auto with_elem(int elem, const void* x, F&& f) {
  switch (elem) {
    case 1: return f(static_cast<const __nv_bfloat16*>(x));
    case 2: return f(static_cast<const __half*>(x));
    default: return f(static_cast<const float*>(x));
  }
}

// ---- AdamW --------------------------------------------------------------------------------

// adamw.cc's update, operation by operation. nvcc would contract a*b + c into an FMA at -O3;
// the _rn intrinsics are never contracted, so only the two FMAs written here happen and every
// other step rounds once, as on the CPU (built with -ffp-contract=off).
template <typename G>
__device__ void adamw_chunk(const AdamWChunk& ch, const G* __restrict__ g,
                            const AdamWScalars& s) {
  float* __restrict__ p = ch.p;
  float* __restrict__ m = ch.m;
  float* __restrict__ v = ch.v;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < ch.n; i += blockDim.x) {
    const float gi = __fmul_rn(Storage<G>::load(g[i]), s.grad_scale);
    const float mi = __fmaf_rn(gi, s.one_minus_beta1, __fmul_rn(m[i], s.beta1));
    const float vi = __fmaf_rn(__fmul_rn(s.one_minus_beta2, gi), gi, __fmul_rn(v[i], s.beta2));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
    const float decayed = __fmul_rn(p[i], s.decay);
    p[i] = __fadd_rn(decayed, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
  }
}

__global__ void adamw_chunks(const AdamWChunk* chunks, int64_t count, AdamWScalars s) {
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const AdamWChunk ch = chunks[c];
    with_elem(ch.elem, ch.g, [&](auto g) { adamw_chunk(ch, g, s); });
  }
}

// ---- sum of squares -----------------------------------------------------------------------

// A chunk's sum of squares, each in f64 (the square of an f32 is exact there).
__global__ void chunk_squares(const ReadChunk* chunks, int64_t count, double* partial) {
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const ReadChunk ch = chunks[c];
    double sum = with_elem(ch.elem, ch.x, [&](auto x) {
      using S = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
      double s = 0.0;
      for (int64_t i = threadIdx.x; i < ch.n; i += blockDim.x) {
        const double d = Storage<S>::load(x[i]);
        s += d * d;
      }
      return s;
    });
    sum = block_reduce(sum, Add());
    if (threadIdx.x == 0) partial[c] = sum;
  }
}

// One block: the chunk sums, each thread over a fixed stride of them, then a fixed tree.
__global__ void sum_partials(const double* partial, int64_t count, double* out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_reduce(s, Add());
  if (threadIdx.x == 0) *out = s;
}

// ---- non-finite check ---------------------------------------------------------------------

// Every thread that sees inf or NaN stores the same 1: the flag needs no atomic.
__global__ void find_nonfinite(const ReadChunk* chunks, int64_t count, int* flag) {
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const ReadChunk ch = chunks[c];
    const bool bad = with_elem(ch.elem, ch.x, [&](auto x) {
      using S = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
      bool b = false;
      for (int64_t i = threadIdx.x; i < ch.n; i += blockDim.x)
        b |= !isfinite(Storage<S>::load(x[i]));
      return b;
    });
    if (bad) *flag = 1;
  }
}

}  // namespace

void launch_adamw(const AdamWChunk* chunks, int64_t count, const AdamWScalars& s,
                  cudaStream_t stream) {
  if (count == 0) return;
  adamw_chunks<<<grid_for_chunks(count), kThreads, 0, stream>>>(chunks, count, s);
}

int64_t sum_of_squares_scratch_bytes(int64_t count) {
  return count * int64_t(sizeof(double));
}

void launch_sum_of_squares(const ReadChunk* chunks, int64_t count, void* scratch, double* out,
                           cudaStream_t stream) {
  double* partial = static_cast<double*>(scratch);
  if (count > 0)
    chunk_squares<<<grid_for_chunks(count), kThreads, 0, stream>>>(chunks, count, partial);
  sum_partials<<<1, kThreads, 0, stream>>>(partial, count, out);  // 0 for no chunks
}

void launch_find_nonfinite(const ReadChunk* chunks, int64_t count, int* flag,
                           cudaStream_t stream) {
  if (count > 0)
    find_nonfinite<<<grid_for_chunks(count), kThreads, 0, stream>>>(chunks, count, flag);
}

}  // namespace merak::cuda_kernels::optim
