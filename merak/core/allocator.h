// Allocators, one per device type, with live/peak byte counters readable at runtime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "merak/core/device.h"

namespace merak {

struct MemoryStats {
  int64_t live_bytes = 0;      // currently allocated by tensors
  int64_t peak_bytes = 0;      // high-water mark of live_bytes since the last reset
  int64_t reserved_bytes = 0;  // held from the system (a caching allocator holds more than live)
  int64_t allocations = 0;     // number of allocate() calls
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// The allocator for a device. Meta has none (it never allocates); CUDA's, one per device index,
// are provided by the CUDA backend when it is linked in, otherwise asking for one is an error.
Allocator* allocator_for(Device device);
using AllocatorForIndex = Allocator* (*)(int index);
void register_allocator(DeviceType type, AllocatorForIndex allocator_for_index);

// CPU allocations are 64-byte aligned (one AVX-512 vector, one cache line); those of 64 KiB and
// more start on a page, so direct I/O can read a checkpoint straight into them.
constexpr size_t kCpuAlignment = 64;
constexpr size_t kCpuPage = 4096;

MemoryStats cpu_memory_stats();
void reset_cpu_peak();
// Returns the CPU allocator's cached idle blocks to the system (reserved_bytes drops to live).
void empty_cpu_cache();

}  // namespace merak
