#include <catch2/catch.hpp>

#include <cstring>

#include "merak/core/parallel.h"
#include "merak/core/tensor.h"

using namespace merak;

namespace {
Tensor arange(const Shape& shape) {
  std::vector<float> v(size_t(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return Tensor::from_vector(v, shape);
}
}  // namespace

TEST_CASE("factories fill and report shape, dtype, bytes", "[core]") {
  Tensor t = Tensor::full({2, 3}, 1.5);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>(6, 1.5f));
  CHECK(Tensor::zeros({4}, DType::I64).to_vector<int64_t>() == std::vector<int64_t>(4, 0));
  CHECK(Tensor::scalar(3.0).item() == 3.0);
  CHECK_THROWS_WITH(Tensor::empty({2, -1}), Catch::Contains("negative size"));
  // Sizes whose product (or byte count) wraps around int64 are refused, not allocated small.
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 62, 128}),
                    Catch::Contains("has more elements than int64 counts"));
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 62}),
                    Catch::Contains("has more bytes than int64 counts"));
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 62, 128}, DType::F32, Device::meta()),
                    Catch::Contains("has more elements than int64 counts"));
}

TEST_CASE("transpose and permute are views; contiguous copies only when needed", "[core]") {
  Tensor a = arange({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.impl().storage == a.impl().storage);
  // element (i, j, k) of t is element (k, j, i) of a = k*12 + j*4 + i
  const auto v = t.contiguous().to_vector<float>();
  CHECK(v[1] == 12.0f);                     // t[0][0][1] = a[1][0][0]
  CHECK(v[2 * 2 + 1] == 12.0f + 4.0f * 2);  // t[0][2][1] = a[1][2][0]
  CHECK(a.contiguous().same(a));            // already contiguous: no copy
  Tensor p = a.permute({1, 2, 0});
  CHECK(p.shape() == Shape{3, 4, 2});
  CHECK(p.contiguous().to_vector<float>()[1] == 12.0f);  // p[0][0][1] = a[1][0][0]
  CHECK_THROWS(a.permute({0, 0, 1}));
}

TEST_CASE("narrow and expand share storage with the right offsets and strides", "[core]") {
  Tensor a = arange({4, 5});
  Tensor n = a.narrow(1, 2, 3);
  CHECK(n.shape() == Shape{4, 3});
  CHECK(n.contiguous().to_vector<float>() ==
        std::vector<float>{2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19});
  CHECK_THROWS(a.narrow(0, 3, 2));
  Tensor row = arange({1, 3});
  Tensor e = row.expand({4, 3});
  CHECK(e.strides() == Shape{0, 1});
  CHECK(e.contiguous().to_vector<float>() ==
        std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2});
  CHECK(arange({3}).expand({2, 3}).shape() == Shape{2, 3});
  CHECK_THROWS(arange({2}).expand({3}));
}

TEST_CASE("view reshapes without copying, including compatible non-contiguous views", "[core]") {
  Tensor a = arange({2, 3, 4});
  Tensor v = a.view({6, -1});
  CHECK(v.shape() == Shape{6, 4});
  CHECK(v.impl().storage == a.impl().storage);
  // A narrowed tensor whose kept dims are still contiguous among themselves.
  Tensor n = arange({4, 2, 3}).narrow(0, 1, 2);  // [2, 2, 3], contiguous inner block
  CHECK(n.view({2, 6}).contiguous().to_vector<float>() == n.contiguous().to_vector<float>());
  // Splitting a transposed dim keeps its stride pattern.
  Tensor t = arange({4, 6}).transpose(0, 1);  // [6, 4] strides [1, 6]
  Tensor s = t.view({2, 3, 4});
  CHECK(s.contiguous().to_vector<float>() == t.contiguous().to_vector<float>());
  // Merging dims across the transpose is impossible without a copy.
  CHECK_THROWS_WITH(t.view({24}), Catch::Contains("reshape copies"));
  CHECK_THROWS(a.view({5, -1}));
}

TEST_CASE("copy_ and clone handle any strides and keep values", "[core]") {
  Tensor a = arange({3, 4});
  Tensor dst = Tensor::zeros({4, 3});
  dst.copy_(a.transpose(0, 1));
  CHECK(dst.to_vector<float>() == a.transpose(0, 1).contiguous().to_vector<float>());
  Tensor c = a.clone();
  CHECK(c.impl().storage != a.impl().storage);
  CHECK(c.to_vector<float>() == a.to_vector<float>());
  CHECK_THROWS(dst.copy_(a));  // shape mismatch
}

TEST_CASE("copy_ from a view of the same bytes reads the source as it was", "[core]") {
  Tensor m = arange({3, 3});
  m.copy_(m.transpose(0, 1));
  CHECK(m.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
  Tensor u = arange({10});  // every even slot takes the one two before it
  u.as_strided({4}, {2}, 2).copy_(u.as_strided({4}, {2}, 0));
  CHECK(u.to_vector<float>() == std::vector<float>{0, 1, 0, 3, 2, 5, 4, 7, 6, 9});
  // Contiguous and large (copied over the pool in blocks): a shift by one element.
  const int64_t n = int64_t(6) << 20;
  Tensor big = arange({n + 1});
  big.narrow(0, 1, n).copy_(big.narrow(0, 0, n));
  const float* p = big.data<float>();
  bool shifted = p[0] == 0;
  for (int64_t i = 1; i <= n && shifted; ++i) shifted = p[i] == float(i - 1);
  CHECK(shifted);
}

TEST_CASE("an empty view is contiguous, whatever its strides", "[core]") {
  Tensor e = Tensor::zeros({3, 4}).narrow(1, 1, 0);  // [3, 0], strides [4, 1]
  CHECK(e.is_contiguous());
  e.fill_(1.0);
  CHECK(e.view({0}).numel() == 0);
  CHECK_THROWS_WITH(Tensor::empty({0, int64_t(1) << 40, int64_t(1) << 40}),
                    Catch::Contains("beyond what int64 counts"));
}

TEST_CASE("data access is checked against dtype and device", "[core]") {
  Tensor a = Tensor::zeros({2});
  CHECK_THROWS_WITH(a.data<double>(), Catch::Contains("f32"));
  Tensor m = Tensor::empty({2}, DType::F32, Device::meta());
  CHECK_THROWS_WITH(m.data<float>(), Catch::Contains("Meta"));
  CHECK_THROWS_WITH(allocator_for(Device::cuda()), Catch::Contains("CUDA"));
}

// Large strided copies are split over the pool along their leading dims; every element must
// still land where a plain walk over the view's strides puts it, whatever the layout, the
// element size or the number of threads.
TEST_CASE("strided copies split over threads move every element to its place", "[core]") {
  struct Layout {
    Shape shape;                 // the source tensor, contiguous
    std::vector<int64_t> order;  // the permutation viewed
    int64_t narrow_dim, start, length;  // then narrowed (narrow_dim -1: not)
  };
  const std::vector<Layout> layouts = {
      {{4, 64, 3, 4, 64}, {0, 3, 1, 2, 4}, 3, 1, 1},  // one of q, k, v of a fused projection
      {{4, 64, 3, 4, 64}, {0, 3, 1, 2, 4}, -1, 0, 0},
      {{1, 1, 300, 257}, {0, 1, 3, 2}, -1, 0, 0},     // leading dims of one
      {{2, 300, 257}, {0, 2, 1}, 1, 7, 250},          // fewer rows than threads x 4 at dim 0
      {{600, 333}, {1, 0}, 1, 5, 590},                // a transpose, rank 2
      {{3, 40, 50, 60}, {3, 2, 1, 0}, 3, 1, 2}};
  const int saved = num_threads();
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::Bool}) {
    const int64_t elem = int64_t(dtype_size(dtype));
    for (const Layout& l : layouts) {
      // Each stored element's bytes spell its position, so a misplaced one shows.
      Tensor src = Tensor::empty(l.shape, dtype);
      auto* bytes = static_cast<uint8_t*>(src.raw_data());
      for (int64_t i = 0; i < src.numel(); ++i)
        for (int64_t b = 0; b < elem; ++b) bytes[i * elem + b] = uint8_t((i >> (8 * b)) * 7 + b);
      Tensor view = src.permute(l.order);
      if (l.narrow_dim >= 0) view = view.narrow(l.narrow_dim, l.start, l.length);
      REQUIRE_FALSE(view.is_contiguous());
      REQUIRE(view.nbytes() >= (int64_t(64) << 10));  // large enough to be split
      // Where each element of the view lies in the source: the element-by-element stride walk
      // that kernels taking arbitrary strides use, independent of strided_copy.
      const std::vector<int64_t> expected = element_offsets(view);
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        // Into a poisoned tensor, so that an element left out shows (contiguous() may get a
        // block the last round filled, already right).
        const Tensor out = Tensor::empty(view.shape(), dtype);
        std::memset(out.raw_data(), 0xAB, size_t(out.nbytes()));
        out.copy_(view);
        const auto* got = static_cast<const uint8_t*>(out.raw_data());
        int64_t wrong = 0;
        for (int64_t i = 0; i < out.numel(); ++i)
          wrong += std::memcmp(got + i * elem, bytes + expected[size_t(i)] * elem, size_t(elem)) != 0;
        INFO(dtype_name(dtype) << " " << shape_str(l.shape) << " viewed as "
                               << shape_str(view.shape()) << " on " << threads << " threads");
        CHECK(wrong == 0);
      }
    }
  }
  set_num_threads(saved);
}
