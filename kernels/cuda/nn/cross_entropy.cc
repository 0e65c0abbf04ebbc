// CUDA kernels of cross_entropy and cross_entropy_grad (defs in merak/ops/defs/nn.cc).
#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/cross_entropy.h"
#include "kernels/cuda/nn/util.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {

using ops::Attrs;

// in: logits [..., V], targets [...]; out: loss [] (f32), lse [...] (f32)
MERAK_REGISTER_KERNEL(cross_entropy, CUDA, [](const std::vector<Tensor>& in,
                                              const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &x = in[0], &t = in[1];
  const Elem elem = elem_of(x, "cross_entropy");
  const int index = index_of(t, "cross_entropy", "targets");
  const int64_t V = x.size(-1), rows = x.numel() / V;
  const Tensor row_loss = scratch(cross_entropy_scratch_bytes(rows), x.device());
  launch_cross_entropy(x.device_data(), t.device_data(),
                       stat_data(out[0], "cross_entropy", "loss"),
                       stat_data(out[1], "cross_entropy", "lse"), rows, V, a.i("ignore_index"),
                       row_loss.device_data(), int(elem), index, stream_of(x));
  check_launch("cross_entropy");
});

// in: dloss [] (f32), logits [..., V], targets [...], lse [...] (f32); out: dlogits [..., V]
MERAK_REGISTER_KERNEL(cross_entropy_grad, CUDA, [](const std::vector<Tensor>& in,
                                                   const std::vector<Tensor>& out,
                                                   const Attrs& a) {
  const Tensor &x = in[1], &t = in[2];
  const Elem elem = elem_of(x, "cross_entropy_grad");
  const int index = index_of(t, "cross_entropy_grad", "targets");
  const int64_t V = x.size(-1), rows = x.numel() / V;
  const Tensor scale = scratch(cross_entropy_grad_scratch_bytes(), x.device());
  launch_cross_entropy_grad(stat_data(in[0], "cross_entropy_grad", "dloss"), x.device_data(),
                            t.device_data(), stat_data(in[3], "cross_entropy_grad", "lse"),
                            out[0].device_data(), rows, V,
                            a.i("ignore_index"), scale.device_data(), int(elem), index,
                            stream_of(x));
  check_launch("cross_entropy_grad");
});

}  // namespace merak::cuda_kernels::nn
