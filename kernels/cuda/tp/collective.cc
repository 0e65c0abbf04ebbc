#include "kernels/cuda/tp/collective.h"

#include <mutex>

#include "kernels/cuda/common.h"

namespace merak::cuda_kernels {
namespace {

std::mutex g_mu;
TpDeviceCollective g_collective;

}  // namespace

void set_tp_device_collective(TpDeviceCollective c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_collective = std::move(c);
}

void tp_device_reduce(const char* op, const Tensor& t, cpu::TpReduce r, const std::string& group,
                      int64_t size) {
  if (size == 1) return;
  TpDeviceCollective c;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    c = g_collective;
  }
  MERAK_CHECK(bool(c.reduce), op, ": no collective over device memory installed for group '",
              group, "' of ", size, " members, so ", t.str(),
              " cannot be reduced (the CPU kernels' collective takes host memory; install one "
              "over an NCCL communicator with merak::cuda_kernels::set_tp_device_collective)");
  MERAK_CHECK(c.memory == DeviceType::CUDA, op, ": group '", group, "' of ", size,
              " members reduces through the ", c.backend,
              " backend, which takes CPU memory, but ", t.str(),
              " is on the GPU (tensor-parallel CUDA tensors need an NCCL group)");
  // The communicator orders its work after a stream of its own choosing, not necessarily the
  // one that wrote `t`: finishing that stream first is correct whatever it chose.
  cuda::check(cudaStreamSynchronize(stream_of(t)), op);
  try {
    c.reduce(t, r, group, size);
  } catch (const Error& e) {
    throw Error(std::string(op) + " on group '" + group + "': " + e.what());
  }
}

}  // namespace merak::cuda_kernels
