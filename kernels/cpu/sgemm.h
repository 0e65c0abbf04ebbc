// The f32 GEMM's own path: our packing and register tile, built where the compiler targets
// AVX-512 or AVX2 with FMA (-march=native; sgemm_simd.h); elsewhere f32 goes through Eigen like
// f64.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/sgemm_simd.h"

namespace merak::cpu {

// The register tile of C, rows by columns: where a product split over threads cuts its output.
struct SgemmTile {
  int64_t rows, cols;
};
#if MERAK_SGEMM_SIMD
constexpr bool kHaveSgemm = true;
constexpr SgemmTile kSgemmTile{simd::Native::kRows, 2 * simd::Native::kLanes};
#else
constexpr bool kHaveSgemm = false;
constexpr SgemmTile kSgemmTile{0, 0};
#endif

// One product on the calling thread, with gemm()'s meaning of every argument (C is
// initialised to beta * C + bias block by block, then alpha * op(A) * op(B) is added; with
// beta 0 and no bias the first depth step writes C instead; the epilogue sees each block of C
// once it is final). K > 0 and alpha != 0: gemm() handles the products that only start C.
// Only callable when kHaveSgemm.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const float* bias, const GemmEpilogue* epilogue);

}  // namespace merak::cpu
