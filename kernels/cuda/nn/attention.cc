// CUDA kernels of sdpa and sdpa_grad (defs in merak/ops/defs/attention.cc).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/attention.h"
#include "kernels/cuda/nn/util.h"
#include "merak/core/philox.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {
namespace {

using ops::Attrs;

// The call's shape and attributes, checked against what the kernels can do.
AttnShape attn_shape(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a,
                     const char* op) {
  AttnShape p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.Tk = k.size(2);
  p.D = q.size(3);
  p.Dv = v.size(3);
  p.causal = a.b("causal");
  const double s = a.f("scale");
  // With D = 0 every score is an empty sum, 0 whatever the scale (as the CPU's GEMM gives).
  p.scale = p.D == 0 ? 0.f : float(s > 0 ? s : 1.0 / std::sqrt(double(p.D)));
  const double drop = a.f("dropout");
  if (drop > 0) {  // the CPU's comparison and scale (kernels/cpu/attention.cc)
    p.dropout = true;
    p.threshold = keep_threshold(drop);
    p.keep_scale = float(1.0 / (1.0 - drop));
    p.key = uint64_t(a.i("key"));
    p.stream = uint64_t(a.i("stream"));
    p.head_start = a.i("head_start");
    p.first_row = a.i("first_row");
    p.heads = a.i("heads") > 0 ? a.i("heads") : p.H;
  }
  MERAK_CHECK(p.D <= kAttnMaxHeadDim && p.Dv <= kAttnMaxHeadDim, op, ": head dims of q ",
              q.str(), " and v ", v.str(), " exceed the CUDA kernel's limit of ",
              kAttnMaxHeadDim);
  const int64_t tiles = (std::max(p.Tq, p.Tk) + 31) / 32;  // the most blocks any kernel launches
  MERAK_CHECK(p.B * p.H * tiles < (int64_t(1) << 31), op, ": q ", q.str(), " and k ", k.str(),
              " need more thread blocks than a CUDA grid holds");
  return p;
}

void check_smem(int64_t bytes, const Tensor& q, const Tensor& v, const char* op) {
  int limit = 0;
  merak::cuda::check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                            q.device().index),
                     "cudaDeviceGetAttribute");
  MERAK_CHECK(bytes <= limit, op, ": head dims of q ", q.str(), " and v ", v.str(), " need ",
              bytes, " bytes of shared memory per block, this GPU allows ", limit);
}

const uint8_t* mask_data(const std::vector<Tensor>& in, size_t i) {
  return i < in.size() && in[i].defined() ? static_cast<const uint8_t*>(in[i].device_data())
                                          : nullptr;
}

}  // namespace

// in: q, k, v, key_padding_mask?; out: out, lse (f32)
MERAK_REGISTER_KERNEL(sdpa, CUDA, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                     const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const Elem elem = elem_of(q, "sdpa");
  const AttnShape p = attn_shape(q, k, v, a, "sdpa");
  const cudaStream_t stream = stream_of(q);
  check_smem(sdpa_forward_smem_bytes(p), q, v, "sdpa");
  launch_sdpa_forward(p, q.device_data(), k.device_data(), v.device_data(), mask_data(in, 3),
                      out[0].device_data(), stat_data(out[1], "sdpa", "lse"), int(elem), stream);
  check_launch("sdpa");
});

// in: dout, q, k, v, key_padding_mask?, out, lse (f32); out: dq, dk, dv
MERAK_REGISTER_KERNEL(sdpa_grad, CUDA, [](const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &q = in[1], &k = in[2], &v = in[3];
  const Elem elem = elem_of(q, "sdpa_grad");
  const AttnShape p = attn_shape(q, k, v, a, "sdpa_grad");
  const cudaStream_t stream = stream_of(q);
  check_smem(sdpa_backward_smem_bytes(p), q, v, "sdpa_grad");
  const Tensor delta = scratch(sdpa_backward_scratch_bytes(p), q.device());
  launch_sdpa_backward(p, in[0].device_data(), q.device_data(), k.device_data(), v.device_data(),
                       mask_data(in, 4), in[5].device_data(), stat_data(in[6], "sdpa_grad", "lse"),
                       out[0].device_data(), out[1].device_data(), out[2].device_data(),
                       delta.device_data(), int(elem), stream);
  check_launch("sdpa_grad");
});

}  // namespace merak::cuda_kernels::nn
