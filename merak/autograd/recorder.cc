// Records op calls onto the tape: the autograd side of the dispatcher's observer hook.
#include <cstdint>
#include <memory>

#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/ops/dispatch.h"

namespace merak::autograd {
namespace {

Tensor saved_or_meta(const Tensor& t, bool save) {
  if (!t.defined()) return t;
  // detach(): the saved copy has no grad_fn, so an output never holds its own node (no cycle).
  return save ? t.detach() : Tensor::empty(t.shape(), t.dtype(), Device::meta());
}

class Recorder final : public ops::OpObserver {
 public:
  void on_op(const ops::OpDef& op, const std::vector<Tensor>& inputs,
             std::vector<Tensor>& outputs, const ops::Attrs& attrs) override {
    if (!grad_enabled()) return;
    std::vector<bool> needs(inputs.size(), false);
    bool any = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      needs[i] = needs_grad(inputs[i]) && is_floating(inputs[i].dtype());
      any = any || needs[i];
    }
    if (!any || !op.backward) return;

    auto node = std::make_shared<OpNode>();
    node->op = &op;
    node->attrs = attrs;
    node->sequence = next_sequence();
    node->needs_input_grad = needs;
    node->num_outputs = int(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      node->next.push_back(needs[i] ? gradient_edge(inputs[i]) : Edge{});
      node->inputs.push_back(saved_or_meta(inputs[i], op.saves_input(i)));
    }
    for (size_t k = 0; k < outputs.size(); ++k)
      node->outputs.push_back(saved_or_meta(outputs[k], op.saves_output(k)));

    const size_t differentiable = op.grad_outputs < 0 ? outputs.size() : size_t(op.grad_outputs);
    for (size_t k = 0; k < outputs.size() && k < differentiable; ++k) {
      if (!is_floating(outputs[k].dtype())) continue;
      outputs[k].impl().grad_fn = node;
      outputs[k].impl().output_nr = int(k);
    }
  }
};

// Registered at start-up; the library is linked whole (alwayslink) so this always runs. The
// recorder lives as long as the program (a static, not a heap object nothing frees).
struct Install {
  Recorder recorder;
  Install() { ops::add_observer(&recorder); }
} install;

}  // namespace
}  // namespace merak::autograd
