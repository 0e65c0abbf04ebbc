// A row-major index space walked by the broadcasting launchers, in plain types: element i of the
// output (contiguous) reads operand k at the offset its strides give for i's coordinates.
#pragma once

#include <cstdint>

namespace merak::cuda_kernels {

constexpr int kMaxDims = 8;      // dims left after merging (layout.h): more is an error
constexpr int kMaxOperands = 3;  // where's cond, a and b

struct StridedLayout {
  int rank = 0;                                 // dims in use, outermost first (>= 1)
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxOperands][kMaxDims] = {};  // in elements; 0 where operand k is broadcast
};

}  // namespace merak::cuda_kernels
