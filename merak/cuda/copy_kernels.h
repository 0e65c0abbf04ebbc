// Launchers of the backend's own data-movement kernels (copy_kernels.cu), in plain types so
// that nvcc sees nothing of the tensor library.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda {

constexpr int kMaxRank = 8;

// Every one of n elements of elem_size bytes (1, 2, 4 or 8) set to the bit pattern `bits`.
void launch_fill(void* data, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream);

// dst[i] = src[i] over a strided index space of `rank` dims (strides in elements, offsets
// already applied to the pointers).
struct StridedCopy {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t dst_strides[kMaxRank] = {};
  int64_t src_strides[kMaxRank] = {};
};
void launch_strided_copy(void* dst, const void* src, int elem_size, const StridedCopy& view,
                         int64_t n, cudaStream_t stream);

}  // namespace merak::cuda
