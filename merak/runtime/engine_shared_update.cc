#include "merak/runtime/engine_shared_update.h"

namespace merak::runtime {
namespace {

Tensor piece_of(const Tensor& whole, const GradBuckets::Piece& piece) {
  return whole.view({whole.numel()}).narrow(0, piece.begin, piece.length);
}

}  // namespace

SharedUpdate::SharedUpdate(const std::vector<optim::Param>& params,
                           std::vector<GradBuckets::Piece> mine, comm::SharedArray& shared,
                           optim::AdamWOptions options)
    : params_(params), mine_(std::move(mine)), shared_(shared) {
  std::vector<optim::Param> pieces;
  for (const GradBuckets::Piece& piece : mine_) {
    const optim::Param& p = params_.at(piece.param);
    values_.push_back(piece_of(p.value, piece));
    pieces.push_back({p.name, values_.back(), p.decay});
  }
  adamw_ = std::make_unique<optim::AdamW>(pieces, options);
}

double SharedUpdate::sum_of_squares(const std::function<bool(size_t)>& count) const {
  double sq = 0;
  for (const GradBuckets::Piece& piece : mine_)
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
