// CPU kernels of the shape ops that move data: concat and slice_grad. Both are block copies
// that don't depend on the element type (any dtype: ids and masks concat too). Views (reshape,
// permute, slice, ...) have no kernels.
#include <algorithm>
#include <cstring>

#include "merak/core/parallel.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

// A tensor seen as [outer, n along dim, inner]: sizes in elements.
struct Blocks {
  int64_t outer = 1, inner = 1;
};

Blocks blocks_around(const Shape& s, int64_t dim) {
  Blocks b;
  for (int64_t d = 0; d < dim; ++d) b.outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) b.inner *= s[d];
  return b;
}

// Copies `outer` blocks of `len` bytes from src (stride src_ld bytes) to dst (stride dst_ld).
void copy_blocks(char* dst, int64_t dst_ld, const char* src, int64_t src_ld, int64_t outer,
                 int64_t len) {
  if (len == 0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / len);  // ~256 KiB per task
  parallel_for(0, outer, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) std::memcpy(dst + o * dst_ld, src + o * src_ld, size_t(len));
  });
}

}  // namespace

// y = concat(xs, dim): each input fills its band of every outer block of y.
MERAK_REGISTER_KERNEL(concat, CPU, [](const std::vector<Tensor>& in,
                                      const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int64_t dim = normalize_dim(a.i("dim"), y.dim());
  const Blocks b = blocks_around(y.shape(), dim);
  const int64_t es = int64_t(dtype_size(y.dtype()));
  const int64_t row = y.size(dim) * b.inner * es;  // bytes per outer block of y
  char* dst = static_cast<char*>(y.raw_data());
  int64_t offset = 0;
  for (const Tensor& x : in) {
    const int64_t len = x.size(dim) * b.inner * es;
    if (x.numel() > 0)
      copy_blocks(dst + offset, row, static_cast<const char*>(x.raw_data()), len, b.outer, len);
    offset += len;
  }
});

// dx = zeros with dy at [start, start + len) along dim.
MERAK_REGISTER_KERNEL(slice_grad, CPU, [](const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& dy = in[0];
  const Tensor& dx = out[0];
  if (dx.numel() == 0) return;
  std::memset(dx.raw_data(), 0, size_t(dx.nbytes()));
  if (dy.numel() == 0) return;
  const int64_t dim = normalize_dim(a.i("dim"), dx.dim());
  const Blocks b = blocks_around(dx.shape(), dim);
  const int64_t es = int64_t(dtype_size(dx.dtype()));
  const int64_t len = dy.size(dim) * b.inner * es;
  char* dst = static_cast<char*>(dx.raw_data()) + a.i("start") * b.inner * es;
  copy_blocks(dst, dx.size(dim) * b.inner * es, static_cast<const char*>(dy.raw_data()), len,
              b.outer, len);
});

}  // namespace merak::ops
