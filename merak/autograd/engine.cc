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

// How many edges into each leaf the walk has yet to pass, to tell when a leaf's gradient is
// complete. Leaves are kept in the order first found, so reports are the same on every process.
class LeafEdges {
 public:
  // Counts the edges into leaf accumulators over the graph reachable from `roots`.
  void count(const std::vector<Tensor>& roots) {
    std::set<Node*> seen;
    std::vector<Node*> stack;
    auto visit = [&](const Edge& e) {
      if (!e.node) return;
      if (auto* acc = dynamic_cast<AccumulateGrad*>(e.node.get())) {
        auto [it, fresh] = remaining_.emplace(acc->leaf.get(), 0);
        if (fresh) order_.push_back(acc->leaf);
        ++it->second;
      } else if (seen.insert(e.node.get()).second) {
        stack.push_back(e.node.get());
      }
    };
    for (const Tensor& r : roots) visit(gradient_edge(r));
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next) visit(e);
    }
  }

  // One edge into `acc`'s leaf has been walked; reports the leaf when it was the last.
  void passed(const AccumulateGrad& acc, const LeafReadyFn& report) {
    auto it = remaining_.find(acc.leaf.get());
    if (it == remaining_.end() || --it->second > 0) return;
    remaining_.erase(it);
    report(Tensor(acc.leaf));
  }

  // Leaves some path into which never carried a gradient.
  void report_rest(const LeafReadyFn& report) {
    for (const std::shared_ptr<TensorImpl>& leaf : order_)
      if (remaining_.erase(leaf.get())) report(Tensor(leaf));
  }

 private:
  std::map<TensorImpl*, int> remaining_;
  std::vector<std::shared_ptr<TensorImpl>> order_;
};

}  // namespace

void backward(const Tensor& root) {
  MERAK_CHECK(root.defined() && root.numel() == 1, "backward() needs a scalar root, got ",
              root.str(), "; pass an explicit gradient for non-scalar roots");
  backward({root}, {Tensor::ones(root.shape(), root.dtype(), root.device())});
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  backward(roots, grads, LeafReadyFn());
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              const LeafReadyFn& on_leaf_ready) {
  MERAK_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ",
              grads.size(), " gradients");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  // Pending gradients per node, and the nodes waiting to run ordered by sequence number (highest
  // first): every node that feeds a gradient into a node was created after it, so it runs first.
  std::map<Node*, std::vector<Tensor>> pending;
  std::map<Node*, std::shared_ptr<Node>> keep_alive;
  std::set<std::pair<uint64_t, Node*>> ready;
  LeafEdges leaves;
  if (on_leaf_ready) leaves.count(roots);

  // A leaf's gradient goes straight into its .grad; others wait for their node's turn.
  auto send = [&](const Edge& edge, const Tensor& g) {
    Node* n = edge.node.get();
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) {
      acc->apply({g});
      if (on_leaf_ready) leaves.passed(*acc, on_leaf_ready);
      return;
    }
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
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node) continue;
      if (i < grad_inputs.size() && grad_inputs[i].defined()) {
        send(edge, grad_inputs[i]);
      } else if (on_leaf_ready) {
        if (auto* acc = dynamic_cast<AccumulateGrad*>(edge.node.get()))
          leaves.passed(*acc, on_leaf_ready);
      }
    }
  }
  if (on_leaf_ready) leaves.report_rest(on_leaf_ready);
}

}  // namespace merak::autograd
