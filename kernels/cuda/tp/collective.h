// The collective behind the CUDA kernels of the tensor-parallel ops. The CPU kernels' one
// (kernels/cpu/tp_ops.h) is handed host memory, and the collectives installed there (an MPI
// communicator's, the single-process simulation's) read it from the host; so device tensors go
// through a second hook, which says where the communicator behind it takes its buffers. Whoever
// installs the CPU one from a rank's tp communicator is to install this one from the same
// communicator, with its memory() and backend() (runtime::TpCollectiveScope installs only the CPU
// one so far, so there groups of one work on CUDA and larger ones fail): with an NCCL one the CUDA
// kernels reduce device memory directly; with an MPI one they fail naming the op and the group
// instead of handing device pointers to the host.
//
// The reductions are synchronous: the CPU kernels' deferral (cpu::TpDeferScope) is a flag
// private to them, so under a TpDeferScope the CUDA tp_all_reduce still waits for its sum.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/tp_ops.h"
#include "merak/core/device.h"
#include "merak/core/tensor.h"

namespace merak::cuda_kernels {

struct TpDeviceCollective {
  // Reduces a contiguous tensor in place over the members of `group`, as cpu::TpCollective, and
  // has finished writing it when it returns. The work that produced the tensor has finished
  // before the call (its stream is synchronised), so the collective may run on any stream.
  cpu::TpCollective reduce;
  // Where the communicator behind `reduce` takes its buffers, and its backend ("nccl", "mpi"),
  // for the error when that is not device memory.
  DeviceType memory = DeviceType::CUDA;
  std::string backend = "nccl";
};

// Installs `c` for every thread (an empty reduce restores the default: groups of one only).
void set_tp_device_collective(TpDeviceCollective c);

// What the CUDA kernels call: a no-op for a group of one; else `t` (a contiguous CUDA tensor)
// reduced in place through the installed collective, once the work queued on its stream has
// finished. Errors name `op` and the group.
void tp_device_reduce(const char* op, const Tensor& t, cpu::TpReduce r, const std::string& group,
                      int64_t size);

}  // namespace merak::cuda_kernels
