// The (dp, pp, tp) process grid as arithmetic: rank <-> coordinates and who shares a group.
// tp varies fastest, then dp, then pp (rank = pp * dp*tp + dp * tp + tp), so tensor-parallel
// ranks are adjacent and land on one node, as in Megatron and Merak.
#pragma once

#include <string>
#include <vector>

namespace merak::comm {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
  std::string str() const;  // "dp 2, pp 2, tp 2"
};

struct GridCoord {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const GridCoord& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

enum class Axis { DP, PP, TP };
const char* axis_name(Axis a);  // "dp", "pp", "tp"

// Throws unless every extent is >= 1 and dp * pp * tp == world_size; the message names all four
// numbers. Needs no communication, so a bad layout fails before any rank waits on another.
void check_grid(const GridShape& shape, int world_size);

int grid_rank(const GridShape& shape, const GridCoord& c);
GridCoord grid_coord(const GridShape& shape, int rank);

// The world ranks that share every coordinate with `rank` except `axis`, ordered by their
// coordinate on `axis` (so a rank's index in the list is its rank in the group).
std::vector<int> axis_group(const GridShape& shape, Axis axis, int rank);

// The tied-weight group of `rank` (embeddings shared by the first and last pipeline stage):
// {first stage, last stage} with the same dp and tp; {rank} when pp == 1; empty for a middle
// stage, which holds no tied weights.
std::vector<int> tied_group(const GridShape& shape, int rank);

}  // namespace merak::comm
