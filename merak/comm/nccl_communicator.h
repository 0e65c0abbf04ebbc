// The NCCL backend: the same communicator interface over CUDA memory, one ncclComm per group.
// MPI arranges the job: member 0 of each group makes the NCCL unique id and MPI broadcasts it.
//
// Stream ordering. Kernels, copies and the caching allocator's reuse all run on the device's
// stream (cuda::stream(device)); the communicator takes that stream as its compute stream when it
// is made, so no caller has to remember to connect them. Each operation runs on the
// communicator's own stream after an event recorded on the compute stream when it is posted: it
// reads only what the kernels queued before it have finished writing. A Work finishes when the
// operation's completion event has fired; wait() polls that event and NCCL's async error, so a
// stuck peer ends the job with a message instead of a hang. A Work keeps its buffers' tensors
// alive until it has finished, so the allocator cannot hand their memory to a kernel while NCCL
// still reads or writes it; consumers run after wait(), hence after the completion event.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "merak/comm/communicator.h"

namespace merak::comm {

// The number of usable CUDA devices; 0 when there is none, with the runtime's reason in *why
// ("cudaGetDeviceCount: no CUDA-capable device is detected").
int cuda_device_count(std::string* why = nullptr);

class NcclCommunicator : public Communicator {
 public:
  // Collective over `group` (owned; freed once NCCL is set up). Every member joins on `device`.
  NcclCommunicator(MPI_Comm group, std::string name, int device, CommOptions options = {});
  ~NcclCommunicator() override;

  const char* backend() const override { return "nccl"; }
  DeviceType memory() const override { return DeviceType::CUDA; }
  bool matches_tags() const override { return false; }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }                  // where NCCL runs
  cudaStream_t compute_stream() const { return compute_stream_; }  // what it waits for
  ncclComm_t nccl_comm() const { return comm_; }

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
  // Orders the stream after the compute stream, issues the NCCL calls, records the event.
  template <typename Issue>
  std::unique_ptr<WorkImpl> launch(const OpInfo& info, Issue issue);
  // Waits out ncclInProgress (the communicator is non-blocking), with the timeout; throws on
  // an NCCL error.
  void settle(ncclResult_t r, const OpInfo& info);
  void check_device(const OpInfo& info, const Buffer& b) const;

  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;  // cuda::stream(device_)
  int* scratch_ = nullptr;                 // barrier's one-element all_reduce
};

// A CommFactory for Grid: NCCL communicators on `device`, or on local rank % device count when
// device is -1 (working that out is collective over MPI_COMM_WORLD: call this on every rank).
CommFactory nccl_backend(CommOptions options = {}, int device = -1);

}  // namespace merak::comm
