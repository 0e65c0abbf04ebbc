#include "merak/autograd/engine.h"

#include <map>
#include <set>
#include <unordered_map>

#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/core/pending.h"
#include "merak/ops/functional.h"

namespace merak::autograd {
namespace {

// The backward graph reachable from the roots: for each node, how many edges lead into it from
// nodes still to run (it may run once that reaches 0), and for each leaf, how many edges lead
// into its accumulators (its gradient is complete once the walk has passed them all). Leaves are
// listed in the order first found, so reports are the same on every process.
struct Reachable {
  std::vector<std::shared_ptr<Node>> nodes;  // keeps them alive for the walk
  std::unordered_map<Node*, int> deps;
  std::map<TensorImpl*, int> leaf_edges;
  std::vector<std::shared_ptr<TensorImpl>> leaves;

  explicit Reachable(const std::vector<Tensor>& roots) {
    std::vector<Node*> stack;
    auto visit = [&](const Edge& e, bool counted) {
      if (!e.node) return;
      if (auto* acc = dynamic_cast<AccumulateGrad*>(e.node.get())) {
        auto [it, fresh] = leaf_edges.emplace(acc->leaf.get(), 0);
        if (fresh) leaves.push_back(acc->leaf);
        ++it->second;
        return;
      }
      auto [it, fresh] = deps.emplace(e.node.get(), 0);
      if (counted) ++it->second;
      if (fresh) {
        nodes.push_back(e.node);
        stack.push_back(e.node.get());
      }
    };
    for (const Tensor& r : roots) visit(gradient_edge(r), false);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next) visit(e, true);
    }
  }

  // One edge into `acc`'s leaf has been walked; reports the leaf when it was the last.
  void passed(const AccumulateGrad& acc, const LeafReadyFn& report) {
    auto it = leaf_edges.find(acc.leaf.get());
    if (it == leaf_edges.end() || --it->second > 0) return;
    leaf_edges.erase(it);
    if (report) report(Tensor(acc.leaf));
  }

  // Leaves some path into which never carried a gradient.
  void report_rest(const LeafReadyFn& report) {
    for (const std::shared_ptr<TensorImpl>& leaf : leaves)
      if (leaf_edges.erase(leaf.get()) && report) report(Tensor(leaf));
  }
};

bool any_pending(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads)
    if (is_pending(g)) return true;
  return false;
}

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
  for (size_t i = 0; i < roots.size(); ++i) {
    MERAK_CHECK(needs_grad(roots[i]), "backward: root ", i, " (", roots[i].str(),
                ") does not require gradients");
    MERAK_CHECK(grads[i].defined() && grads[i].shape() == roots[i].shape(),
                "backward: gradient for root ", i, " must have shape ",
                shape_str(roots[i].shape()));
  }
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  Reachable graph(roots);
  // Gradients received per node, and the nodes free to run (every edge into them walked),
  // highest sequence number first: the reverse of creation order, as a tape would run.
  std::map<Node*, std::vector<Tensor>> received;
  std::set<std::pair<uint64_t, Node*>> ready;
  for (const auto& [node, deps] : graph.deps)
    if (deps == 0) ready.insert({node->sequence, node});

  // A leaf's gradient goes straight into its .grad; others wait for their node's turn. Values
  // still being written by a posted collective are waited for before anything reads them.
  auto send = [&](const Edge& edge, const Tensor& g) {
    Node* n = edge.node.get();
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) {
      wait_pending(g);
      acc->apply({g});
      graph.passed(*acc, on_leaf_ready);
      return;
    }
    auto& slots = received[n];
    if (slots.empty()) slots.resize(size_t(n->num_outputs));
    Tensor& slot = slots[size_t(edge.input_nr)];
    if (slot.defined()) {
      wait_pending(slot);
      wait_pending(g);
      slot = ops::add(slot, g);
    } else {
      slot = g;
    }
  };
  for (size_t i = 0; i < roots.size(); ++i) send(gradient_edge(roots[i]), grads[i]);

  while (!ready.empty()) {
    // The latest node, unless its gradients are still in flight and another node is free to
    // run meanwhile (the sub-pipelined mode: one half computes while the other's all-reduce
    // finishes).
    auto pick = std::prev(ready.end());
    if (pending_count() > 0) {
      poll_pending();
      for (auto it = ready.end(); it != ready.begin();) {
        --it;
        auto r = received.find(it->second);
        if (r == received.end() || !any_pending(r->second)) {
          pick = it;
          break;
        }
      }
    }
    Node* node = pick->second;
    ready.erase(pick);
    std::vector<Tensor> grad_outputs;
    if (auto r = received.find(node); r != received.end()) {
      grad_outputs = std::move(r->second);
      received.erase(r);
    }
    bool any = false;
    for (const Tensor& g : grad_outputs) {
      wait_pending(g);
      any = any || g.defined();
    }
    // A node no gradient reached does not run; its edges still count as walked.
    std::vector<Tensor> grad_inputs;
    if (any) {
      grad_inputs = node->apply(std::move(grad_outputs));
      node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node) continue;
      const bool has = i < grad_inputs.size() && grad_inputs[i].defined();
      if (has) send(edge, grad_inputs[i]);
      if (auto* acc = dynamic_cast<AccumulateGrad*>(edge.node.get())) {
        if (!has) graph.passed(*acc, on_leaf_ready);
      } else if (--graph.deps.at(edge.node.get()) == 0) {
        ready.insert({edge.node->sequence, edge.node.get()});
      }
    }
  }
  graph.report_rest(on_leaf_ready);
}

}  // namespace merak::autograd
