// The start-up FMA peak, the denominator of every "of peak" figure, is the core's speed: a
// neighbour sharing the core takes wall time from the measurement, not from the figure.
#include <catch2/catch.hpp>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <thread>

#include "merak/core/fma_peak.h"

namespace {

// Pins the calling thread to `cpu`; false when it cannot be.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

TEST_CASE("the FMA peak is not lowered by a thread sharing the core") {
  cpu_set_t before;
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0);
  const int cpu = sched_getcpu();
  REQUIRE(cpu >= 0);
  REQUIRE(pin_to(cpu));
  const double alone = merak::bench::measured_fma_peak_gflops();
  // A spinning thread on the same CPU: the scheduler gives each about half of the wall time,
  // so a trial timed by the wall clock would measure about half the core's speed.
  std::atomic<bool> stop{false}, pinned{false};
  std::thread spinner([&] {
    pinned = pin_to(cpu);  // asserted on the test's thread (Catch's are not thread-safe)
    volatile unsigned long n = 0;
    while (!stop.load(std::memory_order_relaxed)) n = n + 1;
  });
  const double shared = merak::bench::measured_fma_peak_gflops();
  stop = true;
  spinner.join();
  REQUIRE(pinned);
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof before, &before) == 0);
  INFO("alone " << alone << " GFLOP/s, sharing the core " << shared);
  CHECK(alone > 0);
  CHECK(shared > 0.8 * alone);
}
