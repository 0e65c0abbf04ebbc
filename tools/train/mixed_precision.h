// Mixed precision for training on a GPU. The model's parameters become bf16 or f16 copies that
// forward and backward compute with, while AdamW updates f32 master weights and keeps its
// moments in f32 (the gradients stay 16-bit; the fused AdamW kernel widens them as it reads).
// Under f16 a loss scale keeps small gradients representable: the loss is multiplied by it
// before backward, the norm and the update divide it out, and a step whose gradients overflowed
// is skipped (logged, never applied) while the scale backs off (optim::LossScaler).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/optim/adamw.h"
#include "merak/optim/loss_scaler.h"
#include "models/model.h"

namespace merak::train {

class MixedPrecision {
 public:
  // `model` must be materialised in f32 on the CPU; its parameters move to `device` as
  // `compute` (bf16 or f16) copies, and f32 masters of their exact values stay on `device`.
  // `scaling` applies to f16 only (bf16 has f32's range and needs no loss scale).
  MixedPrecision(models::Model& model, Device device, DType compute,
                 const optim::LossScalerOptions& scaling);

  // What the optimizer updates: the f32 masters, named and decayed like the model's parameters.
  const std::vector<optim::Param>& master_params() const { return masters_; }
  // The factor the loss is multiplied by before backward (1 unless f16). Read it before the
  // step's backward: gradients_to_masters may change it for the next step.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

  // Drops the model's gradients (the masters' go with the optimizer's zero_grad).
  void zero_grad();
  // After the step's backward: gives each master its parameter's 16-bit gradient and, under
  // f16, checks them all for inf/NaN and updates the loss scale. Returns whether the optimizer
  // may apply the step; when not, `event` says why (the scaler's log line).
  bool gradients_to_masters(std::string* event);
  // After the optimizer step: every master rounded to the compute dtype into the model's
  // parameter, in place (autograd's leaves stay the same tensors).
  void masters_to_model();

 private:
  std::vector<Tensor> model_params_;  // the 16-bit leaves the model computes with
  std::vector<optim::Param> masters_;
  std::unique_ptr<optim::LossScaler> scaler_;  // f16 only
};

}  // namespace merak::train
