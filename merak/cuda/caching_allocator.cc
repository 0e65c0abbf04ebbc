#include "merak/cuda/caching_allocator.h"

#include <algorithm>
#include <string>

#include "merak/core/error.h"
#include "merak/cuda/runtime.h"

namespace merak::cuda {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kLargeStep = size_t(2) << 20;
constexpr size_t kLargeFrom = size_t(1) << 20;

double mib(int64_t bytes) { return double(bytes) / double(1 << 20); }

// Makes `device` current for a scope and restores the caller's: cudaMalloc and cudaFree act on
// the current device, which on a thread that has not touched this device's stream yet (a tensor
// created before its first kernel) may be another GPU.
class DeviceScope {
 public:
  // `what` names the call the device is made current for, in the error when that fails.
  DeviceScope(int device, const char* what) {
    const std::string where = std::string(what) + " on cuda:" + std::to_string(device) +
                              " (making the device current)";
    check(cudaGetDevice(&previous_), where.c_str());
    if (previous_ != device) check(cudaSetDevice(device), where.c_str());
    else previous_ = -1;
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace

size_t CachingAllocator::size_class(size_t bytes) {
  const size_t step = bytes < kLargeFrom ? kSmallStep : kLargeStep;
  return std::max(step, (bytes + step - 1) / step * step);
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++count_;
  auto bin = bins_.find(size);
  void* p = nullptr;
  if (bin != bins_.end() && !bin->second.empty()) {
    p = bin->second.back();
    bin->second.pop_back();
  } else {
    const DeviceScope on_device(device_, "cudaMalloc");
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached_locked();  // give the cache back and try once more
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      MERAK_CHECK(e == cudaErrorMemoryAllocation, "cudaMalloc of ", mib(int64_t(size)),
                  " MiB on cuda:", device_, ": ", cudaGetErrorString(e), " (cudaError ", int(e),
                  ")");
      MERAK_FAIL("CUDA out of memory on cuda:", device_, " allocating ", mib(int64_t(size)),
                 " MiB: ", cudaGetErrorString(e), " (cudaError ", int(e), "); this process has ",
                 mib(live_), " MiB live in tensors, peak ", mib(peak_), " MiB, ", mib(reserved_),
                 " MiB reserved from the device, which has ", mib(int64_t(free_b)),
                 " MiB free of ", mib(int64_t(total_b)), " MiB");
    }
    reserved_ += int64_t(size);
  }
  live_ += int64_t(size);
  peak_ = std::max(peak_, live_);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= int64_t(size);
  bins_[size].push_back(ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s;
  s.live_bytes = live_;
  s.peak_bytes = peak_;
  s.reserved_bytes = reserved_;
  s.allocations = count_;
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  const DeviceScope on_device(device_, "cudaFree");
  for (auto& [size, blocks] : bins_) {
    for (void* p : blocks) {
      cudaFree(p);
      reserved_ -= int64_t(size);
    }
    blocks.clear();
  }
}

CachingAllocator& caching_allocator(int index) {
  MERAK_CHECK(index >= 0, "CUDA allocator for device index ", index);
  static std::mutex mu;
  static std::vector<CachingAllocator*> allocators;  // never destroyed: tensors may outlive main
  std::lock_guard<std::mutex> lock(mu);
  if (int(allocators.size()) <= index) allocators.resize(size_t(index) + 1, nullptr);
  if (!allocators[size_t(index)]) allocators[size_t(index)] = new CachingAllocator(index);
  return *allocators[size_t(index)];
}

}  // namespace merak::cuda
