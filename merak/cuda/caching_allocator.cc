#include "merak/cuda/caching_allocator.h"

#include <algorithm>

#include "merak/core/error.h"
#include "merak/cuda/runtime.h"

namespace merak::cuda {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kLargeStep = size_t(2) << 20;
constexpr size_t kLargeFrom = size_t(1) << 20;

double mib(int64_t bytes) { return double(bytes) / double(1 << 20); }

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
      MERAK_CHECK(e == cudaErrorMemoryAllocation, "cudaMalloc of ", mib(int64_t(size)), " MiB: ",
                  cudaGetErrorString(e), " (cudaError ", int(e), ")");
      MERAK_FAIL("CUDA out of memory allocating ", mib(int64_t(size)), " MiB: ",
                 cudaGetErrorString(e), " (cudaError ", int(e), "); this process has ",
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
  for (auto& [size, blocks] : bins_) {
    for (void* p : blocks) {
      cudaFree(p);
      reserved_ -= int64_t(size);
    }
    blocks.clear();
  }
}

CachingAllocator& caching_allocator() {
  static CachingAllocator* a = new CachingAllocator();  // tensors may outlive main
  return *a;
}

}  // namespace merak::cuda
