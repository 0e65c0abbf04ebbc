// Plugs the CUDA backend into the tensor core when this library is linked: the caching
// allocator for CUDA tensors, and copies and fills. Registration touches no CUDA API, so a
// binary with the backend linked in starts on a machine without a GPU; only using a CUDA tensor
// there fails (with the runtime's message).
#include <algorithm>
#include <cstring>
#include <mutex>

#include "merak/core/device_backend.h"
#include "merak/core/tensor.h"
#include "merak/cuda/caching_allocator.h"
#include "merak/cuda/copy_kernels.h"
#include "merak/cuda/runtime.h"

namespace merak::cuda {
namespace {

// Host <-> device transfers go through one pinned staging buffer in chunks: the DMA engine
// reads and writes pinned memory directly, where pageable memory would be staged by the
// driver anyway.
constexpr size_t kStagingBytes = size_t(8) << 20;

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    // Ordered on the device's stream like the kernels around it (and the allocator's reuse):
    // nothing on the host waits for it. From another device, that device's queued work (which
    // wrote the source) is finished first.
    const bool across = src_device.index != dst_device.index;
    if (across)
      check(cudaStreamSynchronize(stream(src_device.index)), "cudaStreamSynchronize (source)");
    const cudaStream_t s = stream(dst_device.index);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync (d2d)");
    // Across devices the copy reads the source outside its device's stream order: it must end
    // before that device's allocator may hand the source's block to its next kernel.
    if (across) check(cudaStreamSynchronize(s), "cudaStreamSynchronize (cross-device copy)");
    return;
  }
  static std::mutex mu;
  static void* staging = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  const cudaStream_t s = stream(index);
  if (!staging) check(cudaMallocHost(&staging, kStagingBytes), "cudaMallocHost (staging)");
  for (size_t at = 0; at < bytes; at += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - at);
    if (dst_device.is_cuda()) {
      std::memcpy(staging, static_cast<const char*>(src) + at, n);
      check(cudaMemcpyAsync(static_cast<char*>(dst) + at, staging, n, cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync (host to device)");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    } else {
      check(cudaMemcpyAsync(staging, static_cast<const char*>(src) + at, n,
                            cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync (device to host)");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      std::memcpy(static_cast<char*>(dst) + at, staging, n);
    }
  }
}

void strided_copy(const Tensor& dst, const Tensor& src) {
  MERAK_CHECK(dst.dim() <= kMaxRank, "CUDA strided copy of ", dst.str(), ": at most ", kMaxRank,
              " dims");
  const int elem = int(dtype_size(dst.dtype()));
  if (dst.is_contiguous() && src.is_contiguous()) {
    copy_bytes(dst.device_data(), dst.device(), src.device_data(), src.device(),
               size_t(dst.nbytes()));
    return;
  }
  StridedCopy v;
  v.rank = int(dst.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = dst.size(d);
    v.dst_strides[d] = dst.strides()[size_t(d)];
    v.src_strides[d] = src.strides()[size_t(d)];
  }
  launch_strided_copy(dst.device_data(), src.device_data(), elem, v, dst.numel(),
                      stream(dst.device().index));
  check(cudaGetLastError(), "strided copy kernel");
}

void fill(const Tensor& t, double value) {
  // The element's bits as the CPU would store them.
  const Tensor one = Tensor::full({1}, value, t.dtype());
  uint64_t bits = 0;
  std::memcpy(&bits, one.raw_data(), dtype_size(t.dtype()));
  launch_fill(t.device_data(), t.numel(), int(dtype_size(t.dtype())), bits,
              stream(t.device().index));
  check(cudaGetLastError(), "fill kernel");
}

struct Registration {
  Registration() {
    register_allocator(DeviceType::CUDA, [](int index) -> Allocator* {
      return &caching_allocator(index);
    });
    register_device_backend(DeviceType::CUDA, DeviceBackend{copy_bytes, strided_copy, fill});
  }
} registration;

}  // namespace
}  // namespace merak::cuda
