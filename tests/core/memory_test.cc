#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/core/tensor.h"

using namespace merak;

TEST_CASE("CPU allocations are 64-byte aligned and counted live and peak", "[core][memory]") {
  reset_cpu_peak();
  const MemoryStats before = cpu_memory_stats();
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes
    Tensor b = Tensor::empty({3}, DType::I64);
    CHECK(reinterpret_cast<uintptr_t>(a.raw_data()) % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(b.raw_data()) % 64 == 0);
    CHECK(cpu_memory_stats().live_bytes == before.live_bytes + 4024);
    Tensor view = a.transpose(0, 0).narrow(0, 10, 5);  // views allocate nothing
    CHECK(cpu_memory_stats().live_bytes == before.live_bytes + 4024);
  }
  CHECK(cpu_memory_stats().live_bytes == before.live_bytes);
  CHECK(cpu_memory_stats().peak_bytes >= before.live_bytes + 4024);
  reset_cpu_peak();
  CHECK(cpu_memory_stats().peak_bytes == before.live_bytes);
}

TEST_CASE("Meta tensors never allocate", "[core][memory]") {
  const int64_t live = cpu_memory_stats().live_bytes;
  Tensor m = Tensor::empty({1 << 20, 1 << 14}, DType::F32, Device::meta());  // 64 GiB if real
  Tensor v = m.narrow(0, 0, 100).view({-1});
  CHECK(v.shape() == Shape{100LL << 14});
  CHECK(m.transpose(0, 1).shape() == Shape{1 << 14, 1 << 20});
  CHECK(m.clone().is_meta());
  CHECK(cpu_memory_stats().live_bytes == live);
}

TEST_CASE("a borrowed tensor reads and writes the lender's memory and never frees it",
          "[core][memory]") {
  std::vector<float> lent = {1, 2, 3, 4, 5, 6};
  const int64_t live = cpu_memory_stats().live_bytes;
  {
    Tensor t = Tensor::borrow(lent.data(), {2, 3});
    CHECK(t.raw_data() == lent.data());
    CHECK(t.is_contiguous());
    CHECK(t.nbytes() == 24);
    CHECK(t.narrow(0, 1, 1).view({3}).to_vector<float>() == std::vector<float>{4, 5, 6});
    t.narrow(0, 1, 1).fill_(9);  // through a view, into the lender's memory
    CHECK(cpu_memory_stats().live_bytes == live);  // the allocator saw nothing
  }
  CHECK(lent == std::vector<float>{1, 2, 3, 9, 9, 9});  // still there after the last view went
  CHECK_THROWS_WITH(Tensor::borrow(nullptr, {2}), Catch::Contains("null pointer"));
  CHECK(Tensor::borrow(nullptr, {0}).numel() == 0);
}

TEST_CASE("parallel_for covers the range once, with any thread count", "[core][threads]") {
  const int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CHECK(num_threads() == threads);
    std::vector<int> hits(10007, 0);
    parallel_for(0, int64_t(hits.size()), 100, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ++hits[size_t(i)];
    });
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
  // Nested regions run serially in the caller instead of deadlocking.
  std::atomic<int64_t> total{0};
  parallel_for(0, 4, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      parallel_for(0, 100, 1, [&](int64_t a, int64_t b) { total += b - a; });
  });
  CHECK(total == 400);
  CHECK_THROWS_WITH(parallel_for(0, 100, 1, [](int64_t, int64_t) { MERAK_FAIL("boom"); }),
                    Catch::Contains("boom"));
  set_num_threads(saved);
}

TEST_CASE("the pool runs every chunk of many back-to-back regions once, awake or asleep",
          "[core][threads]") {
  const int saved = num_threads();
  set_num_threads(4);
  int wrong = 0;
  for (int region = 0; region < 20000; ++region) {
    // 1 to 4 chunks: workers past the count sit a region out and must still see the next one.
    const int64_t n = 1 + region % 4;
    std::array<std::atomic<int>, 4> runs{};
    parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ++runs[size_t(i)];
    });
    for (int64_t i = 0; i < 4; ++i) wrong += runs[size_t(i)] != (i < n ? 1 : 0);
    // Now and then a pause far past the pool's spin, so the workers go to sleep and must wake.
    if (region % 4000 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(wrong == 0);
  // An exception from a worker's chunk, not only the caller's, reaches the caller.
  CHECK_THROWS_WITH(parallel_for(0, 4, 1,
                                 [](int64_t lo, int64_t) {
                                   if (lo == 3) MERAK_FAIL("chunk three");
                                 }),
                    Catch::Contains("chunk three"));
  set_num_threads(saved);
}

TEST_CASE("large freed blocks are cached and reused; live bytes stay exact", "[core][memory]") {
  empty_cpu_cache();
  const MemoryStats base = cpu_memory_stats();
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({1 << 20});  // 4 MiB
    first = a.raw_data();
    CHECK(cpu_memory_stats().live_bytes == base.live_bytes + (4 << 20));
  }
  const MemoryStats after_free = cpu_memory_stats();
  CHECK(after_free.live_bytes == base.live_bytes);
  CHECK(after_free.reserved_bytes == base.reserved_bytes + (4 << 20));  // held in the cache
  Tensor b = Tensor::full({1 << 20}, 7.0);
  CHECK(b.raw_data() == first);  // the same block, no new pages
  b = Tensor();
  Tensor z = Tensor::zeros({1 << 20});  // reuses the dirty block: must still be all zeros
  CHECK(z.raw_data() == first);
  const auto zv = z.to_vector<float>();
  CHECK(std::all_of(zv.begin(), zv.end(), [](float v) { return v == 0.0f; }));
  z = Tensor();
  empty_cpu_cache();
  CHECK(cpu_memory_stats().reserved_bytes == cpu_memory_stats().live_bytes);
}
