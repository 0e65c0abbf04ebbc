// cpu::gemm against a naive f64 product: every transpose pair, beta 0 / 1 / other, bias, strided
// operands, and shapes beyond one cache block in each dimension (the blocked loop's edges).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "merak/core/parallel.h"

using merak::cpu::gemm;

namespace {

struct Case {
  int64_t M, N, K;
};

// Deterministic values in [-1, 1) that differ per matrix and element.
template <typename T>
std::vector<T> values(int64_t n, int seed) {
  std::vector<T> v(static_cast<size_t>(n));
  uint32_t s = 2654435761u * uint32_t(seed + 1);
  for (T& x : v) {
    s = s * 1664525u + 1013904223u;
    x = T(int32_t(s >> 8) % 2048) / T(1024) - T(1);
  }
  return v;
}

template <typename T>
void check(bool ta, bool tb, Case c, T alpha, T beta, bool with_bias, bool threaded) {
  const int64_t pad = 3;  // leading dimensions wider than the rows
  const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
  const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
  const std::vector<T> A = values<T>(a_rows * lda, 1), B = values<T>(b_rows * ldb, 2);
  const std::vector<T> bias = values<T>(c.N, 3);
  std::vector<T> C = values<T>(c.M * ldc, 4);
  const std::vector<T> C0 = C;
  // beta == 0 must never read C: NaNs there would show.
  if (beta == T(0))
    for (T& x : C) x = std::numeric_limits<T>::quiet_NaN();

  gemm<T>(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc,
          threaded, with_bias ? bias.data() : nullptr);

  const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
        const double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
        dot += a * b;
        mag += std::abs(a * b);
      }
      double want = double(alpha) * dot;
      if (beta != T(0)) want += double(beta) * double(C0[size_t(i * ldc + j)]);
      if (with_bias) want += double(bias[size_t(j)]);
      const double got = double(C[size_t(i * ldc + j)]);
      if (!(std::abs(got - want) <= tol * (1 + std::abs(alpha) * mag))) ++bad;
    }
    // The padding past column N is never written.
    for (int64_t j = c.N; j < ldc && i + 1 < c.M; ++j)
      if (!(beta == T(0) ? std::isnan(C[size_t(i * ldc + j)])
                         : C[size_t(i * ldc + j)] == C0[size_t(i * ldc + j)]))
        ++bad;
  }
  INFO("ta " << ta << " tb " << tb << " M " << c.M << " N " << c.N << " K " << c.K << " alpha "
             << alpha << " beta " << beta << " bias " << with_bias << " threaded " << threaded);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("gemm matches a naive product for every transpose pair, beta and bias", "[gemm]") {
  merak::set_num_threads(2);
  const std::vector<Case> cases = {{1, 1, 1}, {5, 3, 7}, {17, 33, 9}, {64, 48, 130},
                                   {130, 70, 5}, {3, 200, 64}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Case& c : cases)
        for (float beta : {0.0f, 1.0f, 0.5f})
          for (bool bias : {false, true}) check<float>(ta, tb, c, 1.0f, beta, bias, false);
}

TEST_CASE("gemm handles blocks beyond the cache blocking, threaded, and in double", "[gemm]") {
  merak::set_num_threads(2);
  // Long depth (several depth blocks), many rows and columns (several row and column blocks),
  // and sizes that are not multiples of the register tile.
  // Wide outputs (many columns of ours per block) also run the kernel in several row groups.
  // {50, 700, 1300} is x W^T's transposed path (more columns than rows) over several depth
  // blocks, where the first block's tiles apply beta and the bias.
  const std::vector<Case> cases = {{67, 45, 1500}, {900, 37, 300}, {41, 1300, 260},
                                   {300, 1000, 64}, {50, 700, 1300}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Case& c : cases)
        for (bool threaded : {false, true}) {
          check<float>(ta, tb, c, 1.0f, 0.0f, true, threaded);
          check<float>(ta, tb, c, 2.0f, 0.0f, false, threaded);  // the first depth step writes C
          check<float>(ta, tb, c, -0.5f, 1.0f, false, threaded);
          check<float>(ta, tb, c, 1.5f, 0.5f, true, threaded);
        }
  check<double>(false, true, {300, 200, 700}, 1.0, 0.0, true, true);
  check<double>(true, false, {150, 90, 40}, 2.0, 0.25, false, false);
}

TEST_CASE("gemm with op(B) too wide to pack whole and several blocks of rows", "[gemm]") {
  // 256 deep x 8300 columns is more than the f32 kernel packs of op(B) at once, and 140 rows
  // are two blocks of rows: the kernel takes columns outermost (B packed once a block) and
  // packs A's panels again for every block of columns.
  const Case wide{140, 8300, 260};
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check<float>(ta, tb, wide, 1.0f, 0.0f, true, false);
      check<float>(ta, tb, wide, -0.5f, 1.0f, false, false);
    }
}

TEST_CASE("gemm's epilogue sees every block of C once, holding its final values", "[gemm]") {
  merak::set_num_threads(2);
  // Rows outermost (several blocks of each), columns outermost (op(B) too wide to pack), and
  // a depth of several depth blocks (1024 deep with AVX-512, 256 with AVX2).
  for (const Case c : {Case{300, 1000, 300}, Case{140, 8300, 260}, Case{100, 300, 2100}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})  // x W^T (ta false, tb true) is computed transposed
        for (bool threaded : {false, true}) {
          const int64_t lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N;
          const std::vector<float> A = values<float>(c.M * c.K, 1), B = values<float>(c.K * c.N, 2);
          std::vector<float> C(size_t(c.M * c.N)), seen(C.size());
          std::vector<int> visits(C.size(), 0);
          std::mutex mu;  // blocks may come from different threads
          const merak::cpu::GemmEpilogue epilogue = [&](int64_t row, int64_t rows, int64_t col,
                                                        int64_t cols) {
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t i = row; i < row + rows; ++i)
              for (int64_t j = col; j < col + cols; ++j) {
                ++visits[size_t(i * c.N + j)];
                seen[size_t(i * c.N + j)] = C[size_t(i * c.N + j)];
              }
          };
          gemm<float>(ta, tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f,
                      C.data(), c.N, threaded, nullptr, &epilogue);
          int64_t wrong_visits = 0, not_final = 0;
          for (size_t i = 0; i < C.size(); ++i) {
            wrong_visits += visits[i] != 1;
            not_final += seen[i] != C[i];
          }
          INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << ta << " tb " << tb
                    << " threaded " << threaded);
          CHECK(wrong_visits == 0);
          CHECK(not_final == 0);
        }
}

TEST_CASE("gemm with an empty depth or alpha 0 only applies beta and the bias", "[gemm]") {
  for (bool ta : {false, true}) {
    check<float>(ta, false, {4, 5, 0}, 1.0f, 0.0f, true, false);
    check<float>(ta, true, {4, 5, 6}, 0.0f, 0.5f, true, false);
  }
}
