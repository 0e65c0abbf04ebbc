// Launchers of comparison, logical ops and selection (select.cu): eq, lt, gt, le, ge,
// logical_and/or/xor, where, masked_fill. Bool tensors are
// one byte per element, as on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise/strided.h"

namespace merak::cuda_kernels {

// The element types comparisons take (floats by value: NaN compares false, -0 == 0).
enum class EqType : int { F32, I32, I64, Bool };
enum class Compare : int { Eq, Lt, Gt, Le, Ge };

// y = a (op) b over the layout (operands a, b).
void launch_compare(Compare op, EqType type, const void* a, const void* b, bool* y,
                    const StridedLayout& layout, int64_t n, cudaStream_t stream);

enum class Logical : int { And, Or, Xor };

// y = a (op) b on bools over the layout (operands a, b).
void launch_logical(Logical op, const bool* a, const bool* b, bool* y,
                    const StridedLayout& layout, int64_t n, cudaStream_t stream);

// y = cond ? a : b over the layout (operands cond, a, b); a, b and y are of element code `elem`.
void launch_where(int elem, const bool* cond, const void* a, const void* b, void* y,
                  const StridedLayout& layout, int64_t n, cudaStream_t stream);

// y = mask ? value : x over the layout (operands x, mask).
void launch_masked_fill(int elem, const void* x, const bool* mask, float value, void* y,
                        const StridedLayout& layout, int64_t n, cudaStream_t stream);

}  // namespace merak::cuda_kernels
