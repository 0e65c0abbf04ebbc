#include <catch2/catch.hpp>

#include "merak/comm/grid_layout.h"
#include "merak/core/error.h"
#include "tests/comm/layouts.h"

using namespace merak;
using namespace merak::comm;
using namespace merak::comm::test;

TEST_CASE("grid coordinates and groups match the hand-written layouts", "[comm][grid]") {
  for (const LayoutTable& t : hand_layouts()) {
    INFO("layout " << t.shape.str());
    REQUIRE(t.shape.size() == 8);
    for (int r = 0; r < 8; ++r) {
      INFO("rank " << r);
      CHECK(grid_coord(t.shape, r) == t.coords[r]);
      CHECK(grid_rank(t.shape, t.coords[r]) == r);
      CHECK(axis_group(t.shape, Axis::TP, r) == group_of(t.tp, r));
      CHECK(axis_group(t.shape, Axis::DP, r) == group_of(t.dp, r));
      CHECK(axis_group(t.shape, Axis::PP, r) == group_of(t.pp, r));
      CHECK(tied_group(t.shape, r) == group_of(t.tied, r));
    }
  }
}

TEST_CASE("tensor-parallel ranks are adjacent, then dp, then pp", "[comm][grid]") {
  GridShape s{3, 4, 2};  // 24 ranks
  CHECK(grid_rank(s, {0, 0, 1}) == 1);
  CHECK(grid_rank(s, {1, 0, 0}) == 2);
  CHECK(grid_rank(s, {0, 1, 0}) == 6);
  CHECK(grid_rank(s, {2, 3, 1}) == 23);
  CHECK(axis_group(s, Axis::DP, 9) == std::vector<int>{7, 9, 11});  // pp 1, tp 1
  CHECK(tied_group(s, 9).empty());                                    // middle stage
  CHECK(tied_group(s, 19) == std::vector<int>{1, 19});                // dp 0, tp 1, last stage
}

TEST_CASE("a world size that is not dp*pp*tp names all four numbers", "[comm][grid]") {
  try {
    check_grid({2, 2, 3}, 8);
    FAIL("no error");
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("world size 8 != dp 2 * pp 2 * tp 3 (= 12)") != std::string::npos);
  }
  CHECK_THROWS_WITH(check_grid({0, 2, 4}, 8), Catch::Contains("dp 0, pp 2, tp 4"));
  CHECK_NOTHROW(check_grid({2, 2, 2}, 8));
  CHECK_THROWS_WITH(grid_coord({2, 2, 2}, 8), Catch::Contains("rank 8 outside"));
}
