// Device memory over a host transport: the same communicator interface on buffers in a device's
// memory, each operation staged through host memory around a communicator of host memory (MPI).
// Inputs are copied to the host when the operation is posted (after the device's queued work, as
// the device backend's copies are ordered), outputs back to the device when it finishes. This is
// what lets several ranks share one GPU (train.gpus_share), where NCCL refuses two members on one
// device, and what parallel.comm: mpi means on a GPU job. The copies go through the tensor core's
// device backend, so this file needs no device runtime of its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"

namespace merak::comm {

class StagedCommunicator : public Communicator {
 public:
  // `host` carries the data; buffers must live on `device`.
  StagedCommunicator(std::unique_ptr<Communicator> host, Device device);

  const char* backend() const override { return "mpi-staged"; }
  DeviceType memory() const override { return device_.type; }
  bool matches_tags() const override { return host_->matches_tags(); }
  const Communicator& host() const { return *host_; }

 protected:
  std::unique_ptr<WorkImpl> post_batch(const std::vector<P2P>& ops) override;
  std::unique_ptr<WorkImpl> post_all_reduce(const Buffer& b, ReduceOp op) override;
  std::unique_ptr<WorkImpl> post_all_gather(const Buffer& in, const Buffer& out,
                                            const std::vector<int64_t>& counts) override;
  std::unique_ptr<WorkImpl> post_reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op,
                                                const std::vector<int64_t>& counts) override;
  std::unique_ptr<WorkImpl> post_broadcast(const Buffer& b, int root) override;
  std::unique_ptr<WorkImpl> post_barrier() override;

 private:
  std::unique_ptr<Communicator> host_;
  Device device_;
};

// A CommFactory for Grid: `host`'s communicators (MPI), staged for buffers on `device`.
CommFactory staged_backend(CommFactory host, Device device);

}  // namespace merak::comm
