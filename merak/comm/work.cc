#include "merak/comm/work.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "merak/comm/mpi_env.h"

namespace merak::comm {

Work::Work(std::unique_ptr<WorkImpl> impl, double timeout_s, std::vector<Tensor> keep_alive)
    : impl_(std::move(impl)), timeout_s_(timeout_s), keep_alive_(std::move(keep_alive)) {}

Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    Work old(std::move(*this));  // waits for the operation this handle held, on scope exit
    impl_ = std::move(o.impl_);
    timeout_s_ = o.timeout_s_;
    keep_alive_ = std::move(o.keep_alive_);
  }
  return *this;
}

Work::~Work() {
  if (!impl_) return;
  if (unwinding()) {
    // The peers may never post their side, so waiting would hang this rank before its error is
    // printed. The operation is abandoned, not finished: the backend may still write into its
    // buffers, so they (and the backend's state) are leaked on purpose; the job is ending.
    (void)impl_.release();
    (void)new std::vector<Tensor>(std::move(keep_alive_));
    return;
  }
  // A destructor may not throw: a failure here ends the job with its message instead.
  try {
    wait();
  } catch (const std::exception& e) {
    abort_job(e.what());
  }
}

void Work::finish() {
  impl_.reset();
  keep_alive_.clear();
}

bool Work::test() {
  if (!impl_) return true;
  bool finished;
  try {
    finished = impl_->poll();
  } catch (...) {
    finish();  // a failed operation is over: it reports once, and waits after that return
    throw;
  }
  if (finished) finish();
  return finished;
}

void Work::wait() {
  using Clock = std::chrono::steady_clock;
  if (!impl_) return;
  const auto start = Clock::now();
  for (long spins = 0;; ++spins) {
    if (test()) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s_) {
      // The other members time out in the same call at about the same moment, give or take
      // how far apart they entered it: the roll call waits a share of the timeout for them.
      const double grace_s = std::clamp(timeout_s_ / 2, 1.0, 10.0);
      std::string msg = detail::concat("comm timeout after ", timeout_s_, " s: ",
                                       impl_->describe(),
                                       " did not finish (a peer never posted its matching call, "
                                       "is stuck, or died)",
                                       impl_->roll_call(grace_s));
      impl_->abort();
      abort_job(msg);
    }
    // Spin briefly for latency, then give the core away: ranks are often oversubscribed, and a
    // spinning waiter would starve the peer it waits for.
    if (spins < 64) continue;
    if (waited < 0.01)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace merak::comm
