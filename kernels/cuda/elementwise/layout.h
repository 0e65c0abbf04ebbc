// Host-side index layouts for the launchers (gcc only): the broadcast of operands to an output
// and the kept/reduced split of a reduction, with size-1 dims dropped and neighbouring dims
// merged wherever the kernels can step through them as one (so the common cases are one or two
// dims, and at most kMaxDims remain).
#pragma once

#include <vector>

#include "kernels/cuda/elementwise/reduce.h"
#include "kernels/cuda/elementwise/strided.h"
#include "merak/core/shape.h"

namespace merak::cuda_kernels {

// Operands of shapes `in` (at most kMaxOperands) broadcast, NumPy style, to the contiguous
// `out` (numel(out) > 0). Throws naming `op` and the shapes when more than kMaxDims dims remain.
StridedLayout broadcast_layout(const char* op, const Shape& out, const std::vector<Shape>& in);

// A reduction of a contiguous x over `dims` (empty: all; a scalar accepts 0 and -1 and reduces
// nothing), as the op's inference reads them. Throws naming `op` and x's shape when more than
// kMaxDims kept or reduced groups remain.
ReduceLayout reduce_layout(const char* op, const Shape& x, const std::vector<int64_t>& dims);

}  // namespace merak::cuda_kernels
