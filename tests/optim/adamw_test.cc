#include <catch2/catch.hpp>

#include <cmath>

#include "merak/optim/adamw.h"

using namespace merak;
using namespace merak::optim;

namespace {

// AdamW written out in double, element by element, straight from the paper's form
// (bias-corrected moments); the optimizer under test rearranges it as PyTorch does.
struct Reference {
  std::vector<double> p, m, v;
  explicit Reference(const std::vector<float>& init)
      : p(init.begin(), init.end()), m(init.size(), 0.0), v(init.size(), 0.0) {}

  void step(const std::vector<float>& g, int64_t t, double lr, const AdamWOptions& o,
            bool decay) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
      const double m_hat = m[i] / (1 - std::pow(o.beta1, double(t)));
      const double v_hat = v[i] / (1 - std::pow(o.beta2, double(t)));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

// Every element within abs + rel * |want|; reports the worst one.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                 double abs) {
  REQUIRE(got.size() == want.size());
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::abs(double(got[i]) - want[i]) / (abs + rel * std::abs(want[i]));
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  INFO("element " << worst << ": got " << got[worst] << ", want " << want[worst]);
  CHECK(worst_excess <= 1.0);
}

// A deterministic, sign-varying gradient for step t.
std::vector<float> gradient(size_t n, int t, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = scale * float(std::sin(0.7 * double(i + 1) + 1.3 * t) + 0.1 * (int(i % 3) - 1));
  return g;
}

}  // namespace

TEST_CASE("make_params decays matrices and embeddings, not vectors or scalars", "[optim]") {
  auto params = make_params({{"w", Tensor::zeros({4, 3})},
                             {"b", Tensor::zeros({3})},
                             {"e", Tensor::zeros({2, 2, 2})},
                             {"s", Tensor::scalar(1.0)}});
  REQUIRE(params.size() == 4);
  CHECK(params[0].name == "w");
  CHECK(params[0].decay);
  CHECK_FALSE(params[1].decay);
  CHECK(params[2].decay);
  CHECK_FALSE(params[3].decay);
}

TEST_CASE("one AdamW step on known values matches the formula in double", "[optim]") {
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  const std::vector<float> init = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f};
  const std::vector<float> g = {0.1f, -0.3f, 2.0f, 0.0f, -1e-3f, 5.0f};
  Tensor w = Tensor::from_vector(init, {2, 3});
  w.set_grad(Tensor::from_vector(g, {2, 3}));
  AdamW opt(make_params({{"w", w}}), o);
  CHECK(opt.exp_avg()[0].defined() == false);  // moments appear at the first step
  opt.step(1e-2);
  CHECK(opt.steps_taken() == 1);

  // Values worked out by hand: after one step m_hat = g and v_hat = g^2, so each element moves
  // by lr * g / (|g| + eps) after decaying by (1 - lr * wd) = 0.999.
  const std::vector<double> by_hand = {0.999 - 0.01,  -1.998 + 0.01, 0.4995 - 0.01,
                                       2.997,         0.0 + 0.01 * 1e-3 / (1e-3 + 1e-8),
                                       -0.24975 - 0.01};
  Reference ref(init);
  ref.step(g, 1, 1e-2, o, true);
  check_close(w.to_vector<float>(), by_hand, 2e-7, 1e-7);
  check_close(w.to_vector<float>(), ref.p, 2e-7, 1e-7);
  check_close(opt.exp_avg()[0].to_vector<float>(), ref.m, 1e-6, 0);
  check_close(opt.exp_avg_sq()[0].to_vector<float>(), ref.v, 1e-6, 0);
}

TEST_CASE("several AdamW steps with and without decay follow the reference", "[optim]") {
  AdamWOptions o;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  o.eps = 1e-3;  // large enough that where eps enters the denominator matters
  o.weight_decay = 0.2;
  const std::vector<float> w0 = {0.5f, -1.5f, 2.0f, 0.25f, -0.75f, 1.0f};
  const std::vector<float> b0 = {0.1f, -0.2f, 0.3f};
  Tensor w = Tensor::from_vector(w0, {3, 2});
  Tensor b = Tensor::from_vector(b0, {3});
  AdamW opt(make_params({{"w", w}, {"b", b}}), o);
  Reference rw(w0), rb(b0);
  for (int t = 1; t <= 6; ++t) {
    const double lr = 0.05 / t;
    const auto gw = gradient(6, t, 2e-3f), gb = gradient(3, t + 10, 1e-3f);
    w.set_grad(Tensor::from_vector(gw, {3, 2}));
    b.set_grad(Tensor::from_vector(gb, {3}));
    opt.step(lr);
    rw.step(gw, t, lr, o, true);
    rb.step(gb, t, lr, o, false);
  }
  CHECK(opt.steps_taken() == 6);
  check_close(w.to_vector<float>(), rw.p, 1e-6, 1e-7);
  check_close(b.to_vector<float>(), rb.p, 1e-6, 1e-7);
  check_close(opt.exp_avg()[0].to_vector<float>(), rw.m, 1e-5, 1e-12);
  check_close(opt.exp_avg_sq()[1].to_vector<float>(), rb.v, 1e-5, 1e-15);

  // The bias would have moved differently had it decayed: the decay flag is honoured.
  Reference decayed(b0);
  for (int t = 1; t <= 6; ++t) decayed.step(gradient(3, t + 10, 1e-3f), t, 0.05 / t, o, true);
  CHECK(std::abs(b.to_vector<float>()[2] - decayed.p[2]) > 1e-3);
}

TEST_CASE("a large parameter, split across threads, matches the reference", "[optim]") {
  const size_t n = 100000;
  std::vector<float> init(n);
  for (size_t i = 0; i < n; ++i) init[i] = float(std::cos(0.01 * double(i)));
  Tensor w = Tensor::from_vector(init, {400, 250});
  AdamWOptions o;
  AdamW opt(make_params({{"w", w}}), o);
  Reference ref(init);
  for (int t = 1; t <= 2; ++t) {
    const auto g = gradient(n, t, 0.5f);
    w.set_grad(Tensor::from_vector(g, {400, 250}));
    opt.step(1e-3);
    ref.step(g, t, 1e-3, o, true);
  }
  check_close(w.to_vector<float>(), ref.p, 1e-6, 1e-7);
}

TEST_CASE("parameters without a gradient are skipped; zero_grad drops gradients", "[optim]") {
  Tensor w = Tensor::full({2, 2}, 1.0);
  Tensor frozen = Tensor::full({2, 2}, 2.0);
  AdamW opt(make_params({{"w", w}, {"frozen", frozen}}), AdamWOptions{});
  w.set_grad(Tensor::full({2, 2}, 0.5));
  opt.step(1e-2);
  CHECK(w.to_vector<float>()[0] != 1.0f);
  CHECK(frozen.to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK_FALSE(opt.exp_avg()[1].defined());

  opt.zero_grad();
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(frozen.grad().defined());
  const auto before = w.to_vector<float>();
  opt.step(1e-2);  // nothing has a gradient: nothing moves, not even by weight decay
  CHECK(w.to_vector<float>() == before);
  CHECK(opt.steps_taken() == 2);
}

TEST_CASE("AdamW rejects bad options, parameters and gradients with their names", "[optim]") {
  AdamWOptions bad;
  bad.beta2 = 1.0;
  CHECK_THROWS_WITH(AdamW(make_params({{"w", Tensor::zeros({2, 2})}}), bad),
                    Catch::Contains("beta2"));
  CHECK_THROWS_WITH(AdamW(make_params({{"ids", Tensor::zeros({2}, DType::I64)}}), AdamWOptions{}),
                    Catch::Contains("'ids'"));
  Tensor w = Tensor::zeros({2, 2});
  AdamW opt(make_params({{"w", w}}), AdamWOptions{});
  w.set_grad(Tensor::zeros({4}));
  CHECK_THROWS_WITH(opt.step(1e-3), Catch::Contains("gradient of 'w'"));
}

TEST_CASE("AdamW reproduces torch.optim.AdamW (1.13) bit for bit", "[optim]") {
  // Recorded with PyTorch 1.13 (CPU):
  //   w = torch.tensor([[0.5, -1.25], [2.0, 0.125]], requires_grad=True)
  //   b = torch.tensor([0.3, -0.7], requires_grad=True)
  //   opt = torch.optim.AdamW([{'params': [w]}, {'params': [b], 'weight_decay': 0.0}],
  //                           lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
  //   three steps with lr = 1e-2 / t and the gradients below; print(w, b) as hex floats.
  Tensor w = Tensor::from_vector<float>({0.5f, -1.25f, 2.0f, 0.125f}, {2, 2});
  Tensor b = Tensor::from_vector<float>({0.3f, -0.7f}, {2});
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  AdamW opt(make_params({{"w", w}, {"b", b}}), o);
  const std::vector<std::vector<float>> gw = {
      {0.1f, -0.2f, 0.3f, 1e-4f}, {-0.3f, 0.1f, 0.2f, -2e-4f}, {0.2f, 0.4f, -0.1f, 3e-4f}};
  const std::vector<std::vector<float>> gb = {{0.05f, -0.5f}, {0.01f, 0.25f}, {-0.02f, 0.125f}};
  for (int t = 0; t < 3; ++t) {
    w.set_grad(Tensor::from_vector(gw[t], {2, 2}));
    b.set_grad(Tensor::from_vector(gb[t], {2}));
    opt.step(1e-2 / (t + 1));
  }
  CHECK(w.to_vector<float>() ==
        std::vector<float>{0x1.f7455cp-2f, -0x1.3ce5a8p+0f, 0x1.fac748p+0f, 0x1.d8f576p-4f});
  CHECK(b.to_vector<float>() == std::vector<float>{0x1.239a7cp-2f, -0x1.607c7ep-1f});
}

TEST_CASE("AdamW on a device without optimizer kernels fails at construction, naming it",
          "[optim]") {
  // The CPU build registers no device optimizer; a Meta parameter has no data at all.
  CHECK_THROWS_WITH(AdamW(make_params({{"w", Tensor::zeros({2, 2}, DType::F32, Device::meta())}}),
                          AdamWOptions{}),
                    Catch::Contains("'w'"));
  CHECK_THROWS_WITH(optim::device_optimizer(DeviceType::CUDA, "AdamW"),
                    Catch::Contains("no optimizer kernels for cuda"));
  DeviceOptimizer partial;
  CHECK_THROWS_WITH(register_device_optimizer(DeviceType::CUDA, partial),
                    Catch::Contains("every kernel"));
}
