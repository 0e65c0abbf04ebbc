#include "merak/optim/grad_norm.h"

#include <cmath>

namespace merak::optim {

GradNormTracker::GradNormTracker(const std::vector<Param>& params)
    : params_(params), squares_(params.size(), 0.0), done_(params.size(), false) {
  for (size_t i = 0; i < params_.size(); ++i) index_[&params_[i].value.impl()] = i;
}

autograd::LeafReadyFn GradNormTracker::on_leaf_ready() {
  return [this](const Tensor& leaf) {
    auto it = index_.find(&leaf.impl());
    if (it == index_.end() || !leaf.grad().defined()) return;
    squares_[it->second] = sum_of_squares(leaf.grad());
    done_[it->second] = true;
  };
}

double GradNormTracker::norm() {
  double sq = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].value.grad();
    if (!done_[i] && g.defined()) squares_[i] = sum_of_squares(g);
    if (done_[i] || g.defined()) sq += squares_[i];
  }
  squares_.assign(squares_.size(), 0.0);
  done_.assign(done_.size(), false);
  return std::sqrt(sq);
}

}  // namespace merak::optim
