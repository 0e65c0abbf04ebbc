#include "tools/train/mixed_precision.h"

#include "merak/autograd/grad_mode.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"
#include "merak/optim/device_optim.h"

namespace merak::train {

MixedPrecision::MixedPrecision(models::Model& model, Device device, DType compute,
                               const optim::LossScalerOptions& scaling) {
  MERAK_CHECK(compute == DType::BF16 || compute == DType::F16, "mixed precision computes in bf16 ",
              "or f16, not ", dtype_name(compute));
  MERAK_CHECK(!device.is_cpu() && !device.is_meta(), "mixed precision runs on an accelerator, not ",
              device.str());
  // The masters are the f32 values the model was drawn with, moved as they are; the model then
  // holds their rounded copies.
  const std::vector<optim::Param> drawn = optim::make_params(model.named_parameters());
  for (const optim::Param& p : drawn) {
    MERAK_CHECK(p.value.dtype() == DType::F32 && p.value.device().is_cpu(), "mixed precision: ",
                "parameter '", p.name, "' is ", p.value.str(), "; expected the f32 CPU tensor ",
                "materialize() draws");
    Tensor master = p.value.detach().to(device);
    master.set_name(p.name);
    masters_.push_back({p.name, master, p.decay});
  }
  model.to(device, compute);
  for (const auto& [name, value] : model.named_parameters()) model_params_.push_back(value);
  MERAK_CHECK(model_params_.size() == masters_.size(), "mixed precision: the model has ",
              model_params_.size(), " parameters after moving, ", masters_.size(), " before");
  if (compute == DType::F16) scaler_ = std::make_unique<optim::LossScaler>(scaling);  // validates
}

void MixedPrecision::zero_grad() {
  for (const Tensor& p : model_params_) p.set_grad(Tensor());
}

bool MixedPrecision::gradients_to_masters(std::string* event) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < masters_.size(); ++i) {
    const Tensor g = model_params_[i].grad();
    masters_[i].value.set_grad(g);
    if (g.defined()) grads.push_back(g);
  }
  if (!scaler_) return true;
  const bool finite =
      grads.empty() ||
      optim::device_optimizer(grads[0].device().type, "loss scaling").all_finite(grads);
  const bool apply = scaler_->update(!finite);
  if (event) *event = scaler_->last_event();
  return apply;
}

void MixedPrecision::masters_to_model() {
  autograd::NoGradGuard no_grad;
  static const ops::OpDef& cast = *ops::Registry::get().find("cast");
  for (size_t i = 0; i < masters_.size(); ++i) {
    const Tensor& dst = model_params_[i];
    ops::call_into(cast, {masters_[i].value}, {dst},
                   ops::Attrs().set("dtype", dtype_name(dst.dtype())));
  }
}

}  // namespace merak::train
