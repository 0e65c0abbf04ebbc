// Loss scaling for f16 training. The loss is multiplied by scale() before backward so that small
// gradients do not flush to zero in f16's narrow range; the gradients are multiplied by
// inv_scale() before clipping and the update. A scale too large makes some gradient inf or NaN:
// that step is skipped, and in dynamic mode the scale backs off.
//
// Dynamic mode follows Megatron-LM's DynamicGradScaler (PyTorch's GradScaler is the case
// hysteresis 1, without a floor):
//   - a clean step counts towards growth; after growth_interval clean steps in a row the scale
//     is multiplied by `growth` and the hysteresis allowance is restored;
//   - an overflow resets that count, skips the step and uses up one unit of hysteresis; once it
//     is used up, that overflow and every further one until the next growth multiply the scale
//     by `backoff`, never below `min`.
// Only growth restores the allowance, not any clean step: otherwise overflows that alternate
// with clean steps would skip every other step forever without ever lowering the scale.
// bf16 has f32's exponent range and needs no scaling.
#pragma once

#include <cstdint>
#include <string>

namespace merak::optim {

struct LossScalerOptions {
  bool dynamic = true;             // false: `initial` is the scale for the whole run
  float initial = 65536.0f;        // 2^16
  float growth = 2.0f;             // > 1
  float backoff = 0.5f;            // in (0, 1)
  int64_t growth_interval = 1000;  // clean steps in a row before the scale grows
  int64_t hysteresis = 2;          // backs off at this overflow since the last growth (1: every)
  float min = 1.0f;                // backoff stops here; <= initial
};

// Throws merak::Error naming the first option out of range (every option is checked, in
// static mode too, so a bad value is never silently ignored).
void validate(const LossScalerOptions& options);

// What checkpoints keep so that a resumed run scales as the uninterrupted one would.
struct LossScalerState {
  float scale = 0.0f;
  int64_t clean_steps = 0;      // since the last overflow or growth
  // Counts overflows down from `hysteresis`; an overflow that brings it to 0 backs off, and
  // so does every one after it until growth restores it.
  int64_t hysteresis_left = 0;
  int64_t steps = 0;            // updates seen
  int64_t skipped_steps = 0;    // of them, with non-finite gradients
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});
  // Static mode: the scale stays `scale`; non-finite steps are still skipped.
  static LossScaler fixed(float scale);

  float scale() const { return state_.scale; }
  // 1 / scale() rounded once from double, for unscaling gradients (exact for powers of two).
  float inv_scale() const;
  bool dynamic() const { return options_.dynamic; }
  const LossScalerOptions& options() const { return options_; }

  // Records one step: `found_non_finite` is whether any (global) gradient was inf or NaN.
  // Returns whether the optimizer should apply the step, false when it must be skipped. Call it
  // once per step with the same value on every rank, so that all ranks keep one scale.
  bool update(bool found_non_finite);

  int64_t steps() const { return state_.steps; }
  int64_t skipped_steps() const { return state_.skipped_steps; }
  int64_t clean_steps() const { return state_.clean_steps; }
  int64_t hysteresis_left() const { return state_.hysteresis_left; }
  // What the last update did, one line for the training log, or "" for a clean step that left
  // the scale alone: "overflow: scale 65536 -> 32768, step skipped".
  const std::string& last_event() const { return last_event_; }

  LossScalerState state() const { return state_; }
  // Resumes from a checkpoint's state; throws merak::Error when it cannot come from a scaler
  // with these options (a scale that is not finite and > 0, or below min, negative counts).
  void load_state(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
  std::string last_event_;
};

}  // namespace merak::optim
