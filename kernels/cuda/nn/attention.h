// Launchers of the scaled dot-product attention kernels (attention.cu). Layouts as the op:
// q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv], out [B, H, Tq, Dv], lse [B, H, Tq],
// mask [B, Tk] of bytes (non-zero: the key may be attended) or null. elem: common.h's Elem code
// of q, k, v, out, dout and the gradients; lse is f32 for every elem (op_util.h's stat_dtype).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels::nn {

struct AttnShape {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, D = 0, Dv = 0;
  bool causal = false;  // query i sees keys j <= i + Tk - Tq (bottom-right aligned)
  float scale = 0.f;    // scores are scale * q.k
  // Dropout of the probabilities, drawn as the CPU draws it (merak/ops/defs/attention.cc):
  // probability (b, h, i, j) is kept when (word i % 4 of Philox(key, (((first_row + b) * heads +
  // head_start + h) * ceil(Tq / 4) + i / 4) * Tk + j, stream)) >> 8 >= threshold, then scaled
  // by keep_scale.
  bool dropout = false;
  uint32_t threshold = 0;
  float keep_scale = 1.f;
  uint64_t key = 0, stream = 0;
  int64_t head_start = 0, heads = 0;  // this call's heads within the unsplit attention's
  int64_t first_row = 0;              // the global batch's row this call's sample 0 is
};

// The kernels keep a head's rows in registers for head dims up to this.
constexpr int64_t kAttnMaxHeadDim = 256;

// Dynamic shared memory of the forward and of the backward kernels (the caller checks it
// against the device's limit), and the backward's scratch.
int64_t sdpa_forward_smem_bytes(const AttnShape& p);
int64_t sdpa_backward_smem_bytes(const AttnShape& p);
int64_t sdpa_backward_scratch_bytes(const AttnShape& p);

// out = softmax(scale q k^T, masked) v and lse = the rows' log-sum-exp; a row with no key to
// attend gets out 0 and lse -inf.
void launch_sdpa_forward(const AttnShape& p, const void* q, const void* k, const void* v,
                         const uint8_t* mask, void* out, float* lse, int elem,
                         cudaStream_t stream);

// dq, dk, dv from dout, recomputing the probabilities tile by tile from lse.
void launch_sdpa_backward(const AttnShape& p, const void* dout, const void* q, const void* k,
                          const void* v, const uint8_t* mask, const void* out, const float* lse,
                          void* dq, void* dk, void* dv, void* scratch, int elem,
                          cudaStream_t stream);

}  // namespace merak::cuda_kernels::nn
