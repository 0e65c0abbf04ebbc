// The f32 GEMM on AVX-512: operands packed into panels, and a 12 x 32 register tile.
//
// Eigen's AVX-512 kernel holds a 48 x 4 tile of its column-major result (12 accumulators), so
// every depth step loads 3 vectors and broadcasts 4 values for 12 FMAs, and its packing is
// generic; profiled at the benchmark shapes it ran near half the FMA peak. This tile holds 12
// rows by 32 columns of our row-major C in 24 of the 32 vector registers: a depth step loads
// 2 vectors of packed B and broadcasts 12 values of packed A for 24 FMAs.
//
// Loops, outermost first: 512 columns of C (a packed block of B, depth 256 x 512 floats =
// 512 KiB, which stays in L2), depth in steps of 256, 12 rows (one packed panel of A,
// 12 KiB, which stays in L1 while the B panels stream past it), 32 columns (the tile).
#include "kernels/cpu/sgemm_avx512.h"

#if defined(__AVX512F__)

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

namespace merak::cpu {
namespace {

constexpr int64_t kRows = 12;         // rows of C in the register tile
constexpr int64_t kCols = 32;         // columns of C in the register tile: two vectors
constexpr int64_t kDepth = 256;       // depth of one packed block
constexpr int64_t kBlockCols = 512;   // columns of C (and of packed B) in one block

// The lanes of a 16-float vector that hold the first n (<= 0: none) of the columns left.
__mmask16 lanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// op(B)'s rows [k0, k0 + kc), columns [n0, n0 + nc) as panels of kCols columns: the panel of
// columns [p, p + kCols) starts at out + p * kc and holds, depth by depth, kCols values (zero
// past nc), so the tile reads it front to back.
void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0,
            int64_t nc, float* out) {
  for (int64_t p = 0; p < nc; p += kCols) {
    const int64_t w = std::min(kCols, nc - p);
    float* dst = out + p * kc;
    if (!tb) {  // B stored [K, N]: a depth's columns are contiguous
      const __mmask16 m0 = lanes(w), m1 = lanes(w - 16);
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = B + (k0 + k) * ldb + n0 + p;
        _mm512_store_ps(dst + k * kCols, _mm512_maskz_loadu_ps(m0, src));
        _mm512_store_ps(dst + k * kCols + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
      continue;
    }
    // B stored [N, K]: op(B)'s column n is B's row n, contiguous along the depth.
    for (int64_t j = 0; j < kCols; ++j) {
      if (j < w) {
        const float* src = B + (n0 + p + j) * ldb + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * kCols + j] = src[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * kCols + j] = 0.0f;
      }
    }
  }
}

// op(A)'s rows [m0, m0 + mr) (mr <= kRows), depth [k0, k0 + kc): for each depth, kRows values
// (zero past mr), the ones the tile broadcasts.
void pack_a(bool ta, const float* A, int64_t lda, int64_t m0, int64_t mr, int64_t k0,
            int64_t kc, float* out) {
  if (ta) {  // A stored [K, M]: a depth's rows are contiguous
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (k0 + k) * lda + m0;
      float* dst = out + k * kRows;
      for (int64_t r = 0; r < mr; ++r) dst[r] = src[r];
      for (int64_t r = mr; r < kRows; ++r) dst[r] = 0.0f;
    }
    return;
  }
  for (int64_t r = 0; r < kRows; ++r) {  // A stored [M, K]: a row is contiguous along the depth
    if (r < mr) {
      const float* src = A + (m0 + r) * lda + k0;
      for (int64_t k = 0; k < kc; ++k) out[k * kRows + r] = src[k];
    } else {
      for (int64_t k = 0; k < kc; ++k) out[k * kRows + r] = 0.0f;
    }
  }
}

// C[0, rows) x [0, cols) += alpha * a * b over depth kc, a and b packed panels.
void tile(int64_t kc, const float* a, const float* b, float alpha, float* C, int64_t ldc,
          int64_t rows, int64_t cols) {
  __m512 lo[kRows], hi[kRows];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(a[r]);
      lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
    }
    a += kRows;
    b += kCols;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    float* row = C + r * ldc;
    _mm512_mask_storeu_ps(row, m0, _mm512_fmadd_ps(va, lo[r], _mm512_maskz_loadu_ps(m0, row)));
    _mm512_mask_storeu_ps(row + 16, m1,
                          _mm512_fmadd_ps(va, hi[r], _mm512_maskz_loadu_ps(m1, row + 16)));
  }
}

// A thread's packing buffer of at least n floats, 64-byte aligned, reused across calls.
float* scratch(std::unique_ptr<float, decltype(&std::free)>& buf, int64_t& size, int64_t n) {
  if (size < n) {
    buf.reset(static_cast<float*>(std::aligned_alloc(64, size_t(n) * sizeof(float))));
    size = buf ? n : 0;
  }
  return buf.get();
}

}  // namespace

void sgemm_avx512(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, const float* bias, const GemmEpilogue* epilogue) {
  const bool init = beta != 1.0f || bias != nullptr;
  thread_local std::unique_ptr<float, decltype(&std::free)> a_buf(nullptr, &std::free),
      b_buf(nullptr, &std::free);
  thread_local int64_t a_size = 0, b_size = 0;
  const int64_t depth = std::min(kDepth, K);
  float* packed_a = scratch(a_buf, a_size, kRows * depth);
  const int64_t block_cols = std::min(kBlockCols, (N + kCols - 1) / kCols * kCols);
  float* packed_b = scratch(b_buf, b_size, depth * block_cols);
  if (!packed_a || !packed_b) throw std::bad_alloc();

  for (int64_t jc = 0; jc < N; jc += kBlockCols) {
    const int64_t nc = std::min(kBlockCols, N - jc);
    for (int64_t pc = 0; pc < K; pc += kDepth) {
      const int64_t kc = std::min(kDepth, K - pc);
      const bool first = pc == 0, last = pc + kc == K;
      pack_b(tb, B, ldb, pc, kc, jc, nc, packed_b);
      for (int64_t ic = 0; ic < M; ic += kRows) {
        const int64_t mr = std::min(kRows, M - ic);
        pack_a(ta, A, lda, ic, mr, pc, kc, packed_a);
        // Initialised right before the first tile adds into it, while it comes into cache.
        if (first && init) gemm_init_block(C, ldc, beta, bias, ic, mr, jc, nc);
        for (int64_t jr = 0; jr < nc; jr += kCols)
          tile(kc, packed_a, packed_b + jr * kc, alpha, C + ic * ldc + jc + jr, ldc, mr,
               std::min(kCols, nc - jr));
        if (last && epilogue) (*epilogue)(ic, mr, jc, nc);
      }
    }
  }
}

}  // namespace merak::cpu

#endif  // __AVX512F__
