#include "kernels/cuda/tp/collective.h"

#include "kernels/cuda/common.h"

namespace merak::cuda_kernels {

void tp_device_reduce(const char* op, const Tensor& t, ops::TpReduce r, const std::string& group,
                      int64_t size) {
  if (size == 1) return;
  // The collectives read `t` after the work queued on the device's stream, which wrote it: an
  // NCCL communicator waits for that stream by construction, and MPI staged through the host
  // copies out on it (comm::StagedCommunicator), so no synchronisation is needed here.
  ops::tp_collectives(op, group, size).reduce(t, r, group, size);
}

}  // namespace merak::cuda_kernels
