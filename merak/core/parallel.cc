#include "merak/core/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "merak/core/error.h"

namespace merak {
namespace {

thread_local bool t_inside_parallel = false;

int default_threads() {
  if (const char* env = std::getenv("MERAK_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Workers wait for a new generation of work; each takes chunk (worker index + 1), the caller
// runs chunk 0. Simple and enough for kernels that are split into num_threads pieces.
class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    stopping_ = false;
    // Workers start at the current generation so that they do not rerun the last job.
    for (int i = 1; i < n; ++i)
      workers_.emplace_back([this, i, gen = generation_] { worker(i, gen); });
  }

  void run(int chunks, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> lock(run_mu_);  // one parallel region at a time
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = &job;
      chunks_ = chunks;
      pending_ = chunks - 1;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    run_chunk(0);
    std::unique_lock<std::mutex> g(mu_);
    done_cv_.wait(g, [this] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
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
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (index >= chunks_) continue;
      }
      run_chunk(index);
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // leaked on purpose: no join at exit
  return *p;
}

}  // namespace

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
