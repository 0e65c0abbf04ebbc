// CUDA kernels of the ops that move data without arithmetic (merak/ops/defs/shape.cc, arange.cc):
// concat and slice_grad are byte-row copies of any dtype, as on the CPU; arange writes 0..n-1.
#include <vector>

#include "kernels/cuda/common.h"
#include "kernels/cuda/elementwise/copy.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels {
namespace {

using ops::Attrs;
using Tensors = std::vector<Tensor>;

// A tensor seen as [outer, size(dim), inner].
struct Around {
  int64_t outer = 1, inner = 1;
};
Around around(const Shape& s, int64_t dim) {
  Around a;
  for (int64_t d = 0; d < dim; ++d) a.outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) a.inner *= s[d];
  return a;
}

}  // namespace

// y = concat(xs, dim): each input fills its band of every outer row of y.
MERAK_REGISTER_KERNEL(concat, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int64_t dim = normalize_dim(a.i("dim"), y.dim());
  const Around b = around(y.shape(), dim);
  const int64_t es = int64_t(dtype_size(y.dtype()));
  const int64_t row = y.size(dim) * b.inner * es;  // bytes per outer row of y
  char* dst = static_cast<char*>(y.device_data());
  int64_t offset = 0;
  for (const Tensor& x : in) {
    const int64_t width = x.size(dim) * b.inner * es;
    if (x.numel() > 0)
      launch_copy_rows(dst + offset, row, x.device_data(), width, b.outer, width, stream_of(y));
    offset += width;
  }
  check_launch("concat");
});

// dx = zeros with dy at [start, start + dy.size(dim)) along dim, in one pass over dx.
MERAK_REGISTER_KERNEL(slice_grad, CUDA, [](const Tensors& in, const Tensors& out,
                                           const Attrs& a) {
  const Tensor &dy = in[0], &dx = out[0];
  if (dx.numel() == 0) return;
  const int64_t dim = normalize_dim(a.i("dim"), dx.dim());
  const Around b = around(dx.shape(), dim);
  const int64_t es = int64_t(dtype_size(dx.dtype()));
  const int64_t row_bytes = b.inner * es;  // one step along dim
  launch_pad_rows(dx.device_data(), dx.size(dim) * row_bytes,
                  dy.numel() > 0 ? dy.device_data() : nullptr, dy.size(dim) * row_bytes,
                  a.i("start") * row_bytes, b.outer, stream_of(dx));
  check_launch("slice_grad");
});

// y[i] = i; x's values are never read (x may be strided).
MERAK_REGISTER_KERNEL(arange, CUDA, [](const Tensors&, const Tensors& out, const Attrs&) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  launch_arange(static_cast<int64_t*>(y.device_data()), y.numel(), stream_of(y));
  check_launch("arange");
});

}  // namespace merak::cuda_kernels
