// Harness cases for the shape ops, and unit tests of what the harness can't see: which results
// are views (sharing storage), reshape's copy of a strided input, sum_to.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "merak/autograd/engine.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "tests/ops/harness.h"

namespace merak::test {
namespace {

// Builds y[i] = x[src(index of i in y)] for an output shape: the references below only say
// where each output element comes from.
template <typename F>
Tensor gather_ref(const Tensor& x, const Shape& out_shape, F src) {
  const std::vector<double> v = values(x);
  std::vector<double> out(size_t(numel(out_shape)));
  for (int64_t i = 0; i < int64_t(out.size()); ++i)
    out[size_t(i)] = v[size_t(ravel(src(unravel(i, out_shape)), x.shape()))];
  return make_f64(out_shape, out);
}

OpCase make_case(std::string label, std::vector<Tensor> inputs, Attrs attrs, ReferenceFn ref) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  c.reference = std::move(ref);
  return c;
}

// Reshape keeps row-major order: the values are the input's, in a new shape.
OpCase reshape_case(std::string label, const Shape& in, const Shape& target, const Shape& out,
                    uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)}, Attrs().set("shape", target),
                   [out](const std::vector<Tensor>& x, const Attrs&) {
                     return std::vector<Tensor>{make_f64(out, values(x[0]))};
                   });
}

OpCase permute_case(std::string label, const Shape& in, std::vector<int64_t> order,
                    uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)}, Attrs().set("order", order),
                   [order](const std::vector<Tensor>& x, const Attrs&) {
                     const int64_t r = x[0].dim();
                     Shape out(r, 0);
                     std::vector<int64_t> o(r, 0);
                     for (int64_t i = 0; i < r; ++i) {
                       o[size_t(i)] = order[size_t(i)] < 0 ? order[size_t(i)] + r : order[size_t(i)];
                       out[size_t(i)] = x[0].shape()[size_t(o[size_t(i)])];
                     }
                     return std::vector<Tensor>{gather_ref(x[0], out, [&](const auto& idx) {
                       std::vector<int64_t> s(idx.size());
                       for (int64_t i = 0; i < r; ++i) s[size_t(o[size_t(i)])] = idx[size_t(i)];
                       return s;
                     })};
                   });
}

OpCase transpose_case(std::string label, const Shape& in, int64_t d0, int64_t d1,
                      uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)}, Attrs().set("dim0", d0).set("dim1", d1),
                   [d0, d1](const std::vector<Tensor>& x, const Attrs&) {
                     const int64_t r = x[0].dim();
                     const size_t a = size_t(d0 < 0 ? d0 + r : d0), b = size_t(d1 < 0 ? d1 + r : d1);
                     Shape out = x[0].shape();
                     std::swap(out[a], out[b]);
                     return std::vector<Tensor>{gather_ref(x[0], out, [&](auto idx) {
                       std::swap(idx[a], idx[b]);
                       return idx;
                     })};
                   });
}

// Python-style slice: the reference spells the clamping out on its own.
OpCase slice_case(std::string label, const Shape& in, int64_t dim, int64_t start, int64_t end,
                  uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)},
                   Attrs().set("dim", dim).set("start", start).set("end", end),
                   [dim, start, end](const std::vector<Tensor>& x, const Attrs&) {
                     const size_t d = size_t(dim < 0 ? dim + x[0].dim() : dim);
                     const int64_t n = x[0].shape()[d];
                     int64_t lo = start < 0 ? start + n : start, hi = end < 0 ? end + n : end;
                     lo = std::min(std::max(lo, int64_t(0)), n);
                     hi = std::min(std::max(hi, int64_t(0)), n);
                     Shape out = x[0].shape();
                     out[d] = std::max(int64_t(0), hi - lo);
                     return std::vector<Tensor>{gather_ref(x[0], out, [&](auto idx) {
                       idx[d] += lo;
                       return idx;
                     })};
                   });
}

OpCase slice_grad_case(std::string label, const Shape& in, int64_t dim, int64_t start,
                       int64_t size, uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)},
                   Attrs().set("dim", dim).set("start", start).set("size", size),
                   [dim, start, size](const std::vector<Tensor>& x, const Attrs&) {
                     const size_t d = size_t(dim < 0 ? dim + x[0].dim() : dim);
                     const int64_t len = x[0].shape()[d];
                     Shape out = x[0].shape();
                     out[d] = size;
                     const std::vector<double> v = values(x[0]);
                     std::vector<double> y(size_t(numel(out)), 0.0);
                     for (int64_t i = 0; i < int64_t(y.size()); ++i) {
                       auto idx = unravel(i, out);
                       if (idx[d] < start || idx[d] >= start + len) continue;
                       idx[d] -= start;
                       y[size_t(i)] = v[size_t(ravel(idx, x[0].shape()))];
                     }
                     return std::vector<Tensor>{make_f64(out, y)};
                   });
}

OpCase expand_case(std::string label, const Shape& in, const Shape& target, const Shape& out,
                   uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)}, Attrs().set("shape", target),
                   [out](const std::vector<Tensor>& x, const Attrs&) {
                     const std::vector<double> v = values(x[0]);
                     std::vector<double> y(size_t(numel(out)));
                     for (int64_t i = 0; i < int64_t(y.size()); ++i)
                       y[size_t(i)] = v[size_t(broadcast_source(unravel(i, out), x[0].shape()))];
                     return std::vector<Tensor>{make_f64(out, y)};
                   });
}

// Which input, and which index in it, each element of the concatenation comes from.
std::vector<Tensor> concat_ref(const std::vector<Tensor>& xs, int64_t dim) {
  const size_t d = size_t(dim < 0 ? dim + xs[0].dim() : dim);
  Shape out = xs[0].shape();
  out[d] = 0;
  for (const Tensor& x : xs) out[d] += x.shape()[d];
  std::vector<double> y(size_t(numel(out)));
  for (int64_t i = 0; i < int64_t(y.size()); ++i) {
    auto idx = unravel(i, out);
    size_t k = 0;
    while (idx[d] >= xs[k].shape()[d]) idx[d] -= xs[k++].shape()[d];
    y[size_t(i)] = values(xs[k])[size_t(ravel(idx, xs[k].shape()))];
  }
  return {make_f64(out, y)};
}

OpCase concat_case(std::string label, const std::vector<Shape>& shapes, int64_t dim,
                   uint64_t seed) {
  std::vector<Tensor> xs;
  for (const Shape& s : shapes) xs.push_back(rand_f64(s, seed++));
  return make_case(std::move(label), xs, Attrs().set("dim", dim),
                   [dim](const std::vector<Tensor>& in, const Attrs&) {
                     return concat_ref(in, dim);
                   });
}

OpCase split_case(std::string label, const Shape& in, std::vector<int64_t> sizes, int64_t dim,
                  uint64_t seed) {
  return make_case(std::move(label), {rand_f64(in, seed)},
                   Attrs().set("sizes", sizes).set("dim", dim),
                   [sizes, dim](const std::vector<Tensor>& x, const Attrs&) {
                     const size_t d = size_t(dim < 0 ? dim + x[0].dim() : dim);
                     std::vector<Tensor> outs;
                     int64_t start = 0;
                     for (int64_t n : sizes) {
                       Shape out = x[0].shape();
                       out[d] = n;
                       outs.push_back(gather_ref(x[0], out, [&](auto idx) {
                         idx[d] += start;
                         return idx;
                       }));
                       start += n;
                     }
                     return outs;
                   });
}

}  // namespace

MERAK_OP_CASES(reshape) {
  return {
      reshape_case("merge and split dims", {2, 3, 4}, {4, 6}, {4, 6}, 1),
      reshape_case("inferred -1", {2, 3, 4}, {-1, 3}, {8, 3}, 2),
      reshape_case("insert size-1 dims", {6}, {1, 2, 1, 3}, {1, 2, 1, 3}, 3),
      reshape_case("scalar to [1]", {}, {1}, {1}, 4),
      reshape_case("[1, 1] to scalar", {1, 1}, {}, {}, 5),
      reshape_case("empty", {0, 3}, {3, -1}, {3, 0}, 6),
  };
}

MERAK_OP_CASES(permute) {
  return {
      permute_case("rotate three dims", {2, 3, 4}, {2, 0, 1}, 11),
      permute_case("negative dims", {3, 2, 4}, {-1, 0, -2}, 12),
      permute_case("identity", {3, 4}, {0, 1}, 13),
      permute_case("four dims (attention heads)", {2, 3, 2, 4}, {0, 2, 1, 3}, 14),
  };
}

MERAK_OP_CASES(transpose) {
  return {
      transpose_case("matrix", {3, 5}, 0, 1, 21),
      transpose_case("outer dims of three", {2, 3, 4}, 0, 2, 22),
      transpose_case("negative dims", {2, 3, 4}, -1, -2, 23),
      transpose_case("same dim twice", {3, 4}, 1, 1, 24),
  };
}

MERAK_OP_CASES(slice) {
  return {
      slice_case("inner range", {4, 5}, 1, 1, 4, 31),
      slice_case("leading dim", {5, 3}, 0, 2, 5, 32),
      slice_case("negative bounds", {3, 6}, -1, -4, -1, 33),
      slice_case("end past the size clamps", {4, 3}, 0, 1, 100, 34),
      slice_case("start before the beginning clamps", {2, 6}, 1, -100, 2, 35),
      slice_case("end before start is empty", {3, 4}, 1, 3, 1, 36),
      slice_case("middle of three dims", {2, 5, 3}, 1, 2, 3, 37),
  };
}

MERAK_OP_CASES(slice_grad) {
  return {
      slice_grad_case("pad the last dim", {2, 3}, 1, 1, 6, 41),
      slice_grad_case("pad the first dim", {2, 4}, 0, 3, 5, 42),
      slice_grad_case("middle dim, no left padding", {2, 2, 3}, -2, 0, 4, 43),
      slice_grad_case("empty piece gives zeros", {3, 0}, 1, 0, 4, 44),
  };
}

MERAK_OP_CASES(expand) {
  return {
      expand_case("size-1 dims and a new leading dim", {3, 1}, {2, 3, 4}, {2, 3, 4}, 51),
      expand_case("-1 keeps a dim", {3, 1}, {-1, 5}, {3, 5}, 52),
      expand_case("scalar to a matrix", {}, {2, 3}, {2, 3}, 53),
      expand_case("no-op", {2, 3}, {2, 3}, {2, 3}, 54),
      expand_case("inner size-1 dim", {2, 1, 3}, {4, 2, 5, 3}, {4, 2, 5, 3}, 55),
  };
}

MERAK_OP_CASES(concat) {
  return {
      concat_case("middle dim, uneven, one empty", {{2, 1, 3}, {2, 2, 3}, {2, 0, 3}}, 1, 61),
      concat_case("leading dim", {{1, 4}, {3, 4}}, 0, 64),
      concat_case("last dim by -1", {{3, 2}, {3, 3}, {3, 1}}, -1, 66),
      concat_case("single input", {{2, 3}}, 0, 69),
  };
}

MERAK_OP_CASES(split) {
  return {
      split_case("two pieces of the leading dim", {5, 4}, {2, 3}, 0, 71),
      split_case("with an empty piece", {3, 4}, {1, 0, 3}, 1, 72),
      split_case("last dim, qkv-like", {2, 2, 6}, {2, 2, 2}, -1, 73),
      split_case("one piece", {3, 2}, {3}, 0, 74),
  };
}

MERAK_OP_CASES(contiguous) {
  auto c = make_case("already contiguous", {rand_f64({3, 4}, 81)}, Attrs(),
                     [](const std::vector<Tensor>& x, const Attrs&) {
                       return std::vector<Tensor>{make_f64(x[0].shape(), values(x[0]))};
                     });
  auto s = c;
  s.label = "scalar";
  s.inputs = {rand_f64({}, 82)};
  return {c, s};
}

// --- what the harness can't see: views, copies of strided inputs, sum_to ---

TEST_CASE("shape ops: view ops share storage, reshape copies only strided inputs") {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor r = ops::reshape(x, {3, 2});
  CHECK(r.impl().storage == x.impl().storage);
  CHECK(ops::slice(x, 1, 1, 3).impl().storage == x.impl().storage);
  CHECK(ops::expand(ops::reshape(x, {2, 1, 3}), {2, 4, 3}).strides() == Shape{3, 0, 1});
  for (const Tensor& p : ops::split(x, {1, 2}, 1)) CHECK(p.impl().storage == x.impl().storage);

  // A transpose can't be flattened in place: reshape copies, in row-major order of the view.
  Tensor t = ops::transpose(x, 0, 1);
  CHECK_FALSE(t.is_contiguous());
  Tensor flat = ops::reshape(t, {6});
  CHECK(flat.impl().storage != x.impl().storage);
  CHECK(flat.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  // ... but splitting one of its dims is still a view.
  Tensor m = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor split_dim = ops::reshape(ops::transpose(m, 0, 1), {2, 2, 3});
  CHECK(split_dim.impl().storage == m.impl().storage);
  CHECK(split_dim.to_vector<float>() ==
        std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});

  Tensor c = ops::contiguous(t);
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(ops::contiguous(x).same(x));  // no copy, no new node
}

TEST_CASE("shape ops: concat and slice_grad move any dtype") {
  Tensor a = Tensor::from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<int64_t>({5, 6}, {2, 1});
  CHECK(ops::concat({a, b}, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 5, 3, 4, 6});
  Tensor g = ops::call1(ops::def("slice_grad"), {b},
                        ops::Attrs().set("dim", 1).set("start", 1).set("size", 3));
  CHECK(g.to_vector<int64_t>() == std::vector<int64_t>{0, 5, 0, 0, 6, 0});
}

TEST_CASE("shape ops: errors name the shapes") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(ops::reshape(x, {4, 2}), Catch::Contains("reshape"));
  CHECK_THROWS_WITH(ops::concat({x, Tensor::zeros({3, 3})}, 1), Catch::Contains("[3, 3]"));
  CHECK_THROWS_WITH(ops::split(x, {1, 1}, 1), Catch::Contains("sum to 2"));
  // Sizes whose sum overflows int64 are refused before they are summed (UBSan would report it).
  const int64_t big = std::numeric_limits<int64_t>::max() - 1;
  CHECK_THROWS_WITH(ops::split(x, {big, big}, 1), Catch::Contains("sum to more than 3"));
  CHECK_THROWS_WITH(ops::split(x, {2, big}, 1), Catch::Contains("sum to more than 3"));
  const ops::OpDef& concat = ops::Registry::get().at("concat");
  const std::vector<ops::TensorMeta> huge(2, ops::TensorMeta{{big, 2}, DType::F32});
  const ops::Attrs dim0 = ops::complete_attrs(concat, ops::Attrs().set("dim", 0));
  CHECK_THROWS_WITH(ops::infer(concat, huge, dim0), Catch::Contains("overflow"));
  CHECK_THROWS_WITH(ops::expand(x, {2, 4}), Catch::Contains("[2, 3]"));
  // Negative sizes are refused where the input's size is 1 too, not only in new leading dims.
  CHECK_THROWS_WITH(ops::expand(Tensor::zeros({1, 3}), {-5, 3}),
                    Catch::Contains("cannot expand x [1, 3] to [-5, 3]: negative size in dim 0"));
  CHECK_THROWS_WITH(ops::expand(Tensor::zeros({2, 1}), {2, -3}),
                    Catch::Contains("to [2, -3]: negative size in dim 1"));
  CHECK_THROWS_WITH(ops::expand(x, {-1, 2, 3}), Catch::Contains("negative size in dim 0 (-1"));
  CHECK(ops::expand(Tensor::zeros({1, 3}), {0, 3}).numel() == 0);
  CHECK_THROWS_WITH(ops::permute(x, {0, 0}), Catch::Contains("repeats"));
}

TEST_CASE("split backward: pieces without a gradient count as zeros") {
  auto leaf = [] {
    Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
    x.set_requires_grad(true);
    return x;
  };
  Tensor ones_1x2 = Tensor::ones({1, 2}, DType::F64);
  // One piece used: slice_grad pads it.
  Tensor x = leaf();
  auto parts = ops::split(x, {1, 2, 1}, 0);
  autograd::backward({parts[1]}, {Tensor::ones({2, 2}, DType::F64)});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 1, 1, 1, 0, 0});
  // Two of three: concat with a zero block in the middle.
  Tensor y = leaf();
  parts = ops::split(y, {1, 2, 1}, 0);
  autograd::backward({parts[0], parts[2]}, {ones_1x2, ones_1x2});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 0, 0, 1, 1});
}

TEST_CASE("sum_to inverts broadcasting") {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  CHECK(ops::sum_to(x, {2, 2, 3}).same(x));
  CHECK(ops::sum_to(x, {3}).to_vector<double>() == std::vector<double>{22, 26, 30});
  // [2, 1] aligns with the last two dims: sums dim 0 (leading) and dim 2.
  CHECK(ops::sum_to(x, {2, 1}).to_vector<double>() == std::vector<double>{6 + 24, 15 + 33});
  Tensor s = ops::sum_to(x, {1, 2, 1});
  CHECK(s.shape() == Shape{1, 2, 1});
  CHECK(s.to_vector<double>() == std::vector<double>{6 + 24, 15 + 33});
  CHECK(ops::sum_to(x, {}).item() == 78);
  CHECK_THROWS(ops::sum_to(x, {2}));
  CHECK_THROWS(ops::sum_to(x, {1, 2, 2, 3}));
}

TEST_CASE("reductions: threads and layouts agree with a plain loop in f32") {
  // Big enough for the thread-split and pairwise paths; integers keep f32 sums exact.
  const int64_t rows = 3000, cols = 37;
  std::vector<float> v(size_t(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(int64_t(i * 7919 % 13) - 6);
  Tensor x = Tensor::from_vector(v, {rows, cols});
  std::vector<float> col(size_t(cols), 0), row(size_t(rows), 0);
  float all = 0, mx = -1e30f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float e = v[size_t(r * cols + c)];
      col[size_t(c)] += e;
      row[size_t(r)] += e;
      all += e;
      mx = std::max(mx, e);
    }
  CHECK(ops::sum(x, {0}).to_vector<float>() == col);
  CHECK(ops::sum(x, {1}).to_vector<float>() == row);
  CHECK(ops::sum(x).item() == all);
  CHECK(ops::max(x).item() == mx);
  // NaN is not lost by max.
  v[1234] = std::nanf("");
  CHECK(std::isnan(ops::max(Tensor::from_vector(v, {rows, cols})).item()));
  CHECK(std::isnan(ops::max(Tensor::from_vector(v, {rows, cols}), {0}).to_vector<float>()[1234 % cols]));
}

}  // namespace merak::test
