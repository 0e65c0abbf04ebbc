#include "merak/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "merak/core/error.h"

namespace merak {
namespace {

thread_local bool t_inside_parallel = false;

int default_threads() {
  if (const int n = threads_from_environment()) return n;
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// Workers wait for a new generation of work; each takes chunk (worker index + 1), the caller
// runs chunk 0. A training step runs hundreds of short regions, so both sides spin for a while
// (kSpin) before they sleep on a condition variable: waking a sleeping thread through the OS
// made an empty two-thread region cost 50-65 us on a 2-core VM, against 0.4 us spinning. An
// idle pool still sleeps after kSpin, and a rank that has one core has a pool of one, which
// never waits.
class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void resize(int n) {
    MERAK_CHECK(n <= kMaxThreads, "thread count ", n, " is above the limit of ", kMaxThreads);
    stop();
    stopping_ = false;
    // Workers start at the current generation so that they do not rerun the last job.
    for (int i = 1; i < n; ++i)
      workers_.emplace_back([this, i, gen = generation(work_.load())] { worker(i, gen); });
  }

  void run(int chunks, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> lock(run_mu_);  // one parallel region at a time
    job_ = &job;
    error_ = nullptr;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    // One word holds the generation and its chunk count, so a worker that wakes late never pairs
    // one region's generation with the next one's count. The release publishes job_.
    const uint64_t next = ((generation(work_.load()) + 1) << kChunkBits) | uint64_t(chunks);
    work_.store(next, std::memory_order_release);
    { std::lock_guard<std::mutex> g(mu_); }  // a worker between its check and its wait is waiting now
    cv_.notify_all();
    run_chunk(0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> g(mu_);
      done_cv_.wait(g, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr int kChunkBits = 16;
  static constexpr int kMaxThreads = (1 << kChunkBits) - 1;
  static constexpr std::chrono::microseconds kSpin{200};

  static uint64_t generation(uint64_t work) { return work >> kChunkBits; }
  static int chunk_count(uint64_t work) { return int(work & kMaxThreads); }

  // Polls `ready` for up to kSpin; true once it holds.
  template <typename Ready>
  static bool spin_until(const Ready& ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
        cpu_relax();
      }
      if (std::chrono::steady_clock::now() >= deadline) return ready();
    }
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void run_chunk(int c) {
    t_inside_parallel = true;
    try {
      (*job_)(c);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_parallel = false;
  }

  void worker(int index, uint64_t seen) {
    for (;;) {
      uint64_t work = 0;
      const auto fresh = [&] {
        work = work_.load(std::memory_order_acquire);
        return generation(work) != seen || stopping_.load(std::memory_order_acquire);
      };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, fresh);
      }
      if (stopping_.load(std::memory_order_acquire)) return;
      seen = generation(work);
      if (index >= chunk_count(work)) continue;  // the caller does not wait for this worker
      run_chunk(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> g(mu_);  // the caller is either before its check or waiting
        done_cv_.notify_one();
      }
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> work_{0};  // generation << kChunkBits | chunks
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // leaked on purpose: no join at exit
  return *p;
}

}  // namespace

int threads_from_environment() {
  const char* env = std::getenv("MERAK_NUM_THREADS");
  if (env == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(env, &end, 10);
  if (*env == '\0' || *end != '\0' || errno == ERANGE || n < 1 || n > kThreadLimit)
    throw Error("MERAK_NUM_THREADS must be a whole number of threads from 1 to " +
                std::to_string(kThreadLimit) + ", got '" + env + "'");
  return int(n);
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  MERAK_CHECK(n >= 1, "thread count must be >= 1, got ", n);
  MERAK_CHECK(!t_inside_parallel, "set_num_threads inside a parallel region");
  if (n != pool().size()) pool().resize(n);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int chunks = int(std::min<int64_t>(max_chunks, t_inside_parallel ? 1 : num_threads()));
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  const int64_t per = (n + chunks - 1) / chunks;
  pool().run(chunks, [&](int c) {
    const int64_t lo = begin + c * per;
    const int64_t hi = std::min(end, lo + per);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace merak
