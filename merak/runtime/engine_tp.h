// Plugs a rank's tensor-parallel communicator into the tp ops' CPU kernels
// (cpu::set_tp_collective) for the engine's lifetime: the collectives the tensor-parallel pass
// put in the stage graph then run over the rank's real tp group. When the group's members share
// a node, f32 sums and maxima go through shared memory (comm::NodeAllReduce) instead of MPI's
// messages.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/comm/node_all_reduce.h"

namespace merak::runtime {

class TpCollectiveScope {
 public:
  // `groups` are the plan's names for this rank's tp group ("tp.pp1.dp0"; one per model stage
  // the rank runs: several when interleaved); a tp op naming another group, or a size other
  // than the communicator's, is an error naming both.
  // `shared_memory`: reduce through shared memory where the members share a node.
  TpCollectiveScope(comm::Communicator& tp, std::vector<std::string> groups, bool shared_memory);
  ~TpCollectiveScope();  // restores the default (groups of one only)
  TpCollectiveScope(const TpCollectiveScope&) = delete;
  TpCollectiveScope& operator=(const TpCollectiveScope&) = delete;

  // Seconds spent in the collectives so far (the engine takes them out of compute time).
  double seconds() const { return seconds_; }
  // All-reduces posted without waiting so far (the sub-pipelined mode).
  int64_t posted() const { return posted_; }
  // How the all-reduces travel ("shared memory", "MPI all-reduce (not shared memory: why)").
  const std::string& transport() const { return transport_; }
  int64_t shared_bytes() const { return node_ ? node_->bytes() : 0; }

 private:
  // The shared-memory path for this reduction, or null: MPI's.
  comm::NodeAllReduce* shared_for(const Tensor& t, comm::ReduceOp op) const;

  std::unique_ptr<comm::NodeAllReduce> node_;
  std::string transport_;
  double seconds_ = 0;
  int64_t posted_ = 0;
};

}  // namespace merak::runtime
