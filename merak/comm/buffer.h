// What a communicator moves: a contiguous run of elements in host or device memory, and the
// reductions it can apply. A Tensor converts implicitly, so callers pass tensors directly; raw
// buffers serve memory the tensor core cannot describe yet (CUDA).
#pragma once

#include <cstdint>

#include "merak/core/device.h"
#include "merak/core/dtype.h"
#include "merak/core/tensor.h"

namespace merak::comm {

// Avg is the sum divided by the group size; integers divide toward zero (as NCCL's ncclAvg).
enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

// Element types every backend carries: f32, bf16, f16, i32, i64.
bool comm_dtype(DType t);

struct Buffer {
  Buffer(void* data, int64_t numel, DType dtype, Device device);
  // The tensor's elements; it must be contiguous and have memory (not Meta). The buffer keeps
  // the tensor's storage alive, and so does any Work posted on it, until the work completes.
  Buffer(const Tensor& t);  // NOLINT: implicit on purpose

  size_t bytes() const { return size_t(numel) * dtype_size(dtype); }
  // A sub-range [offset, offset + count) in elements, sharing the owner.
  Buffer slice(int64_t offset, int64_t count) const;

  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::F32;
  Device device;
  Tensor owner;  // undefined for raw buffers
};

}  // namespace merak::comm
