#include "merak/ops/dispatch.h"

#include <algorithm>
#include <mutex>

#include "merak/core/error.h"

namespace merak::ops {
namespace {

std::vector<OpObserver*>& observers() {
  static std::vector<OpObserver*> list;
  return list;
}

void check_arity(const OpDef& op, size_t n) {
  const size_t lo = size_t(op.min_inputs());
  const size_t hi = op.variadic ? SIZE_MAX : op.inputs.size();
  MERAK_CHECK(n >= lo && n <= hi, "op '", op.name, "' takes ",
              op.variadic ? std::to_string(lo) + " or more" : std::to_string(hi), " inputs, got ",
              n);
}

}  // namespace

Attrs complete_attrs(const OpDef& op, const Attrs& attrs) {
  Attrs out;
  for (const auto& [name, value] : attrs.values()) {
    auto spec = std::find_if(op.attrs.begin(), op.attrs.end(),
                             [&](const AttrSpec& s) { return s.name == name; });
    MERAK_CHECK(spec != op.attrs.end(), "op '", op.name, "' has no attribute '", name, "'");
    const AttrKind got = attr_kind_of(value);
    const bool ok = got == spec->kind || (spec->kind == AttrKind::Float && got == AttrKind::Int) ||
                    (spec->kind == AttrKind::Bool && got == AttrKind::Int) ||
                    (spec->kind == AttrKind::Int && got == AttrKind::Bool);
    MERAK_CHECK(ok, "op '", op.name, "' attribute '", name, "' must be ",
                attr_kind_name(spec->kind), ", got ", attr_kind_name(got));
    out.set_value(name, value);
  }
  for (const AttrSpec& spec : op.attrs) {
    if (out.has(spec.name)) continue;
    MERAK_CHECK(spec.default_value.has_value(), "op '", op.name, "' needs attribute '", spec.name,
                "'");
    out.set_value(spec.name, *spec.default_value);
  }
  return out;
}

std::vector<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                              const Attrs& attrs) {
  check_arity(op, inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    MERAK_CHECK(inputs[i].defined || op.input_optional(i), "op '", op.name, "' input ", i,
                " ('", i < op.inputs.size() ? op.inputs[i] : op.inputs.back(), "') is missing");
  try {
    return op.infer(inputs, attrs);
  } catch (const Error& e) {
    throw Error("op '" + op.name + "': " + e.what());
  }
}

OpCost cost(const OpDef& op, const std::vector<TensorMeta>& inputs, const Attrs& attrs) {
  const Attrs full = complete_attrs(op, attrs);
  const std::vector<TensorMeta> outputs = infer(op, inputs, full);
  if (op.cost) return op.cost(inputs, outputs, full);
  OpCost c;
  for (const auto& o : outputs) {
    c.fwd_flops += double(o.numel());
    c.bytes += double(o.nbytes());
  }
  for (const auto& i : inputs)
    if (i.defined) c.bytes += double(i.nbytes());
  c.bwd_flops = op.backward ? 2 * c.fwd_flops : 0;
  return c;
}

std::vector<Tensor> call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  const Attrs full = complete_attrs(op, attrs);
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  Device device = Device::cpu();
  bool have_device = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    metas.push_back(TensorMeta::of(inputs[i]));
    if (!inputs[i].defined()) continue;
    if (!have_device) {
      device = inputs[i].device();
      have_device = true;
    } else {
      MERAK_CHECK(inputs[i].device() == device, "op '", op.name, "': input ", i, " is on ",
                  inputs[i].device().str(), ", input 0 on ", device.str());
    }
  }
  const std::vector<TensorMeta> out_metas = infer(op, metas, full);

  std::vector<Tensor> outputs;
  if (op.view) {
    outputs = op.view(inputs, full);
    // A view op may hand back an input itself; give the output its own identity so recording
    // it (autograd, tracer) never relabels the input.
    for (Tensor& out : outputs)
      for (const Tensor& in : inputs)
        if (out.same(in)) out = out.detach();
  } else {
    outputs.reserve(out_metas.size());
    for (const auto& m : out_metas) outputs.push_back(Tensor::empty(m.shape, m.dtype, device));
    if (!device.is_meta()) {
      const KernelFn* kernel = Registry::get().kernel(op.name, device.type);
      MERAK_CHECK(kernel, "op '", op.name, "' has no ", device.str(), " kernel");
      if (op.strided_inputs) {
        (*kernel)(inputs, outputs, full);
      } else {
        std::vector<Tensor> dense;
        dense.reserve(inputs.size());
        for (const Tensor& t : inputs) dense.push_back(t.defined() ? t.contiguous() : t);
        (*kernel)(dense, outputs, full);
      }
    }
  }
  for (OpObserver* o : observers()) o->on_op(op, inputs, outputs, full);
  return outputs;
}

void call_into(const OpDef& op, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& outputs, const Attrs& attrs) {
  MERAK_CHECK(!op.view, "call_into: op '", op.name, "' is a view");
  const Attrs full = complete_attrs(op, attrs);
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back(TensorMeta::of(t));
  const std::vector<TensorMeta> out_metas = infer(op, metas, full);
  MERAK_CHECK(out_metas.size() == outputs.size(), "call_into: op '", op.name, "' has ",
              out_metas.size(), " outputs, ", outputs.size(), " given");
  const Device device = outputs.empty() ? Device::cpu() : outputs[0].device();
  for (size_t i = 0; i < outputs.size(); ++i)
    MERAK_CHECK(outputs[i].is_contiguous() && outputs[i].shape() == out_metas[i].shape &&
                    outputs[i].dtype() == out_metas[i].dtype && outputs[i].device() == device,
                "call_into: output ", i, " of op '", op.name, "' is ", outputs[i].str(),
                ", expected a contiguous ", shape_str(out_metas[i].shape));
  for (const Tensor& t : inputs)
    MERAK_CHECK(!t.defined() || t.device() == device, "call_into: op '", op.name, "' input on ",
                t.device().str(), ", outputs on ", device.str());
  if (device.is_meta()) return;
  const KernelFn* kernel = Registry::get().kernel(op.name, device.type);
  MERAK_CHECK(kernel, "op '", op.name, "' has no ", device.str(), " kernel");
  if (op.strided_inputs) {
    (*kernel)(inputs, outputs, full);
    return;
  }
  std::vector<Tensor> dense;
  for (const Tensor& t : inputs) dense.push_back(t.defined() ? t.contiguous() : t);
  (*kernel)(dense, outputs, full);
}

std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs,
                         const Attrs& attrs) {
  return call(Registry::get().at(op), inputs, attrs);
}

Tensor call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  auto outs = call(op, inputs, attrs);
  return outs[0];
}

namespace {
thread_local std::string t_scope;
}

const std::string& current_scope() { return t_scope; }
ScopeGuard::ScopeGuard(const std::string& path) : previous_(std::move(t_scope)) { t_scope = path; }
ScopeGuard::~ScopeGuard() { t_scope = std::move(previous_); }

void add_observer(OpObserver* observer) { observers().push_back(observer); }

void remove_observer(OpObserver* observer) {
  auto& list = observers();
  list.erase(std::remove(list.begin(), list.end(), observer), list.end());
}

}  // namespace merak::ops
