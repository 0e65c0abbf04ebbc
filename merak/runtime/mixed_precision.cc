#include "merak/runtime/mixed_precision.h"

#include "merak/autograd/grad_mode.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"
#include "merak/optim/device_optim.h"

namespace merak::runtime {

MixedPrecision::MixedPrecision(std::vector<optim::Param> masters, std::vector<Tensor> copies,
                               DType compute, const optim::LossScalerOptions& scaling)
    : masters_(std::move(masters)), copies_(std::move(copies)), compute_(compute) {
  MERAK_CHECK(compute == DType::BF16 || compute == DType::F16, "mixed precision computes in bf16 ",
              "or f16, not ", dtype_name(compute));
  MERAK_CHECK(masters_.size() == copies_.size(), "mixed precision: ", masters_.size(),
              " master weights for ", copies_.size(), " parameters");
  for (size_t i = 0; i < masters_.size(); ++i)
    MERAK_CHECK(masters_[i].value.dtype() == DType::F32 &&
                    masters_[i].value.shape() == copies_[i].shape(),
                "mixed precision: master '", masters_[i].name, "' is ", masters_[i].value.str(),
                " for a parameter ", copies_[i].str(), "; expected f32 of its shape");
  if (compute == DType::F16) scaler_ = std::make_unique<optim::LossScaler>(scaling);  // validates
}

bool MixedPrecision::overflowed() const {
  if (!scaler_) return false;
  std::vector<Tensor> grads;
  for (const Tensor& c : copies_)
    if (c.grad().defined()) grads.push_back(c.grad());
  if (grads.empty()) return false;
  return !optim::device_optimizer(grads[0].device().type, "loss scaling").all_finite(grads);
}

bool MixedPrecision::update(bool overflow_anywhere, std::string* event) {
  if (!scaler_) return true;
  const bool apply = scaler_->update(overflow_anywhere);
  if (event) *event = scaler_->last_event();
  return apply;
}

void MixedPrecision::gradients_to_masters() {
  for (size_t i = 0; i < masters_.size(); ++i) masters_[i].value.set_grad(copies_[i].grad());
}

void MixedPrecision::masters_to_copies() {
  autograd::NoGradGuard no_grad;
  static const ops::OpDef& cast = *ops::Registry::get().find("cast");
  for (size_t i = 0; i < masters_.size(); ++i)
    ops::call_into(cast, {masters_[i].value}, {copies_[i]},
                   ops::Attrs().set("dtype", dtype_name(copies_[i].dtype())));
}

}  // namespace merak::runtime
