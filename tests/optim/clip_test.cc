#include <catch2/catch.hpp>

#include <cmath>

#include "merak/optim/adamw.h"

using namespace merak;
using namespace merak::optim;

namespace {
// Two parameters whose gradients have global norm 5 (3-4-5), plus one without a gradient.
std::vector<Param> three_four() {
  auto params = make_params({{"a", Tensor::zeros({2})},
                             {"b", Tensor::zeros({1, 2})},
                             {"c", Tensor::zeros({3})}});
  params[0].value.set_grad(Tensor::from_vector<float>({3, 0}, {2}));
  params[1].value.set_grad(Tensor::from_vector<float>({0, -4}, {1, 2}));
  return params;
}
}  // namespace

TEST_CASE("clip_grad_norm leaves gradients below the limit alone", "[optim]") {
  auto params = three_four();
  CHECK(clip_grad_norm(params, 10.0) == Approx(5.0).epsilon(1e-12));
  CHECK(params[0].value.grad().to_vector<float>() == std::vector<float>{3, 0});
  CHECK(params[1].value.grad().to_vector<float>() == std::vector<float>{0, -4});
  // max_norm <= 0 only measures.
  CHECK(clip_grad_norm(params, 0.0) == Approx(5.0).epsilon(1e-12));
  CHECK(params[0].value.grad().to_vector<float>() == std::vector<float>{3, 0});
}

TEST_CASE("clip_grad_norm scales gradients above the limit by max/(norm+1e-6)", "[optim]") {
  auto params = three_four();
  CHECK(clip_grad_norm(params, 1.0) == Approx(5.0).epsilon(1e-12));  // the norm before clipping
  const double coef = 1.0 / (5.0 + 1e-6);
  const auto a = params[0].value.grad().to_vector<float>();
  const auto b = params[1].value.grad().to_vector<float>();
  CHECK(a[0] == Approx(3 * coef).epsilon(1e-7));
  CHECK(a[1] == 0.0f);
  CHECK(b[1] == Approx(-4 * coef).epsilon(1e-7));
  CHECK(clip_grad_norm(params, 0.0) == Approx(1.0).epsilon(1e-6));
  CHECK_FALSE(params[2].value.grad().defined());
}

TEST_CASE("clip_grad_norm scales a non-contiguous gradient view in place", "[optim]") {
  auto params = make_params({{"w", Tensor::zeros({2, 2})}});
  Tensor base = Tensor::from_vector<float>({9, 3, 0, 9, 9, 0, 4, 9}, {2, 4});
  params[0].value.set_grad(base.narrow(1, 1, 2));  // [[3, 0], [0, 4]], strided
  CHECK(clip_grad_norm(params, 1.0) == Approx(5.0));
  const auto v = base.to_vector<float>();
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(v[1] == Approx(3 * coef).epsilon(1e-7));
  CHECK(v[6] == Approx(4 * coef).epsilon(1e-7));
  for (int i : {0, 3, 4, 7}) CHECK(v[i] == 9.0f);  // outside the view: untouched
}

TEST_CASE("clip_grad_norm accumulates in double", "[optim]") {
  const int64_t n = 300001;  // several accumulation blocks
  auto params = make_params({{"w", Tensor::zeros({n})}});
  params[0].value.set_grad(Tensor::full({n}, 0.1));
  const double x = double(0.1f);
  CHECK(clip_grad_norm(params, 0.0) == Approx(std::sqrt(double(n) * x * x)).epsilon(1e-12));
}

TEST_CASE("clip_coefficient is 1 unless the norm exceeds a positive limit", "[optim]") {
  CHECK(clip_coefficient(5.0, 10.0) == 1.0f);
  CHECK(clip_coefficient(5.0, 0.0) == 1.0f);  // clipping off
  CHECK(clip_coefficient(std::nan(""), 1.0) == 1.0f);
  CHECK(clip_coefficient(5.0, 1.0) == float(1.0 / (5.0 + 1e-6)));
  CHECK(grad_norm(three_four()) == Approx(5.0).epsilon(1e-12));
}

TEST_CASE("AdamW with the clip coefficient equals clipping in place then stepping, bit for bit",
          "[optim]") {
  auto make = [] {
    auto params = make_params({{"w", Tensor::from_vector<float>({0.5f, -1.25f, 2.0f, 0.1f}, {2, 2})},
                               {"b", Tensor::from_vector<float>({0.3f, -0.7f}, {2})}});
    return params;
  };
  auto grads = [](std::vector<Param>& params) {
    params[0].value.set_grad(Tensor::from_vector<float>({1.7f, -2.3f, 0.9f, 3.1f}, {2, 2}));
    params[1].value.set_grad(Tensor::from_vector<float>({-0.4f, 2.6f}, {2}));
  };
  std::vector<Param> in_place = make(), fused = make();
  AdamW a(in_place, AdamWOptions{}), b(fused, AdamWOptions{});
  for (int t = 0; t < 3; ++t) {
    grads(in_place);
    grads(fused);
    const double norm_a = clip_grad_norm(in_place, 1.0);
    a.step(1e-2);
    const double norm_b = grad_norm(fused);
    b.step(1e-2, clip_coefficient(norm_b, 1.0));
    CHECK(norm_a == norm_b);
    for (size_t i = 0; i < in_place.size(); ++i)
      CHECK(in_place[i].value.to_vector<float>() == fused[i].value.to_vector<float>());
  }
  // The fused path leaves the gradients themselves unscaled.
  CHECK(fused[1].value.grad().to_vector<float>() == std::vector<float>{-0.4f, 2.6f});
}
