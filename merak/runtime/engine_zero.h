// ZeRO-1: AdamW whose state is sharded over the data-parallel group. The parameters, flattened
// in order into one vector of N elements, are cut into dp contiguous segments; each member
// keeps moments for its segment only (pieces of parameters, as views), receives the sum of
// everyone's gradients for it (reduce-scatter instead of all-reduce), updates it, and the
// updated segments are all-gathered back into every member's parameters. AdamW is elementwise,
// so the result equals the unsharded update. Members on one node exchange through shared
// memory (comm::NodeSum: the segments are its segments), others through MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/comm/node_sum.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine_pieces.h"

namespace merak::runtime {

class ShardedAdamW {
 public:
  // `params` must be contiguous f32 tensors, the same shapes in the same order on every member.
  ShardedAdamW(comm::Communicator& dp, const std::vector<optim::Param>& params,
               optim::AdamWOptions options, bool shared_memory);
  ~ShardedAdamW();

  // Sums `grads` (one per parameter, contiguous) over the group and keeps this member's segment
  // as the gradients of its pieces.
  void reduce_scatter(const std::vector<Tensor>& grads);
  // Sum of squares of this member's segment, over the parameters count(i) selects.
  double sum_of_squares(const std::function<bool(size_t)>& count) const;
  // AdamW on the segment (gradients scaled by grad_scale: clipping), then every member's
  // segment gathered into the parameters.
  void step(double lr, float grad_scale = 1.0f);
  // Checkpoints: the optimizer and this member's pieces, its tensors' places.
  optim::AdamW& adamw() { return *adamw_; }
  const std::vector<ParamPiece>& pieces() const { return pieces_; }

  int64_t segment_begin() const { return begin_; }
  int64_t segment_size() const { return counts_[size_t(dp_.rank())]; }
  // "shared memory" or "MPI (not shared memory: why)", for the start-up report.
  const std::string& transport() const { return transport_; }
  int64_t shared_bytes() const { return node_sum_ ? node_sum_->bytes() : 0; }  // see NodeSum

 private:
  // Values [begin, begin + count) of the flattened parameters into the parameters (host).
  void scatter_flat(int64_t begin, const float* values, int64_t count);
  // The segment's gradient pieces of the parameters count(i) selects.
  std::vector<Tensor> segment_grads(const std::function<bool(size_t)>& count) const;

  comm::Communicator& dp_;
  std::vector<optim::Param> params_;
  Device device_;                // where the parameters, and so the segment, live
  std::vector<size_t> order_;    // 0, 1, ...: the flat vector lays the parameters out in order
  std::vector<int64_t> counts_;  // segment sizes per member
  int64_t begin_ = 0;            // this member's segment starts here in the flat vector
  std::vector<ParamPiece> pieces_;
  std::vector<Tensor> piece_values_;  // per piece: its view of the parameter
  Tensor segment_grad_;
  std::unique_ptr<optim::AdamW> adamw_;
  std::unique_ptr<comm::NodeSum> node_sum_;  // null: MPI
  std::string transport_;
};

}  // namespace merak::runtime
