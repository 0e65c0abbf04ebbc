// Launchers of the data-movement kernels (copy.cu): byte-row copies for concat and slice_grad,
// and arange. Any dtype: they move bytes, in the widest unit (up to 16 B) every address, pitch
// and width allows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels {

// rows x width bytes: dst row r (at r * dst_pitch) = src row r (at r * src_pitch).
void launch_copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                      int64_t rows, int64_t width, cudaStream_t stream);

// rows of dst_width bytes (contiguous): src's row r (src_width bytes, rows contiguous) at byte
// `offset`, zeros around it. src may be null when src_width is 0.
void launch_pad_rows(void* dst, int64_t dst_width, const void* src, int64_t src_width,
                     int64_t offset, int64_t rows, cudaStream_t stream);

// y[i] = i for i < n.
void launch_arange(int64_t* y, int64_t n, cudaStream_t stream);

}  // namespace merak::cuda_kernels
