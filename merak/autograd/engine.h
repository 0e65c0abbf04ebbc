// Running the backward graph.
#pragma once

#include <vector>

#include "merak/core/tensor.h"

namespace merak::autograd {

// Backward from a scalar: accumulates d(root)/d(leaf) into every reachable leaf's .grad.
void backward(const Tensor& root);
// Backward from several roots, each seeded with its gradient (same shape as the root).
// Saved tensors are released as nodes run, so a graph can be walked once.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

}  // namespace merak::autograd
