#include "merak/ops/collectives.h"

#include "merak/core/error.h"

namespace merak::ops {
namespace {

thread_local TpCollectives* t_collectives = nullptr;
thread_local bool t_defer = false;

}  // namespace

TpCollectives& tp_collectives(const char* op, const std::string& group, int64_t size) {
  MERAK_CHECK(t_collectives != nullptr, op, ": no collectives serve tensor-parallel group '",
              group, "' of ", size, " members on this thread (run the graph under an "
              "ops::TpScope, as the runtime's engine does)");
  return *t_collectives;
}

PendingOp TpCollectives::post(const Tensor& t, TpReduce op, const std::string& group,
                              int64_t size) {
  reduce(t, op, group, size);
  PendingOp done;
  done.test = [] { return true; };
  done.wait = [] {};
  return done;
}

TpScope::TpScope(TpCollectives* collectives, bool defer)
    : previous_(t_collectives), previous_defer_(t_defer) {
  t_collectives = collectives;
  t_defer = defer;
}

TpScope::~TpScope() {
  t_collectives = previous_;
  t_defer = previous_defer_;
}

void tp_reduce(const char* op, const Tensor& t, TpReduce r, const std::string& group,
               int64_t size) {
  if (size == 1) return;
  tp_collectives(op, group, size).reduce(t, r, group, size);
}

void tp_reduce_maybe_deferred(const char* op, const Tensor& t, TpReduce r,
                              const std::string& group, int64_t size) {
  if (size == 1) return;
  TpCollectives& c = tp_collectives(op, group, size);
  if (!t_defer) {
    c.reduce(t, r, group, size);
    return;
  }
  mark_pending(t, c.post(t, r, group, size));
}

}  // namespace merak::ops
