// The integer and bool paths of the elementwise kernels that constant folding of ONNX shape
// arithmetic runs: add, sub, mul, div, neg, relu on i32/i64 and where on i32/i64/bool, over
// each broadcasting path (equal shapes, a scalar, repeating rows, a general broadcast).
#include <catch2/catch.hpp>

#include <limits>

#include "merak/ops/dispatch.h"

using namespace merak;

namespace {

template <typename T>
Tensor ints(const std::vector<T>& v, const Shape& s) {
  return Tensor::from_vector(v, s);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("int kernels: arithmetic on i64 and i32 broadcasts, wraps and truncates") {
  const Tensor a = ints<int64_t>({1, -2, 3, -4, 5, -6}, {2, 3});
  // Equal shapes, a scalar, a repeating row, a column (the general broadcast).
  CHECK(ops::call("add", {a, a})[0].to_vector<int64_t>() ==
        std::vector<int64_t>{2, -4, 6, -8, 10, -12});
  CHECK(ops::call("sub", {a, ints<int64_t>({1}, {})})[0].to_vector<int64_t>() ==
        std::vector<int64_t>{0, -3, 2, -5, 4, -7});
  CHECK(ops::call("mul", {a, ints<int64_t>({1, 10, 100}, {3})})[0].to_vector<int64_t>() ==
        std::vector<int64_t>{1, -20, 300, -4, 50, -600});
  CHECK(ops::call("div", {a, ints<int64_t>({2, -3}, {2, 1})})[0].to_vector<int64_t>() ==
        std::vector<int64_t>{0, -1, 1, 1, -1, 2});
  // Overflow wraps around; i32 keeps its dtype.
  const int32_t top = std::numeric_limits<int32_t>::max();
  const Tensor y = ops::call("add", {ints<int32_t>({top, 1}, {2}), ints<int32_t>({1}, {1})})[0];
  CHECK(y.dtype() == DType::I32);
  CHECK(y.to_vector<int32_t>() == std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 2});
  CHECK_THAT(error_of([] { ops::call("div", {ints<int32_t>({4}, {1}), ints<int32_t>({0}, {})}); }),
             Catch::Contains("division by zero"));
  // Dtypes must still agree, and bool is no arithmetic dtype.
  CHECK_THAT(error_of([&] { ops::call("add", {a, ints<int32_t>({1}, {})}); }),
             Catch::Contains("i32"));
  CHECK_THAT(error_of([] {
               ops::call("add", {Tensor::zeros({2}, DType::Bool), Tensor::zeros({2}, DType::Bool)});
             }),
             Catch::Contains("must be a floating dtype"));
}

TEST_CASE("int kernels: neg and relu of integers; f32 results unchanged") {
  const int64_t min = std::numeric_limits<int64_t>::min();
  CHECK(ops::call("neg", {ints<int64_t>({3, -4, min}, {3})})[0].to_vector<int64_t>() ==
        std::vector<int64_t>{-3, 4, min});
  CHECK(ops::call("relu", {ints<int32_t>({3, -4, 0}, {3})})[0].to_vector<int32_t>() ==
        std::vector<int32_t>{3, 0, 0});
  const Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.25f, 0.1f}, {3});
  CHECK(ops::call("neg", {f})[0].to_vector<float>() == std::vector<float>{-1.5f, 2.25f, -0.1f});
  CHECK(ops::call("div", {f, Tensor::scalar(3.0)})[0].to_vector<float>() ==
        std::vector<float>{1.5f / 3, -2.25f / 3, 0.1f / 3});
  CHECK_THAT(error_of([] { ops::call("exp", {ints<int64_t>({1}, {1})}); }),
             Catch::Contains("floating"));
}

TEST_CASE("int kernels: where selects i64, i32 and bool values") {
  Tensor cond = Tensor::empty({2, 1}, DType::Bool);
  cond.data<bool>()[0] = true;
  cond.data<bool>()[1] = false;
  const Tensor y = ops::call("where", {cond, ints<int64_t>({1, 2, 3}, {3}),
                                       ints<int64_t>({-1}, {})})[0];
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, -1, -1, -1});
  const Tensor yb = ops::call("where", {cond, Tensor::zeros({}, DType::Bool),
                                        Tensor::full({}, 1.0, DType::Bool)})[0];
  CHECK(yb.dtype() == DType::Bool);
  CHECK((!yb.data<bool>()[0] && yb.data<bool>()[1]));
  CHECK_THAT(error_of([&] {
               ops::call("where", {cond, ints<int64_t>({1}, {1}), ints<int32_t>({1}, {1})});
             }),
             Catch::Contains("i32"));
}
