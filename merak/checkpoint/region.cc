#include "merak/checkpoint/region.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace merak::checkpoint {
namespace {

// The product of `shape`; false when it does not fit in int64 (a corrupt index's shape).
bool checked_numel(const Shape& shape, int64_t* n) {
  *n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(*n, s, n)) return false;
  return true;
}

}  // namespace

int64_t Region::box_numel() const {
  // Exact for every region region_fits accepts; saturated for a corrupt one (described in an
  // error message), so that describing it is defined.
  int64_t n = 0;
  return checked_numel(shape, &n) ? n : INT64_MAX;
}

std::string Region::str() const {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t o = d < offset.size() ? offset[d] : 0;  // a corrupt region's ranks may differ
    int64_t e = 0;
    s += (d ? ", " : "") + std::to_string(o) + ":" +
         (__builtin_add_overflow(o, shape[d], &e) ? std::string("?") : std::to_string(e));
  }
  s += "]";
  if (begin != 0 || end >= 0)
    s += " elements " + std::to_string(begin) + ".." + std::to_string(flat_end());
  return s;
}

bool region_fits(const Region& r, const Shape& global, std::string* why) {
  if (r.offset.size() != global.size() || r.shape.size() != global.size()) {
    *why = "region " + r.str() + " has rank " + std::to_string(r.shape.size()) +
           ", the tensor " + shape_str(global);
    return false;
  }
  for (size_t d = 0; d < global.size(); ++d)
    if (r.offset[d] < 0 || r.shape[d] < 0 || r.offset[d] > global[d] ||
        r.shape[d] > global[d] - r.offset[d]) {
      *why = "region " + r.str() + " lies outside the tensor's shape " + shape_str(global);
      return false;
    }
  int64_t box = 0;
  if (!checked_numel(r.shape, &box)) {
    *why = "region " + r.str() + " has more elements than int64 counts";
    return false;
  }
  if (r.begin < 0 || r.flat_end() > r.box_numel() || r.begin > r.flat_end()) {
    *why = "region " + r.str() + ": elements outside its box of " +
           std::to_string(r.box_numel());
    return false;
  }
  return true;
}

Region whole(const Shape& global) {
  Region r;
  r.offset.assign(global.size(), 0);
  r.shape = global;
  return r;
}

namespace {

// Calls run(src_flat, dst_flat, n) for each run of n elements that `src` and `dst` have in common
// (flat indices into each region's own elements: contiguous on both sides); returns the total.
template <typename Run>
int64_t for_each_overlap(const Region& src, const Region& dst, Run run) {
  const size_t n = src.shape.size();
  const int64_t sb = src.begin, se = src.flat_end(), db = dst.begin, de = dst.flat_end();
  if (n == 0) {  // a scalar: its one element, if both hold it
    if (sb == 0 && se > 0 && db == 0 && de > 0) {
      run(0, 0, 1);
      return 1;
    }
    return 0;
  }
  for (size_t d = 0; d < n; ++d)  // boxes apart: nothing in common
    if (src.offset[d] >= dst.offset[d] + dst.shape[d] ||
        dst.offset[d] >= src.offset[d] + src.shape[d])
      return 0;
  if (src.offset == dst.offset && src.shape == dst.shape) {  // one box: the runs' intersection
    const int64_t x = std::max(sb, db), y = std::min(se, de);
    if (x >= y) return 0;
    run(x - sb, x - db, y - x);
    return y - x;
  }
  const int64_t row = src.shape[n - 1];
  if (row == 0) return 0;
  int64_t common = 0;
  std::vector<int64_t> c(n);
  // Along the source's elements a row (last dim) at a time: each run is contiguous on both sides.
  for (int64_t f = sb; f < se;) {
    int64_t rest = f;
    for (size_t d = n; d-- > 0;) {
      c[d] = rest % src.shape[d];
      rest /= src.shape[d];
    }
    const int64_t len = std::min(se - f, row - c[n - 1]);
    bool inside = true;
    int64_t dst_flat = 0;  // of the row's start (last coordinate taken as the box's first)
    for (size_t d = 0; d + 1 < n; ++d) {
      const int64_t g = src.offset[d] + c[d] - dst.offset[d];
      inside = inside && g >= 0 && g < dst.shape[d];
      dst_flat = dst_flat * dst.shape[d] + g;
    }
    if (inside) {
      // The run's last coordinates, global, clipped to the destination's box.
      const int64_t g0 = src.offset[n - 1] + c[n - 1];
      const int64_t a = std::max(g0, dst.offset[n - 1]);
      const int64_t b = std::min(g0 + len, dst.offset[n - 1] + dst.shape[n - 1]);
      if (a < b) {
        const int64_t x0 = dst_flat * dst.shape[n - 1] + (a - dst.offset[n - 1]);
        const int64_t x = std::max(x0, db), y = std::min(x0 + (b - a), de);
        if (x < y) {
          const int64_t from = f + (a - g0) + (x - x0);  // source flat index
          run(from - sb, x - db, y - x);
          common += y - x;
        }
      }
    }
    f += len;
  }
  return common;
}

}  // namespace

int64_t copy_overlap(const Region& src, const void* src_data, const Region& dst, void* dst_data,
                     size_t elem) {
  const auto* in = static_cast<const char*>(src_data);
  auto* out = static_cast<char*>(dst_data);
  return for_each_overlap(src, dst, [&](int64_t from, int64_t to, int64_t count) {
    std::memcpy(out + size_t(to) * elem, in + size_t(from) * elem, size_t(count) * elem);
  });
}

int64_t overlap_numel(const Region& a, const Region& b) {
  return for_each_overlap(a, b, [](int64_t, int64_t, int64_t) {});
}

}  // namespace merak::checkpoint
