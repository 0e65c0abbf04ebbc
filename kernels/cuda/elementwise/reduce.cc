// CUDA kernels of sum, mean, max, min and prod over dims (merak/ops/defs/reduce.cc), for f32,
// bf16 and f16, accumulated in f32. An empty reduction gives 0 (sum), NaN (mean) or 1 (prod);
// max and min reject it at inference.
#include <vector>

#include "kernels/cuda/common.h"
#include "kernels/cuda/elementwise/layout.h"
#include "kernels/cuda/elementwise/reduce.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels {
namespace {

using ops::Attrs;
using Tensors = std::vector<Tensor>;

void reduce(const char* name, Reduce op, const Tensors& in, const Tensors& out, const Attrs& a) {
  const Tensor &x = in[0], &y = out[0];
  const Elem e = elem_of(x, name);
  if (y.numel() == 0) return;
  const ReduceLayout layout = reduce_layout(name, x.shape(), a.ints("dims"));
  const int64_t splits = reduce_splits(layout);
  // The slices' partial results; freed here while the kernels may still run, which is safe:
  // the caching allocator hands the block out again only to work queued later on this stream.
  Tensor partials;
  if (splits > 1) partials = Tensor::empty({splits * layout.n_out}, DType::F32, y.device());
  launch_reduce(op, int(e), x.device_data(), y.device_data(), layout, splits,
                splits > 1 ? static_cast<float*>(partials.device_data()) : nullptr,
                stream_of(y));
  check_launch(name);
}

}  // namespace

MERAK_REGISTER_KERNEL(sum, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  reduce("sum", Reduce::Sum, in, out, a);
});
MERAK_REGISTER_KERNEL(mean, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  reduce("mean", Reduce::Mean, in, out, a);
});
MERAK_REGISTER_KERNEL(max, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  reduce("max", Reduce::Max, in, out, a);
});
MERAK_REGISTER_KERNEL(min, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  reduce("min", Reduce::Min, in, out, a);
});
MERAK_REGISTER_KERNEL(prod, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  reduce("prod", Reduce::Prod, in, out, a);
});

}  // namespace merak::cuda_kernels
