// Launchers of the cross-entropy kernels (cross_entropy.cu): `rows` rows of V logits, targets of
// index code `index` (0 i32, 1 i64), elem: common.h's Elem code of the logits and dlogits; loss,
// lse and dloss are f32 for every elem (op_util.h's stat_dtype). A target outside [0, V) that
// is not ignore_index makes its row's loss and gradient NaN (the CPU kernel throws; a device
// kernel cannot without a synchronisation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::nn {

// Bytes of scratch launch_cross_entropy needs.
int64_t cross_entropy_scratch_bytes(int64_t rows);

// lse[r] = logsumexp(logits[r]); loss = mean over rows whose target is not ignore_index of
// lse[r] - logits[r, target] (0 when every row is ignored), summed in double in a fixed order.
void launch_cross_entropy(const void* logits, const void* targets, float* loss, float* lse,
                          int64_t rows, int64_t V, int64_t ignore_index, void* scratch, int elem,
                          int index, cudaStream_t stream);

// Bytes of scratch launch_cross_entropy_grad needs.
int64_t cross_entropy_grad_scratch_bytes();

// dlogits = (exp(logits - lse) - onehot(target)) * dloss / count; zero rows where the target is
// ignore_index. dloss is a device scalar.
void launch_cross_entropy_grad(const float* dloss, const void* logits, const void* targets,
                               const float* lse, void* dlogits, int64_t rows, int64_t V,
                               int64_t ignore_index, void* scratch, int elem, int index,
                               cudaStream_t stream);

}  // namespace merak::cuda_kernels::nn
