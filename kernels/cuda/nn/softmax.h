// Launchers of the softmax kernels (softmax.cu): softmax and log_softmax along one dim of a
// tensor seen as [outer, len, inner], and their backwards. elem: common.h's Elem code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::nn {

// y = softmax(x) (or log_softmax when `log`) along len.
void launch_softmax(const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log,
                    int elem, cudaStream_t stream);

// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
void launch_softmax_grad(const void* dy, const void* y, void* dx, int64_t outer, int64_t len,
                         int64_t inner, bool log, int elem, cudaStream_t stream);

}  // namespace merak::cuda_kernels::nn
