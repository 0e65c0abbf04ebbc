#include "merak/ops/registry.h"

#include <algorithm>

#include "merak/core/error.h"

namespace merak::ops {

int OpDef::min_inputs() const {
  int n = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!input_optional(i)) n = int(i) + 1;
  return n;
}

bool OpDef::input_optional(size_t i) const {
  return i < inputs.size() && !inputs[i].empty() && inputs[i].back() == '?';
}

Registry& Registry::get() {
  static Registry* r = new Registry();
  return *r;
}

void Registry::add(OpDef def) {
  MERAK_CHECK(!def.name.empty(), "op registered without a name");
  MERAK_CHECK(!ops_.count(def.name), "op '", def.name, "' registered twice");
  MERAK_CHECK(def.infer, "op '", def.name, "' has no shape inference");
  MERAK_CHECK(!def.outputs.empty(), "op '", def.name, "' declares no outputs");
  if (!def.random.rate.empty()) {  // the attributes a graph's runner sets
    auto declared = [&](const std::string& attr, AttrKind kind) {
      return std::any_of(def.attrs.begin(), def.attrs.end(), [&](const AttrSpec& a) {
        return a.name == attr && a.kind == kind;
      });
    };
    MERAK_CHECK(declared(def.random.rate, AttrKind::Float) && declared("stream", AttrKind::Int) &&
                    declared("first_row", AttrKind::Int) && declared("rows", AttrKind::Int),
                "op '", def.name, "' draws random numbers but does not declare a float '",
                def.random.rate, "' and ints 'stream', 'first_row' and 'rows'");
  }
  ops_.emplace(def.name, std::move(def));
}

const OpDef* Registry::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

const OpDef& Registry::at(const std::string& name) const {
  const OpDef* op = find(name);
  MERAK_CHECK(op, "unknown op '", name, "'");
  return *op;
}

void Registry::add_kernel(const std::string& op, DeviceType device, KernelFn fn) {
  auto key = std::make_pair(op, device);
  MERAK_CHECK(!kernels_.count(key), "kernel for op '", op, "' registered twice");
  kernels_.emplace(key, std::move(fn));
}

const KernelFn* Registry::kernel(const std::string& op, DeviceType device) const {
  auto it = kernels_.find(std::make_pair(op, device));
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : ops_) out.push_back(name);
  return out;
}

}  // namespace merak::ops
