// A group whose members share one node, as one communicator: f32 sums and maxima within the
// window's reach go through shared memory (comm::NodeAllReduce: no message, no progress engine,
// every member adding in rank order so all get the same bits), everything else through the MPI
// communicator it wraps. The grid builds its tensor-parallel group this way where it can
// (GridOptions::tp_shared_memory), so whoever all-reduces over it never asks how the data travels.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/comm/mpi_communicator.h"
#include "merak/comm/node_all_reduce.h"

namespace merak::comm {

class NodeCommunicator : public Communicator {
 public:
  // Collective over `mpi`'s members. When they share a node: a NodeCommunicator over it; else
  // `mpi` handed back as it is, with the reason in *why_not.
  static std::unique_ptr<Communicator> wrap(std::unique_ptr<MpiCommunicator> mpi,
                                            std::string* why_not);
  ~NodeCommunicator() override;

  const char* backend() const override { return "mpi"; }
  DeviceType memory() const override { return DeviceType::CPU; }
  bool matches_tags() const override { return true; }
  int64_t shared_bytes() const override { return node_->bytes(); }

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
  NodeCommunicator(std::unique_ptr<MpiCommunicator> mpi, std::unique_ptr<NodeAllReduce> node);

  std::unique_ptr<MpiCommunicator> mpi_;
  std::unique_ptr<NodeAllReduce> node_;  // reads mpi_: declared after it
};

// A CommFactory for Grid: MPI communicators, wrapped as NodeCommunicators where their members
// share a node.
CommFactory node_backend(CommOptions options = {});

}  // namespace merak::comm
