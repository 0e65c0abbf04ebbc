#include "merak/optim/grad_norm.h"

#include <cmath>

#include "merak/optim/device_optim.h"

namespace merak::optim {

GradNormTracker::GradNormTracker(const std::vector<Param>& params)
    : params_(params), squares_(params.size(), 0.0), done_(params.size(), false) {
  for (size_t i = 0; i < params_.size(); ++i) index_[&params_[i].value.impl()] = i;
}

autograd::LeafReadyFn GradNormTracker::on_leaf_ready() {
  return [this](const Tensor& leaf) {
    auto it = index_.find(&leaf.impl());
    // A device's gradients wait for norm(): one multi-tensor kernel, one read back.
    if (it == index_.end() || !leaf.grad().defined() || !leaf.grad().device().is_cpu()) return;
    squares_[it->second] = sum_of_squares(leaf.grad());
    done_[it->second] = true;
  };
}

double GradNormTracker::norm() {
  double sq = 0;
  std::vector<Tensor> on_device;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].value.grad();
    if (g.defined() && !g.device().is_cpu()) {
      on_device.push_back(g);
      continue;
    }
    if (!done_[i] && g.defined()) squares_[i] = sum_of_squares(g);
    if (done_[i] || g.defined()) sq += squares_[i];
  }
  if (!on_device.empty())
    sq += device_optimizer(on_device[0].device().type, "gradient norm").sum_of_squares(on_device);
  squares_.assign(squares_.size(), 0.0);
  done_.assign(done_.size(), false);
  return std::sqrt(sq);
}

}  // namespace merak::optim
