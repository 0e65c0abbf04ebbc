// Running the backward graph.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::autograd {

struct Node;

// Backward from a scalar: accumulates d(root)/d(leaf) into every reachable leaf's .grad.
void backward(const Tensor& root);
// Backward from several roots, each seeded with its gradient (same shape as the root).
// Saved tensors are released as nodes run, so a graph can be walked once. A leaf's gradient is
// added into its .grad as soon as it arrives.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

// Called once per leaf the backward graph reaches, as soon as every path into the leaf has been
// walked: its .grad holds everything this backward adds to it, so a data-parallel engine can
// start reducing it while the rest of backward runs. Leaves on paths that carried no gradient
// are reported when backward ends. The order is the walk's, the same on every process that
// runs the same graph.
using LeafReadyFn = std::function<void(const Tensor& leaf)>;
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              const LeafReadyFn& on_leaf_ready);

// A backward in two halves, for zero-bubble pipelines: the gradients a stage must pass on (of
// activations) now, the parameters' gradients later, when the stage would otherwise wait for a
// neighbour. `defer` picks the leaves whose gradients wait. A node of an op with separable
// gradients (OpDef::separable_grads: linear, matmul, embedding) that feeds such leaves runs now
// for its other inputs only and is kept, with the gradients it received, in DeferredGrads; other
// nodes run whole. Nothing is reported to on_leaf_ready for the deferred leaves until
// run_deferred, which computes the rest: the same products a single backward would, added into
// .grad in the order a single backward adds them.
using DeferLeafFn = std::function<bool(const Tensor& leaf)>;

// One kept node of a split backward.
struct DeferredJob {
  std::shared_ptr<Node> node;
  std::vector<Tensor> grad_outputs;
  std::vector<bool> deferred;  // per input: its gradient is computed by run_deferred
};

class DeferredGrads {
 public:
  bool empty() const { return jobs_.empty() && leaves_.empty(); }
  size_t jobs() const { return jobs_.size(); }

 private:
  friend void backward(const std::vector<Tensor>&, const std::vector<Tensor>&, const DeferLeafFn&,
                       DeferredGrads&);
  friend void run_deferred(DeferredGrads&, const LeafReadyFn&);
  std::vector<DeferredJob> jobs_;
  std::vector<Tensor> leaves_;  // the deferred leaves the backward reached, in order found
};

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              const DeferLeafFn& defer, DeferredGrads& later);
// The second half: every kept node computes its deferred inputs' gradients, in the order the
// first half met them. Each leaf is reported once its gradient is complete: first those the
// first half completed, then each as its last contribution comes in. `later` is empty afterwards.
void run_deferred(DeferredGrads& later, const LeafReadyFn& on_leaf_ready);

}  // namespace merak::autograd
