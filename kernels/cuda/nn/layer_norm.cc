// CUDA kernels of layer_norm and layer_norm_grad (defs in merak/ops/defs/nn.cc).
#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/layer_norm.h"
#include "kernels/cuda/nn/util.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {
namespace {

using ops::Attrs;

const void* optional_data(const std::vector<Tensor>& in, size_t i) {
  return i < in.size() && in[i].defined() ? in[i].device_data() : nullptr;
}

}  // namespace

// in: x, weight?, bias?; out: y, mean (f32), rstd (f32)
MERAK_REGISTER_KERNEL(layer_norm, CUDA, [](const std::vector<Tensor>& in,
                                           const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& x = in[0];
  const Elem elem = elem_of(x, "layer_norm");
  const int64_t D = x.size(-1), rows = x.numel() / D;
  launch_layer_norm(x.device_data(), optional_data(in, 1), optional_data(in, 2), float(a.f("eps")),
                    out[0].device_data(), stat_data(out[1], "layer_norm", "mean"),
                    stat_data(out[2], "layer_norm", "rstd"), rows, D, int(elem), stream_of(x));
  check_launch("layer_norm");
});

// in: dy, x, weight?, mean (f32), rstd (f32); out: dx, dweight, dbias
MERAK_REGISTER_KERNEL(layer_norm_grad, CUDA, [](const std::vector<Tensor>& in,
                                                const std::vector<Tensor>& out, const Attrs&) {
  const Tensor& x = in[1];
  const Elem elem = elem_of(x, "layer_norm_grad");
  const int64_t D = x.size(-1), rows = x.numel() / D;
  MERAK_CHECK(D <= int64_t(65535) * 32, "layer_norm_grad: x ", x.str(),
              " has more features than the CUDA kernel's grid covers (2M)");
  const Tensor partial = scratch(layer_norm_grad_scratch_bytes(rows, D), x.device());
  launch_layer_norm_grad(in[0].device_data(), x.device_data(), optional_data(in, 2),
                         stat_data(in[3], "layer_norm_grad", "mean"),
                         stat_data(in[4], "layer_norm_grad", "rstd"), out[0].device_data(),
                         out[1].device_data(), out[2].device_data(), rows, D,
                         partial.device_data(), int(elem), stream_of(x));
  check_launch("layer_norm_grad");
});

}  // namespace merak::cuda_kernels::nn
