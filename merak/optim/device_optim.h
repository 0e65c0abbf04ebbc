// The optimizer's kernels for tensors that live on an accelerator. merak/optim cannot depend on
// a device's kernels (they sit above it), so a backend registers them here at start-up
// (kernels/cuda/optim does for CUDA) and AdamW, the gradient norm and the loss scaler's
// overflow check call them for parameters on that device.
#pragma once

#include <vector>

#include "merak/core/device.h"
#include "merak/core/tensor.h"

namespace merak::optim {

// The per-step scalars of the AdamW update, rounded to f32 once (see adamw.cc for the order of
// operations every implementation follows).
struct AdamWCoefficients {
  float grad_scale = 1;  // clipping's factor (over the loss scale), 1 when not clipping
  float decay = 1;       // 1 - lr * wd, or exactly 1 when the parameter does not decay
  float beta1 = 0, one_minus_beta1 = 1;
  float beta2 = 0, one_minus_beta2 = 1;
  float bias_correction2_sqrt = 1;
  float eps = 0;
  float neg_step_size = 0;  // -lr / bias_correction1
};

struct DeviceOptimizer {
  // One update of every tensor in `params` (f32, contiguous) from `grads` (f32, bf16 or f16, the
  // parameters' shapes) and the moments `m`, `v` (f32), all on the device.
  void (*adamw)(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& m, const std::vector<Tensor>& v,
                const AdamWCoefficients& c) = nullptr;
  // Sum of the squares of every element of every tensor, accumulated in f64 in a fixed order.
  double (*sum_of_squares)(const std::vector<Tensor>& tensors) = nullptr;
  // False when any element of any tensor is inf or NaN.
  bool (*all_finite)(const std::vector<Tensor>& tensors) = nullptr;
};

void register_device_optimizer(DeviceType device, const DeviceOptimizer& kernels);
// The kernels registered for `device`; throws naming the device and `what` needed them when the
// build has none.
const DeviceOptimizer& device_optimizer(DeviceType device, const char* what);

}  // namespace merak::optim
