// Launchers of the multi-tensor optimizer kernels (multi_tensor.cu). Plain C++ types only: the
// work arrives as a device array of chunk descriptors, one thread block per chunk, so a single
// launch covers every tensor of a model whatever their sizes. elem: common.h's Elem code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::optim {

// The elements [0, n) of one chunk of a parameter and its gradient and moments.
struct AdamWChunk {
  float* p;
  const void* g;  // f32, bf16 or f16 (elem), widened to f32
  float* m;
  float* v;
  int64_t n;
  int elem;
};

// The elements [0, n) of one chunk of a tensor that is only read.
struct ReadChunk {
  const void* x;
  int64_t n;
  int elem;
};

// merak::optim::AdamWCoefficients, field for field (nvcc does not see the tensor headers).
struct AdamWScalars {
  float grad_scale, decay;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt, eps, neg_step_size;
};

// One AdamW update of every chunk, in adamw.cc's order of operations with IEEE round-to-nearest
// intrinsics (no contraction beyond its two FMAs), so the f32 results equal the CPU's bit for bit.
void launch_adamw(const AdamWChunk* chunks, int64_t count, const AdamWScalars& s,
                  cudaStream_t stream);

// Bytes of device scratch launch_sum_of_squares needs for `count` chunks.
int64_t sum_of_squares_scratch_bytes(int64_t count);
// *out (device) = the sum of x*x over every element of every chunk, in f64: each chunk's sum by
// a fixed tree, then the chunk sums by one block in a fixed order (no atomics), so the bits are
// the same from run to run.
void launch_sum_of_squares(const ReadChunk* chunks, int64_t count, void* scratch, double* out,
                           cudaStream_t stream);

// Sets *flag (device, zeroed by the caller) to 1 when any element of any chunk is inf or NaN.
void launch_find_nonfinite(const ReadChunk* chunks, int64_t count, int* flag,
                           cudaStream_t stream);

}  // namespace merak::cuda_kernels::optim
