// The CUDA kernels' way to the tensor-parallel collectives: the same collectives as the CPU
// kernels' (the thread's ops::TpScope, merak/ops/collectives.h). Collectives on device tensors
// are ordered after the device's stream (cuda::stream) by the communicator that carries them.
#pragma once

#include <cstdint>
#include <string>

#include "merak/core/tensor.h"
#include "merak/ops/collectives.h"

namespace merak::cuda_kernels {

// Nothing for a group of one; else `t` (a contiguous CUDA tensor) reduced in place through the
// thread's collectives. Errors name `op` and the group.
void tp_device_reduce(const char* op, const Tensor& t, ops::TpReduce r, const std::string& group,
                      int64_t size);

}  // namespace merak::cuda_kernels
