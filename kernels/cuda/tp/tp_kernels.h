// Launchers of the vocabulary-parallel kernels (tp_kernels.cu): this member holds classes (rows
// of the embedding table, columns of the logits) [start, start + V). elem: common.h's Elem code
// of the floating tensors; index: 0 for i32 ids/targets, 1 for i64. Everything is queued on
// `stream`; nothing waits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::tp {

// out[r, :] = weight[ids[r] - start, :] for ids in [start, start + V), zeros for the others
// (they belong to another member, whose part of the sum fills them in).
void launch_tp_embedding(const void* weight, const void* ids, void* out, int64_t n, int64_t V,
                         int64_t D, int64_t start, int elem, int index, cudaStream_t stream);

// shifted[r] = ids[r] - start, as i64 whatever the ids' type (no i32 overflow): the table's
// local row, outside [0, V) for the ids of other members.
void launch_shift_ids(const void* ids, int64_t* shifted, int64_t n, int64_t start, int index,
                      cudaStream_t stream);

// The cross entropy's local pass over `rows` rows of V logits, all in f32:
//   row_max[r] = local_max[r] = max of the row's logits here,
//   sums[r] = sum of exp(x - local_max[r]) here,
//   sums[rows + r] = the target's logit when the target is one of ours, else 0.
// row_max is then reduced with max over the group; sums (2 * rows) waits for the rescale.
void launch_tp_ce_local(const void* logits, const void* targets, float* row_max,
                        float* local_max, float* sums, int64_t rows, int64_t V, int64_t start,
                        int64_t ignore_index, int elem, int index, cudaStream_t stream);

// sums[r] *= exp(local_max[r] - row_max[r]) with row_max the group's: each member's sum of
// exponentials relative to the common maximum, ready to be summed over the group.
void launch_tp_ce_rescale(const float* row_max, const float* local_max, float* sums,
                          int64_t rows, cudaStream_t stream);

// After the group's sums: lse[r] = row_max[r] + log(sums[r]); loss = mean over rows whose target
// is not ignore_index of lse[r] - sums[rows + r], summed in double in a fixed order (0 when all
// are ignored). A negative target other than ignore_index makes the loss NaN (the CPU kernel
// throws; a device kernel cannot without a synchronisation). stat_elem: the Elem code of lse
// and loss (the logits' own, or f32 where the op keeps its statistics in f32).
void launch_tp_ce_finish(const float* row_max, const float* sums, const void* targets, void* lse,
                         void* loss, int64_t rows, int64_t ignore_index, int stat_elem, int index,
                         cudaStream_t stream);

// Bytes of scratch launch_tp_ce_grad needs.
int64_t tp_ce_grad_scratch_bytes();

// dlogits = (exp(logits - lse) - onehot(target - start)) * dloss / count on this member's
// classes; zero rows where the target is ignore_index, NaN rows where it is negative otherwise.
// count = rows whose target is not ignore_index; dloss is a device scalar. elem: the Elem code
// of logits and dlogits; stat_elem: that of dloss and lse.
void launch_tp_ce_grad(const void* dloss, const void* logits, const void* targets,
                       const void* lse, void* dlogits, int64_t rows, int64_t V, int64_t start,
                       int64_t ignore_index, void* scratch, int elem, int stat_elem, int index,
                       cudaStream_t stream);

}  // namespace merak::cuda_kernels::tp
