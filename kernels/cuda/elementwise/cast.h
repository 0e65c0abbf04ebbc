// Launcher of dtype conversion (cast.cu) between f32, bf16, f16, i32, i64 and bool.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace merak::cuda_kernels {

enum class Scalar : int { F32, BF16, F16, I32, I64, Bool };

// y[i] = x[i] converted, for i < n, with the CPU's rules: floating -> integer truncates toward
// zero (NaN -> 0, out of range saturates), -> bool is x != 0, bf16/f16 go through f32 and round
// to nearest even. `from` != `to` (equal dtypes are a plain copy).
void launch_cast(Scalar from, Scalar to, const void* x, void* y, int64_t n, cudaStream_t stream);

}  // namespace merak::cuda_kernels
