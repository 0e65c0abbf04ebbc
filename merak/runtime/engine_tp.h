// Plugs a rank's tensor-parallel communicator into the tp ops' CPU kernels
// (cpu::set_tp_collective) for the engine's lifetime: the collectives the tensor-parallel pass
// put in the stage graph then run over the rank's real tp group.
#pragma once

#include <string>
#include <vector>

#include "merak/comm/communicator.h"

namespace merak::runtime {

class TpCollectiveScope {
 public:
  // `groups` are the plan's names for this rank's tp group ("tp.pp1.dp0"; one per model stage
  // the rank runs: several when interleaved); a tp op naming another group, or a size other
  // than the communicator's, is an error naming both.
  TpCollectiveScope(comm::Communicator& tp, std::vector<std::string> groups);
  ~TpCollectiveScope();  // restores the default (groups of one only)
  TpCollectiveScope(const TpCollectiveScope&) = delete;
  TpCollectiveScope& operator=(const TpCollectiveScope&) = delete;

  // Seconds spent in the collectives so far (the engine takes them out of compute time).
  double seconds() const { return seconds_; }
  // All-reduces posted without waiting so far (the sub-pipelined mode).
  int64_t posted() const { return posted_; }

 private:
  double seconds_ = 0;
  int64_t posted_ = 0;
};

}  // namespace merak::runtime
