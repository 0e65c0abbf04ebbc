#include <catch2/catch.hpp>

#include "merak/autograd/engine.h"
#include "merak/core/philox.h"
#include "merak/ops/functional.h"
#include "merak/optim/grad_norm.h"

using namespace merak;
namespace F = merak::ops;

namespace {
Tensor param(const Shape& shape, const char* name) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, philox_key(11, name), 0.0, 0.5);
  t.set_requires_grad(true).set_name(name);
  return t;
}
}  // namespace

TEST_CASE("the norm taken during backward equals grad_norm afterwards, bit for bit",
          "[optim][norm]") {
  // w is used twice (its gradient completes only after both uses), u once, and `unused` gets a
  // gradient in the first backward only: the tracker must read it at the end.
  Tensor w = param({4, 3}, "w"), u = param({3}, "u"), unused = param({2}, "unused");
  const auto params = optim::make_params({{"w", w}, {"u", u}, {"unused", unused}});
  optim::GradNormTracker tracker(params);
  const Tensor x = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f}, {2, 3});

  auto loss = [&](bool with_unused) {
    const Tensor h = F::matmul(x, F::transpose(w, 0, 1));  // [2, 4]
    const Tensor hu = F::mul(x, u);                         // [2, 3], u broadcast
    const Tensor y = F::add(F::sum(F::mul(h, h)), F::sum(F::mul(hu, F::sum(w))));
    return with_unused ? F::add(y, F::sum(F::mul(unused, unused))) : y;
  };
  autograd::backward(loss(true));  // an earlier micro-batch
  int reported = 0;
  const autograd::LeafReadyFn hook = tracker.on_leaf_ready();
  const Tensor last = loss(false);
  autograd::backward({last}, {Tensor::ones(last.shape())}, [&](const Tensor& leaf) {
    ++reported;
    hook(leaf);
  });
  CHECK(reported == 2);  // w and u
  const double want = optim::grad_norm(params);
  CHECK(tracker.norm() == want);
  // It starts over: with no backward reported, it reads every gradient.
  CHECK(tracker.norm() == want);
}
