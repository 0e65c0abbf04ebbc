#include "merak/runtime/engine_shared_update.h"

namespace merak::runtime {

SharedUpdate::SharedUpdate(const std::vector<optim::Param>& params, std::vector<ParamPiece> mine,
                           comm::SharedArray& shared, optim::AdamWOptions options)
    : params_(params), mine_(std::move(mine)), shared_(shared) {
  adamw_ = piece_adamw(params_, mine_, options, &values_);
}

double SharedUpdate::sum_of_squares(const std::function<bool(size_t)>& count) const {
  double sq = 0;
  for (const ParamPiece& piece : mine_)
    if (count(piece.param))
      sq += optim::sum_of_squares(piece_of(params_[piece.param].value.grad(), piece));
  return sq;
}

void SharedUpdate::step(double lr, float grad_scale) {
  for (size_t i = 0; i < mine_.size(); ++i)
    values_[i].set_grad(piece_of(params_[mine_[i].param].value.grad(), mine_[i]));
  adamw_->step(lr, grad_scale);
  for (const Tensor& v : values_) v.set_grad(Tensor());
  shared_.barrier();
}

}  // namespace merak::runtime
