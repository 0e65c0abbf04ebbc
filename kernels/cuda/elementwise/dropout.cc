// CUDA kernel of dropout (merak/ops/defs/nn.cc): the CPU's mask bit for bit, the same
// Philox4x32-10 draw per (key, element index, stream), so a mask can be re-derived on either
// device.
#include <cmath>
#include <vector>

#include "kernels/cuda/common.h"
#include "kernels/cuda/elementwise/dropout.h"
#include "merak/core/philox.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::cuda_kernels {

MERAK_REGISTER_KERNEL(dropout, CUDA, [](const std::vector<Tensor>& in,
                                        const std::vector<Tensor>& out, const ops::Attrs& a) {
  const Tensor &x = in[0], &y = out[0];
  const Elem e = elem_of(x, "dropout");
  if (x.numel() == 0) return;
  const double p = a.f("p");
  if (p == 0) {  // nothing dropped, nothing scaled: skip the draws, as the CPU does
    merak::cuda::check(cudaMemcpyAsync(y.device_data(), x.device_data(), size_t(x.nbytes()),
                                       cudaMemcpyDeviceToDevice, stream_of(y)),
                       "dropout: cudaMemcpyAsync");
    return;
  }
  const uint32_t threshold = keep_threshold(p);  // the CPU's comparison, in integers
  const float scale = float(1.0 / (1.0 - p));  // the CPU's T(1.0 / (1.0 - p))
  launch_dropout(int(e), x.device_data(), y.device_data(), x.numel(), uint64_t(a.i("key")),
                 uint64_t(a.i("stream")), threshold, scale, ops::dropout_piece(a, x.shape()),
                 stream_of(y));
  check_launch("dropout");
});

}  // namespace merak::cuda_kernels
