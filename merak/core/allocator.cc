#include "merak/core/allocator.h"

#include <cstdlib>
#include <new>

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

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
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
    std::free(ptr);
    live_.fetch_sub(int64_t(bytes));
  }
  MemoryStats stats() const override {
    return {live_.load(), peak_.load(), live_.load(), count_.load()};
  }
  void reset_peak() override { peak_.store(live_.load()); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, count_{0};
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive main
  return *a;
}

Allocator*& cuda_slot() {
  static Allocator* a = nullptr;
  return a;
}

}  // namespace

Allocator* allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU: return &cpu_allocator();
    case DeviceType::CUDA:
      MERAK_CHECK(cuda_slot(), "no CUDA allocator: this build has no CUDA backend linked in");
      return cuda_slot();
    case DeviceType::Meta: MERAK_FAIL("Meta tensors never allocate");
  }
  MERAK_FAIL("unknown device");
}

void register_allocator(DeviceType type, Allocator* allocator) {
  MERAK_CHECK(type == DeviceType::CUDA, "only the CUDA allocator can be registered");
  cuda_slot() = allocator;
}

MemoryStats cpu_memory_stats() { return cpu_allocator().stats(); }
void reset_cpu_peak() { cpu_allocator().reset_peak(); }

}  // namespace merak
