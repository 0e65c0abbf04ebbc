// Running the backward graph.
#pragma once

#include <functional>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::autograd {

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

}  // namespace merak::autograd
