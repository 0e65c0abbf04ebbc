// Reductions on host memory that MPI cannot do itself: bf16 and f16 (MPI has no such types, so
// they travel as 16-bit words and reduce through f32), and avg's final division.
#pragma once

#include <cstdint>

#include "merak/comm/buffer.h"

namespace merak::comm {

// inout[i] = op(in[i], inout[i]) for n elements of a 16-bit float type (bf16 or f16), computed
// in f32 and rounded back to nearest even. op is Sum or Max (Avg reduces as Sum). Max
// propagates NaN, so a diverged rank is not hidden.
void reduce_half(DType dtype, ReduceOp op, const void* in, void* inout, int64_t n);

// data[i] /= divisor for any communicator dtype (the avg of a sum over `divisor` ranks).
// Integers divide with truncation toward zero, as NCCL's ncclAvg does.
void divide_in_place(DType dtype, void* data, int64_t n, int divisor);

}  // namespace merak::comm
