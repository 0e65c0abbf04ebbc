// Launchers of the layer-norm kernels (layer_norm.cu) over the last dim: `rows` rows of D.
// elem: common.h's Elem code of x, y, weight, bias, dy, dx, dweight and dbias; mean and rstd
// are f32 for every elem (op_util.h's stat_dtype). weight and bias may be null.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::nn {

// y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) (biased variance); also
// writes mean and rstd [rows] (f32).
void launch_layer_norm(const void* x, const void* weight, const void* bias, float eps, void* y,
                       float* mean, float* rstd, int64_t rows, int64_t D, int elem,
                       cudaStream_t stream);

// Bytes of scratch launch_layer_norm_grad needs.
int64_t layer_norm_grad_scratch_bytes(int64_t rows, int64_t D);

// dx, and dweight / dbias [D] summed over the rows (written even without a weight).
void launch_layer_norm_grad(const void* dy, const void* x, const void* weight, const float* mean,
                            const float* rstd, void* dx, void* dweight, void* dbias, int64_t rows,
                            int64_t D, void* scratch, int elem, cudaStream_t stream);

}  // namespace merak::cuda_kernels::nn
