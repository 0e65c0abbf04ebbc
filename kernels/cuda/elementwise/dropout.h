// Launcher of dropout (dropout.cu): the CPU kernel's mask, element for element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "merak/ops/dropout_piece.h"

namespace merak::cuda_kernels {

// y[i] = x[i] * scale where the 24-bit uniform of Philox(key, piece.global(i), stream) (word 0
// >> 8) is at least `threshold`, else 0; threshold = ceil(p * 2^24) is the exact integer form of
// the CPU's test uniform01(bits) >= p.
void launch_dropout(int elem, const void* x, void* y, int64_t n, uint64_t key, uint64_t stream,
                    uint32_t threshold, float scale, const ops::DropoutPiece& piece,
                    cudaStream_t cuda_stream);

}  // namespace merak::cuda_kernels
