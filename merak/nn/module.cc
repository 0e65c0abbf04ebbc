#include "merak/nn/module.h"

#include "merak/autograd/grad_mode.h"
#include "merak/ops/functional.h"

namespace merak::nn {

Tensor& Module::parameter(const std::string& name, const Shape& shape, Init init) {
  for (const Slot& s : params_)
    MERAK_CHECK(s.name != name, "parameter '", name, "' declared twice in module '", path_, "'");
  Tensor placeholder = Tensor::empty(shape, DType::F32, Device::meta());
  placeholder.set_requires_grad(true);
  params_.push_back({name, placeholder, init});
  return params_.back().value;
}

void Module::adopt(const std::string& name, std::unique_ptr<Module> child) {
  for (const auto& c : children_)
    MERAK_CHECK(c.first != name, "submodule '", name, "' added twice in module '", path_, "'");
  children_.emplace_back(name, std::move(child));
}

void Module::collect(const std::string& prefix, std::vector<ParameterInfo>& out) const {
  for (const Slot& s : params_) out.push_back({prefix + s.name, s.value, s.init});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<ParameterInfo> Module::parameters() const {
  std::vector<ParameterInfo> out;
  collect("", out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParameterInfo& p : parameters()) out.emplace_back(p.name, p.value);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const ParameterInfo& p : parameters()) n += p.value.numel();
  return n;
}

void Module::assign_paths(const std::string& path) {
  path_ = path;
  for (auto& [name, child] : children_) child->assign_paths(path.empty() ? name : path + "." + name);
}

void Module::materialize_all(uint64_t seed, Device device) {
  const std::string prefix = path_.empty() ? "" : path_ + ".";
  for (Slot& s : params_) {
    Tensor t = Tensor::empty(s.value.shape(), DType::F32, device);
    initialize(t, prefix + s.name, s.init, seed);
    t.set_requires_grad(true).set_name(prefix + s.name);
    s.value = t;
  }
  on_materialize(seed);
  for (auto& [name, child] : children_) child->materialize_all(seed, device);
}

void Module::materialize(uint64_t seed, Device device) {
  assign_paths("");
  materialize_all(seed, device);
}

void Module::to(Device device, DType dtype) {
  autograd::NoGradGuard no_grad;  // the moved tensors are new leaves, not results of a copy
  for (Slot& s : params_) {
    MERAK_CHECK(!s.value.is_meta(), "module '", path_, "': parameter '", s.name,
                "' is not materialised; call materialize() before to()");
    const std::string name = s.value.name();
    Tensor moved = s.value.detach().to(device);
    if (moved.dtype() != dtype) moved = ops::cast(moved, dtype);
    moved.set_requires_grad(true).set_name(name);
    s.value = moved;
  }
  for (auto& [name, child] : children_) child->to(device, dtype);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void initialize(const Tensor& value, const std::string& full_name, const Init& init, uint64_t seed,
                const SliceOf& slice) {
  switch (init.kind) {
    case Init::Kind::Normal: fill_normal(value, philox_key(seed, full_name), 0.0, init.std, slice); break;
    case Init::Kind::Zeros: value.fill_(0.0); break;
    case Init::Kind::Ones: value.fill_(1.0); break;
  }
}

}  // namespace merak::nn
