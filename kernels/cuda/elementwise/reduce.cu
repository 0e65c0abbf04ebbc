// sum, mean, max, min and prod over dims, accumulated in f32. Two shapes of work:
//   rows    (the innermost input dim is reduced, e.g. the last-dim case): a warp per output
//           reads its inputs contiguously and combines its lanes by shuffles;
//   columns (the innermost dim is kept, e.g. a bias gradient summed over leading dims): a
//           thread per output, neighbouring threads reading neighbouring columns.
// Few outputs with long reductions are cut into slices whose f32 partials a second kernel
// combines in slice order, so results do not depend on timing.
#include "kernels/cuda/elementwise/reduce.h"

#include <limits>

#include "kernels/cuda/elem.cuh"

namespace merak::cuda_kernels {
namespace {

constexpr int kWarp = 32;
// Enough work units to fill an H100/H200 (132 SMs, 64 warps each) about twice over, and the
// least a slice is worth: below these, slicing costs more than it spreads.
constexpr int64_t kTargetWarps = 16384;
constexpr int64_t kTargetThreads = int64_t(1) << 19;
constexpr int64_t kMinRowSlice = 1024;  // elements per warp
constexpr int64_t kMinColSlice = 64;    // elements per thread

struct SumOf {
  static constexpr float kIdentity = 0.0f;
  __device__ static float combine(float a, float b) { return a + b; }
};
// As the CPU's max_nan: a NaN anywhere gives NaN.
struct MaxOf {
  static constexpr float kIdentity = -std::numeric_limits<float>::infinity();
  __device__ static float combine(float a, float b) { return (b > a || b != b) ? b : a; }
};
struct MinOf {
  static constexpr float kIdentity = std::numeric_limits<float>::infinity();
  __device__ static float combine(float a, float b) { return (b < a || b != b) ? b : a; }
};
struct ProdOf {
  static constexpr float kIdentity = 1.0f;
  __device__ static float combine(float a, float b) { return a * b; }
};

bool reduces_rows(const ReduceLayout& l) {
  return l.red_rank > 0 && l.red_stride[l.red_rank - 1] == 1;
}

// Offset of flat index i over `rank` dims (innermost divided first).
__device__ int64_t offset_of(int rank, const int64_t* size, const int64_t* stride, int64_t i) {
  if (rank == 0) return 0;
  int64_t off = 0;
  for (int d = rank - 1; d > 0; --d) {
    const int64_t q = i / size[d];
    off += (i - q * size[d]) * stride[d];
    i = q;
  }
  return off + i * stride[0];
}

// What a (output o, slice s) unit does with its result: the output itself (divided by count
// for mean) when there is one slice, else its partial.
template <typename S>
__device__ void finish(float acc, S* y, float* partials, int64_t o, int64_t s, int64_t n_out,
                       int64_t splits, bool mean, float count) {
  if (splits == 1) y[o] = Storage<S>::store(mean ? acc / count : acc);
  else partials[s * n_out + o] = acc;
}

// A warp per unit; units are output-major. The unit loop is uniform across a warp, so every
// lane reaches the shuffles.
template <typename S, typename Op>
__global__ void reduce_rows_kernel(const S* x, S* y, float* partials, ReduceLayout l,
                                   int64_t splits, bool mean, float count) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const int64_t units = l.n_out * splits;
  for (int64_t u = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; u < units;
       u += warps) {
    const int64_t o = u / splits, s = u - o * splits;
    const S* base = x + offset_of(l.kept_rank, l.kept_size, l.kept_stride, o);
    const int64_t r0 = l.count * s / splits, r1 = l.count * (s + 1) / splits;
    float acc = Op::kIdentity;
    if (l.red_rank == 1) {  // one contiguous run
      for (int64_t r = r0 + lane; r < r1; r += kWarp)
        acc = Op::combine(acc, Storage<S>::load(base[r]));
    } else {
      for (int64_t r = r0 + lane; r < r1; r += kWarp)
        acc = Op::combine(
            acc, Storage<S>::load(base[offset_of(l.red_rank, l.red_size, l.red_stride, r)]));
    }
    for (int w = kWarp / 2; w > 0; w /= 2)
      acc = Op::combine(acc, __shfl_down_sync(0xffffffffu, acc, w));
    if (lane == 0) finish(acc, y, partials, o, s, l.n_out, splits, mean, count);
  }
}

// A thread per unit; units are slice-major, so neighbouring threads take neighbouring outputs.
// The reduced coordinates advance like an odometer, without division.
template <typename S, typename Op>
__global__ void reduce_cols_kernel(const S* x, S* y, float* partials, ReduceLayout l,
                                   int64_t splits, bool mean, float count) {
  const int64_t threads = int64_t(gridDim.x) * blockDim.x;
  const int64_t units = l.n_out * splits;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += threads) {
    const int64_t s = u / l.n_out, o = u - s * l.n_out;
    const S* base = x + offset_of(l.kept_rank, l.kept_size, l.kept_stride, o);
    const int64_t r0 = l.count * s / splits, r1 = l.count * (s + 1) / splits;
    float acc = Op::kIdentity;
    if (l.red_rank == 1) {
      const int64_t stride = l.red_stride[0];
      for (int64_t r = r0; r < r1; ++r) acc = Op::combine(acc, Storage<S>::load(base[r * stride]));
    } else if (r0 < r1) {
      int64_t idx[kMaxDims];
      int64_t off = 0, rest = r0;
      for (int d = l.red_rank - 1; d >= 0; --d) {
        idx[d] = rest % l.red_size[d];
        rest /= l.red_size[d];
        off += idx[d] * l.red_stride[d];
      }
      for (int64_t r = r0; r < r1; ++r) {
        acc = Op::combine(acc, Storage<S>::load(base[off]));
        for (int d = l.red_rank - 1; d >= 0; --d) {
          off += l.red_stride[d];
          if (++idx[d] < l.red_size[d]) break;
          off -= l.red_stride[d] * l.red_size[d];
          idx[d] = 0;
        }
      }
    }
    finish(acc, y, partials, o, s, l.n_out, splits, mean, count);
  }
}

// The second pass: output o combines its slices' partials in slice order.
template <typename S, typename Op>
__global__ void combine_partials_kernel(const float* partials, S* y, int64_t n_out,
                                        int64_t splits, bool mean, float count) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    float acc = partials[o];
    for (int64_t s = 1; s < splits; ++s) acc = Op::combine(acc, partials[s * n_out + o]);
    y[o] = Storage<S>::store(mean ? acc / count : acc);
  }
}

template <typename S, typename Op>
void reduce_as(const void* x, void* y, const ReduceLayout& l, int64_t splits, float* partials,
               bool mean, cudaStream_t stream) {
  // The CPU divides by T(count) too: the count rounded to f32.
  const float count = float(l.count);
  const S* px = static_cast<const S*>(x);
  S* py = static_cast<S*>(y);
  const int64_t units = l.n_out * splits;
  if (reduces_rows(l)) {
    reduce_rows_kernel<S, Op><<<blocks_for(units * kWarp), kThreads, 0, stream>>>(
        px, py, partials, l, splits, mean, count);
  } else {
    reduce_cols_kernel<S, Op><<<blocks_for(units), kThreads, 0, stream>>>(px, py, partials, l,
                                                                          splits, mean, count);
  }
  if (splits > 1) {
    combine_partials_kernel<S, Op><<<blocks_for(l.n_out), kThreads, 0, stream>>>(
        partials, py, l.n_out, splits, mean, count);
  }
}

}  // namespace

int64_t reduce_splits(const ReduceLayout& l) {
  if (l.n_out <= 0) return 1;
  const bool rows = reduces_rows(l);
  const int64_t target = rows ? kTargetWarps : kTargetThreads;
  const int64_t want = (target + l.n_out - 1) / l.n_out;
  const int64_t most = l.count / (rows ? kMinRowSlice : kMinColSlice);
  const int64_t splits = want < most ? want : most;
  return splits > 1 ? splits : 1;
}

void launch_reduce(Reduce op, int elem, const void* x, void* y, const ReduceLayout& layout,
                   int64_t splits, float* partials, cudaStream_t stream) {
  if (layout.n_out <= 0) return;
  const bool mean = op == Reduce::Mean;
  with_storage(elem, [&]<typename S>() {
    switch (op) {
      case Reduce::Max: return reduce_as<S, MaxOf>(x, y, layout, splits, partials, mean, stream);
      case Reduce::Min: return reduce_as<S, MinOf>(x, y, layout, splits, partials, mean, stream);
      case Reduce::Prod: return reduce_as<S, ProdOf>(x, y, layout, splits, partials, mean, stream);
      default: return reduce_as<S, SumOf>(x, y, layout, splits, partials, mean, stream);
    }
  });
}

}  // namespace merak::cuda_kernels
