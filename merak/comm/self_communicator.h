// A group of one process with no MPI underneath: the communicators of the single-process run's
// grid (the (1, 1, 1) layout), so that one process goes through the same engine as a job of
// many without starting MPI. Every collective of one member leaves its data as it is (or copies
// it from input to output); point to point has no peer and is refused.
#pragma once

#include <string>

#include "merak/comm/communicator.h"

namespace merak::comm {

class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::string name, CommOptions options = {});

  const char* backend() const override { return "self"; }
  DeviceType memory() const override { return DeviceType::CPU; }
  bool matches_tags() const override { return true; }

 protected:
  std::unique_ptr<WorkImpl> post_batch(const std::vector<P2P>& ops) override;
  std::unique_ptr<WorkImpl> post_all_reduce(const Buffer& b, ReduceOp op) override;
  std::unique_ptr<WorkImpl> post_all_gather(const Buffer& in, const Buffer& out,
                                            const std::vector<int64_t>& counts) override;
  std::unique_ptr<WorkImpl> post_reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op,
                                                const std::vector<int64_t>& counts) override;
  std::unique_ptr<WorkImpl> post_broadcast(const Buffer& b, int root) override;
  std::unique_ptr<WorkImpl> post_barrier() override;
};

}  // namespace merak::comm
