#include "merak/core/shape.h"

#include <algorithm>

#include "merak/core/error.h"

namespace merak {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    MERAK_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(shape),
                " has more elements than int64 counts");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    // Checked even where a zero dim makes the element count small: {0, 2^40, 2^40}.
    if (i > 0)
      MERAK_CHECK(!__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s), "shape ",
                  shape_str(shape), " has strides beyond what int64 counts");
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t normalize_dim(int64_t dim, int64_t rank) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  MERAK_CHECK(d >= 0 && d < rank, "dim ", dim, " out of range for rank ", rank);
  return d;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MERAK_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
                " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape infer_reshape(const Shape& target, int64_t n) {
  Shape out = target;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MERAK_CHECK(infer_at < 0, "reshape to ", shape_str(target), ": more than one -1");
      infer_at = int64_t(i);
    } else {
      MERAK_CHECK(out[i] >= 0, "reshape to ", shape_str(target), ": negative size");
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    MERAK_CHECK(known > 0 && n % known == 0, "cannot reshape ", n, " elements to ",
                shape_str(target));
    out[infer_at] = n / known;
  }
  MERAK_CHECK(numel(out) == n, "cannot reshape ", n, " elements to ", shape_str(target));
  return out;
}

}  // namespace merak
