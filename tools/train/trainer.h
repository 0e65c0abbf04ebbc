// Single-process training: the data, model and optimizer a config describes, stepped one global
// batch at a time (split into micro-batches whose gradients accumulate). It lives in tools/
// because it joins config, data, models and optim, which sit below it in the layer order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "merak/config/config.h"
#include "merak/optim/adamw.h"
#include "merak/optim/grad_norm.h"
#include "models/model.h"
#include "tools/train/batches.h"
#include "tools/train/mixed_precision.h"

namespace merak::train {

struct StepStats {
  int64_t step = 0;        // 1-based, after the update
  double loss = 0;         // mean over the global batch
  double lr = 0;
  double grad_norm = 0;    // before clipping
  bool skipped = false;    // f16: gradients overflowed, the update was not applied
  std::string event;       // f16: what the loss scaler did this step, if anything
  double seconds = 0;      // wall time of the step
  double tokens = 0;       // tokens in the global batch
  double model_flops = 0;  // model FLOPs of the step (flops_per_token * tokens)
  int64_t peak_mem_bytes = 0;  // allocator high-water mark since the start
};

class Trainer {
 public:
  // Builds everything the config describes; a config that does not fit the data (a vocabulary
  // smaller than the token ids) throws config::ConfigError naming the key.
  explicit Trainer(const config::Config& config);
  ~Trainer();

  StepStats step();
  int64_t steps_done() const { return steps_; }
  models::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  // The batch the trainer feeds at `step` (0-based), rows [r0, r1) of the global batch.
  models::Batch batch(int64_t step, int64_t r0, int64_t r1) const;

 private:
  // The batch rows [r0, r1) of `step` on the training device.
  models::Batch device_batch(int64_t step, int64_t r0, int64_t r1) const;

  config::Config config_;
  Device device_ = Device::cpu();
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::GradNormTracker> norms_;
  std::unique_ptr<MixedPrecision> mixed_;  // bf16/f16 on a GPU; null in f32
  int64_t steps_ = 0;  // steps run, skipped ones included (they consume their batch)
};

// The model options a config describes.
models::ModelOptions model_options(const config::ModelConfig& m);

}  // namespace merak::train
