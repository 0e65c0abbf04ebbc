#include "merak/partition/tp_split.h"

namespace merak::partition {
namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// The split with units of `unit` flat elements repeating every `period`, placed on a dim of
// `to` whose extent covers whole periods and whose elements are whole within a unit.
std::optional<Split> place(const Shape& to, int64_t parts, int64_t unit, int64_t period) {
  const std::vector<int64_t> ts = strides_of(to);
  for (size_t b = 0; b < to.size(); ++b) {
    if (to[b] == 1) continue;
    const int64_t extent = to[b] * ts[b];
    if (unit % ts[b] != 0 || extent % period != 0) continue;
    Split s;
    s.axis = int64_t(b);
    s.outer = extent / period;
    s.parts = parts;
    s.inner = unit / ts[b];
    return s;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Split> reshape_split(const Shape& from, const Split& s, const Shape& to) {
  const std::vector<int64_t> fs = strides_of(from);
  const int64_t unit = s.inner * fs[size_t(s.axis)];
  // Finest units first: coarsen by k (a divisor of parts) only when the units must be merged to
  // land on one dim of `to`.
  for (int64_t k = 1; k <= s.parts; ++k) {
    if (s.parts % k != 0) continue;
    if (auto out = place(to, s.parts / k, unit * k, unit * s.parts)) return out;
  }
  return std::nullopt;
}

std::vector<std::pair<int64_t, int64_t>> split_ranges(const Split& s, int64_t tp, int64_t rank) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t chunk = (s.parts / tp) * s.inner;
  for (int64_t o = 0; o < s.outer; ++o)
    out.push_back({o * s.parts * s.inner + rank * chunk, chunk});
  return out;
}

std::pair<int64_t, int64_t> vocab_range(int64_t rows, int64_t tp, int64_t rank) {
  const int64_t base = rows / tp, extra = rows % tp;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace merak::partition
