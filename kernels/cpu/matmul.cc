// GEMM (a single-threaded kernel - our own for f32 on AVX-512 or AVX2, Eigen's otherwise -
// split over merak's pool) and the matmul / linear kernels.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/ops/op_util.h"

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/vec_math.h"

namespace merak::cpu {
namespace {

// One GEMM on the calling thread: Eigen's packing routines and register kernel (gebp) under
// our own cache-blocking loop, the loop of Eigen's general_matrix_matrix_product. Driving the
// loop ourselves lets the output be initialised (zeroed, scaled by beta, bias added) block by
// block right before the kernel first accumulates into it, while the block is in cache; a
// separate pass over C first cost 5-25% of a product's time at GPT-2 shapes.
//
// Eigen is column-major, so it computes C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]: its lhs
// is B (row-major storage when trans_b), its rhs is A (row-major when trans_a), and its column
// j of the result is our row j.
template <typename T, int LhsOrder, int RhsOrder>
void gemm_blocked(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                  int64_t ldb, T beta, T* C, int64_t ldc, const T* bias,
                  const GemmEpilogue* epilogue) {
  namespace ei = Eigen::internal;
  using Traits = ei::gebp_traits<T, T>;
  using LhsMapper = ei::const_blas_data_mapper<T, int64_t, LhsOrder>;
  using RhsMapper = ei::const_blas_data_mapper<T, int64_t, RhsOrder>;
  using ResMapper = ei::blas_data_mapper<T, int64_t, Eigen::ColMajor>;
  ei::gemm_pack_lhs<T, int64_t, LhsMapper, Traits::mr, Traits::LhsProgress,
                    typename Traits::LhsPacket4Packing, LhsOrder>
      pack_lhs;
  ei::gemm_pack_rhs<T, int64_t, RhsMapper, Traits::nr, RhsOrder> pack_rhs;
  ei::gebp_kernel<T, T, int64_t, ResMapper, Traits::mr, Traits::nr> kernel;

  const int64_t rows = N, cols = M, depth = K;  // Eigen's view
  const bool init = beta != T(1) || bias != nullptr;

  int64_t kc = depth, mc = rows, nc = cols;
  ei::computeProductBlockingSizes<T, T, 1>(kc, mc, nc, int64_t(1));
  mc = std::min(rows, mc);
  nc = std::min(cols, nc);
  // Packed panels, reused across calls on this thread (Eigen-aligned for its packet loads).
  thread_local Eigen::Matrix<T, Eigen::Dynamic, 1> lhs_buf, rhs_buf;
  if (lhs_buf.size() < kc * mc) lhs_buf.resize(kc * mc);
  if (rhs_buf.size() < kc * nc) rhs_buf.resize(kc * nc);
  T* block_a = lhs_buf.data();
  T* block_b = rhs_buf.data();

  const LhsMapper lhs(B, ldb);
  const RhsMapper rhs(A, lda);
  const ResMapper res(C, ldc);
  const bool pack_rhs_once = mc != rows && kc == depth && nc == cols;
  // On the first depth block the kernel runs over a few of our rows at a time, each group
  // initialised just before, so it is still in cache when the kernel reads it (measured faster
  // even with nothing to initialise, for short depths such as weight gradients).
  const int64_t group = std::max<int64_t>(
      Traits::nr, (int64_t(16) << 10) / std::max<int64_t>(1, mc) / Traits::nr * Traits::nr);
  for (int64_t i2 = 0; i2 < rows; i2 += mc) {
    const int64_t amc = std::min(i2 + mc, rows) - i2;
    for (int64_t k2 = 0; k2 < depth; k2 += kc) {
      const int64_t akc = std::min(k2 + kc, depth) - k2;
      const bool last_depth = k2 + akc == depth;
      pack_lhs(block_a, lhs.getSubMapper(i2, k2), akc, amc);
      for (int64_t j2 = 0; j2 < cols; j2 += nc) {
        const int64_t anc = std::min(j2 + nc, cols) - j2;
        if (!pack_rhs_once || i2 == 0) pack_rhs(block_b, rhs.getSubMapper(k2, j2), akc, anc);
        if (k2 > 0) {
          kernel(res.getSubMapper(i2, j2), block_a, block_b, amc, akc, anc, alpha);
          if (last_depth && epilogue) (*epilogue)(j2, anc, i2, amc);
          continue;
        }
        // Packed rhs columns come in panels of nr, each akc long: column j starts at j * akc.
        for (int64_t j = 0; j < anc; j += group) {
          const int64_t w = std::min(group, anc - j);
          if (k2 == 0 && init) gemm_init_block(C, ldc, beta, bias, j2 + j, w, i2, amc);
          kernel(res.getSubMapper(i2, j2 + j), block_a, block_b + j * akc, amc, akc, w, alpha);
          if (last_depth && epilogue) (*epilogue)(j2 + j, w, i2, amc);
        }
      }
    }
  }
}

template <typename T>
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias,
                 const GemmEpilogue* epi) {
  if (K == 0 || alpha == T(0)) {  // no product: C only starts, for every kernel alike
    if (beta != T(1) || bias) gemm_init_block(C, ldc, beta, bias, 0, M, 0, N);
    if (epi) (*epi)(0, M, 0, N);
    return;
  }
  if constexpr (std::is_same_v<T, float> && kHaveSgemm) {
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epi);
    return;
  }
  constexpr int R = Eigen::RowMajor, Cm = Eigen::ColMajor;
  if (tb && ta) gemm_blocked<T, R, R>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epi);
  else if (tb) gemm_blocked<T, R, Cm>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epi);
  else if (ta) gemm_blocked<T, Cm, R>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epi);
  else gemm_blocked<T, Cm, Cm>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epi);
}

}  // namespace

template <typename T>
void gemm_init_block(T* C, int64_t ldc, T beta, const T* bias, int64_t r0, int64_t nr, int64_t c0,
                     int64_t nc) {
  for (int64_t r = r0; r < r0 + nr; ++r) {
    T* row = C + r * ldc + c0;
    if (beta == T(0)) std::fill(row, row + nc, T(0));
    else if (beta != T(1)) for (int64_t c = 0; c < nc; ++c) row[c] *= beta;
    if (bias) for (int64_t c = 0; c < nc; ++c) row[c] += bias[c0 + c];
  }
}
template void gemm_init_block<float>(float*, int64_t, float, const float*, int64_t, int64_t,
                                     int64_t, int64_t);
template void gemm_init_block<double>(double*, int64_t, double, const double*, int64_t, int64_t,
                                      int64_t, int64_t);

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, bool threaded, const T* bias,
          const GemmEpilogue* epilogue) {
  if (M <= 0 || N <= 0) return;
  const int64_t macs = M * N * K;
  int64_t parts = threaded ? std::min<int64_t>(num_threads(), macs / kGemmMacsPerThread) : 1;
  if (parts <= 1) {
    gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, epilogue);
    return;
  }
  // Split the longer output side into `parts` panels, each a whole GEMM over the full K: every
  // thread packs the shared operand once, and its panel of C stays in its own cache. Panel edges
  // fall on whole register tiles: our f32 kernel's (AVX-512: 12 rows by 32 columns; AVX2: 6 by
  // 16), 8 by 16 for Eigen's.
  const bool split_n = N >= M;
  const int64_t len = split_n ? N : M;
  constexpr bool own = std::is_same_v<T, float> && kHaveSgemm;
  const int64_t align = split_n ? (own ? kSgemmTile.cols : 16) : (own ? kSgemmTile.rows : 8);
  const int64_t chunk = ((len + parts - 1) / parts + align - 1) / align * align;
  parts = (len + chunk - 1) / chunk;
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t s = p * chunk, n = std::min(len, s + chunk) - s;
      // The panel's epilogue sees the whole C's coordinates.
      GemmEpilogue shifted;
      if (epilogue) {
        shifted = [&, s](int64_t row, int64_t rows, int64_t col, int64_t cols) {
          (*epilogue)(split_n ? row : row + s, rows, split_n ? col + s : col, cols);
        };
      }
      const GemmEpilogue* epi = epilogue ? &shifted : nullptr;
      if (split_n) {
        gemm_serial(ta, tb, M, n, K, alpha, A, lda, tb ? B + s * ldb : B + s, ldb, beta, C + s,
                    ldc, bias ? bias + s : nullptr, epi);
      } else {
        gemm_serial(ta, tb, n, N, K, alpha, ta ? A + s : A + s * lda, lda, B, ldb, beta,
                    C + s * ldc, ldc, bias, epi);
      }
    }
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t, bool, const float*,
                          const GemmEpilogue*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, bool, const double*,
                           const GemmEpilogue*);

namespace {

using ops::Attrs;

// Row-major element offsets of each broadcast batch index into a tensor with batch dims `dims`
// (right-aligned against `out`), in matrices: size-1 dims repeat.
std::vector<int64_t> batch_offsets(const Shape& dims, const Shape& out) {
  const int64_t n = numel(out);
  std::vector<int64_t> offsets(size_t(n), 0);
  const int64_t lead = int64_t(out.size()) - int64_t(dims.size());
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, stride = 1, off = 0;
    for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
      const int64_t i = rest % out[d];
      rest /= out[d];
      if (d >= lead) {
        const int64_t size = dims[d - lead];
        if (size != 1) off += i * stride;
        stride *= size;
      }
    }
    offsets[size_t(flat)] = off;
  }
  return offsets;
}

template <typename T>
void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const Shape& cs = c.shape();
  const int64_t ra = int64_t(as.size()), rb = int64_t(bs.size()), rc = int64_t(cs.size());
  const int64_t M = cs[rc - 2], N = cs[rc - 1];
  const int64_t K = ta ? as[ra - 2] : as[ra - 1];
  const int64_t lda = as[ra - 1], ldb = bs[rb - 1];
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape c_batch(cs.begin(), cs.end() - 2);
  const int64_t batch = numel(c_batch);
  const T* A = a.data<T>();
  const T* B = b.data<T>();
  T* C = c.data<T>();
  if (batch == 0) return;

  // A shared 2-D b against a batched, untransposed a: one tall GEMM over the folded batch.
  if (numel(b_batch) == 1 && !ta && numel(a_batch) == batch) {
    gemm<T>(false, tb, batch * M, N, K, T(1), A, lda, B, ldb, T(0), C, N);
    return;
  }
  const std::vector<int64_t> aoff = batch_offsets(a_batch, c_batch);
  const std::vector<int64_t> boff = batch_offsets(b_batch, c_batch);
  const int64_t a_mat = as[ra - 2] * as[ra - 1], b_mat = bs[rb - 2] * bs[rb - 1];
  auto one = [&](int64_t i, bool threaded) {
    gemm<T>(ta, tb, M, N, K, T(1), A + aoff[size_t(i)] * a_mat, lda, B + boff[size_t(i)] * b_mat,
            ldb, T(0), C + i * M * N, N, threaded);
  };
  // Many (or evenly divisible) products: one whole GEMM per thread, no redundant packing.
  // Otherwise the products run in turn, each split over the pool.
  const int64_t threads = num_threads();
  if (batch >= 4 * threads || batch % threads == 0) {
    const int64_t macs = std::max<int64_t>(1, M * N * K);
    const int64_t grain = std::max<int64_t>(1, kGemmMacsPerThread / macs);
    parallel_for(0, batch, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i, false);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i, true);
  }
}

MERAK_REGISTER_KERNEL(matmul, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                      const Attrs& attrs) {
  const bool ta = attrs.b("trans_a"), tb = attrs.b("trans_b");
  MERAK_DISPATCH_FLOAT(in[0].dtype(), "matmul",
                       [&] { matmul_kernel<scalar_t>(in[0], in[1], out[0], ta, tb); });
});

// y [M, out] = x [M, in] W^T + bias, with every leading dim of x folded into M.
MERAK_REGISTER_KERNEL(linear, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                      const Attrs&) {
  MERAK_DISPATCH_FLOAT(in[0].dtype(), "linear", [&] {
    const Tensor &x = in[0], &w = in[1];
    const Tensor bias = in.size() > 2 ? in[2] : Tensor();
    const int64_t n_in = w.size(1), n_out = w.size(0);
    const int64_t M = numel(Shape(x.shape().begin(), x.shape().end() - 1));
    gemm<scalar_t>(false, true, M, n_out, n_in, scalar_t(1), x.data<scalar_t>(), n_in,
                   w.data<scalar_t>(), n_in, scalar_t(0), out[0].data<scalar_t>(), n_out, true,
                   bias.defined() ? bias.data<scalar_t>() : nullptr);
  });
});

// linear_gelu: the linear GEMM writes pre = x W^T + bias, and its epilogue writes y = gelu(pre)
// block by block while each block of pre is still in cache. The same gelu functions as the gelu
// kernel, so the fused op gives the unfused pair's bits.
template <typename T, typename Gelu>
void linear_gelu_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                        const Tensor& pre, Gelu gelu) {
  const int64_t n_in = w.size(1), n_out = w.size(0);
  const int64_t M = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  T* yp = y.data<T>();
  T* zp = pre.data<T>();
  const GemmEpilogue epilogue = [&](int64_t row, int64_t rows, int64_t col, int64_t cols) {
    for (int64_t r = row; r < row + rows; ++r) {
      const T* z = zp + r * n_out + col;
      T* out = yp + r * n_out + col;
      for (int64_t c = 0; c < cols; ++c) out[c] = gelu(z[c]);
    }
  };
  gemm<T>(false, true, M, n_out, n_in, T(1), x.data<T>(), n_in, w.data<T>(), n_in, T(0), zp,
          n_out, true, bias.defined() ? bias.data<T>() : nullptr, &epilogue);
}

MERAK_REGISTER_KERNEL(linear_gelu, CPU, [](const std::vector<Tensor>& in,
                                           const std::vector<Tensor>& out, const Attrs& a) {
  const bool exact = a.s("approximate") == "none";
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  MERAK_DISPATCH_FLOAT(in[0].dtype(), "linear_gelu", [&] {
    using T = scalar_t;
    if (exact)
      linear_gelu_kernel<T>(in[0], in[1], bias, out[0], out[1], [](T v) { return gelu_erf(v); });
    else
      linear_gelu_kernel<T>(in[0], in[1], bias, out[0], out[1], [](T v) { return gelu_tanh(v); });
  });
});

}  // namespace
}  // namespace merak::cpu
