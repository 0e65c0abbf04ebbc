#include "merak/autograd/checkpoint.h"

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/core/philox.h"

namespace merak::autograd {
namespace {

// Backward of a checkpointed segment: re-runs the segment with recording on, then back-propagates
// through that fresh graph. Parameters used inside the segment are leaves of the fresh graph and
// get their .grad as usual; the segment inputs are stand-in leaves whose .grad is returned.
struct CheckpointNode final : Node {
  SegmentFn fn;
  std::vector<Tensor> inputs;       // detached inputs (the only activations kept)
  std::vector<bool> needs_input_grad;
  std::vector<Tensor> leaves;       // stand-ins for the inputs in the recomputed graph
  std::vector<Tensor> recomputed;   // outputs of the recomputed graph
  RngPlace rng_place;               // where the forward drew its dropout masks
  bool done = false;

  void recompute() {
    if (done) return;
    MERAK_CHECK(!inputs.empty() || fn, "checkpoint recomputed after release");
    EnableGradGuard grad_on;
    leaves.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor leaf = inputs[i].defined() ? inputs[i].detach() : inputs[i];
      if (needs_input_grad[i]) leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    }
    const RngPlace outer = merak::rng_place();
    set_rng_place(rng_place);  // same dropout masks as the forward
    try {
      recomputed = fn(leaves);
    } catch (...) {
      set_rng_place(outer);
      throw;
    }
    set_rng_place(outer);
    done = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    MERAK_CHECK(fn, "backward through a checkpoint a second time");
    recompute();
    std::vector<Tensor> roots, grads;
    for (size_t k = 0; k < recomputed.size() && k < grad_outputs.size(); ++k) {
      if (!grad_outputs[k].defined() || !needs_grad(recomputed[k])) continue;
      roots.push_back(recomputed[k]);
      grads.push_back(grad_outputs[k]);
    }
    if (!roots.empty()) backward(roots, grads);
    std::vector<Tensor> out(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (needs_input_grad[i]) out[i] = leaves[i].grad();
    return out;
  }

  void release() override {
    fn = nullptr;
    inputs.clear();
    leaves.clear();
    recomputed.clear();
  }

  std::string name() const override { return "checkpoint"; }
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  // Parameters used inside the segment need the node too, so record whenever grad is on.
  if (!grad_enabled()) return outputs;
  std::vector<bool> needs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    needs[i] = needs_grad(inputs[i]) && is_floating(inputs[i].dtype());

  auto node = std::make_shared<CheckpointNode>();
  node->fn = fn;
  node->rng_place = rng_place();
  node->sequence = next_sequence();
  node->needs_input_grad = needs;
  node->num_outputs = int(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->next.push_back(needs[i] ? gradient_edge(inputs[i]) : Edge{});
    node->inputs.push_back(inputs[i].defined() ? inputs[i].detach() : inputs[i]);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined() || !is_floating(outputs[k].dtype())) continue;
    for (const Tensor& in : inputs)
      if (outputs[k].same(in)) outputs[k] = outputs[k].detach();  // never relabel an input
    outputs[k].impl().grad_fn = node;
    outputs[k].impl().output_nr = int(k);
  }
  return outputs;
}

void recompute(const Tensor& output) {
  if (!output.defined() || !output.grad_fn()) return;
  if (auto* node = dynamic_cast<CheckpointNode*>(output.grad_fn().get())) node->recompute();
}

}  // namespace merak::autograd
