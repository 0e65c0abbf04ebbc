// The f32 GEMM on AVX-512 or AVX2 (sgemm_simd.h's vector sets): operands in panels (packed, or
// A read where it lies), and a register tile of kRows rows by two vectors of columns.
//
// Eigen's AVX-512 kernel holds a 48 x 4 tile of its column-major result (12 accumulators), so
// every depth step loads 3 vectors and broadcasts 4 values for 12 FMAs, and its packing is
// generic; profiled at the benchmark shapes it ran near half the FMA peak. Our tile holds rows
// of our row-major C by two vectors (AVX-512: 12 x 32 in 24 of the 32 registers; AVX2: 6 x 16
// in 12 of the 16): a depth step loads 2 vectors of packed B and broadcasts kRows values of A.
// A stored [M, K] is read in place for full panels (kRows rows, each a stream along the depth);
// other panels are packed. A linear layer's forward, x W^T, is computed as its transpose
// (sgemm, at the end), so that W is the operand read in place.
//
// Loops, outermost first: depth in steps of kDepth; kBlockRows rows of C (their packed A);
// kBlockCols columns of C (a packed block of B, which stays in L2); kRows rows (one panel of A,
// kept close while the B panels stream past it); two vectors of columns (the tile). Every depth
// step after the first reads and writes C again, so deep steps pay. Each operand is packed once
// per depth step: A block by block, B block by block when C has one block of rows
// (a layer's forward: batch x sequence rows), else all of its columns at once (a weight's
// gradient: rows are the layer's outputs). At our models' shapes packing costs a fifth of the
// GEMM when either operand is packed more than once. Where op(B) is too wide to pack at once
// and C has several blocks of rows, the two block loops swap when that packs less: columns
// outermost, B packed once and A's few packed panels again for each block of columns.
#include "kernels/cpu/sgemm.h"

#if MERAK_SGEMM_SIMD

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

namespace merak::cpu {
namespace {

using V = simd::Native;
constexpr int64_t kRows = kSgemmTile.rows;  // rows of C in the register tile
constexpr int64_t kCols = kSgemmTile.cols;  // columns of C in the register tile: two vectors
constexpr int64_t kDepth = V::kDepth;        // depth of one packed block
constexpr int64_t kBlockCols = V::kBlockCols;  // columns of C (and of packed B) in one block
constexpr int64_t kBlockRows = V::kBlockRows;  // rows of C (and of packed A) in one block
constexpr int64_t kWholeB = int64_t(1) << 21;  // floats of op(B) packed at once at most (8 MiB)
static_assert(kBlockRows % kRows == 0 && kBlockCols % kCols == 0 && kRows % 3 == 0);

// op(B)'s rows [k0, k0 + kc), columns [n0, n0 + nc) as panels of kCols columns: the panel of
// columns [p, p + kCols) starts at out + p * kc and holds, depth by depth, kCols values (zero
// past nc), so the tile reads it front to back.
void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0,
            int64_t nc, float* out) {
  constexpr int64_t L = V::kLanes;
  if (!tb) {  // B stored [K, N]: a depth's columns are contiguous, read as one stream per depth
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (k0 + k) * ldb + n0;
      for (int64_t p = 0; p < nc; p += kCols) {
        float* dst = out + p * kc + k * kCols;
        V::store_aligned(dst, V::load(src + p, nc - p));
        V::store_aligned(dst + L, V::load(src + p + L, nc - p - L));
      }
    }
    return;
  }
  for (int64_t p = 0; p < nc; p += kCols) {
    const int64_t w = std::min(kCols, nc - p);
    float* dst = out + p * kc;
    // B stored [N, K]: op(B)'s column n is B's row n, contiguous along the depth; a vector's
    // worth of columns by as many depths at a time are transposed.
    for (int64_t k = 0; k < kc; k += L)
      for (int64_t half = 0; half < 2; ++half)
        V::transpose(B + (n0 + p + L * half) * ldb + k0 + k, ldb,
                     std::clamp<int64_t>(w - L * half, 0, L), std::min<int64_t>(L, kc - k),
                     dst + k * kCols + L * half, kCols, L);
  }
}

// op(A)'s rows [m0, m0 + mr) (mr <= kRows), depth [k0, k0 + kc): for each depth, kRows values
// (zero past mr), the ones the tile broadcasts.
void pack_a(bool ta, const float* A, int64_t lda, int64_t m0, int64_t mr, int64_t k0,
            int64_t kc, float* out) {
  if (ta) {  // A stored [K, M]: a depth's rows are contiguous
    for (int64_t k = 0; k < kc; ++k)
      V::store(out + k * kRows, kRows, V::load(A + (k0 + k) * lda + m0, mr));
    return;
  }
  // A stored [M, K]: a row is contiguous along the depth; the rows by a vector's worth of
  // depths at a time are transposed, and each depth's kRows values stored (zero past mr).
  for (int64_t k = 0; k < kc; k += V::kLanes)
    V::transpose(A + m0 * lda + k0 + k, lda, mr, std::min<int64_t>(V::kLanes, kc - k),
                 out + k * kRows, kRows, kRows);
}

// C[0, rows) x [0, cols) = alpha * a * b + beta * C over depth kc, a and b packed panels; C is
// not read when beta is 0 (a product with beta 0 and no bias starts without a pass that zeroes
// C). Untransposed, beta is 0 or 1 and C was initialised before (gemm_init_block).
// The a operand is a packed panel (kRowsApart false: depth by depth, kRows values each) or
// kRows whole rows of A itself, lda apart (true: A stored [M, K], read where it lies; each row
// is a stream along the depth, and the panel stays in L1 across the B panels).
// kTileRows (kRows, or a third or two thirds of it) rows are computed: a last panel of a few
// rows (GPT-2's 256 rows are 21 panels of 12 and one of 4) does not pay for a whole tile.
// With kTransC the tile is of C's transpose: its row r, column j goes to C[j * ldc + r], plus
// bias[r] where bias is not null (C's columns are the tile's rows: the bias is a vector here).
template <int64_t kTileRows, bool kRowsApart, bool kTransC>
void tile(int64_t kc, const float* a, int64_t lda, const float* b, float alpha, float* C,
          int64_t ldc, int64_t rows, int64_t cols, float beta, const float* bias) {
  constexpr int64_t L = V::kLanes;
  V::Reg lo[kTileRows], hi[kTileRows];
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) lo[r] = hi[r] = V::zero();
  for (int64_t k = 0; k < kc; ++k) {
    const V::Reg b0 = V::load_aligned(b), b1 = V::load_aligned(b + L);
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r) {
      const V::Reg x = V::set1(kRowsApart ? a[r * lda] : a[r]);
      lo[r] = V::fmadd(x, b0, lo[r]);
      hi[r] = V::fmadd(x, b1, hi[r]);
    }
    a += kRowsApart ? 1 : kRows;
    b += kCols;
  }
  const V::Reg va = V::set1(alpha);
  if constexpr (kTransC) {
    // Each column of the tile is `rows` consecutive values of a row of C: the tile goes through
    // memory and a transpose (a few hundred instructions against kc x 2 x kTileRows FMAs).
    static_assert(kTileRows <= L);
    alignas(64) float by_row[L * kCols], by_col[kCols * L];  // L rows: what transpose may read
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r) {
      V::store_aligned(by_row + r * kCols, lo[r]);
      V::store_aligned(by_row + r * kCols + L, hi[r]);
    }
    for (int64_t h = 0; h < cols; h += L)
      V::transpose(by_row + h, kCols, rows, std::min(L, cols - h), by_col + h * L, L, L);
    const V::Reg vbeta = V::set1(beta), vbias = bias ? V::load(bias, rows) : V::zero();
    for (int64_t j = 0; j < cols; ++j) {
      float* out = C + j * ldc;
      V::Reg v = V::fmadd(va, V::load_aligned(by_col + j * L), vbias);
      if (beta != 0.0f) v = V::fmadd(vbeta, V::load(out, rows), v);
      V::store(out, rows, v);
    }
    return;
  }
  const int64_t n0 = cols, n1 = cols - L;  // the columns each vector stores
  if (beta == 0.0f) {
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r) {
      if (r >= rows) break;
      V::store(C + r * ldc, n0, V::mul(va, lo[r]));
      if (n1 > 0) V::store(C + r * ldc + L, n1, V::mul(va, hi[r]));
    }
    return;
  }
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) {
    if (r >= rows) break;
    float* row = C + r * ldc;
    V::store(row, n0, V::fmadd(va, lo[r], V::load(row, n0)));
    if (n1 > 0) V::store(row + L, n1, V::fmadd(va, hi[r], V::load(row + L, n1)));
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

// C = alpha op(A) op(B) + beta C (+ bias); with kTransC the product computed is C's transpose
// (M and N are C's columns and rows, bias runs along M) and C is written through it.
template <bool kTransC>
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const float* bias, const GemmEpilogue* epilogue) {
  // beta 0 without a bias: the first depth step writes C; else C is initialised (scaled by
  // beta, the bias added; transposed, by the first step's tiles) and every step adds into it.
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
  // With op(B) too wide to pack whole and several blocks of rows, one operand is packed more
  // than once a depth step: B once per block of rows, or A's packed panels once per block of
  // columns. Columns go outermost when that packs fewer floats: A read in place leaves only a
  // last partial panel to pack (the LM head's forward: 256 rows of x against 50257 columns of
  // W^T, which rows outermost transposed into panels twice).
  const int64_t row_blocks = (M + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (N + kBlockCols - 1) / kBlockCols;
  const int64_t a_packed_rows = ta ? M : M % kRows;
  const bool cols_outer = !whole_b && row_blocks > 1 &&
                          (col_blocks - 1) * a_packed_rows < (row_blocks - 1) * N;

  for (int64_t pc = 0; pc < K; pc += kDepth) {
    const int64_t kc = std::min(kDepth, K - pc);
    const bool first = pc == 0, last = pc + kc == K;
    // The packed panels of A's rows [icb, icb + mc) that are not read in place.
    auto pack_a_block = [&](int64_t icb, int64_t mc) {
      for (int64_t ic = 0; ic < mc; ic += kRows) {
        const int64_t mr = std::min(kRows, mc - ic);
        if (!in_place(mr)) pack_a(ta, A, lda, icb + ic, mr, pc, kc, packed_a + ic * kc);
      }
    };
    // Rows [icb, icb + mc) by columns [jc, jc + nc) of C against packed B's block b.
    auto run_block = [&](int64_t icb, int64_t mc, int64_t jc, int64_t nc, const float* b) {
      for (int64_t ic = icb; ic < icb + mc; ic += kRows) {
        const int64_t mr = std::min(kRows, icb + mc - ic);
        // Initialised right before the first tile adds into it, while it comes into cache;
        // transposed, the first depth step's tiles apply beta and the bias as they store.
        if (!kTransC && first && init) gemm_init_block(C, ldc, beta, bias, ic, mr, jc, nc);
        const float tile_beta = kTransC && first ? beta : first && overwrite ? 0.0f : 1.0f;
        const float* tile_bias = kTransC && first && bias ? bias + ic : nullptr;
        float* c = kTransC ? C + jc * ldc + ic : C + ic * ldc + jc;
        const int64_t step = kTransC ? ldc : 1;  // from a tile's columns to the next's
        if (in_place(mr)) {
          const float* a = A + ic * lda + pc;
          for (int64_t jr = 0; jr < nc; jr += kCols)
            tile<kRows, true, kTransC>(kc, a, lda, b + jr * kc, alpha, c + jr * step, ldc, mr,
                                       std::min(kCols, nc - jr), tile_beta, tile_bias);
        } else {
          const float* a = packed_a + (ic - icb) * kc;
          // The fewest rows that cover the panel's mr: a third, two thirds or all of kRows.
          const auto run = mr <= kRows / 3       ? &tile<kRows / 3, false, kTransC>
                           : mr <= 2 * kRows / 3 ? &tile<2 * kRows / 3, false, kTransC>
                                                 : &tile<kRows, false, kTransC>;
          for (int64_t jr = 0; jr < nc; jr += kCols)
            run(kc, a, 0, b + jr * kc, alpha, c + jr * step, ldc, mr, std::min(kCols, nc - jr),
                tile_beta, tile_bias);
        }
        if (!kTransC && last && epilogue) (*epilogue)(ic, mr, jc, nc);
      }
      // Transposed, a panel is a few columns of C: the epilogue sees the whole block at once.
      if (kTransC && last && epilogue) (*epilogue)(jc, nc, icb, mc);
    };
    if (cols_outer) {
      for (int64_t jc = 0; jc < N; jc += kBlockCols) {
        const int64_t nc = std::min(kBlockCols, N - jc);
        pack_b(tb, B, ldb, pc, kc, jc, nc, packed_b);
        for (int64_t icb = 0; icb < M; icb += kBlockRows) {
          const int64_t mc = std::min(kBlockRows, M - icb);
          pack_a_block(icb, mc);
          run_block(icb, mc, jc, nc, packed_b);
        }
      }
      continue;
    }
    if (whole_b) pack_b(tb, B, ldb, pc, kc, 0, N, packed_b);
    for (int64_t icb = 0; icb < M; icb += kBlockRows) {
      const int64_t mc = std::min(kBlockRows, M - icb);
      pack_a_block(icb, mc);
      for (int64_t jc = 0; jc < N; jc += kBlockCols) {
        const int64_t nc = std::min(kBlockCols, N - jc);
        if (!whole_b) pack_b(tb, B, ldb, pc, kc, jc, nc, packed_b);
        run_block(icb, mc, jc, nc, whole_b ? packed_b + jc * kc : packed_b);
      }
    }
  }
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const float* bias, const GemmEpilogue* epilogue) {
  // A B^T with both stored row by row along the depth (a linear layer's forward, x W^T) and
  // more columns than rows: op(B) would be transposed into panels, N x K values, for M rows
  // to use. Computed as its transpose B A^T instead, W is read where it lies and x, the
  // smaller, is the one transposed; each tile is transposed on its way out.
  if (!ta && tb && N > M)
    product<true>(false, true, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc, bias, epilogue);
  else
    product<false>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epilogue);
}

}  // namespace merak::cpu

#endif  // MERAK_SGEMM_SIMD
