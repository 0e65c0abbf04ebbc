// CUDA kernels of softmax, log_softmax and their gradients (defs in merak/ops/defs/nn.cc).
#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/softmax.h"
#include "kernels/cuda/nn/util.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {
namespace {

using ops::Attrs;

template <bool kLog>
void softmax_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const char* op = kLog ? "log_softmax" : "softmax";
  const Tensor& x = in[0];
  const Elem elem = elem_of(x, op);
  const Dims d = dims_around(x.shape(), normalize_dim(a.i("dim"), x.dim()));
  launch_softmax(x.device_data(), out[0].device_data(), d.outer, d.len, d.inner, kLog, int(elem),
                 stream_of(x));
  check_launch(op);
}

// in: dy, y
template <bool kLog>
void softmax_grad_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
  const char* op = kLog ? "log_softmax_grad" : "softmax_grad";
  const Tensor& y = in[1];
  const Elem elem = elem_of(y, op);
  const Dims d = dims_around(y.shape(), normalize_dim(a.i("dim"), y.dim()));
  launch_softmax_grad(in[0].device_data(), y.device_data(), out[0].device_data(), d.outer, d.len,
                      d.inner, kLog, int(elem), stream_of(y));
  check_launch(op);
}

}  // namespace

MERAK_REGISTER_KERNEL(softmax, CUDA, softmax_kernel<false>);
MERAK_REGISTER_KERNEL(log_softmax, CUDA, softmax_kernel<true>);
MERAK_REGISTER_KERNEL(softmax_grad, CUDA, softmax_grad_kernel<false>);
MERAK_REGISTER_KERNEL(log_softmax_grad, CUDA, softmax_grad_kernel<true>);

}  // namespace merak::cuda_kernels::nn
