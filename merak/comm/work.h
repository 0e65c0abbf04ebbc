// The handle of an operation in flight. Posting returns at once; wait() blocks until the
// operation is done, so compute placed between the two overlaps the communication.
// A Work must finish before the communicator that posted it is destroyed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::comm {

// A backend's operation in flight.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  // True once the operation (and any finishing step, such as avg's division) is done. Throws
  // merak::Error naming the operation when the backend reports a failure.
  virtual bool poll() = 0;
  // "send of 1024 f32 to peer 1 (world rank 5), tag 3, on group 'pp' (rank 0 of 2, ...)"
  virtual std::string describe() const = 0;
  // Called once the timeout has passed, before the job ends: who among the group's members can
  // be found missing within grace_s, as a clause for the message ("" when the backend cannot
  // tell, or names the peer in describe() already).
  virtual std::string roll_call(double grace_s) { return ""; }
  // Called just before a timeout ends the job (NCCL aborts its communicator here).
  virtual void abort() {}
};

class Work {
 public:
  Work() = default;  // an already-finished operation
  Work(std::unique_ptr<WorkImpl> impl, double timeout_s, std::vector<Tensor> keep_alive);
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& o) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  // Dropping an unfinished handle waits for it: its buffers must not be reused before then.
  // While an exception unwinds it is abandoned instead, its buffers leaked (see unwinding()).
  ~Work();

  // Non-blocking: true once finished. Progresses the backend (MPI moves data only inside calls).
  // A failed operation throws merak::Error (naming it) once, and counts as finished after.
  bool test();
  // Blocks until finished. Past the communicator's timeout, counted from this call, the job
  // ends: one line on stderr naming the operation, group and peer, then MPI_Abort.
  void wait();
  // True once test() or wait() has seen the operation finish (or for a default Work).
  bool done() const { return impl_ == nullptr; }
  // The backend's roll call for an unfinished operation (WorkImpl::roll_call): what a wrapping
  // backend's own timeout message adds when the wrapped operation is what it waits on.
  std::string roll_call(double grace_s) { return impl_ ? impl_->roll_call(grace_s) : ""; }

 private:
  void finish();
  std::unique_ptr<WorkImpl> impl_;
  double timeout_s_ = 0;
  std::vector<Tensor> keep_alive_;  // tensors whose memory the operation reads or writes
};

}  // namespace merak::comm
