// The global gradient norm gathered while backward runs: autograd reports each parameter whose
// gradient is complete (autograd::backward's on_leaf_ready), and its sum of squares is taken
// right then, while the gradient just written is still in cache, instead of in a separate pass
// over all gradients after backward.
#pragma once

#include <map>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/optim/adamw.h"

namespace merak::optim {

class GradNormTracker {
 public:
  explicit GradNormTracker(const std::vector<Param>& params);

  // For the step's last backward (earlier backwards still add to the gradients).
  autograd::LeafReadyFn on_leaf_ready();
  // The norm of every parameter's gradient: the ones reported, and the others read now. Equal
  // to grad_norm(params) bit for bit (the same sums, added in parameter order). Starts over.
  double norm();

 private:
  std::vector<Param> params_;
  std::map<const TensorImpl*, size_t> index_;
  std::vector<double> squares_;
  std::vector<bool> done_;
};

}  // namespace merak::optim
