#include "merak/runtime/engine_zero.h"

#include <cstring>

#include "merak/runtime/engine_comm.h"

namespace merak::runtime {

ShardedAdamW::ShardedAdamW(comm::Communicator& dp, const std::vector<optim::Param>& params,
                           optim::AdamWOptions options, bool shared_memory)
    : dp_(dp), params_(params) {
  int64_t total = 0;
  for (const optim::Param& p : params_) {
    MERAK_CHECK(p.value.dtype() == DType::F32 && p.value.is_contiguous(), "ZeRO-1: parameter '",
                p.name, "' is ", p.value.str(), "; expected a contiguous f32 tensor");
    total += p.value.numel();
  }
  const int64_t n = dp_.size();
  device_ = params_.empty() ? Device::cpu() : params_[0].value.device();
  std::string why_not = "the parameters are on " + device_.str();
  // The window holds f32 in host memory.
  if (device_.is_cpu()) node_sum_ = comm::NodeSum::create_if(shared_memory, dp_, {total}, &why_not);
  if (node_sum_) {
    transport_ = "shared memory";
    for (int r = 0; r < int(n); ++r)
      counts_.push_back(node_sum_->segment_begin(0, r + 1) - node_sum_->segment_begin(0, r));
  } else {
    transport_ = comm::backend_name(dp_) + " (not shared memory: " + why_not + ")";
    // Even segments, the first total % dp members one element longer.
    for (int64_t r = 0; r < n; ++r) counts_.push_back(total / n + (r < total % n ? 1 : 0));
  }
  for (int64_t r = 0; r < dp_.rank(); ++r) begin_ += counts_[size_t(r)];
  const int64_t end = begin_ + segment_size();

  order_.resize(params_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  append_pieces(params_, order_, 0, begin_, end, &pieces_);
  adamw_ = piece_adamw(params_, pieces_, options, &piece_values_);
}

ShardedAdamW::~ShardedAdamW() = default;

void ShardedAdamW::reduce_scatter(const std::vector<Tensor>& grads) {
  MERAK_CHECK(grads.size() == params_.size(), "ZeRO-1: ", grads.size(), " gradients for ",
              params_.size(), " parameters");
  segment_grad_ = Tensor::empty({segment_size()}, DType::F32, device_);
  if (node_sum_) {
    std::vector<Tensor> inputs;  // alive until this member's segment is summed
    std::vector<comm::NodeSum::Piece> pieces;
    for (const Tensor& g : grads) {
      inputs.push_back(g.contiguous());
      pieces.push_back({inputs.back().data<float>(), g.numel()});
    }
    node_sum_->post(0, std::move(pieces));
    node_sum_->reduce_scatter(0, segment_grad_.data<float>());
  } else {
    dp_.reduce_scatter(pack_flat(grads), segment_grad_, comm::ReduceOp::Sum, counts_);
  }
  int64_t at = 0;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    piece_values_[k].set_grad(segment_grad_.narrow(0, at, pieces_[k].length));
    at += pieces_[k].length;
  }
}

void ShardedAdamW::scatter_flat(int64_t begin, const float* values, int64_t count) {
  std::vector<ParamPiece> pieces;
  append_pieces(params_, order_, 0, begin, begin + count, &pieces);
  for (const ParamPiece& piece : pieces) {
    std::memcpy(params_[piece.param].value.data<float>() + piece.begin, values,
                size_t(piece.length) * sizeof(float));
    values += piece.length;
  }
}

std::vector<Tensor> ShardedAdamW::segment_grads(const std::function<bool(size_t)>& count) const {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const ParamPiece& p : pieces_) {
    if (count(p.param)) out.push_back(segment_grad_.narrow(0, at, p.length));
    at += p.length;
  }
  return out;
}

double ShardedAdamW::sum_of_squares(const std::function<bool(size_t)>& count) const {
  return optim::sum_of_squares(segment_grads(count));
}

void ShardedAdamW::step(double lr, float grad_scale) {
  adamw_->step(lr, grad_scale);
  if (node_sum_) {
    float* mine = node_sum_->own_segment(0);
    for (const Tensor& piece : piece_values_) {
      std::memcpy(mine, piece.data<float>(), size_t(piece.nbytes()));
      mine += piece.numel();
    }
    // This member's own segment is in its parameters already; the others' are copied in.
    node_sum_->all_gather(0, [&](int member, int64_t begin, const float* values, int64_t count) {
      if (member != dp_.rank()) scatter_flat(begin, values, count);
    });
    return;
  }
  // Every member's updated segment into everyone's parameters.
  int64_t total = 0;
  for (int64_t c : counts_) total += c;
  const Tensor mine = segment_size() > 0 ? pack_flat(piece_values_)
                                         : Tensor::empty({0}, DType::F32, device_);
  const Tensor flat = Tensor::empty({total}, DType::F32, device_);
  dp_.all_gather(mine, flat, counts_);
  std::vector<Tensor> values;
  for (const optim::Param& p : params_) values.push_back(p.value);
  unpack_flat(flat, values);
}

}  // namespace merak::runtime
