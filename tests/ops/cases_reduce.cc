// Harness cases for the reductions (sum, mean, max, min, prod). One naive reference serves them
// all: every input element is folded into the output element its index maps to.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "tests/ops/harness.h"

namespace merak::test {
namespace {

enum class Kind { Sum, Mean, Max, Min, Prod };

// acc folded with v by `kind`; max and min propagate NaN.
double fold_ref(Kind kind, double acc, double v) {
  if ((kind == Kind::Max || kind == Kind::Min) && (std::isnan(acc) || std::isnan(v))) return NAN;
  switch (kind) {
    case Kind::Max: return std::max(acc, v);
    case Kind::Min: return std::min(acc, v);
    case Kind::Prod: return acc * v;
    default: return acc + v;
  }
}

Tensor reduce_ref(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Kind kind) {
  const Shape& s = x.shape();
  const int64_t rank = x.dim();
  std::vector<bool> red(size_t(rank), dims.empty());
  for (int64_t d : dims)
    if (rank > 0) red[size_t(d < 0 ? d + rank : d)] = true;
  Shape ks = s;  // keepdim shape
  Shape out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (red[size_t(d)]) ks[size_t(d)] = 1;
    if (!red[size_t(d)] || keepdim) out_shape.push_back(ks[size_t(d)]);
  }
  const int64_t n_out = numel(ks);
  const double inf = std::numeric_limits<double>::infinity();
  const double init = kind == Kind::Max    ? -inf
                      : kind == Kind::Min  ? inf
                      : kind == Kind::Prod ? 1
                                           : 0;
  std::vector<double> acc(size_t(n_out), init);
  std::vector<double> count(size_t(n_out), 0.0);
  const std::vector<double> v = values(x);
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    std::vector<int64_t> idx = unravel(i, s);
    for (int64_t d = 0; d < rank; ++d)
      if (red[size_t(d)]) idx[size_t(d)] = 0;
    const int64_t o = ravel(idx, ks);
    acc[size_t(o)] = fold_ref(kind, acc[size_t(o)], v[size_t(i)]);
    count[size_t(o)] += 1;
  }
  if (kind == Kind::Mean)
    for (int64_t o = 0; o < n_out; ++o) acc[size_t(o)] /= count[size_t(o)];
  return make_f64(out_shape, acc);
}

OpCase reduce_case(Kind kind, std::string label, const Shape& shape, std::vector<int64_t> dims,
                   bool keepdim, uint64_t seed) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {rand_f64(shape, seed)};
  c.attrs = Attrs().set("dims", dims).set("keepdim", keepdim);
  c.reference = [kind, dims, keepdim](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{reduce_ref(in[0], dims, keepdim, kind)};
  };
  return c;
}

// Shapes and dims shared by sum and mean: every layout the kernel distinguishes.
std::vector<OpCase> common_cases(Kind kind) {
  std::vector<OpCase> cs = {
      reduce_case(kind, "all dims", {3, 4}, {}, false, 1),
      reduce_case(kind, "all dims keepdim", {2, 3, 2}, {}, true, 2),
      reduce_case(kind, "last dim", {3, 7}, {-1}, false, 3),
      reduce_case(kind, "leading dims keepdim", {2, 3, 4}, {0, 1}, true, 4),
      reduce_case(kind, "middle dim", {2, 5, 3}, {1}, false, 5),
      reduce_case(kind, "two separate dims", {2, 3, 2, 4}, {2, 0}, false, 6),
      reduce_case(kind, "size-1 dims only", {1, 4, 1}, {0, 2}, false, 7),
      reduce_case(kind, "scalar", {}, {}, false, 8),
      reduce_case(kind, "one element per output", {3, 1, 2}, {1}, true, 9),
  };
  // Long reductions take the blocked, pairwise and thread-split paths: forward only (the
  // finite-difference check would be too slow), f32 within a sum's rounding error.
  for (auto [label, shape, dims] :
       std::vector<std::tuple<std::string, Shape, std::vector<int64_t>>>{
           {"long rows (pairwise)", {3, 20000}, {1}},
           {"long columns (row blocks)", {9000, 7}, {0}},
           {"full sum of a long vector", {100003}, {}},
           {"wide columns, leading dims", {40, 30, 600}, {0, 1}},
           {"alternating dims", {30, 7, 40, 9}, {0, 2}}}) {
    OpCase c = reduce_case(kind, label, shape, dims, false, 10);
    c.check_grad = false;
    c.f32_tol = 1e-4;
    cs.push_back(std::move(c));
  }
  return cs;
}

}  // namespace

MERAK_OP_CASES(sum) {
  auto cs = common_cases(Kind::Sum);
  OpCase empty = reduce_case(Kind::Sum, "empty reduced dim gives zeros", {0, 3}, {0}, false, 11);
  cs.push_back(empty);
  return cs;
}

MERAK_OP_CASES(mean) { return common_cases(Kind::Mean); }

// max and min: the same layouts, ties (min's are max's negated) and NaN.
std::vector<OpCase> extremum_cases(Kind kind) {
  const double s = kind == Kind::Max ? 1 : -1;
  auto scaled = [s](const Shape& shape, std::vector<double> v) {
    for (double& x : v) x *= s;
    return make_f64(shape, v);
  };
  std::vector<OpCase> cs = {
      reduce_case(kind, "all dims", {3, 4}, {}, false, 21),
      reduce_case(kind, "last dim keepdim", {4, 6}, {-1}, true, 22),
      reduce_case(kind, "leading dims", {3, 2, 5}, {0, 1}, false, 23),
      reduce_case(kind, "two separate dims", {2, 3, 4, 2}, {0, 2}, true, 24),
      reduce_case(kind, "scalar", {}, {}, false, 25),
  };
  // A two-way tie: the gradient is split in halves, which is also what central differences
  // give at such a kink (+h moves the extremum, -h does not).
  OpCase tie = reduce_case(kind, "two-way tie shares the gradient", {2, 4}, {1}, false, 0);
  tie.inputs = {scaled({2, 4}, {0.5, -0.25, 0.5, 0.125, -0.75, 0.375, 0.25, 0.375})};
  cs.push_back(tie);
  // A three-way tie: the even split (1/3 each) is a convention finite differences can't see.
  OpCase tie3 = reduce_case(kind, "three-way tie (forward only)", {5}, {}, false, 0);
  tie3.inputs = {scaled({5}, {0.25, 0.75, -0.5, 0.75, 0.75})};
  tie3.check_grad = false;
  cs.push_back(tie3);
  // NaN anywhere in a row is the row's result, on the contiguous and the strided path.
  for (auto [label, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"NaN propagates along rows", {1}}, {"NaN propagates down columns", {0}}}) {
    OpCase c = reduce_case(kind, label, {2, 3}, dims, false, 0);
    c.inputs = {make_f64({2, 3}, {1, NAN, -2, 3, 0.5, 4})};
    c.check_grad = false;
    cs.push_back(std::move(c));
  }
  for (auto [label, shape, dims] :
       std::vector<std::tuple<std::string, Shape, std::vector<int64_t>>>{
           {"long rows", {3, 20000}, {1}},
           {"long columns", {9000, 7}, {0}},
           {"full reduction of a long vector", {100003}, {}},
           {"alternating dims", {30, 7, 40, 9}, {0, 2}}}) {
    OpCase c = reduce_case(kind, label, shape, dims, false, 26);
    c.check_grad = false;
    cs.push_back(std::move(c));
  }
  return cs;
}

MERAK_OP_CASES(max) { return extremum_cases(Kind::Max); }
MERAK_OP_CASES(min) { return extremum_cases(Kind::Min); }

// prod has no backward (its definition says why): forward cases only. Long products of values
// near 1 stay in range; f32 rounding grows with the length.
MERAK_OP_CASES(prod) {
  std::vector<OpCase> cs;
  for (OpCase& c : common_cases(Kind::Prod)) {
    if (c.inputs[0].numel() > 1000) {
      c.inputs = {rand_f64(c.inputs[0].shape(), 31, 0.9995, 1.0005)};
      c.f32_tol = 1e-3;
    }
    cs.push_back(std::move(c));
  }
  OpCase zero = reduce_case(Kind::Prod, "a zero and signs", {2, 3}, {1}, false, 0);
  zero.inputs = {make_f64({2, 3}, {2, 0, -3, -1.5, -2, 4})};
  cs.push_back(zero);
  cs.push_back(reduce_case(Kind::Prod, "empty reduced dim gives ones", {0, 3}, {0}, false, 32));
  return cs;
}

}  // namespace merak::test
