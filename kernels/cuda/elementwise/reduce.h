// Launchers of sum, mean, max, min and prod over dims (reduce.cu). The input (contiguous) is
// described by its kept and reduced dims, size-1 dims dropped and neighbours of one kind merged
// (layout.h): output o reads the inputs at kept_offset(o) + reduced_offset(r) for r < count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise/strided.h"

namespace merak::cuda_kernels {

enum class Reduce : int { Sum, Mean, Max, Min, Prod };

struct ReduceLayout {
  int64_t n_out = 1;  // outputs: the product of the kept sizes
  int64_t count = 1;  // inputs folded into each output (0: sum 0, mean NaN, prod 1)
  int kept_rank = 0;  // outermost first, in output order
  int64_t kept_size[kMaxDims] = {};
  int64_t kept_stride[kMaxDims] = {};
  int red_rank = 0;
  int64_t red_size[kMaxDims] = {};
  int64_t red_stride[kMaxDims] = {};
};

// How many slices each output's reduction is cut into, so that few, long reductions still fill
// the GPU. Above 1, launch_reduce needs `splits * n_out` floats of workspace for the slices'
// partial results, which a second pass combines in a fixed order (results are deterministic).
int64_t reduce_splits(const ReduceLayout& layout);

// y [n_out] (element code `elem`, like x) = op over each output's `count` inputs; accumulates
// in f32.
void launch_reduce(Reduce op, int elem, const void* x, void* y, const ReduceLayout& layout,
                   int64_t splits, float* partials, cudaStream_t stream);

}  // namespace merak::cuda_kernels
