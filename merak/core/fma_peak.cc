#include "merak/core/fma_peak.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>

namespace merak::bench {
namespace {

// Independent accumulators hide the FMA latency (4 cycles x 2 ports = 8 in flight needed), all
// in registers with the two operands: 16 of AVX-512's 32, 12 of AVX2's 16 (16 there spilled two
// chains to the stack, and the loop measured half of a Zen 3's peak, below what GEMMs reach).
#if defined(__AVX512F__)
constexpr int kChains = 16;
#else
constexpr int kChains = 12;
#endif
// ~10 ms a trial at these cores' peaks: short enough that many fit between a shared host's
// disturbances, long enough for the clock's resolution.
constexpr long kIters = 5'000'000;

// Seconds of CPU this thread has run. Trials are timed by it, not by the wall clock: the loop
// touches no memory, so its CPU time is the core's speed alone, and a neighbour sharing the
// core (another process, another rank on an oversubscribed node) only takes wall time from it.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double run_once() {
  const double t0 = thread_seconds();
  float sink = 0;
#if defined(__AVX512F__)
  constexpr int kWidth = 16;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kIters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  // Summed through memory, as below: GCC 12's _mm512_reduce_add_ps draws a false
  // uninitialized-use warning.
  alignas(64) float lanes[kWidth];
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(lanes, acc[c]);
    for (float l : lanes) sink += l;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  constexpr int kWidth = 8;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(float(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kIters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  float lanes[8];
  for (int c = 0; c < kChains; ++c) {
    _mm256_storeu_ps(lanes, acc[c]);
    for (float l : lanes) sink += l;
  }
#else
  constexpr int kWidth = 1;
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = float(c) * 1e-3f;
  for (long i = 0; i < kIters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  for (float v : acc) sink += v;
#endif
  const double s = thread_seconds() - t0;
  volatile float keep = sink;  // the loop's result is used, so it is not optimised away
  (void)keep;
  return 2.0 * kChains * kWidth * double(kIters) / s / 1e9;
}

}  // namespace

double measured_fma_peak_gflops() {
  // The peak is the fastest trial: a clock still ramping up, or what a neighbour's time slices
  // leave in the core's caches and predictors, only ever slows one down. Three trials of 40 ms
  // (timed by the wall clock then) once gave 64 GFLOP/s on a core whose GEMMs reach 92,
  // inflating every "of peak" by half; so trials go on until the best has stood for ten more
  // (at least 10 trials, at most 40: about 0.1 to 0.4 s of this thread's time). The start-up
  // line prints the figure used.
  double best = 0;
  int since_best = 0;
  for (int r = 0; r < 40 && (r < 10 || since_best < 10); ++r) {
    const double g = run_once();
    since_best = g > best * 1.005 ? 0 : since_best + 1;
    best = std::max(best, g);
  }
  return best;
}

const char* fma_peak_isa() {
#if defined(__AVX512F__)
  return "AVX-512 FMA";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2 FMA";
#else
  return "scalar";
#endif
}

}  // namespace merak::bench
