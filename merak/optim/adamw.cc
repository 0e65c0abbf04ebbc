#include "merak/optim/adamw.h"

#include <cmath>

#include "merak/autograd/grad_mode.h"
#include "merak/core/parallel.h"
#include "merak/optim/device_optim.h"

namespace merak::optim {
namespace {

// One fused pass over a parameter. The arithmetic follows torch.optim.AdamW (1.13,
// single-tensor path, vectorised CPU kernels) operation by operation, so f32 results agree with
// it bit for bit:
//   g = g * clip_coef                          (clip_grad_norm_'s mul_, exact when it is 1)
//   p = p * (1 - lr*wd)                        (mul_)
//   m = fma(g, 1 - b1, m * b1)                 (mul_, then add_ with alpha: an FMA)
//   v = fma((1 - b2) * g, g, v * b2)           (mul_, then addcmul_: an FMA)
//   p = p + (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)   (addcdiv_, no FMA)
// The BUILD turns off implicit FMA contraction so that only the FMAs written here happen.
void update_range(float* __restrict p, const float* __restrict g, float* __restrict m,
                  float* __restrict v, int64_t lo, int64_t hi, const AdamWCoefficients& c) {
  for (int64_t i = lo; i < hi; ++i) {
    const float gi = g[i] * c.grad_scale;
    const float mi = std::fma(gi, c.one_minus_beta1, m[i] * c.beta1);
    const float vi = std::fma(c.one_minus_beta2 * gi, gi, v[i] * c.beta2);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    const float decayed = p[i] * c.decay;
    p[i] = decayed + c.neg_step_size * mi / denom;
  }
}

// Below this many elements a parameter is updated by the calling thread alone.
constexpr int64_t kGrain = int64_t(1) << 15;

}  // namespace

std::vector<Param> make_params(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Param> out;
  out.reserve(named.size());
  for (const auto& [name, tensor] : named) out.push_back(Param{name, tensor, tensor.dim() >= 2});
  return out;
}

AdamW::AdamW(std::vector<Param> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  MERAK_CHECK(options_.lr >= 0, "AdamW: lr must be >= 0, got ", options_.lr);
  MERAK_CHECK(options_.beta1 >= 0 && options_.beta1 < 1, "AdamW: beta1 must be in [0, 1), got ",
              options_.beta1);
  MERAK_CHECK(options_.beta2 >= 0 && options_.beta2 < 1, "AdamW: beta2 must be in [0, 1), got ",
              options_.beta2);
  MERAK_CHECK(options_.eps >= 0, "AdamW: eps must be >= 0, got ", options_.eps);
  MERAK_CHECK(options_.weight_decay >= 0, "AdamW: weight_decay must be >= 0, got ",
              options_.weight_decay);
  for (const Param& p : params_) {
    MERAK_CHECK(p.value.defined(), "AdamW: parameter '", p.name, "' is an undefined tensor");
    MERAK_CHECK(p.value.dtype() == DType::F32 && !p.value.is_meta(), "AdamW: parameter '",
                p.name, "' is ", p.value.str(), "; expected an f32 tensor with data");
    MERAK_CHECK(p.value.device() == params_[0].value.device(), "AdamW: parameter '", p.name,
                "' is on ", p.value.device().str(), ", the first on ",
                params_[0].value.device().str(), "; one optimizer per device");
    MERAK_CHECK(p.value.is_contiguous(), "AdamW: parameter '", p.name, "' is not contiguous");
  }
  // A device without optimizer kernels fails here, not at the first step.
  if (!params_.empty() && !params_[0].value.device().is_cpu())
    device_optimizer(params_[0].value.device().type, "AdamW");
  m_.resize(params_.size());
  v_.resize(params_.size());
}

void AdamW::allocate_state() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!m_[i].defined()) {
      const Tensor& p = params_[i].value;
      m_[i] = Tensor::zeros(p.shape(), DType::F32, p.device());
      v_[i] = Tensor::zeros(p.shape(), DType::F32, p.device());
    }
}

void AdamW::set_steps_taken(int64_t steps) {
  MERAK_CHECK(steps >= 0, "AdamW: a step count must be >= 0, got ", steps);
  step_ = steps;
}

void AdamW::step(double lr, float grad_scale) {
  MERAK_CHECK(std::isfinite(lr) && lr >= 0, "AdamW: step lr must be finite and >= 0, got ", lr);
  MERAK_CHECK(std::isfinite(grad_scale) && grad_scale > 0, "AdamW: gradient scale must be ",
              "finite and > 0, got ", grad_scale);
  autograd::NoGradGuard no_grad;
  ++step_;
  // All parameters share one step count (they all receive gradients in training).
  const double bias_correction1 = 1 - std::pow(options_.beta1, double(step_));
  const double bias_correction2 = 1 - std::pow(options_.beta2, double(step_));
  AdamWCoefficients c;
  c.grad_scale = grad_scale;
  c.beta1 = float(options_.beta1);
  c.one_minus_beta1 = float(1 - options_.beta1);
  c.beta2 = float(options_.beta2);
  c.one_minus_beta2 = float(1 - options_.beta2);
  c.bias_correction2_sqrt = float(std::sqrt(bias_correction2));
  c.eps = float(options_.eps);
  c.neg_step_size = float(-(lr / bias_correction1));
  const float decay = float(1 - lr * options_.weight_decay);
  if (!params_.empty() && !params_[0].value.device().is_cpu()) {
    step_on_device(c, decay);
    return;
  }

  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& param = params_[i];
    const Tensor grad_tensor = param.value.grad();
    if (!grad_tensor.defined()) continue;
    MERAK_CHECK(grad_tensor.dtype() == DType::F32 && grad_tensor.shape() == param.value.shape(),
                "AdamW: gradient of '", param.name, "' is ", grad_tensor.str(),
                "; expected f32 with the parameter's shape ", shape_str(param.value.shape()));
    const Tensor grad = grad_tensor.contiguous();
    if (!m_[i].defined()) {
      m_[i] = Tensor::zeros(param.value.shape());
      v_[i] = Tensor::zeros(param.value.shape());
    }
    c.decay = param.decay ? decay : 1.0f;  // multiplying by 1.0f leaves p bit-identical
    float* p = param.value.data<float>();
    const float* g = grad.data<float>();
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    parallel_for(0, param.value.numel(), kGrain,
                 [&](int64_t lo, int64_t hi) { update_range(p, g, m, v, lo, hi, c); });
  }
}

// On an accelerator the update runs as the device's multi-tensor kernel, once for the
// parameters that decay and once for those that do not (the only coefficient that differs).
void AdamW::step_on_device(AdamWCoefficients c, float decay) {
  const Device device = params_[0].value.device();
  const DeviceOptimizer& kernels = device_optimizer(device.type, "AdamW");
  for (const bool decays : {true, false}) {
    std::vector<Tensor> p, g, m, v;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& param = params_[i];
      if (param.decay != decays) continue;
      const Tensor grad = param.value.grad();
      if (!grad.defined()) continue;
      MERAK_CHECK(grad.shape() == param.value.shape() && grad.device() == device &&
                      (grad.dtype() == DType::F32 || grad.dtype() == DType::BF16 ||
                       grad.dtype() == DType::F16),
                  "AdamW: gradient of '", param.name, "' is ", grad.str(),
                  "; expected f32, bf16 or f16 on ", device.str(), " with the shape ",
                  shape_str(param.value.shape()));
      if (!m_[i].defined()) {
        m_[i] = Tensor::zeros(param.value.shape(), DType::F32, device);
        v_[i] = Tensor::zeros(param.value.shape(), DType::F32, device);
      }
      p.push_back(param.value);
      g.push_back(grad.contiguous());
      m.push_back(m_[i]);
      v.push_back(v_[i]);
    }
    if (p.empty()) continue;
    c.decay = decays ? decay : 1.0f;
    kernels.adamw(p, g, m, v, c);
  }
}

void AdamW::zero_grad() {
  for (const Param& p : params_) p.value.set_grad(Tensor());
}

}  // namespace merak::optim
