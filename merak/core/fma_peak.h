// Measures this core's f32 FMA peak: the honest denominator for "fraction of peak" figures,
// whatever processor the benchmark lands on.
#pragma once

namespace merak::bench {

// GFLOP/s of one thread running independent vector FMA chains from registers (no memory
// traffic), a second being one of the thread's CPU time (so another thread or process sharing
// the core does not lower it); the widest vectors the build targets (AVX-512, else AVX2, else
// scalar).
double measured_fma_peak_gflops();
const char* fma_peak_isa();

}  // namespace merak::bench
