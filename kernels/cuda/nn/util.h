// What the registration code of the nn kernels (.cc files) shares: index dtype codes for the
// launchers, f32 statistics, scratch memory, and the [outer, len, inner] view of a tensor
// around one dim.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.h"
#include "merak/core/tensor.h"

namespace merak::cuda_kernels::nn {

// The launchers' index code of an i32 / i64 tensor (reduce.cuh's with_index): 0 i32, 1 i64.
inline int index_of(const Tensor& t, const char* op, const char* what) {
  switch (t.dtype()) {
    case DType::I32: return 0;
    case DType::I64: return 1;
    default: MERAK_FAIL(op, ": ", what, " must be i32 or i64, got ", t.str());
  }
}

// The data of a statistic an op keeps for its backward (layer_norm's mean and rstd, an lse) or
// of a loss: f32 for every dtype the CUDA kernels take (op_util.h's stat_dtype). The ops'
// inference sees to it; the check catches a kernel called around it with stats in the input's
// 16-bit dtype, which the kernel would otherwise misread.
inline float* stat_data(const Tensor& t, const char* op, const char* what) {
  MERAK_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be f32 (the stat dtype), got ",
              t.str());
  return static_cast<float*>(t.device_data());
}

// `bytes` of device memory for one call, from the caching allocator. Freeing it as soon as the
// launches are queued is safe: all work on a device is ordered on its one stream, so the memory
// is only handed out again to work queued after these kernels.
inline Tensor scratch(int64_t bytes, Device device) {
  return Tensor::empty({bytes > 8 ? (bytes + 7) / 8 : 1}, DType::I64, device);
}

// A tensor seen as [outer, len, inner] around dim `dim` (already normalised).
struct Dims {
  int64_t outer = 1, len = 1, inner = 1;
};
inline Dims dims_around(const Shape& shape, int64_t dim) {
  Dims d;
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    if (i < dim) d.outer *= shape[size_t(i)];
    else if (i == dim) d.len = shape[size_t(i)];
    else d.inner *= shape[size_t(i)];
  }
  return d;
}

}  // namespace merak::cuda_kernels::nn
