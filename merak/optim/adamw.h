// AdamW with decoupled weight decay and bias correction, the learning-rate schedule, and
// global-norm gradient clipping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/optim/device_optim.h"

namespace merak::optim {

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
};

// One trainable tensor. Decay is off for biases and norm weights (by convention: tensors of
// rank < 2), on for matrices and embeddings.
struct Param {
  std::string name;
  Tensor value;  // updated in place; its .grad() is read
  bool decay = true;
};
std::vector<Param> make_params(const std::vector<std::pair<std::string, Tensor>>& named);

class AdamW {
 public:
  AdamW(std::vector<Param> params, AdamWOptions options);
  // Applies one update with learning rate `lr` to every parameter that has a gradient (f32
  // parameters; f32 gradients, or also bf16/f16 on an accelerator; moments kept in f32, on the
  // parameters' device). Runs under no-grad. Each gradient element
  // is first multiplied by `grad_scale` in f32, exactly as clipping the gradient in place by
  // that factor would, without the separate pass over the gradients (they are left unscaled).
  void step(double lr, float grad_scale = 1.0f);
  void zero_grad();  // drops every gradient
  int64_t steps_taken() const { return step_; }
  const std::vector<Param>& params() const { return params_; }
  // Optimizer state for checkpoints: first and second moments, by parameter name.
  const std::vector<Tensor>& exp_avg() const { return m_; }
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }
  // The moments made (zeros) where no step made them yet, so that they exist before training
  // (a resume reads into them); and, for checkpoints, the step count set.
  void allocate_state();
  void set_steps_taken(int64_t steps);

 private:
  void step_on_device(AdamWCoefficients c, float decay);

  std::vector<Param> params_;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

// Learning rate at `step` (0-based): linear warmup over warmup_steps from lr/warmup to lr, then
// decay ("cosine", "linear" or "constant") to min_lr at total_steps.
double scheduled_lr(int64_t step, int64_t total_steps, double lr, int64_t warmup_steps,
                    const std::string& decay, double min_lr);

// Sum of squares of an f32 tensor's elements, accumulated in f64 over fixed-size blocks, so the
// result does not depend on the thread count.
double sum_of_squares(const Tensor& t);
// The same over several tensors: host ones one by one, in order (the same bits as adding up
// sum_of_squares of each), those on a device in one multi-tensor pass (one read-back for all).
double sum_of_squares(const std::vector<Tensor>& tensors);
// The global L2 norm of all gradients (parameters without one are skipped).
double grad_norm(const std::vector<Param>& params);
// The factor global-norm clipping multiplies gradients by, as torch.nn.utils.clip_grad_norm_:
// max_norm / (norm + 1e-6) when that is below 1, otherwise (and when max_norm <= 0, or for a NaN
// norm) exactly 1.
float clip_coefficient(double norm, double max_norm);
void scale_in_place(const Tensor& t, float factor);
// grad_norm, then every gradient scaled in place by clip_coefficient. Returns the norm before
// clipping. (A training step can instead pass the coefficient to AdamW::step.)
double clip_grad_norm(const std::vector<Param>& params, double max_norm);

}  // namespace merak::optim
