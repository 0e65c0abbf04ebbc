// Harness cases for arange (position ids from a tensor's shape), and what the harness can't see:
// a scalar x is an error, a strided x is fine since only its shape is read.
#include <catch2/catch.hpp>

#include "merak/ops/functional.h"
#include "tests/ops/harness.h"

namespace merak::test {
namespace {

OpCase arange_case(std::string label, Tensor x, int64_t dim) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = {x};
  c.attrs = Attrs().set("dim", dim);
  c.reference = [dim](const std::vector<Tensor>& in, const Attrs&) {
    const int64_t rank = in[0].dim();
    const int64_t n = in[0].shape()[size_t(dim < 0 ? dim + rank : dim)];
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(i);
    return std::vector<Tensor>{Tensor::from_vector<int64_t>(ids, {n})};
  };
  return c;
}

}  // namespace

MERAK_OP_CASES(arange) {
  return {
      arange_case("token ids [B, T], dim 1", rand_int({2, 5}, 1, 0, 50), 1),
      arange_case("f64 x, last dim by default index", rand_f64({3, 7}, 2), -1),
      arange_case("first dim of a 3-d x", rand_f64({4, 2, 3}, 3), 0),
      arange_case("bool mask, empty dim", rand_bool({2, 0}, 4), -1),
      arange_case("a GPT sequence", rand_int({1, 2048}, 5, 0, 50257), 1),
  };
}

TEST_CASE("arange reads only the shape: strided x works, a scalar is an error", "[ops]") {
  const Tensor x = rand_f64({3, 4}, 6).transpose(0, 1);  // [4, 3], not contiguous
  CHECK(ops::arange(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK_THROWS_WITH(ops::arange(Tensor::scalar(1.0), 0), Catch::Contains("at least one dim"));
  const Tensor meta = ops::arange(Tensor::empty({2, 9}, DType::I64, Device::meta()), 1);
  CHECK(meta.is_meta());
  CHECK(meta.shape() == Shape{9});
}

}  // namespace merak::test
