// The MPI backend: communicators over CPU memory, built on MPI's non-blocking calls. bf16 and
// f16 reduce through f32 with user-defined MPI_Ops; avg is a sum divided on arrival. MPI counts
// are int: an operation longer than that (CommOptions::mpi_max_count) is posted as several calls
// under one handle, so callers see no limit.
#pragma once

#include <mpi.h>

#include "merak/comm/communicator.h"

namespace merak::comm {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) and makes it return errors as codes.
  MpiCommunicator(MPI_Comm comm, std::string name, CommOptions options = {});
  ~MpiCommunicator() override;

  MPI_Comm mpi_comm() const { return comm_; }
  const char* backend() const override { return "mpi"; }
  DeviceType memory() const override { return DeviceType::CPU; }
  bool matches_tags() const override { return true; }
  // The tag a timed-out collective's roll call uses (MPI_TAG_UB): point-to-point tags stay below.
  int roll_call_tag() const { return tag_ub_; }

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
  // The most elements one MPI call carries (counts are int): longer operations take several.
  int64_t max_count() const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
};

// `group` as an MPI communicator, or null with the reason ("the nccl backend") in *why_not: what
// the shared-memory pieces, which need MPI's windows, ask first.
const MpiCommunicator* as_mpi(const Communicator& group, std::string* why_not);

// A CommFactory for Grid: MPI communicators with these options.
CommFactory mpi_backend(CommOptions options = {});

}  // namespace merak::comm
