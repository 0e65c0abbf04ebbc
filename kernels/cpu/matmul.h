// The CPU GEMM every kernel shares: row-major, BLAS-like, float and double.
#pragma once

#include <cstdint>
#include <functional>

namespace merak::cpu {

// Called on each block of C once its value is final - C's rows [row, row + rows) and columns
// [col, col + cols) - while the block is still in cache: a fused elementwise step (GELU after a
// linear) costs no extra pass over memory. Blocks of one GEMM may be handed to different threads.
using GemmEpilogue = std::function<void(int64_t row, int64_t rows, int64_t col, int64_t cols)>;

// C[M, N] = alpha * op(A) * op(B) + beta * C (+ bias[n] on every row when bias is non-null).
// All matrices are row-major with leading dimensions (row strides) lda, ldb, ldc:
//   op(A) is A stored [M, K] (lda >= K), or with trans_a the transpose of A stored [K, M];
//   op(B) is B stored [K, N] (ldb >= N), or with trans_b the transpose of B stored [N, K].
// beta == 0 never reads C, so C may hold garbage. When `threaded` and the product is large
// enough, the output is split into panels over merak's thread pool (inside a parallel region it
// runs serially); small products stay on the calling thread.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, bool threaded = true,
          const T* bias = nullptr, const GemmEpilogue* epilogue = nullptr);

// C's rows [r0, r0 + nr), columns [c0, c0 + nc) as a product starts them: beta * C (beta == 0
// never reads C) plus bias[c] when bias is non-null. Each single-threaded kernel calls it on a
// block right before it first adds into it, while the block comes into cache.
template <typename T>
void gemm_init_block(T* C, int64_t ldc, T beta, const T* bias, int64_t r0, int64_t nr, int64_t c0,
                     int64_t nc);

// A GEMM is split so that every thread gets at least this many multiply-adds (~10 us of work,
// well above the cost of waking the pool); smaller products run on the calling thread.
constexpr int64_t kGemmMacsPerThread = int64_t(1) << 20;

}  // namespace merak::cpu
