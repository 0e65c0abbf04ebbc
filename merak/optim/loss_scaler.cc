#include "merak/optim/loss_scaler.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "merak/core/error.h"

namespace merak::optim {
namespace {

// The shortest decimal that reads back as `v`: scales print as 65536 and 0.5, not 65536.000000.
std::string str(float v) {
  char buf[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

void validate(const LossScalerOptions& o) {
  // Written so that NaN fails every check.
  MERAK_CHECK(std::isfinite(o.initial) && o.initial > 0,
              "LossScaler: initial scale must be finite and > 0, got ", o.initial);
  MERAK_CHECK(std::isfinite(o.growth) && o.growth > 1,
              "LossScaler: growth factor must be finite and > 1, got ", o.growth);
  MERAK_CHECK(o.backoff > 0 && o.backoff < 1, "LossScaler: backoff factor must be in (0, 1), got ",
              o.backoff);
  MERAK_CHECK(o.growth_interval >= 1, "LossScaler: growth_interval must be >= 1, got ",
              o.growth_interval);
  MERAK_CHECK(o.hysteresis >= 1, "LossScaler: hysteresis must be >= 1, got ", o.hysteresis);
  MERAK_CHECK(std::isfinite(o.min) && o.min > 0,
              "LossScaler: min scale must be finite and > 0, got ", o.min);
  // The floor only bounds backoff, which static mode never does.
  MERAK_CHECK(!o.dynamic || o.min <= o.initial, "LossScaler: min scale ", o.min,
              " is above the initial scale ", o.initial);
}

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  validate(options_);
  state_.scale = options_.initial;
  state_.hysteresis_left = options_.hysteresis;
}

LossScaler LossScaler::fixed(float scale) {
  LossScalerOptions o;
  o.dynamic = false;
  o.initial = scale;
  return LossScaler(o);
}

float LossScaler::inv_scale() const { return float(1.0 / double(state_.scale)); }

bool LossScaler::update(bool found_non_finite) {
  LossScalerState& s = state_;
  ++s.steps;
  last_event_.clear();
  if (!options_.dynamic) {
    if (!found_non_finite) return true;
    ++s.skipped_steps;
    last_event_ = "overflow: static scale " + str(s.scale) + ", step skipped";
    return false;
  }
  if (found_non_finite) {
    ++s.skipped_steps;
    s.clean_steps = 0;
    --s.hysteresis_left;
    const float before = s.scale;
    if (s.hysteresis_left <= 0) {
      // Stays <= 0 until the next growth: every further overflow backs off at once.
      s.hysteresis_left = 0;
      s.scale = std::fmax(s.scale * options_.backoff, options_.min);
    }
    if (s.scale != before) {
      last_event_ = "overflow: scale " + str(before) + " -> " + str(s.scale) + ", step skipped";
    } else if (s.hysteresis_left > 0) {
      // The n-th overflow since the last growth backs off, for n = hysteresis.
      last_event_ = "overflow: scale " + str(s.scale) + " kept (overflow " +
                    std::to_string(options_.hysteresis - s.hysteresis_left) + " of hysteresis " +
                    std::to_string(options_.hysteresis) + "), step skipped";
    } else {
      last_event_ = "overflow: scale " + str(s.scale) + " kept (at min), step skipped";
    }
    return false;
  }
  if (++s.clean_steps == options_.growth_interval) {
    s.clean_steps = 0;
    s.hysteresis_left = options_.hysteresis;
    const float grown = s.scale * options_.growth;
    const std::string interval = std::to_string(options_.growth_interval);
    // As PyTorch: a scale that would leave f32's range stays where it is (an inf scale could
    // never back off again).
    if (std::isfinite(grown)) {
      last_event_ = "no overflow in " + interval + " steps: scale " + str(s.scale) + " -> " +
                    str(grown);
      s.scale = grown;
    } else {
      last_event_ = "no overflow in " + interval + " steps: scale " + str(s.scale) +
                    " kept (f32's largest)";
    }
  }
  return true;
}

void LossScaler::load_state(const LossScalerState& st) {
  MERAK_CHECK(st.steps >= 0 && st.skipped_steps >= 0 && st.skipped_steps <= st.steps,
              "LossScaler: checkpoint state has skipped_steps ", st.skipped_steps, " of ",
              st.steps, " steps");
  if (!options_.dynamic) {
    // The configured scale wins: a static scale may be changed between runs.
    state_.steps = st.steps;
    state_.skipped_steps = st.skipped_steps;
    return;
  }
  MERAK_CHECK(std::isfinite(st.scale) && st.scale >= options_.min,
              "LossScaler: checkpoint scale ", st.scale, " is not finite and >= min scale ",
              options_.min);
  MERAK_CHECK(st.clean_steps >= 0 && st.clean_steps < options_.growth_interval,
              "LossScaler: checkpoint clean_steps ", st.clean_steps, " is outside [0, ",
              options_.growth_interval, ")");
  MERAK_CHECK(st.hysteresis_left >= 0 && st.hysteresis_left <= options_.hysteresis,
              "LossScaler: checkpoint hysteresis_left ", st.hysteresis_left, " is outside [0, ",
              options_.hysteresis, "]");
  state_ = st;
  last_event_.clear();
}

}  // namespace merak::optim
