// Mixed precision in the engine: the stage graphs compute with bf16 or f16 copies of the
// parameters, while AdamW updates f32 master weights and keeps its moments in f32 (the gradients
// stay 16-bit; the fused AdamW kernel widens them as it reads). Under f16 a loss scale keeps
// small gradients representable: the loss is multiplied by it before backward, the norm and the
// update divide it out, and a step whose gradients overflowed on any rank of the job is skipped
// on every rank (the engine combines the ranks' overflow flags) while the scale backs off
// (optim::LossScaler's rules).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/optim/adamw.h"
#include "merak/optim/loss_scaler.h"

namespace merak::runtime {

class MixedPrecision {
 public:
  // `masters`: the f32 parameters; `copies`: the 16-bit leaves the graphs compute with, in the
  // same order. `scaling` applies to f16 only (bf16 has f32's range and needs no loss scale).
  MixedPrecision(std::vector<optim::Param> masters, std::vector<Tensor> copies, DType compute,
                 const optim::LossScalerOptions& scaling);

  // What the optimizer updates: the f32 masters, named and decayed like the parameters.
  const std::vector<optim::Param>& master_params() const { return masters_; }
  DType compute() const { return compute_; }
  // The factor the loss is multiplied by before backward (1 unless f16). Fixed for a step:
  // update() changes it for the next one.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // The f16 loss scaler (checkpoints save and restore its state); null otherwise.
  optim::LossScaler* loss_scaler() { return scaler_.get(); }
  const optim::LossScaler* loss_scaler() const { return scaler_.get(); }

  // Whether this rank's gradients hold an inf or NaN (f16 only; false otherwise).
  bool overflowed() const;
  // After the job's overflow flags are combined: updates the loss scale and returns whether the
  // optimizer may apply the step (what the scaler did, if anything, in *event).
  bool update(bool overflow_anywhere, std::string* event);
  // Before the optimizer step: each master takes its copy's (16-bit) gradient.
  void gradients_to_masters();
  // After it: every master rounded to the compute dtype into its copy, in place (autograd's
  // leaves stay the same tensors).
  void masters_to_copies();

 private:
  std::vector<optim::Param> masters_;
  std::vector<Tensor> copies_;
  DType compute_;
  std::unique_ptr<optim::LossScaler> scaler_;  // f16 only
};

}  // namespace merak::runtime
