// How the kernels of the tensor-parallel ops (defs/tp_ops.cc) reach the other members of their
// group. Whoever runs a graph holding tp ops hands its collectives to the calls it makes on its
// thread, through a TpScope: the runtime over the rank's tp communicator (runtime/engine_tp.h),
// the partitioner's single-process simulation over the threads that play the members. The CPU
// and CUDA kernels both call tp_reduce; how the data travels (host or device memory, shared
// memory, MPI, NCCL) is the collectives' business. There is no process-wide default: outside a
// scope only groups of one work.
#pragma once

#include <cstdint>
#include <string>

#include "merak/core/pending.h"
#include "merak/core/tensor.h"

namespace merak::ops {

enum class TpReduce { Sum, Max };

class TpCollectives {
 public:
  virtual ~TpCollectives() = default;
  // Reduces `t` (contiguous; host or device memory) in place over the members of `group`
  // (`size` of them); every member calls it with its own tensor of the same shape. Done when it
  // returns.
  virtual void reduce(const Tensor& t, TpReduce op, const std::string& group, int64_t size) = 0;
  // The same reduction posted: returns how to progress and finish it. By default it is done
  // before it returns.
  virtual PendingOp post(const Tensor& t, TpReduce op, const std::string& group, int64_t size);
};

// For its lifetime, `collectives` serve the tp ops this thread runs; with `defer`,
// tp_all_reduce's sums (forward, and tp_copy's in backward) are posted and their outputs marked
// pending (merak/core/pending.h) instead of waited for: the sub-pipelined mode, one half of a
// micro-batch computing while the other half's sum is in flight. Scopes nest; the innermost
// serves.
class TpScope {
 public:
  explicit TpScope(TpCollectives* collectives, bool defer = false);
  ~TpScope();
  TpScope(const TpScope&) = delete;
  TpScope& operator=(const TpScope&) = delete;

 private:
  TpCollectives* previous_;
  bool previous_defer_;
};

// This thread's collectives, for `op` on `group` of `size` members: an error naming them when no
// scope serves the thread.
TpCollectives& tp_collectives(const char* op, const std::string& group, int64_t size);
// What the kernels call: nothing for a group of one; else the reduction through this thread's
// collectives.
void tp_reduce(const char* op, const Tensor& t, TpReduce r, const std::string& group,
               int64_t size);
// tp_all_reduce's sum: posted and marked pending inside a deferring scope, else tp_reduce.
void tp_reduce_maybe_deferred(const char* op, const Tensor& t, TpReduce r,
                              const std::string& group, int64_t size);

}  // namespace merak::ops
