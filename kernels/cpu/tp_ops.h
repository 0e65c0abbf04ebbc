// The collective behind the CPU kernels of the tensor-parallel ops (tp_all_reduce,
// tp_all_gather, tp_cross_entropy): pluggable, so the runtime installs one backed by its
// communicator (merak/comm) and a single-process simulation one that combines the shards its
// threads hold. Without one, only groups of one member work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "merak/core/pending.h"
#include "merak/core/tensor.h"

namespace merak::cpu {

enum class TpReduce { Sum, Max };

// Reduces a contiguous CPU tensor in place over the members of `group` (`size` of them); every
// member calls it with its own tensor of the same shape.
using TpCollective =
    std::function<void(const Tensor& t, TpReduce op, const std::string& group, int64_t size)>;

// Installs `fn` for every thread (an empty fn restores the default).
void set_tp_collective(TpCollective fn);
// What the kernels call: a no-op for a group of one, else the installed collective.
void tp_reduce(const Tensor& t, TpReduce op, const std::string& group, int64_t size);

// The same reduction posted without waiting: returns how to progress and finish it.
using TpCollectiveAsync =
    std::function<PendingOp(const Tensor& t, TpReduce op, const std::string& group, int64_t size)>;
void set_tp_collective_async(TpCollectiveAsync fn);

// While one is alive on a thread, tp_all_reduce (forward, and in tp_copy's backward) posts its
// sum through the async collective and marks its output pending (merak/core/pending.h) instead
// of waiting: the sub-pipelined mode, where one half of a micro-batch computes while the other
// half's all-reduce is in flight. Without an async collective installed it changes nothing.
class TpDeferScope {
 public:
  TpDeferScope();
  ~TpDeferScope();
  TpDeferScope(const TpDeferScope&) = delete;
  TpDeferScope& operator=(const TpDeferScope&) = delete;

 private:
  bool previous_;
};

// tp_all_reduce's reduction: deferred inside a TpDeferScope, else tp_reduce.
void tp_reduce_maybe_deferred(const Tensor& t, TpReduce op, const std::string& group,
                              int64_t size);

}  // namespace merak::cpu
