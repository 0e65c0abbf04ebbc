// The f32 GEMM on AVX-512: operands in panels (packed, or A read where it lies), and a 12 x 32
// register tile.
//
// Eigen's AVX-512 kernel holds a 48 x 4 tile of its column-major result (12 accumulators), so
// every depth step loads 3 vectors and broadcasts 4 values for 12 FMAs, and its packing is
// generic; profiled at the benchmark shapes it ran near half the FMA peak. This tile holds 12
// rows by 32 columns of our row-major C in 24 of the 32 vector registers: a depth step loads
// 2 vectors of packed B and broadcasts 12 values of A for 24 FMAs. A stored [M, K] is read in
// place for full panels (12 rows, each a stream along the depth); other panels are packed.
//
// Loops, outermost first: depth in steps of 256; up to 264 rows of C (their packed A, 264 KiB);
// 512 columns of C (a packed block of B, 256 x 512 floats = 512 KiB, which stays in L2); 12 rows
// (one panel of A, 12 KiB, in L1 while the B panels stream past it); 32 columns (the tile).
// Each operand is packed once per depth step: A block by block, B block by block when C has
// one block of rows (a layer's forward: batch x sequence rows), else all of its columns at once
// (a weight's gradient: rows are the layer's outputs). At our models' shapes packing costs a
// fifth of the GEMM when either operand is packed more than once.
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
constexpr int64_t kBlockRows = 264;   // rows of C (and of packed A) in one block: 22 panels
constexpr int64_t kWholeB = int64_t(1) << 21;  // floats of op(B) packed at once at most (8 MiB)

// The lanes of a 16-float vector that hold the first n (<= 0: none) of the columns left.
__mmask16 lanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

__m512 unpacklo_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
__m512 unpackhi_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// Rows [0, rows) of src (row stride ld), their first `cols` (<= 16) values, transposed into
// dst: value i of every row goes to dst + i * ld_dst, in the lanes `keep` (lanes of rows past
// `rows` hold zero). Packing an operand that runs along the other dimension than the tile's
// reads goes through this: a 16 x 16 block in registers instead of one value at a time.
__attribute__((always_inline)) inline void transpose_16(const float* src, int64_t ld,
                                                        int64_t rows, int64_t cols, float* dst,
                                                        int64_t ld_dst, __mmask16 keep) {
  const __mmask16 m = lanes(cols);
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + i * ld) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // pairs of rows interleaved by value
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {  // then by pairs of values: 4 rows per 128-bit lane
    r[i] = unpacklo_pairs(t[i], t[i + 2]);
    r[i + 1] = unpackhi_pairs(t[i], t[i + 2]);
    r[i + 2] = unpacklo_pairs(t[i + 1], t[i + 3]);
    r[i + 3] = unpackhi_pairs(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 16; i += 8)  // then the 128-bit lanes of 8 rows, and of all 16
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0x88);
      t[i + 4 + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0xdd);
    }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m512 lo = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88),
                 hi = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    if (j < cols) _mm512_mask_storeu_ps(dst + j * ld_dst, keep, lo);
    if (8 + j < cols) _mm512_mask_storeu_ps(dst + (8 + j) * ld_dst, keep, hi);
  }
}

// op(B)'s rows [k0, k0 + kc), columns [n0, n0 + nc) as panels of kCols columns: the panel of
// columns [p, p + kCols) starts at out + p * kc and holds, depth by depth, kCols values (zero
// past nc), so the tile reads it front to back.
void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0,
            int64_t nc, float* out) {
  if (!tb) {  // B stored [K, N]: a depth's columns are contiguous, read as one stream per depth
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (k0 + k) * ldb + n0;
      for (int64_t p = 0; p < nc; p += kCols) {
        const __mmask16 m0 = lanes(nc - p), m1 = lanes(nc - p - 16);
        float* dst = out + p * kc + k * kCols;
        _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src + p));
        _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, src + p + 16));
      }
    }
    return;
  }
  for (int64_t p = 0; p < nc; p += kCols) {
    const int64_t w = std::min(kCols, nc - p);
    float* dst = out + p * kc;
    // B stored [N, K]: op(B)'s column n is B's row n, contiguous along the depth; 16 columns
    // by 16 depths at a time are transposed.
    for (int64_t k = 0; k < kc; k += 16)
      for (int64_t half = 0; half < 2; ++half)
        transpose_16(B + (n0 + p + 16 * half) * ldb + k0 + k, ldb,
                     std::clamp<int64_t>(w - 16 * half, 0, 16), std::min<int64_t>(16, kc - k),
                     dst + k * kCols + 16 * half, kCols, lanes(16));
  }
}

// op(A)'s rows [m0, m0 + mr) (mr <= kRows), depth [k0, k0 + kc): for each depth, kRows values
// (zero past mr), the ones the tile broadcasts.
void pack_a(bool ta, const float* A, int64_t lda, int64_t m0, int64_t mr, int64_t k0,
            int64_t kc, float* out) {
  const __mmask16 row_lanes = lanes(kRows);
  if (ta) {  // A stored [K, M]: a depth's rows are contiguous
    const __mmask16 m = lanes(mr);
    for (int64_t k = 0; k < kc; ++k)
      _mm512_mask_storeu_ps(out + k * kRows, row_lanes,
                            _mm512_maskz_loadu_ps(m, A + (k0 + k) * lda + m0));
    return;
  }
  // A stored [M, K]: a row is contiguous along the depth; the rows by 16 depths at a time are
  // transposed, and each depth's kRows values stored (lanes past mr are zero).
  for (int64_t k = 0; k < kc; k += 16)
    transpose_16(A + m0 * lda + k0 + k, lda, mr, std::min<int64_t>(16, kc - k),
                 out + k * kRows, kRows, row_lanes);
}

// C[0, rows) x [0, cols) += alpha * a * b over depth kc, a and b packed panels; with
// `overwrite`, C = alpha * a * b (C is not read: a product with beta 0 and no bias starts
// without a pass that zeroes C).
// The a operand is a packed panel (kRowsApart false: depth by depth, kRows values each) or
// kRows whole rows of A itself, lda apart (true: A stored [M, K], read where it lies; each row
// is a stream along the depth, and the panel's 12 KiB stay in L1 across the B panels).
template <bool kRowsApart>
void tile(int64_t kc, const float* a, int64_t lda, const float* b, float alpha, float* C,
          int64_t ldc, int64_t rows, int64_t cols, bool overwrite) {
  __m512 lo[kRows], hi[kRows];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(kRowsApart ? a[r * lda] : a[r]);
      lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
    }
    a += kRowsApart ? 1 : kRows;
    b += kCols;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
  if (overwrite) {
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      _mm512_mask_storeu_ps(C + r * ldc, m0, _mm512_mul_ps(va, lo[r]));
      _mm512_mask_storeu_ps(C + r * ldc + 16, m1, _mm512_mul_ps(va, hi[r]));
    }
    return;
  }
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
// aligned_alloc wants a whole number of alignments (glibc forgives less; ASan does not).
float* scratch(std::unique_ptr<float, decltype(&std::free)>& buf, int64_t& size, int64_t n) {
  if (size < n) {
    const int64_t whole = (n + 15) / 16 * 16;  // 16 floats: 64 bytes
    buf.reset(static_cast<float*>(std::aligned_alloc(64, size_t(whole) * sizeof(float))));
    if (!buf) {
      size = 0;
      throw std::bad_alloc();
    }
    size = whole;
  }
  return buf.get();
}

}  // namespace

void sgemm_avx512(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, const float* bias, const GemmEpilogue* epilogue) {
  // beta 0 without a bias: the first depth step writes C; else C is initialised (scaled by
  // beta, the bias added) and every step adds into it.
  const bool overwrite = beta == 0.0f && bias == nullptr;
  const bool init = !overwrite && (beta != 1.0f || bias != nullptr);
  thread_local std::unique_ptr<float, decltype(&std::free)> a_buf(nullptr, &std::free),
      b_buf(nullptr, &std::free);
  thread_local int64_t a_size = 0, b_size = 0;
  const int64_t depth = std::min(kDepth, K);
  const int64_t block_rows = std::min(kBlockRows, (M + kRows - 1) / kRows * kRows);
  float* packed_a = scratch(a_buf, a_size, block_rows * depth);
  // With several blocks of rows, op(B) is packed whole for each depth step when that fits
  // kWholeB, so neither operand is packed twice; else block by block for each block of rows.
  const int64_t padded_n = (N + kCols - 1) / kCols * kCols;
  const bool whole_b = M > kBlockRows && depth * padded_n <= kWholeB;
  const int64_t b_floats = depth * (whole_b ? padded_n : std::min(kBlockCols, padded_n));
  float* packed_b = scratch(b_buf, b_size, b_floats);
  if (!packed_a || !packed_b) throw std::bad_alloc();

  // Full panels of A stored [M, K] are read in place; the others are packed.
  auto in_place = [ta](int64_t mr) { return !ta && mr == kRows; };
  for (int64_t pc = 0; pc < K; pc += kDepth) {
    const int64_t kc = std::min(kDepth, K - pc);
    const bool first = pc == 0, last = pc + kc == K;
    if (whole_b) pack_b(tb, B, ldb, pc, kc, 0, N, packed_b);
    for (int64_t icb = 0; icb < M; icb += kBlockRows) {
      const int64_t mc = std::min(kBlockRows, M - icb);
      for (int64_t ic = 0; ic < mc; ic += kRows) {
        const int64_t mr = std::min(kRows, mc - ic);
        if (!in_place(mr)) pack_a(ta, A, lda, icb + ic, mr, pc, kc, packed_a + ic * kc);
      }
      for (int64_t jc = 0; jc < N; jc += kBlockCols) {
        const int64_t nc = std::min(kBlockCols, N - jc);
        if (!whole_b) pack_b(tb, B, ldb, pc, kc, jc, nc, packed_b);
        const float* b = whole_b ? packed_b + jc * kc : packed_b;
        for (int64_t ic = icb; ic < icb + mc; ic += kRows) {
          const int64_t mr = std::min(kRows, icb + mc - ic);
          // Initialised right before the first tile adds into it, while it comes into cache.
          if (first && init) gemm_init_block(C, ldc, beta, bias, ic, mr, jc, nc);
          float* c = C + ic * ldc + jc;
          if (in_place(mr)) {
            const float* a = A + ic * lda + pc;
            for (int64_t jr = 0; jr < nc; jr += kCols)
              tile<true>(kc, a, lda, b + jr * kc, alpha, c + jr, ldc, mr,
                         std::min(kCols, nc - jr), first && overwrite);
          } else {
            const float* a = packed_a + (ic - icb) * kc;
            for (int64_t jr = 0; jr < nc; jr += kCols)
              tile<false>(kc, a, 0, b + jr * kc, alpha, c + jr, ldc, mr,
                          std::min(kCols, nc - jr), first && overwrite);
          }
          if (last && epilogue) (*epilogue)(ic, mr, jc, nc);
        }
      }
    }
  }
}

}  // namespace merak::cpu

#endif  // __AVX512F__
