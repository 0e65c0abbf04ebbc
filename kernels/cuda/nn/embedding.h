// Launchers of the embedding kernels (embedding.cu). elem: common.h's Elem code of the table;
// index: 0 for i32 ids, 1 for i64.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::nn {

// out[r, :] = weight[ids[r], :] for n ids into a [V, D] table. An id outside [0, V) gives a row
// of NaN (the CPU kernel throws; a device kernel cannot without a synchronisation).
void launch_embedding(const void* weight, const void* ids, void* out, int64_t n, int64_t V,
                      int64_t D, int elem, int index, cudaStream_t stream);

// Bytes of scratch launch_embedding_grad needs.
int64_t embedding_grad_scratch_bytes(int64_t n, int64_t V);

// dweight [V, D] = dy rows summed at their ids: deterministic (no atomics), each element summed
// in the order of the ids, as on the CPU. Ids outside [0, V) are skipped. n < 2^31.
void launch_embedding_grad(const void* dy, const void* ids, void* dweight, int64_t n, int64_t V,
                           int64_t D, void* scratch, int elem, int index, cudaStream_t stream);

}  // namespace merak::cuda_kernels::nn
