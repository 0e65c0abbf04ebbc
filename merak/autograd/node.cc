#include "merak/autograd/node.h"

#include <atomic>

#include "merak/autograd/grad_mode.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"

namespace merak::autograd {

uint64_t next_sequence() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.grad_fn()) return {std::static_pointer_cast<Node>(t.grad_fn()), t.impl().output_nr};
  if (!t.requires_grad()) return {};
  auto acc = std::make_shared<AccumulateGrad>();
  acc->leaf = t.impl_ptr();
  acc->sequence = 0;
  acc->next = {};
  return {acc, 0};
}

std::vector<Tensor> OpNode::apply(std::vector<Tensor> grad_outputs) {
  return apply_for(std::move(grad_outputs), std::vector<bool>(needs_input_grad.size(), true));
}

std::vector<Tensor> OpNode::apply_for(std::vector<Tensor> grad_outputs,
                                      const std::vector<bool>& which) {
  MERAK_CHECK(!released, "backward through op '", op->name,
              "' a second time: its saved tensors were released after the first backward");
  std::vector<bool> needs = needs_input_grad;
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs[i] && i < which.size() && which[i];
  const ops::BackwardCtx ctx{inputs, outputs, grad_outputs, attrs, needs, &carry};
  std::vector<Tensor> grads = op->backward(ctx);
  MERAK_CHECK(grads.size() == inputs.size(), "backward of op '", op->name, "' returned ",
              grads.size(), " gradients for ", inputs.size(), " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!needs[i]) {
      grads[i] = Tensor();
      continue;
    }
    MERAK_CHECK(grads[i].defined(), "backward of op '", op->name, "' gave no gradient for input ",
                i, " (", inputs[i].str(), ")");
    MERAK_CHECK(grads[i].shape() == inputs[i].shape(), "backward of op '", op->name,
                "': gradient of input ", i, " has shape ", shape_str(grads[i].shape()),
                ", input has ", shape_str(inputs[i].shape()));
  }
  return grads;
}

void OpNode::release() {
  inputs.clear();
  outputs.clear();
  carry.clear();
  released = true;
}

namespace {

// Whether `leaf`'s gradient is referenced only by the leaf itself, contiguous and shaped like g.
bool owns_grad(const TensorImpl& leaf, const Tensor& g) {
  if (leaf.grad.use_count() != 1 || !leaf.grad->storage || leaf.grad->storage.use_count() != 1 ||
      g.is_meta())
    return false;
  const Tensor grad(leaf.grad);
  return grad.is_contiguous() && grad.shape() == g.shape() && grad.dtype() == g.dtype() &&
         grad.device() == g.device();
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grad_outputs) {
  Tensor g = grad_outputs[0];
  if (!g.defined()) return {};
  NoGradGuard no_grad;
  if (!leaf->grad) {
    // Own the buffer: a gradient that aliases another tensor (a view, a shared storage) would be
    // changed by later in-place updates such as clipping.
    const bool shared = !g.is_meta() && g.impl().storage.use_count() > 1;
    leaf->grad = (shared || !g.is_contiguous()) ? g.clone().impl_ptr() : g.impl_ptr();
  } else if (owns_grad(*leaf, g)) {
    // Nobody else sees the buffer: add in place, sparing a new gradient-sized allocation (the
    // tied embedding's is vocab x hidden).
    const Tensor grad(leaf->grad);
    static const ops::OpDef& add = *ops::Registry::get().find("add");
    ops::call_into(add, {grad, g}, {grad});
  } else {
    leaf->grad = ops::add(Tensor(leaf->grad), g).impl_ptr();
  }
  return {};
}

}  // namespace merak::autograd
