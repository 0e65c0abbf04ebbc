// Intra-op parallelism: one persistent pool, sized by set_num_threads (default: the cores, or
// MERAK_NUM_THREADS). Nested parallel_for calls run serially in the calling thread.
#pragma once

#include <cstdint>
#include <functional>

namespace merak {

// The most threads a rank's pool is given by train.threads or MERAK_NUM_THREADS: more than the
// cores any CPU has.
constexpr int kThreadLimit = 1024;

int num_threads();
void set_num_threads(int n);

// MERAK_NUM_THREADS: 0 when it is unset, else its thread count; a value that is not a whole
// number from 1 to kThreadLimit is an Error naming the variable and the value.
int threads_from_environment();

// Calls fn(lo, hi) on disjoint chunks covering [begin, end), each at least `grain` long (except
// possibly the last), spread over the pool. Returns when all chunks are done; rethrows the first
// exception a chunk threw.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace merak
