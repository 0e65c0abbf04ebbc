// The trace keeps the spans of its last steps only, so a long traced run's memory is bounded.
#include <catch2/catch.hpp>

#include "merak/runtime/engine_trace.h"

using namespace merak;
using namespace merak::runtime;

TEST_CASE("a span log keeps the spans of its last steps", "[engine][trace]") {
  const SpanLog::Clock::time_point t0 = SpanLog::Clock::now();
  SpanLog log(t0, /*steps=*/2);
  auto step = [&](int n, const std::string& name) {
    log.begin_step();
    for (int i = 0; i < n; ++i) log.add(name + std::to_string(i), "compute", t0, t0);
  };
  step(3, "a");
  step(2, "b");
  CHECK(log.spans().size() == 5);
  step(1, "c");  // the first step's three go
  REQUIRE(log.spans().size() == 3);
  CHECK(log.spans()[0].name == "b0");
  CHECK(log.spans()[2].name == "c0");
  step(0, "d");
  step(4, "e");
  REQUIRE(log.spans().size() == 4);
  CHECK(log.spans()[0].name == "e0");

  SpanLog standard(t0);
  for (int s = 0; s < kTraceSteps + 5; ++s) {
    standard.begin_step();
    standard.add("F" + std::to_string(s), "compute", t0, t0);
  }
  REQUIRE(standard.spans().size() == size_t(kTraceSteps));
  CHECK(standard.spans()[0].name == "F5");
}
