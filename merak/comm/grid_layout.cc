#include "merak/comm/grid_layout.h"

#include "merak/core/error.h"

namespace merak::comm {

std::string GridShape::str() const {
  return detail::concat("dp ", dp, ", pp ", pp, ", tp ", tp);
}

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::DP: return "dp";
    case Axis::PP: return "pp";
    case Axis::TP: return "tp";
  }
  return "?";
}

void check_grid(const GridShape& s, int world_size) {
  MERAK_CHECK(s.dp >= 1 && s.pp >= 1 && s.tp >= 1, "grid: dp, pp and tp must be >= 1, got ",
              s.str(), " for world size ", world_size);
  // Compare in 64 bits: a large bad layout must not overflow into a match.
  const long long want = 1LL * s.dp * s.pp * s.tp;
  MERAK_CHECK(want == world_size, "grid: world size ", world_size, " != dp ", s.dp, " * pp ",
              s.pp, " * tp ", s.tp, " (= ", want, ")");
}

int grid_rank(const GridShape& s, const GridCoord& c) {
  MERAK_CHECK(c.dp >= 0 && c.dp < s.dp && c.pp >= 0 && c.pp < s.pp && c.tp >= 0 && c.tp < s.tp,
              "grid: coordinate (dp ", c.dp, ", pp ", c.pp, ", tp ", c.tp, ") outside ", s.str());
  return (c.pp * s.dp + c.dp) * s.tp + c.tp;
}

GridCoord grid_coord(const GridShape& s, int rank) {
  MERAK_CHECK(rank >= 0 && rank < s.size(), "grid: rank ", rank, " outside ", s.str());
  GridCoord c;
  c.tp = rank % s.tp;
  c.dp = (rank / s.tp) % s.dp;
  c.pp = rank / (s.tp * s.dp);
  return c;
}

std::vector<int> axis_group(const GridShape& s, Axis axis, int rank) {
  GridCoord c = grid_coord(s, rank);
  const int extent = axis == Axis::DP ? s.dp : axis == Axis::PP ? s.pp : s.tp;
  std::vector<int> ranks;
  for (int i = 0; i < extent; ++i) {
    GridCoord m = c;
    (axis == Axis::DP ? m.dp : axis == Axis::PP ? m.pp : m.tp) = i;
    ranks.push_back(grid_rank(s, m));
  }
  return ranks;
}

std::vector<int> tied_group(const GridShape& s, int rank) {
  GridCoord c = grid_coord(s, rank);
  if (s.pp == 1) return {rank};
  if (c.pp != 0 && c.pp != s.pp - 1) return {};
  GridCoord first = c, last = c;
  first.pp = 0;
  last.pp = s.pp - 1;
  return {grid_rank(s, first), grid_rank(s, last)};
}

}  // namespace merak::comm
