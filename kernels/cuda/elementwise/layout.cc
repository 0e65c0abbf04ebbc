#include "kernels/cuda/elementwise/layout.h"

#include <array>
#include <string>

#include "merak/core/error.h"

namespace merak::cuda_kernels {

StridedLayout broadcast_layout(const char* op, const Shape& out, const std::vector<Shape>& in) {
  const int n_in = int(in.size());
  MERAK_CHECK(n_in <= kMaxOperands, op, ": ", n_in, " operands, at most ", kMaxOperands);
  const int64_t rank = int64_t(out.size());
  // Each operand's stride along each output dim (right-aligned, 0 where it is broadcast).
  std::vector<std::array<int64_t, kMaxOperands>> st(static_cast<size_t>(rank));
  for (int k = 0; k < n_in; ++k) {
    const Shape& s = in[size_t(k)];
    const int64_t lead = rank - int64_t(s.size());
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t size = d >= lead ? s[size_t(d - lead)] : 1;
      st[size_t(d)][size_t(k)] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  // Drop size-1 dims; merge a dim into the one before when every operand steps through the
  // pair as one run.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, kMaxOperands>> strides;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = out[size_t(d)];
    if (size == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; merge && k < n_in; ++k)
      merge = strides.back()[size_t(k)] == st[size_t(d)][size_t(k)] * size;
    if (merge) {
      sizes.back() *= size;
      strides.back() = st[size_t(d)];
    } else {
      sizes.push_back(size);
      strides.push_back(st[size_t(d)]);
    }
  }
  if (sizes.empty()) {  // a one-element output
    sizes.push_back(1);
    strides.push_back({});
  }
  std::string shapes;
  for (const Shape& s : in) shapes += (shapes.empty() ? "" : ", ") + shape_str(s);
  MERAK_CHECK(sizes.size() <= size_t(kMaxDims), op, ": broadcasting ", shapes, " to ",
              shape_str(out), " leaves ", sizes.size(), " dims, the CUDA kernels take ",
              kMaxDims);
  StridedLayout l;
  l.rank = int(sizes.size());
  for (int d = 0; d < l.rank; ++d) {
    l.size[d] = sizes[size_t(d)];
    for (int k = 0; k < n_in; ++k) l.stride[k][d] = strides[size_t(d)][size_t(k)];
  }
  return l;
}

ReduceLayout reduce_layout(const char* op, const Shape& x, const std::vector<int64_t>& dims) {
  const int64_t rank = int64_t(x.size());
  std::vector<bool> reduced(size_t(rank), dims.empty());
  for (int64_t d : dims)
    if (rank > 0) reduced[size_t(normalize_dim(d, rank))] = true;
  // Groups of (size, reduced): size-1 dims dropped, neighbours of one kind merged.
  std::vector<std::pair<int64_t, bool>> groups;
  ReduceLayout l;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = x[size_t(d)];
    if (reduced[size_t(d)]) l.count *= size;
    else l.n_out *= size;
    if (size == 1) continue;
    if (!groups.empty() && groups.back().second == reduced[size_t(d)])
      groups.back().first *= size;
    else
      groups.push_back({size, reduced[size_t(d)]});
  }
  int n_kept = 0, n_red = 0;
  for (const auto& g : groups) ++(g.second ? n_red : n_kept);
  MERAK_CHECK(n_kept <= kMaxDims && n_red <= kMaxDims, op, ": x ", shape_str(x), " leaves ",
              n_kept, " kept and ", n_red, " reduced groups of dims, the CUDA kernels take ",
              kMaxDims, " of each");
  // x is contiguous: a group's stride is the product of the sizes after it.
  int64_t stride = 1;
  for (size_t i = groups.size(); i-- > 0;) {
    const auto& [size, is_reduced] = groups[i];
    if (is_reduced) {
      l.red_size[--n_red] = size;
      l.red_stride[n_red] = stride;
      ++l.red_rank;
    } else {
      l.kept_size[--n_kept] = size;
      l.kept_stride[n_kept] = stride;
      ++l.kept_rank;
    }
    stride *= size;
  }
  return l;
}

}  // namespace merak::cuda_kernels
