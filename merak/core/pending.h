// Tensors an asynchronous operation is still writing: a collective posted without waiting (the
// sub-pipelined tensor-parallel mode) hands back its output at once and registers it here, and
// whoever reads the tensor next (the graph executor before a step, autograd before a node) waits
// for it first. Keyed by storage, so views of a pending tensor count as pending. One registry
// per process; used from the thread that runs the model.
#pragma once

#include <cstddef>
#include <functional>

#include "merak/core/tensor.h"

namespace merak {

struct PendingOp {
  std::function<bool()> test;  // progresses the operation; true once finished
  std::function<void()> wait;  // blocks until finished
};

// Registers `t` as being written by `op` (a tensor with no storage cannot be pending).
void mark_pending(const Tensor& t, PendingOp op);
bool is_pending(const Tensor& t);
// Waits for the operation writing `t`, if any.
void wait_pending(const Tensor& t);
// Tests every pending operation (MPI moves data only inside its calls); finished ones leave.
void poll_pending();
void wait_all_pending();
size_t pending_count();

}  // namespace merak
