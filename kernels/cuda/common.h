// What the CUDA kernels' registration code (.cc files, compiled by gcc) shares: the stream a
// tensor's work goes to, launch-error checks, and the dtype codes the .cu launchers take (the
// launchers see plain pointers and sizes only, never a Tensor).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "merak/core/tensor.h"
#include "merak/cuda/runtime.h"

namespace merak::cuda_kernels {

// The launchers' element types: f32, bf16 and f16 storage (bf16/f16 computed through f32).
enum class Elem : int { F32 = 0, BF16 = 1, F16 = 2 };

// The Elem of a floating tensor; an error naming `op` for dtypes the CUDA kernels do not take
// (f64 is CPU-only: the CPU is the reference, the GPU trains in f32/bf16/f16).
inline Elem elem_of(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case DType::F32: return Elem::F32;
    case DType::BF16: return Elem::BF16;
    case DType::F16: return Elem::F16;
    default: MERAK_FAIL(op, ": the CUDA kernel takes f32, bf16 or f16, got ", t.str());
  }
}

inline cudaStream_t stream_of(const Tensor& t) { return merak::cuda::stream(t.device().index); }

// After a launch: a launch error becomes merak::Error naming the kernel.
inline void check_launch(const char* kernel) { merak::cuda::check(cudaGetLastError(), kernel); }

}  // namespace merak::cuda_kernels
