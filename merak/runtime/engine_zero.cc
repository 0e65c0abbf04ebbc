#include "merak/runtime/engine_zero.h"

#include <algorithm>
#include <cstring>

#include "merak/runtime/engine_comm.h"

namespace merak::runtime {

ShardedAdamW::ShardedAdamW(comm::Communicator& dp, const std::vector<optim::Param>& params,
                           optim::AdamWOptions options)
    : dp_(dp), params_(params) {
  int64_t total = 0;
  for (const optim::Param& p : params_) {
    MERAK_CHECK(p.value.dtype() == DType::F32 && p.value.is_contiguous(), "ZeRO-1: parameter '",
                p.name, "' is ", p.value.str(), "; expected a contiguous f32 tensor");
    total += p.value.numel();
  }
  // Even segments, the first total % dp members one element longer.
  const int64_t n = dp_.size();
  for (int64_t r = 0; r < n; ++r) counts_.push_back(total / n + (r < total % n ? 1 : 0));
  for (int64_t r = 0; r < dp_.rank(); ++r) begin_ += counts_[size_t(r)];
  const int64_t end = begin_ + segment_size();

  std::vector<optim::Param> pieces;
  int64_t at = 0;  // flat offset of the current parameter
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t numel = params_[i].value.numel();
    const int64_t lo = std::max(at, begin_), hi = std::min(at + numel, end);
    if (lo < hi) {
      pieces_.push_back({i, lo - at, hi - lo});
      Tensor view = params_[i].value.view({numel}).narrow(0, lo - at, hi - lo);
      piece_values_.push_back(view);
      pieces.push_back({params_[i].name, view, params_[i].decay});
    }
    at += numel;
  }
  adamw_ = std::make_unique<optim::AdamW>(pieces, options);
}

ShardedAdamW::~ShardedAdamW() = default;

void ShardedAdamW::reduce_scatter(const std::vector<Tensor>& grads) {
  MERAK_CHECK(grads.size() == params_.size(), "ZeRO-1: ", grads.size(), " gradients for ",
              params_.size(), " parameters");
  const Tensor flat = pack_flat(grads);
  segment_grad_ = Tensor::empty({segment_size()}, DType::F32);
  dp_.reduce_scatter(flat, segment_grad_, comm::ReduceOp::Sum, counts_);
  int64_t at = 0;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    piece_values_[k].set_grad(segment_grad_.narrow(0, at, pieces_[k].length));
    at += pieces_[k].length;
  }
}

double ShardedAdamW::sum_of_squares(const std::function<bool(size_t)>& count) const {
  double sq = 0;
  int64_t at = 0;
  for (const Piece& p : pieces_) {
    if (count(p.param)) {
      sq += optim::sum_of_squares(segment_grad_.narrow(0, at, p.length));
    }
    at += p.length;
  }
  return sq;
}

void ShardedAdamW::step(double lr, float grad_scale) {
  adamw_->step(lr, grad_scale);
  // Every member's updated segment into everyone's parameters.
  int64_t total = 0;
  for (int64_t c : counts_) total += c;
  const Tensor mine = segment_size() > 0 ? pack_flat(piece_values_)
                                         : Tensor::empty({0}, DType::F32);
  const Tensor flat = Tensor::empty({total}, DType::F32);
  dp_.all_gather(mine, flat, counts_);
  const char* in = static_cast<const char*>(flat.raw_data());
  for (const optim::Param& p : params_) {
    std::memcpy(p.value.raw_data(), in, size_t(p.value.nbytes()));
    in += p.value.nbytes();
  }
}

}  // namespace merak::runtime
