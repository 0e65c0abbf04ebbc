#include "merak/autograd/engine.h"

#include <map>
#include <set>

#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/ops/functional.h"

namespace merak::autograd {
namespace {

void accumulate(Tensor& slot, const Tensor& g) {
  slot = slot.defined() ? ops::add(slot, g) : g;
}

}  // namespace

void backward(const Tensor& root) {
  MERAK_CHECK(root.defined() && root.numel() == 1, "backward() needs a scalar root, got ",
              root.str(), "; pass an explicit gradient for non-scalar roots");
  backward({root}, {Tensor::ones(root.shape(), root.dtype(), root.device())});
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  MERAK_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ",
              grads.size(), " gradients");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  // Pending gradients per node, and the nodes waiting to run ordered by sequence number (highest
  // first): every node that feeds a gradient into a node was created after it, so it runs first.
  std::map<Node*, std::vector<Tensor>> pending;
  std::map<Node*, std::shared_ptr<Node>> keep_alive;
  std::set<std::pair<uint64_t, Node*>> ready;

  auto send = [&](const Edge& edge, const Tensor& g) {
    Node* n = edge.node.get();
    auto& slots = pending[n];
    if (slots.empty()) slots.resize(size_t(n->num_outputs));
    accumulate(slots[size_t(edge.input_nr)], g);
    keep_alive.emplace(n, edge.node);
    ready.insert({n->sequence, n});
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MERAK_CHECK(needs_grad(r), "backward: root ", i, " (", r.str(),
                ") does not require gradients");
    MERAK_CHECK(grads[i].defined() && grads[i].shape() == r.shape(), "backward: gradient for root ",
                i, " must have shape ", shape_str(r.shape()));
    send(gradient_edge(r), grads[i]);
  }

  while (!ready.empty()) {
    auto last = std::prev(ready.end());
    Node* node = last->second;
    ready.erase(last);
    std::shared_ptr<Node> hold = keep_alive[node];
    keep_alive.erase(node);
    std::vector<Tensor> grad_outputs = std::move(pending[node]);
    pending.erase(node);

    std::vector<Tensor> grad_inputs = node->apply(std::move(grad_outputs));
    node->release();
    for (size_t i = 0; i < node->next.size() && i < grad_inputs.size(); ++i)
      if (node->next[i].node && grad_inputs[i].defined()) send(node->next[i], grad_inputs[i]);
  }
}

}  // namespace merak::autograd
