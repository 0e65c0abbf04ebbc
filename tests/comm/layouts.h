// The four grid layouts of an 8-rank job, written out by hand: every rank's (dp, pp, tp) and
// every group. The layout arithmetic and the MPI grid are both checked against these.
#pragma once

#include <vector>

#include "merak/comm/grid_layout.h"

namespace merak::comm::test {

using Groups = std::vector<std::vector<int>>;

struct LayoutTable {
  GridShape shape;
  std::vector<GridCoord> coords;  // by world rank, as {dp, pp, tp}
  Groups tp, dp, pp, tied;        // every group of each kind, members in group-rank order
};

inline std::vector<LayoutTable> hand_layouts() {
  const Groups singles = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
  const Groups all8 = {{0, 1, 2, 3, 4, 5, 6, 7}};
  return {
      {{2, 2, 2},
       {{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {1, 0, 1}, {0, 1, 0}, {0, 1, 1}, {1, 1, 0}, {1, 1, 1}},
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
       {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {{1, 8, 1},
       {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 3, 0}, {0, 4, 0}, {0, 5, 0}, {0, 6, 0}, {0, 7, 0}},
       singles,
       singles,
       all8,
       {{0, 7}}},  // ranks 1..6 are middle stages: no tied group
      {{8, 1, 1},
       {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 0}, {5, 0, 0}, {6, 0, 0}, {7, 0, 0}},
       singles,
       all8,
       singles,
       singles},  // pp == 1: first and last stage are the same rank
      {{1, 2, 4},
       {{0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3}, {0, 1, 0}, {0, 1, 1}, {0, 1, 2}, {0, 1, 3}},
       {{0, 1, 2, 3}, {4, 5, 6, 7}},
       singles,
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
  };
}

// The group in `groups` that holds `rank`; empty when none does.
inline std::vector<int> group_of(const Groups& groups, int rank) {
  for (const auto& g : groups)
    for (int r : g)
      if (r == rank) return g;
  return {};
}

}  // namespace merak::comm::test
