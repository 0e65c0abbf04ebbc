// A measured run's spans become simulator costs: medians per stage (the slowest rank of a
// stage), the quickest ReduceGrads per stage, the quickest receive as the transfer time.
#include <catch2/catch.hpp>

#include "merak/runtime/engine_replay.h"

using merak::runtime::TraceSpan;

namespace {

TraceSpan span(int rank, const char* name, double start, double end) {
  TraceSpan s;
  s.track = rank;
  s.name = name;
  s.start = start;
  s.end = end;
  return s;
}

}  // namespace

TEST_CASE("measured costs take medians per stage and the quickest reduce and receive",
          "[engine]") {
  // dp 2 x pp 2: ranks 0, 1 are stage 0 (dp 0, 1); ranks 2, 3 stage 1.
  const merak::comm::GridShape shape{2, 2, 1};
  std::vector<TraceSpan> spans = {
      // Stage 0: rank 0's forwards 1, 1, 9 (median 1); rank 1's 2, 2, 2: the stage takes 2.
      span(0, "F0", 0, 1), span(0, "F1", 1, 2), span(0, "F2", 2, 11),
      span(1, "F0", 0, 2), span(1, "F1", 2, 4), span(1, "F2", 4, 6),
      span(0, "B0", 11, 14), span(1, "B0", 6, 9), span(0, "R0", 20, 20.5),
      span(0, "AR", 14, 15), span(1, "AR", 9, 9.25), span(0, "OPT", 15, 15.1),
      // Stage 1.
      span(2, "RA0", 0, 0.5), span(2, "F0", 1, 1.5), span(3, "F0", 1, 1.25),
      span(2, "RG0", 2, 2.125), span(2, "B0", 3, 4), span(2, "AR", 4, 4.5),
      span(2, "SA0", 1.5, 1.5001),
  };
  const merak::runtime::SimCosts c = merak::runtime::measured_costs(spans, shape);
  REQUIRE(c.forward.size() == 2);
  CHECK(c.forward[0] == Approx(2));
  CHECK(c.forward[1] == Approx(0.5));
  CHECK(c.backward[0] == Approx(3));
  CHECK(c.backward[1] == Approx(1));
  CHECK(c.recompute[0] == Approx(0.5));
  CHECK(c.recompute[1] == 0);
  CHECK(c.reduce[0] == Approx(0.25));
  CHECK(c.reduce[1] == Approx(0.5));
  CHECK(c.optimizer[0] == Approx(0.1));
  CHECK(c.p2p == Approx(0.125));
}

TEST_CASE("interleaved runs are costed per model stage: chunk c of rank r is stage c * pp + r",
          "[engine]") {
  // pp 2 with two chunks: model stages 0 (rank 0, chunk 0), 1 (rank 1, chunk 0), 2 (rank 0,
  // chunk 1), 3 (rank 1, chunk 1).
  const merak::comm::GridShape shape{1, 2, 1};
  const std::vector<TraceSpan> spans = {
      span(0, "F0", 0, 1), span(0, "F0.1", 1, 3), span(1, "F0", 1, 5), span(1, "F0.1", 5, 13),
      span(0, "B0", 13, 14), span(0, "B0.1", 14, 17), span(1, "B0.1", 17, 18),
      span(0, "R1.1", 18, 18.5), span(0, "OPT", 19, 19.25), span(1, "OPT", 19, 19.5),
  };
  const merak::runtime::SimCosts c = merak::runtime::measured_costs(spans, shape, 2);
  REQUIRE(c.forward.size() == 4);
  CHECK(c.forward[0] == Approx(1));
  CHECK(c.forward[1] == Approx(4));
  CHECK(c.forward[2] == Approx(2));
  CHECK(c.forward[3] == Approx(8));
  CHECK(c.backward[0] == Approx(1));
  CHECK(c.backward[2] == Approx(3));
  CHECK(c.backward[3] == Approx(1));
  CHECK(c.backward[1] == 0);
  CHECK(c.recompute[2] == Approx(0.5));
  CHECK(c.recompute[0] == 0);
  REQUIRE(c.optimizer.size() == 2);  // per rank
  CHECK(c.optimizer[1] == Approx(0.5));
}
