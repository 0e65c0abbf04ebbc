// GEMM (Eigen's single-threaded kernel, split over merak's pool) and the matmul / linear kernels.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/ops/op_util.h"

#include "kernels/cpu/eigen.h"

namespace merak::cpu {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// One GEMM on the calling thread. Eigen packs transposed operands itself, so all four transpose
// combinations are one blocked product with no copy on our side.
template <typename T>
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias) {
  MutMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  // Eigen's GEMM accumulates into C; prefilling it is how beta and the bias ride along with the
  // product's own output pass.
  if (beta == T(0)) {
    c.setZero();
  } else if (beta != T(1)) {
    c *= beta;
  }
  if (bias) {
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> row(bias, N);
    c.rowwise() += row;
  }
  if (K == 0 || alpha == T(0)) return;
  ConstMap<T> a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
  ConstMap<T> b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
  if (!ta && !tb) {
    c.noalias() += alpha * a * b;
  } else if (!ta && tb) {
    c.noalias() += alpha * a * b.transpose();
  } else if (ta && !tb) {
    c.noalias() += alpha * a.transpose() * b;
  } else {
    c.noalias() += alpha * a.transpose() * b.transpose();
  }
}

}  // namespace

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, bool threaded, const T* bias) {
  if (M <= 0 || N <= 0) return;
  const int64_t macs = M * N * K;
  int64_t parts = threaded ? std::min<int64_t>(num_threads(), macs / kGemmMacsPerThread) : 1;
  if (parts <= 1) {
    gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    return;
  }
  // Split the longer output side into `parts` panels, each a whole GEMM over the full K: every
  // thread packs the shared operand once, and its panel of C stays in its own cache. Panel edges
  // fall on whole vectors (16 floats) along N and on whole register-tile rows along M.
  const bool split_n = N >= M;
  const int64_t len = split_n ? N : M;
  const int64_t align = split_n ? 16 : 8;
  const int64_t chunk = ((len + parts - 1) / parts + align - 1) / align * align;
  parts = (len + chunk - 1) / chunk;
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t s = p * chunk, n = std::min(len, s + chunk) - s;
      if (split_n) {
        gemm_serial(ta, tb, M, n, K, alpha, A, lda, tb ? B + s * ldb : B + s, ldb, beta, C + s,
                    ldc, bias ? bias + s : nullptr);
      } else {
        gemm_serial(ta, tb, n, N, K, alpha, ta ? A + s : A + s * lda, lda, B, ldb, beta,
                    C + s * ldc, ldc, bias);
      }
    }
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t, bool, const float*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, bool, const double*);

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

}  // namespace
}  // namespace merak::cpu
