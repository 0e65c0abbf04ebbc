// The collectives the tensor-parallel ops of a rank's stage graphs reduce through
// (ops::TpCollectives): its tp group's communicator, installed by the engine (ops::TpScope) for
// the work it runs. Sums and maxima of f32 host tensors go through the group's shared-memory
// window where its members share a node (comm::NodeAllReduce) and through the communicator
// otherwise; device tensors go through a communicator over device memory directly, or are staged
// through the host for one over host memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/comm/node_all_reduce.h"
#include "merak/ops/collectives.h"

namespace merak::runtime {

class TpGroupCollectives : public ops::TpCollectives {
 public:
  // `groups` are the plan's names for this rank's tp group ("tp.pp1.dp0"; one per model stage
  // the rank runs: several when interleaved); a tp op naming another group, or a size other
  // than the communicator's, is an error naming both.
  // `shared_memory`: reduce through shared memory where the members share a node.
  TpGroupCollectives(comm::Communicator& tp, std::vector<std::string> groups, bool shared_memory);
  ~TpGroupCollectives() override;

  void reduce(const Tensor& t, ops::TpReduce op, const std::string& group, int64_t size) override;
  // The sub-pipelined mode's posted sums; the time counted is the wait, what the overlap left.
  PendingOp post(const Tensor& t, ops::TpReduce op, const std::string& group,
                 int64_t size) override;

  // Seconds spent in the collectives so far (the engine takes them out of compute time).
  double seconds() const { return seconds_; }
  // All-reduces posted without waiting so far (the sub-pipelined mode).
  int64_t posted() const { return posted_; }
  // How the all-reduces travel ("shared memory", "MPI all-reduce (not shared memory: why)").
  const std::string& transport() const { return transport_; }
  int64_t shared_bytes() const { return node_ ? node_->bytes() : 0; }

 private:
  void check_group(const std::string& name, int64_t size) const;
  // The shared-memory path for this reduction, or null: the communicator's.
  comm::NodeAllReduce* shared_for(const Tensor& t, comm::ReduceOp op) const;

  comm::Communicator& tp_;
  std::vector<std::string> groups_;
  std::unique_ptr<comm::NodeAllReduce> node_;
  std::string transport_;
  double seconds_ = 0;
  int64_t posted_ = 0;
};

}  // namespace merak::runtime
