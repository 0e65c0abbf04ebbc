// The optimizer's device half on CUDA: multi-tensor AdamW, sum of squares (for the gradient
// norm) and the non-finite check (for dynamic loss scaling), each one launch or a few over a
// whole list of tensors. Linking this library registers them as merak::optim's CUDA kernels
// (device_optim.h), so optim::AdamW, grad_norm and sum_of_squares run them for CUDA tensors.
//
// All tensors of one call must be on one CUDA device; the work is queued on that device's
// stream. adamw_step_cuda returns once it is queued; the reductions wait for their result.
#pragma once

#include <cstdint>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/optim/device_optim.h"

namespace merak::cuda_kernels::optim {

using merak::optim::AdamWCoefficients;

// One AdamW update of every params[i] (f32, contiguous) in place, from grads[i] (f32, bf16 or
// f16, widened to f32; the parameter's shape, contiguous) and the moments m[i], v[i] (f32, the
// parameter's shape, contiguous, updated in place). The arithmetic is merak/optim/adamw.cc's,
// operation by operation: the f32 results equal the CPU AdamW's bit for bit.
void adamw_step_cuda(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& m, const std::vector<Tensor>& v,
                     const AdamWCoefficients& c);

// The sum of x*x over every element of every tensor (f32, bf16 or f16; views are read through
// a contiguous copy), accumulated in f64 per fixed chunk and then in a fixed order: the same bits
// every run. 0 for an empty list.
double sum_of_squares_cuda(const std::vector<Tensor>& tensors);

// False when any element of any tensor (f32, bf16 or f16) is inf or NaN; true for an empty list.
bool all_finite_cuda(const std::vector<Tensor>& tensors);

// ---- host side, exposed for tests ---------------------------------------------------------

// Elements per chunk: one thread block's share of a launch. Tensors are cut at multiples of it,
// so every chunk starts as aligned as its tensor does.
constexpr int64_t kChunkNumel = int64_t(1) << 16;

// Elements [offset, offset + numel) of tensor number `tensor` of a list.
struct TensorChunk {
  int64_t tensor = 0, offset = 0, numel = 0;
  bool operator==(const TensorChunk& o) const {
    return tensor == o.tensor && offset == o.offset && numel == o.numel;
  }
};

// Every tensor of the list (given by element counts) cut into chunks of at most chunk_numel
// elements, in list order; empty tensors give none.
std::vector<TensorChunk> split_into_chunks(const std::vector<int64_t>& numels,
                                           int64_t chunk_numel = kChunkNumel);

}  // namespace merak::cuda_kernels::optim
