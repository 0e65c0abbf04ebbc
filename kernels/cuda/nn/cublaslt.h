// Row-major GEMMs through cuBLASLt, shared by matmul and linear (matmul.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.h"

namespace merak::cuda_kernels::nn {

// C[b] = op(A[b]) op(B[b]) (+ bias on every row) for b < batch, all row-major with leading
// dims (row strides) lda, ldb, ldc: op(A) is A stored [M, K], or with trans_a the transpose of
// A stored [K, M]; op(B) is B stored [K, N], or with trans_b the transpose of B stored [N, K].
// Matrix b of X starts stride_x elements after matrix b - 1 (0: one matrix shared by all).
// f32, bf16 or f16 storage, accumulated in f32 - or TF32 for f32 when the environment sets
// MERAK_CUDA_TF32=1.
struct GemmArgs {
  Elem elem = Elem::F32;
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  const void* bias = nullptr;  // [N], added by cuBLASLt's epilogue; see bias_epilogue_ok
  bool accumulate = false;     // C += product (beta = 1) instead of C = product
  // When set, C gets GELU (tanh form) of the product (plus bias) and this buffer, laid out as
  // C, the value before GELU: cuBLASLt's GELU_AUX epilogue; see gelu_epilogue_ok. batch 1 only.
  void* gelu_aux = nullptr;
};

// Queues the GEMM on `stream` of device `device`; errors name `op`. M, N, K, batch >= 1.
void gemm(const GemmArgs& g, int device, cudaStream_t stream, const char* op);

// Whether the bias epilogue can read this bias: it has been seen to fail on vectors that are
// not 16-byte aligned, so callers add such a bias themselves.
inline bool bias_epilogue_ok(const void* bias) {
  return reinterpret_cast<uintptr_t>(bias) % 16 == 0;
}

// Whether the GELU_AUX epilogue can write an aux matrix with N columns (row-major) at `aux`:
// cuBLASLt wants its leading dimension a multiple of 8.
inline bool gelu_epilogue_ok(int64_t N, const void* aux) {
  return N % 8 == 0 && reinterpret_cast<uintptr_t>(aux) % 16 == 0;
}

}  // namespace merak::cuda_kernels::nn
