#include "merak/core/allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "merak/core/error.h"

namespace merak {

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::Meta: return "meta";
    case DeviceType::CUDA: return "cuda:" + std::to_string(index);
  }
  return "?";
}

namespace {

// Blocks from 2 MiB up are mapped on a 2 MiB boundary and marked for transparent huge pages.
// Touching a fresh 4 KiB page costs a fault each (about 10 us on a paravirtualised guest); a
// 2 MiB page costs one fault for 512 of them, so first use of a large tensor (initialisation, a
// checkpoint read into it, a new activation size) runs near memory speed, and the TLB covers
// more of the working set.
constexpr size_t kHugePage = size_t(2) << 20;

void* map_huge(size_t size) {
  const size_t span = size + kHugePage;  // room to slide the start onto a 2 MiB boundary
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + size, raw_end = start + span;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the block keeps 4 KiB pages
  return p;
}

// Memory for a block of `size` bytes (block_size rounds it): huge-page mappings for large
// blocks, aligned malloc otherwise; released by os_free with the same size.
void* os_alloc(size_t size, size_t align) {
  return size >= kHugePage ? map_huge(size) : std::aligned_alloc(align, size);
}
void os_free(void* p, size_t size) {
  if (size >= kHugePage) ::munmap(p, size);
  else std::free(p);
}

// Large blocks are cached after free and handed out again for the same (rounded) size: a
// training step allocates the same sizes every step, and returning them to the OS would fault
// every page back in each step. The cache never holds more idle bytes than the live high-water
// mark (or kMinCache), so it at most doubles the footprint; empty_cpu_cache() releases it.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t size = block_size(bytes);
    void* p = size >= kCacheFrom ? take_cached(size) : nullptr;
    const size_t align = size >= kCacheFrom ? kCpuPage : kCpuAlignment;
    if (!p) p = os_alloc(size, align);
    if (!p) {
      release_cache();  // the cache may be what stands in the way
      p = os_alloc(size, align);
    }
    if (!p) {
      MERAK_FAIL("CPU out of memory allocating ", bytes, " bytes (live ", live_.load(),
                 ", peak ", peak_.load(), ")");
    }
    const int64_t now = live_.fetch_add(int64_t(bytes)) + int64_t(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    count_.fetch_add(1);
    return p;
  }

  void deallocate(void* ptr, size_t bytes) override {
    live_.fetch_sub(int64_t(bytes));
    const size_t size = block_size(bytes);
    if (size >= kCacheFrom) {
      std::lock_guard<std::mutex> g(mu_);
      if (cached_ + int64_t(size) <= std::max<int64_t>(kMinCache, peak_.load())) {
        free_[size].push_back(ptr);
        cached_ += int64_t(size);
        return;
      }
    }
    os_free(ptr, size);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> g(mu_);
    return {live_.load(), peak_.load(), live_.load() + cached_, count_.load()};
  }
  void reset_peak() override { peak_.store(live_.load()); }

  void release_cache() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) os_free(p, size);
    free_.clear();
    cached_ = 0;
  }

 private:
  static constexpr size_t kCacheFrom = size_t(1) << 16;   // smaller blocks: malloc is fine
  static constexpr int64_t kMinCache = int64_t(1) << 28;  // 256 MiB
  static size_t block_size(size_t bytes) {
    const size_t unit = bytes >= kCacheFrom ? kCpuPage : kCpuAlignment;  // pages for large blocks
    return bytes == 0 ? kCpuAlignment : (bytes + unit - 1) / unit * unit;
  }
  void* take_cached(size_t size) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= int64_t(size);
    return p;
  }

  std::atomic<int64_t> live_{0}, peak_{0}, count_{0};
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // idle blocks by size
  int64_t cached_ = 0;                                   // bytes in free_
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive main
  return *a;
}

AllocatorForIndex& cuda_slot() {
  static AllocatorForIndex for_index = nullptr;
  return for_index;
}

}  // namespace

Allocator* allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU: return &cpu_allocator();
    case DeviceType::CUDA:
      MERAK_CHECK(cuda_slot(), "no CUDA allocator: this build has no CUDA backend linked in");
      return cuda_slot()(device.index);
    case DeviceType::Meta: MERAK_FAIL("Meta tensors never allocate");
  }
  MERAK_FAIL("unknown device");
}

void register_allocator(DeviceType type, AllocatorForIndex allocator_for_index) {
  MERAK_CHECK(type == DeviceType::CUDA, "only the CUDA allocator can be registered");
  cuda_slot() = allocator_for_index;
}

MemoryStats cpu_memory_stats() { return cpu_allocator().stats(); }
void empty_cpu_cache() { cpu_allocator().release_cache(); }
void reset_cpu_peak() { cpu_allocator().reset_peak(); }

}  // namespace merak
