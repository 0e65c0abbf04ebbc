// The f32 GEMM's AVX-512 path: our own packing and register kernel, built where the compiler
// targets AVX-512 (-march=native on such a CPU); elsewhere f32 goes through Eigen like f64.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace merak::cpu {

#if defined(__AVX512F__)
constexpr bool kHaveSgemmAvx512 = true;
#else
constexpr bool kHaveSgemmAvx512 = false;
#endif

// One product on the calling thread, with gemm()'s meaning of every argument (C is
// initialised to beta * C + bias block by block, then alpha * op(A) * op(B) is added; with
// beta 0 and no bias the first depth step writes C instead; the epilogue sees each block of C
// once it is final). K > 0 and alpha != 0: gemm() handles the products that only start C.
// Only callable when kHaveSgemmAvx512.
void sgemm_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, const float* bias, const GemmEpilogue* epilogue);

}  // namespace merak::cpu
