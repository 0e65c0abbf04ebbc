// The CUDA caching allocator, one per device: device memory is taken from cudaMalloc once and
// reused. Requests are rounded to a size class (512 B steps below 1 MiB, 2 MiB steps above) and
// freed blocks wait in a bin of their class for the next request of that class, so the step loop
// never calls cudaMalloc or cudaFree once warm. Reuse is safe because all work on a device is
// ordered on its one stream (runtime.h). When cudaMalloc fails the cache is returned to the
// driver and the request retried; if it still fails the error gives the live, peak and reserved
// counters.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "merak/core/allocator.h"

namespace merak::cuda {

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  int device() const { return device_; }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  // Returns every cached block to the driver (reserved drops to live).
  void empty_cache();
  static size_t size_class(size_t bytes);

 private:
  void release_cached_locked();
  const int device_;  // cudaMalloc and cudaFree run with it current, whatever the caller's is
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> bins_;  // idle blocks by size class
  int64_t live_ = 0, peak_ = 0, reserved_ = 0, count_ = 0;
};

// Device `index`'s allocator, created on first use; touches no CUDA API until it allocates.
CachingAllocator& caching_allocator(int index);

}  // namespace merak::cuda
