// The collectives the tensor-parallel ops of a rank's stage graphs reduce through
// (ops::TpCollectives): its tp group's communicator, installed by the engine (ops::TpScope) for
// the work it runs. How the data travels is the communicator's (the grid chose it: shared memory
// on one node, MPI, NCCL, or MPI staged through host memory for device tensors).
#pragma once

#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/ops/collectives.h"

namespace merak::runtime {

class TpGroupCollectives : public ops::TpCollectives {
 public:
  // `groups` are the plan's names for this rank's tp group ("tp.pp1.dp0"; one per model stage
  // the rank runs: several when interleaved); a tp op naming another group, or a size other
  // than the communicator's, is an error naming both.
  TpGroupCollectives(comm::Communicator& tp, std::vector<std::string> groups);

  void reduce(const Tensor& t, ops::TpReduce op, const std::string& group, int64_t size) override;
  // The sub-pipelined mode's posted sums; the time counted is the wait, what the overlap left.
  PendingOp post(const Tensor& t, ops::TpReduce op, const std::string& group,
                 int64_t size) override;

  // Seconds spent in the collectives so far (the engine takes them out of compute time).
  double seconds() const { return seconds_; }
  // All-reduces posted without waiting so far (the sub-pipelined mode).
  int64_t posted() const { return posted_; }

 private:
  void check_group(const std::string& name, int64_t size) const;

  comm::Communicator& tp_;
  std::vector<std::string> groups_;
  double seconds_ = 0;
  int64_t posted_ = 0;
};

}  // namespace merak::runtime
