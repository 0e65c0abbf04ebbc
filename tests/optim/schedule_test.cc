#include <catch2/catch.hpp>

#include <cmath>

#include "merak/optim/adamw.h"

using merak::optim::scheduled_lr;

namespace {
constexpr double kLr = 1e-3, kMin = 1e-4;
constexpr int64_t kWarmup = 10, kTotal = 110;  // 100 decay steps after warmup
double at(int64_t step, const std::string& decay) {
  return scheduled_lr(step, kTotal, kLr, kWarmup, decay, kMin);
}
}  // namespace

TEST_CASE("warmup rises linearly from lr/warmup to lr, whatever the decay", "[optim]") {
  for (const char* decay : {"cosine", "linear", "constant"}) {
    INFO(decay);
    CHECK(at(0, decay) == Approx(1e-4));
    CHECK(at(4, decay) == Approx(5e-4));
    CHECK(at(9, decay) == Approx(1e-3));
  }
}

TEST_CASE("cosine decay: lr after warmup, halfway cosine in the middle, min_lr at the end",
          "[optim]") {
  CHECK(at(10, "cosine") == Approx(kLr));
  // progress 0.25: min + (lr - min) * (1 + cos(pi/4)) / 2
  CHECK(at(35, "cosine") == Approx(1e-4 + 9e-4 * (1 + std::sqrt(0.5)) / 2));
  CHECK(at(60, "cosine") == Approx(5.5e-4));
  CHECK(at(110, "cosine") == Approx(kMin));
  CHECK(at(5000, "cosine") == Approx(kMin));
}

TEST_CASE("linear decay: straight line from lr to min_lr", "[optim]") {
  CHECK(at(10, "linear") == Approx(kLr));
  CHECK(at(35, "linear") == Approx(7.75e-4));
  CHECK(at(60, "linear") == Approx(5.5e-4));
  CHECK(at(110, "linear") == Approx(kMin));
  CHECK(at(5000, "linear") == Approx(kMin));
}

TEST_CASE("constant: lr after warmup forever", "[optim]") {
  CHECK(at(10, "constant") == kLr);
  CHECK(at(60, "constant") == kLr);
  CHECK(at(5000, "constant") == kLr);
}

TEST_CASE("schedule edge cases: no warmup, total within warmup, unknown decay", "[optim]") {
  CHECK(scheduled_lr(0, 100, 2.0, 0, "linear", 0.0) == Approx(2.0));
  CHECK(scheduled_lr(50, 100, 2.0, 0, "linear", 0.0) == Approx(1.0));
  // total <= warmup: the decay phase is one step long
  CHECK(scheduled_lr(10, 5, 1.0, 10, "cosine", 0.1) == Approx(1.0));
  CHECK(scheduled_lr(11, 5, 1.0, 10, "cosine", 0.1) == Approx(0.1));
  CHECK_THROWS_WITH(at(50, "step"), Catch::Contains("unknown lr decay 'step'"));
  CHECK_THROWS_WITH(at(0, "Cosine"), Catch::Contains("'Cosine'"));
}
