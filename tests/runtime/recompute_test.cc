// Stage-aware recomputation: Merak's ratio rule and the memory-driven policy.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <vector>

#include "merak/core/error.h"
#include "merak/runtime/schedule.h"
#include "merak/runtime/schedule_recompute.h"

using namespace merak::runtime;

namespace {
// Element-wise approximate equality of a vector of ratios. The expectation stays an
// initializer_list: Debian's GCC 12.2 at -O2 -mavx512f miscompiles copying a constant such as
// {1, 1, 1, 0} into a std::vector (it stores four 1s; SLP vectorizer).
void check_near(const std::vector<double>& actual, std::initializer_list<double> expected) {
  REQUIRE(actual.size() == expected.size());
  size_t i = 0;
  for (double e : expected) {
    INFO("entry " << i);
    CHECK(actual[i++] == Approx(e).margin(1e-12));
  }
}
}  // namespace

TEST_CASE("Merak's ratio rule", "[recompute]") {
  // S = 4, r0 = 0.5: 1 - 0.5 * 3/3, 1 - 0.5 * 3/2, 1 - 0.5 * 3/1 -> clamped, last 0.
  check_near(ratio_rule_recompute(4, 0.5), {0.5, 0.25, 0, 0});
  check_near(ratio_rule_recompute(4, 1.0), {1, 1, 1, 0});
  check_near(ratio_rule_recompute(4, 0.0), {0, 0, 0, 0});
  // S = 8, r0 = 0.9: 1 - 0.1 * 7 / (7 - s).
  const auto r = ratio_rule_recompute(8, 0.9);
  for (int s = 0; s < 7; ++s) CHECK(r[s] == Approx(1 - 0.1 * 7 / (7 - s)));
  CHECK(r[7] == 0);
  CHECK(ratio_rule_recompute(1, 0.7) == std::vector<double>{0});
  CHECK_THROWS_WITH(ratio_rule_recompute(4, 1.5), Catch::Contains("[0, 1], got 1.5"));
}

TEST_CASE("peak memory under recomputation", "[recompute]") {
  StageMemory m{10, 4, 1, 3};  // static 10, activations 4, checkpoint 1, 3 in flight
  CHECK(peak_memory(m, 0) == Approx(10 + 3 * 4));
  CHECK(peak_memory(m, 1) == Approx(10 + 3 * 1 + 4));
  CHECK(peak_memory(m, 0.5) == Approx(10 + 3 * (2 + 0.5) + 2));
}

TEST_CASE("memory-driven recomputation: the smallest ratio that fits", "[recompute]") {
  // Static 10, activations 4 per micro-batch, 1F1B in-flight counts of 4 stages.
  std::vector<StageMemory> stages;
  for (int s = 0; s < 4; ++s) {
    const Program p = one_f_one_b(s, 4, 8);
    stages.push_back({10, 4, 0, peak_in_flight(p)});
  }
  REQUIRE(stages[0].in_flight == 4);
  REQUIRE(stages[3].in_flight == 1);
  // Cap 20: peaks without recomputation are 26, 22, 18, 14; full recomputation gives 14.
  check_near(memory_driven_recompute(stages, 20), {0.5, 0.25, 0, 0});
  // Rounded up to whole layers (3 per stage).
  check_near(memory_driven_recompute(stages, 20, 3), {2.0 / 3, 1.0 / 3, 0, 0});
  for (double cap : {14.0, 17.5, 20.0, 26.0}) {
    const auto ratio = memory_driven_recompute(stages, cap);
    for (size_t s = 0; s < stages.size(); ++s) {
      INFO("cap " << cap << " stage " << s);
      CHECK(peak_memory(stages[s], ratio[s]) <= cap + 1e-9);
      // Smallest: any less recomputation would not fit.
      if (ratio[s] > 0) CHECK(peak_memory(stages[s], ratio[s] - 0.01) > cap);
    }
  }
  // GPipe holds every micro-batch, so the same cap needs more.
  std::vector<StageMemory> gp(4, StageMemory{10, 4, 0, peak_in_flight(gpipe(0, 4, 8))});
  CHECK(gp[0].in_flight == 8);
  CHECK(memory_driven_recompute(gp, 20)[3] == Approx((42.0 - 20) / (42 - 14)));
  // Too small for full recomputation: the error names the stage and what it needs.
  CHECK_THROWS_WITH(memory_driven_recompute(stages, 13),
                    Catch::Contains("stage 0 needs 14 bytes") && Catch::Contains("cap is 13"));
}
