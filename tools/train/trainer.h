// Single-process training: the data, model and optimizer a config describes, stepped one global
// batch at a time (split into micro-batches whose gradients accumulate). It lives in tools/
// because it joins config, data, models and optim, which sit below it in the layer order.
#pragma once

#include <cstdint>
#include <memory>

#include "merak/config/config.h"
#include "merak/optim/adamw.h"
#include "merak/optim/grad_norm.h"
#include "models/model.h"
#include "tools/train/batches.h"

namespace merak::train {

struct StepStats {
  int64_t step = 0;        // 1-based, after the update
  double loss = 0;         // mean over the global batch
  double lr = 0;
  double grad_norm = 0;    // before clipping
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
  int64_t steps_done() const { return optimizer_->steps_taken(); }
  models::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  // The batch the trainer feeds at `step` (0-based), rows [r0, r1) of the global batch.
  models::Batch batch(int64_t step, int64_t r0, int64_t r1) const;

 private:
  config::Config config_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::GradNormTracker> norms_;
};

// The model options a config describes.
models::ModelOptions model_options(const config::ModelConfig& m);

}  // namespace merak::train
