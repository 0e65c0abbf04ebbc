// LossScaler: growth after exactly growth_interval clean steps, backoff only at the hysteresis-th
// overflow since the last growth, the min floor, skipped-step counts, static mode, options and
// checkpoint state that are rejected.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "merak/core/error.h"
#include "merak/optim/loss_scaler.h"

using merak::optim::LossScaler;
using merak::optim::LossScalerOptions;
using merak::optim::LossScalerState;

namespace {

LossScalerOptions small(int64_t interval, int64_t hysteresis) {
  LossScalerOptions o;
  o.initial = 1024.0f;
  o.growth_interval = interval;
  o.hysteresis = hysteresis;
  return o;
}

// `n` updates with the same outcome; returns how many of them were to be applied.
int run(LossScaler& s, int n, bool overflow) {
  int applied = 0;
  for (int i = 0; i < n; ++i) applied += s.update(overflow) ? 1 : 0;
  return applied;
}

}  // namespace

TEST_CASE("defaults are the peers': 2^16, x2 every 1000 clean steps, x0.5, hysteresis 2",
          "[optim][loss_scale]") {
  LossScaler s;
  CHECK(s.dynamic());
  CHECK(s.scale() == 65536.0f);
  CHECK(s.inv_scale() == 1.0f / 65536.0f);
  CHECK(s.options().growth == 2.0f);
  CHECK(s.options().backoff == 0.5f);
  CHECK(s.options().growth_interval == 1000);
  CHECK(s.options().hysteresis == 2);
  CHECK(s.options().min == 1.0f);
  CHECK(s.hysteresis_left() == 2);
  CHECK(s.steps() == 0);
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("the scale grows after exactly growth_interval clean steps", "[optim][loss_scale]") {
  LossScaler s;
  CHECK(run(s, 999, false) == 999);
  CHECK(s.scale() == 65536.0f);
  CHECK(s.clean_steps() == 999);
  CHECK(s.last_event().empty());
  CHECK(s.update(false));
  CHECK(s.scale() == 131072.0f);
  CHECK(s.clean_steps() == 0);
  CHECK(s.last_event() == "no overflow in 1000 steps: scale 65536 -> 131072");
  // The count starts again: the next growth needs another full interval.
  run(s, 999, false);
  CHECK(s.scale() == 131072.0f);
  s.update(false);
  CHECK(s.scale() == 262144.0f);
  CHECK(s.steps() == 2000);
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("an overflow restarts the count towards growth", "[optim][loss_scale]") {
  LossScaler s(small(4, 5));  // hysteresis 5: these overflows do not back off
  run(s, 3, false);
  CHECK_FALSE(s.update(true));
  CHECK(s.clean_steps() == 0);
  run(s, 3, false);
  CHECK(s.scale() == 1024.0f);  // 3 + 3 clean steps, but not 4 in a row
  s.update(false);
  CHECK(s.scale() == 2048.0f);
}

TEST_CASE("backoff comes only at the hysteresis-th overflow; every overflow is skipped",
          "[optim][loss_scale]") {
  LossScaler s(small(1000, 3));
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 1024.0f);
  CHECK(s.last_event() == "overflow: scale 1024 kept (overflow 1 of hysteresis 3), step skipped");
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 1024.0f);
  CHECK(s.last_event() == "overflow: scale 1024 kept (overflow 2 of hysteresis 3), step skipped");
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 512.0f);
  CHECK(s.last_event() == "overflow: scale 1024 -> 512, step skipped");
  // Used up: each further overflow backs off at once.
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 256.0f);
  CHECK(s.skipped_steps() == 4);
  CHECK(s.steps() == 4);

  // Hysteresis 1 is PyTorch's GradScaler: every overflow backs off.
  LossScaler t(small(1000, 1));
  t.update(true);
  CHECK(t.scale() == 512.0f);
  t.update(true);
  CHECK(t.scale() == 256.0f);
}

TEST_CASE("only growth restores the hysteresis allowance, not a clean step",
          "[optim][loss_scale]") {
  LossScaler s(small(3, 2));
  s.update(true);  // 1 of 2
  CHECK(s.hysteresis_left() == 1);
  CHECK(run(s, 2, false) == 2);  // clean, but short of growth
  CHECK(s.hysteresis_left() == 1);
  s.update(true);  // 2 of 2, although not consecutive with the first
  CHECK(s.scale() == 512.0f);
  CHECK(s.hysteresis_left() == 0);
  // An overflow alternating with clean steps keeps backing off instead of skipping forever.
  for (int i = 0; i < 3; ++i) {
    s.update(false);
    s.update(true);
  }
  CHECK(s.scale() == 64.0f);

  // Growth restores it: the next overflow is tolerated again.
  run(s, 3, false);
  CHECK(s.scale() == 128.0f);
  CHECK(s.hysteresis_left() == 2);
  s.update(true);
  CHECK(s.scale() == 128.0f);
  s.update(true);
  CHECK(s.scale() == 64.0f);
}

TEST_CASE("backoff stops at min", "[optim][loss_scale]") {
  LossScalerOptions o = small(1000, 1);
  o.initial = 6.0f;
  o.min = 2.0f;
  LossScaler s(o);
  s.update(true);
  CHECK(s.scale() == 3.0f);
  s.update(true);
  CHECK(s.scale() == 2.0f);  // 1.5 clamped
  CHECK(s.last_event() == "overflow: scale 3 -> 2, step skipped");
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 2.0f);
  CHECK(s.last_event() == "overflow: scale 2 kept (at min), step skipped");
  CHECK(s.skipped_steps() == 3);
}

TEST_CASE("growth never takes the scale past f32's range", "[optim][loss_scale]") {
  LossScalerOptions o = small(1, 1);
  o.initial = 0x1p126f;
  LossScaler s(o);
  s.update(false);
  CHECK(s.scale() == 0x1p127f);
  s.update(false);
  CHECK(s.scale() == 0x1p127f);
  CHECK(std::isfinite(s.scale()));
  CHECK(s.last_event().find("kept (f32's largest)") != std::string::npos);
  s.update(true);  // and it can still back off
  CHECK(s.scale() == 0x1p126f);
}

TEST_CASE("skipped steps are counted among all steps", "[optim][loss_scale]") {
  LossScaler s(small(1000, 2));
  const bool pattern[] = {false, true, false, false, true, true, false};
  int applied = 0;
  for (bool overflow : pattern) applied += s.update(overflow) ? 1 : 0;
  CHECK(applied == 4);
  CHECK(s.steps() == 7);
  CHECK(s.skipped_steps() == 3);
  CHECK(s.last_event().empty());  // a clean step that changed nothing says nothing
}

TEST_CASE("static mode never changes the scale and still skips overflows",
          "[optim][loss_scale]") {
  LossScaler s = LossScaler::fixed(128.0f);
  CHECK_FALSE(s.dynamic());
  CHECK(run(s, 2500, false) == 2500);
  CHECK(s.scale() == 128.0f);
  CHECK(run(s, 10, true) == 0);
  CHECK(s.scale() == 128.0f);
  CHECK(s.last_event() == "overflow: static scale 128, step skipped");
  CHECK(s.skipped_steps() == 10);
  CHECK(s.steps() == 2510);
  // Static mode does not need min <= scale.
  CHECK(LossScaler::fixed(0.25f).scale() == 0.25f);
}

TEST_CASE("invalid options are rejected with the option named", "[optim][loss_scale]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    LossScalerOptions o;
    const char* message;
  };
  auto with = [](auto set) {
    LossScalerOptions o;
    set(o);
    return o;
  };
  const Case cases[] = {
      {with([](auto& o) { o.initial = 0; }), "initial scale must be finite and > 0, got 0"},
      {with([&](auto& o) { o.initial = inf; }), "initial scale must be finite and > 0"},
      {with([&](auto& o) { o.initial = nan; }), "initial scale must be finite and > 0"},
      {with([](auto& o) { o.growth = 1; }), "growth factor must be finite and > 1, got 1"},
      {with([](auto& o) { o.backoff = 1; }), "backoff factor must be in (0, 1), got 1"},
      {with([](auto& o) { o.backoff = 0; }), "backoff factor must be in (0, 1), got 0"},
      {with([&](auto& o) { o.backoff = nan; }), "backoff factor must be in (0, 1)"},
      {with([](auto& o) { o.growth_interval = 0; }), "growth_interval must be >= 1, got 0"},
      {with([](auto& o) { o.hysteresis = 0; }), "hysteresis must be >= 1, got 0"},
      {with([](auto& o) { o.min = -1; }), "min scale must be finite and > 0, got -1"},
      {with([](auto& o) { o.min = 4096, o.initial = 1024; }),
       "min scale 4096 is above the initial scale 1024"},
      {with([](auto& o) { o.dynamic = false, o.growth = 0.5f; }),
       "growth factor must be finite and > 1, got 0.5"},
  };
  for (const Case& c : cases) {
    INFO(c.message);
    CHECK_THROWS_AS(LossScaler(c.o), merak::Error);
    CHECK_THROWS_WITH(LossScaler(c.o), Catch::Contains(c.message));
  }
  CHECK_THROWS_WITH(LossScaler::fixed(0), Catch::Contains("initial scale must be finite"));
  CHECK_NOTHROW(LossScaler(with([](auto& o) { o.min = o.initial; })));
}

TEST_CASE("state round-trips; impossible checkpoint state is rejected", "[optim][loss_scale]") {
  LossScaler a(small(5, 2));
  const bool pattern[] = {false, true, false, false, false, false, false, true, false};
  for (bool overflow : pattern) a.update(overflow);
  LossScaler b(small(5, 2));
  b.load_state(a.state());
  for (int i = 0; i < 20; ++i) {
    const bool overflow = i % 7 == 3;
    CHECK(a.update(overflow) == b.update(overflow));
    CHECK(a.scale() == b.scale());
    CHECK(a.hysteresis_left() == b.hysteresis_left());
    CHECK(a.clean_steps() == b.clean_steps());
  }
  CHECK(a.skipped_steps() == b.skipped_steps());

  LossScalerState bad = a.state();
  bad.scale = 0.5f;  // below min 1
  CHECK_THROWS_WITH(b.load_state(bad), Catch::Contains("checkpoint scale 0.5"));
  bad = a.state();
  bad.clean_steps = 5;
  CHECK_THROWS_WITH(b.load_state(bad), Catch::Contains("clean_steps 5 is outside [0, 5)"));
  bad = a.state();
  bad.hysteresis_left = 3;
  CHECK_THROWS_WITH(b.load_state(bad), Catch::Contains("hysteresis_left 3 is outside [0, 2]"));
  bad = a.state();
  bad.skipped_steps = bad.steps + 1;
  CHECK_THROWS_WITH(b.load_state(bad), Catch::Contains("skipped_steps"));

  // Static mode keeps its configured scale and takes only the counts.
  LossScaler fixed = LossScaler::fixed(8.0f);
  fixed.load_state(a.state());
  CHECK(fixed.scale() == 8.0f);
  CHECK(fixed.steps() == a.steps());
}
