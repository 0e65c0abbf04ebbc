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

namespace {

// The walk shared by both forms of backward; `defer` and `later` are set for the first half of a
// split one.
void walk(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
          const LeafReadyFn& on_leaf_ready, const DeferLeafFn& defer,
          std::vector<DeferredJob>* later, std::vector<Tensor>* deferred_leaves) {
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
  // Deferred leaves are reported by run_deferred, not here.
  auto deferred_leaf = [&](const Tensor& leaf) { return defer && defer(leaf); };
  LeafReadyFn report;
  if (on_leaf_ready) {
    report = [&](const Tensor& leaf) {
      if (!deferred_leaf(leaf)) on_leaf_ready(leaf);
    };
  }
  if (deferred_leaves)
    for (const std::shared_ptr<TensorImpl>& leaf : graph.leaves)
      if (deferred_leaf(Tensor(leaf))) deferred_leaves->push_back(Tensor(leaf));
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
      graph.passed(*acc, report);
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
    // Inputs whose gradients wait for the second half: deferred leaves fed by a separable op.
    std::vector<bool> deferred(node->next.size(), false);
    bool defers = false;
    auto* op_node = dynamic_cast<OpNode*>(node);
    if (later && op_node && op_node->op->separable_grads) {
      for (size_t i = 0; i < node->next.size(); ++i) {
        auto* acc = dynamic_cast<AccumulateGrad*>(node->next[i].node.get());
        deferred[i] = acc && deferred_leaf(Tensor(acc->leaf));
        defers = defers || deferred[i];
      }
    }
    // A node no gradient reached does not run; its edges still count as walked.
    std::vector<Tensor> grad_inputs;
    if (any && defers) {
      later->push_back({node->shared_from_this(), grad_outputs, deferred});
      std::vector<bool> now(deferred.size());
      bool any_now = false;
      for (size_t i = 0; i < now.size(); ++i) {
        now[i] = !deferred[i];
        any_now = any_now || (now[i] && op_node->needs_input_grad[i]);
      }
      // Released by run_deferred, which needs its saved tensors.
      if (any_now) grad_inputs = op_node->apply_for(std::move(grad_outputs), now);
    } else if (any) {
      grad_inputs = node->apply(std::move(grad_outputs));
      node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node || deferred[i]) continue;
      const bool has = i < grad_inputs.size() && grad_inputs[i].defined();
      if (has) send(edge, grad_inputs[i]);
      if (auto* acc = dynamic_cast<AccumulateGrad*>(edge.node.get())) {
        if (!has) graph.passed(*acc, report);
      } else if (--graph.deps.at(edge.node.get()) == 0) {
        ready.insert({edge.node->sequence, edge.node.get()});
      }
    }
  }
  graph.report_rest(report);
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              const LeafReadyFn& on_leaf_ready) {
  walk(roots, grads, on_leaf_ready, DeferLeafFn(), nullptr, nullptr);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              const DeferLeafFn& defer, DeferredGrads& later) {
  MERAK_CHECK(later.empty(), "backward: the deferred gradients of an earlier backward have not ",
              "been computed (run_deferred) yet");
  walk(roots, grads, LeafReadyFn(), defer, &later.jobs_, &later.leaves_);
}

void run_deferred(DeferredGrads& later, const LeafReadyFn& on_leaf_ready) {
  NoGradGuard no_grad;
  // Contributions still to come per leaf; a leaf is complete when its count reaches 0.
  std::map<const TensorImpl*, int> remaining;
  for (const DeferredJob& job : later.jobs_)
    for (size_t i = 0; i < job.deferred.size(); ++i)
      if (job.deferred[i])
        ++remaining[static_cast<AccumulateGrad*>(job.node->next[i].node.get())->leaf.get()];
  std::set<const TensorImpl*> reported;
  auto report = [&](const Tensor& leaf) {
    if (reported.insert(&leaf.impl()).second && on_leaf_ready) on_leaf_ready(leaf);
  };
  // Leaves no kept node feeds got everything in the first half.
  for (const Tensor& leaf : later.leaves_)
    if (!remaining.count(&leaf.impl())) report(leaf);
  for (DeferredJob& job : later.jobs_) {
    auto& node = static_cast<OpNode&>(*job.node);
    for (const Tensor& g : job.grad_outputs) wait_pending(g);
    const std::vector<Tensor> grads = node.apply_for(std::move(job.grad_outputs), job.deferred);
    node.release();
    for (size_t i = 0; i < job.deferred.size(); ++i) {
      if (!job.deferred[i]) continue;
      auto& acc = static_cast<AccumulateGrad&>(*node.next[i].node);
      if (i < grads.size() && grads[i].defined()) acc.apply({grads[i]});
      if (--remaining.at(acc.leaf.get()) == 0) report(Tensor(acc.leaf));
    }
  }
  for (const Tensor& leaf : later.leaves_) report(leaf);  // fed only by nodes that got nothing
  later.jobs_.clear();
  later.leaves_.clear();
}

}  // namespace merak::autograd
