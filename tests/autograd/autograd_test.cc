#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "merak/autograd/checkpoint.h"
#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/autograd/node.h"
#include "merak/ops/collectives.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"
#include "merak/core/pending.h"
#include "merak/core/philox.h"
#include "merak/ops/functional.h"

using namespace merak;
namespace F = merak::ops;

namespace {
Tensor param(const Shape& shape, const char* name) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, philox_key(5, name), 0.0, 0.5);
  t.set_requires_grad(true).set_name(name);
  return t;
}
std::vector<float> vec(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("gradients accumulate over multiple uses of a tensor", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad(true);
  // y = sum(x * x + x) -> dy/dx = 2x + 1
  Tensor y = F::sum(F::add(F::mul(x, x), x));
  autograd::backward(y);
  CHECK(vec(x.grad()) == std::vector<float>{3, 5, 7});
  // A second backward on a fresh graph adds into .grad.
  autograd::backward(F::sum(x));
  CHECK(vec(x.grad()) == std::vector<float>{4, 6, 8});
}

TEST_CASE("a gradient only the leaf holds accumulates in place", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad(true);
  autograd::backward(F::sum(F::mul_scalar(x, 2.0)));
  const void* buffer = x.grad().raw_data();
  autograd::backward(F::sum(F::mul_scalar(x, 3.0)));
  CHECK(x.grad().raw_data() == buffer);
  CHECK(vec(x.grad()) == std::vector<float>{5, 5, 5});
}

TEST_CASE("a gradient someone still holds is not changed by a later backward", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad(true);
  autograd::backward(F::sum(F::mul_scalar(x, 2.0)));
  const Tensor held = x.grad();
  autograd::backward(F::sum(F::mul_scalar(x, 3.0)));
  CHECK(vec(held) == std::vector<float>{2, 2, 2});
  CHECK(vec(x.grad()) == std::vector<float>{5, 5, 5});
}

TEST_CASE("no-grad scope records nothing", "[autograd]") {
  Tensor x = param({4}, "x");
  {
    autograd::NoGradGuard guard;
    Tensor y = F::mul(x, x);
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(autograd::grad_enabled());
  }
  CHECK(autograd::grad_enabled());
  CHECK(F::mul(x, x).grad_fn() != nullptr);
  Tensor c = Tensor::ones({4});
  CHECK(F::mul(c, c).grad_fn() == nullptr);  // nothing requires grad: no node
}

TEST_CASE("backward needs a scalar root or an explicit gradient", "[autograd]") {
  Tensor x = param({2, 3}, "x");
  Tensor y = F::mul_scalar(x, 3.0);
  CHECK_THROWS_WITH(autograd::backward(y), Catch::Contains("scalar"));
  autograd::backward({y}, {Tensor::ones({2, 3})});
  CHECK(vec(x.grad()) == std::vector<float>(6, 3.0f));
  CHECK_THROWS_WITH(autograd::backward(F::sum(Tensor::ones({2}))),
                    Catch::Contains("does not require gradients"));
}

TEST_CASE("saved tensors are released once their node has run", "[autograd]") {
  Tensor a = param({3, 4}, "a");
  Tensor b = param({4, 5}, "b");
  Tensor y = F::sum(F::matmul(a, b));
  auto* node = dynamic_cast<autograd::OpNode*>(y.grad_fn().get());
  REQUIRE(node != nullptr);
  autograd::backward(y);
  CHECK(node->inputs.empty());
  CHECK_THROWS_WITH(autograd::backward(y), Catch::Contains("second time"));
}

TEST_CASE("ops keep only what their backward reads", "[autograd]") {
  Tensor a = param({64, 64}, "a");
  Tensor b = param({64, 64}, "b");
  Tensor y = F::add(a, b);  // add's backward reads no values
  auto* node = dynamic_cast<autograd::OpNode*>(y.grad_fn().get());
  REQUIRE(node != nullptr);
  for (const Tensor& t : node->inputs) CHECK(t.is_meta());
  Tensor z = F::mul(a, b);  // mul reads both inputs
  auto* mnode = dynamic_cast<autograd::OpNode*>(z.grad_fn().get());
  REQUIRE(mnode != nullptr);
  for (const Tensor& t : mnode->inputs) CHECK_FALSE(t.is_meta());
}

namespace {
// A small MLP segment: gelu(x W1^T + b1) W2^T.
std::vector<Tensor> mlp(const std::vector<Tensor>& in, const Tensor& w1, const Tensor& b1,
                        const Tensor& w2) {
  return {F::linear(F::gelu(F::linear(in[0], w1, b1)), w2)};
}
}  // namespace

TEST_CASE("checkpointed segments give the same gradients and keep no inner activations",
          "[autograd][recompute]") {
  Tensor w1 = param({16, 8}, "w1"), b1 = param({16}, "b1"), w2 = param({8, 16}, "w2");
  Tensor x0 = param({4, 8}, "x");
  auto run = [&](bool use_checkpoint, bool early) {
    for (Tensor* p : {&w1, &b1, &w2, &x0}) p->set_grad(Tensor());
    auto seg = [&](const std::vector<Tensor>& in) { return mlp(in, w1, b1, w2); };
    Tensor h = F::mul_scalar(x0, 2.0);
    Tensor out = use_checkpoint ? autograd::checkpoint(seg, {h})[0] : seg({h})[0];
    if (use_checkpoint) {
      // Only the checkpoint node sits between `out` and `h`: no inner op was recorded.
      REQUIRE(out.grad_fn() != nullptr);
      CHECK(dynamic_cast<autograd::OpNode*>(out.grad_fn().get()) == nullptr);
    }
    if (early) autograd::recompute(out);
    autograd::backward(F::sum(F::mul(out, out)));
    return std::vector<std::vector<float>>{vec(w1.grad()), vec(b1.grad()), vec(w2.grad()),
                                           vec(x0.grad())};
  };
  const auto plain = run(false, false);
  const auto ckpt = run(true, false);
  const auto ahead = run(true, true);
  for (size_t i = 0; i < plain.size(); ++i) {
    REQUIRE(plain[i].size() == ckpt[i].size());
    for (size_t j = 0; j < plain[i].size(); ++j) {
      CHECK(ckpt[i][j] == Approx(plain[i][j]).epsilon(1e-6));
      CHECK(ahead[i][j] == Approx(plain[i][j]).epsilon(1e-6));
    }
  }
}

TEST_CASE("recomputation re-derives the same dropout mask", "[autograd][recompute]") {
  Tensor x = param({8, 32}, "x");
  auto seg = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{F::dropout(F::tanh(in[0]), 0.3, 99, 7)};
  };
  autograd::backward(F::sum(seg({x})[0]));
  const auto plain = vec(x.grad());
  x.set_grad(Tensor());
  autograd::backward(F::sum(autograd::checkpoint(seg, {x})[0]));
  CHECK(vec(x.grad()) == plain);
}

TEST_CASE("backward runs other ready nodes while a gradient's all-reduce is in flight",
          "[autograd][pending]") {
  // A stand-in for the communicator: the all-reduce of a 2-member group is posted, finishes
  // only when waited for, and doubles the values (each member held the same part).
  std::vector<std::string> events;
  struct Posted : ops::TpCollectives {
    std::vector<std::string>& events;
    explicit Posted(std::vector<std::string>& e) : events(e) {}
    void reduce(const Tensor&, ops::TpReduce, const std::string&, int64_t) override {
      events.push_back("reduce without posting");
    }
    PendingOp post(const Tensor& t, ops::TpReduce, const std::string&, int64_t) override {
      PendingOp op;
      op.test = [] { return false; };
      op.wait = [this, t] {
        events.push_back("wait");
        float* p = t.data<float>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] *= 2;
      };
      return op;
    }
  } posted(events);
  Tensor x1 = Tensor::from_vector<float>({1, 2}, {2}).set_requires_grad(true);
  Tensor x2 = Tensor::from_vector<float>({3, 4}, {2}).set_requires_grad(true);
  // Chain B first, then chain A, whose tp_copy sums its gradient over the group in backward:
  // by creation order A's nodes run first, and the node after tp_copy would have to wait.
  const Tensor rb = F::sum(F::mul_scalar(x2, 3.0));
  const Tensor c = F::tp_copy(F::mul_scalar(x1, 1.5), "g", 2);
  const Tensor ra = F::sum(F::mul_scalar(c, 2.0));
  {
    ops::TpScope defer(&posted, /*defer=*/true);
    autograd::backward({ra, rb}, {Tensor::ones({}), Tensor::ones({})}, [&](const Tensor& leaf) {
      events.push_back(leaf.same(x1) ? "x1 ready" : "x2 ready");
    });
  }
  CHECK(events == std::vector<std::string>{"x2 ready", "wait", "x1 ready"});
  CHECK(vec(x1.grad()) == std::vector<float>{6, 6});  // 2 * 1.5, summed over 2 members
  CHECK(vec(x2.grad()) == std::vector<float>{3, 3});
  CHECK(pending_count() == 0);
}

TEST_CASE("pending tensors: waited for once, views included, polled to completion",
          "[pending]") {
  Tensor t = Tensor::zeros({4});
  int waits = 0, tests = 0;
  mark_pending(t, {[&] { return ++tests >= 2; }, [&] { ++waits; }});
  CHECK(is_pending(t));
  CHECK(is_pending(t.narrow(0, 1, 2)));  // same storage
  CHECK(!is_pending(Tensor::zeros({4})));
  CHECK_THROWS_WITH(mark_pending(t, {[] { return true; }, [] {}}),
                    Catch::Contains("already being written"));
  poll_pending();
  CHECK(pending_count() == 1);
  poll_pending();  // the second test finishes it
  CHECK(pending_count() == 0);
  CHECK(waits == 0);
  mark_pending(t, {[] { return false; }, [&] { ++waits; }});
  wait_pending(t.narrow(0, 0, 1));
  wait_pending(t);
  CHECK(waits == 1);
  CHECK(!is_pending(t));
}

// A small stage: tied embedding table (embedding and LM head), a layer norm, an MLP with fused
// GELU, a loss; plus `act`, a leaf that stands for an activation received from another stage.
struct SplitStage {
  Tensor table = param({11, 8}, "table");
  Tensor ln_w = param({8}, "ln_w"), ln_b = param({8}, "ln_b");
  Tensor fc_w = param({16, 8}, "fc_w"), fc_b = param({16}, "fc_b");
  Tensor proj_w = param({8, 16}, "proj_w");
  Tensor act = param({2, 3, 8}, "act");

  std::vector<Tensor> params() const { return {table, ln_w, ln_b, fc_w, fc_b, proj_w}; }
  Tensor loss() const {
    const Tensor ids = Tensor::from_vector<int64_t>({1, 4, 7, 10, 2, 0}, {2, 3});
    Tensor h = F::add(F::embedding(table, ids), act);
    h = F::layer_norm(h, ln_w, ln_b);
    h = F::add(h, F::linear(F::linear_gelu(h, fc_w, fc_b), proj_w));
    const Tensor logits = F::linear(h, table);
    return F::cross_entropy(logits, Tensor::from_vector<int64_t>({3, 1, 4, 1, 5, 9}, {2, 3}));
  }
  void zero() {
    for (Tensor t : params()) t.set_grad(Tensor());
    act.set_grad(Tensor());
  }
};

TEST_CASE("a backward split in two gives a single backward's gradients, bit for bit",
          "[autograd]") {
  SplitStage s;
  const Tensor one = Tensor::ones({});
  autograd::backward({s.loss()}, {one});
  std::vector<std::vector<float>> want;
  for (const Tensor& p : s.params()) want.push_back(vec(p.grad()));
  const std::vector<float> want_act = vec(s.act.grad());
  s.zero();

  // The parameters wait; the activation's gradient does not.
  std::set<const TensorImpl*> params;
  for (const Tensor& p : s.params()) params.insert(&p.impl());
  auto defer = [&](const Tensor& leaf) { return params.count(&leaf.impl()) > 0; };
  autograd::DeferredGrads later;
  autograd::backward({s.loss()}, {one}, defer, later);
  CHECK(vec(s.act.grad()) == want_act);
  // The separable ops' parameters have nothing yet; the layer norm's (one fused kernel) are
  // computed in the first half.
  CHECK_FALSE(s.fc_w.grad().defined());
  CHECK_FALSE(s.fc_b.grad().defined());
  CHECK_FALSE(s.proj_w.grad().defined());
  CHECK_FALSE(s.table.grad().defined());
  CHECK(vec(s.ln_w.grad()) == want[1]);
  CHECK(later.jobs() == 4);  // embedding, linear_gelu, proj, LM head

  std::vector<std::string> reported;
  autograd::run_deferred(later, [&](const Tensor& leaf) { reported.push_back(leaf.name()); });
  CHECK(later.empty());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO(s.params()[k].name());
    CHECK(vec(s.params()[k].grad()) == want[k]);
  }
  // Each parameter once: the layer norm's first (complete before run_deferred), the table only
  // after both its uses.
  std::multiset<std::string> once(reported.begin(), reported.end());
  CHECK(once == std::multiset<std::string>{"table", "ln_w", "ln_b", "fc_w", "fc_b", "proj_w"});
  CHECK(reported.back() == "table");
  CHECK(std::set<std::string>{reported[0], reported[1]} == std::set<std::string>{"ln_w", "ln_b"});

  // A second split backward before the first's second half is refused.
  autograd::backward({s.loss()}, {one}, defer, later);
  CHECK_THROWS_WITH(autograd::backward({s.loss()}, {one}, defer, later),
                    Catch::Contains("run_deferred"));
}

namespace {
// A variadic op whose backward (by its declaration) reads input 0 only: with more than 32
// inputs, the recorder must not read bit 32 of its saves_inputs mask (an undefined shift that
// x86 performs as a shift by 0, which would save input 32 too).
MERAK_REGISTER_OP(autograd_test_sum_n) {
  ops::OpDef d;
  d.name = "autograd_test_sum_n";
  d.doc = "xs[0] + xs[1] + ... (test op)";
  d.inputs = {"xs"};
  d.variadic = true;
  d.outputs = {"y"};
  d.saves_inputs = 1u;
  d.infer = [](const std::vector<ops::TensorMeta>& in, const ops::Attrs&) {
    return std::vector<ops::TensorMeta>{in[0]};
  };
  d.backward = [](const ops::BackwardCtx& c) {
    return std::vector<Tensor>(c.inputs.size(), c.grad_outputs[0]);
  };
  return d;
}
MERAK_REGISTER_KERNEL(autograd_test_sum_n, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const ops::Attrs&) {
                        float* y = out[0].data<float>();
                        for (int64_t j = 0; j < out[0].numel(); ++j) y[j] = 0;
                        for (const Tensor& x : in)
                          for (int64_t j = 0; j < x.numel(); ++j) y[j] += x.data<float>()[j];
                      });
}  // namespace

TEST_CASE("ops with more than 32 inputs save only the inputs their mask names", "[autograd]") {
  std::vector<Tensor> xs;
  for (int i = 0; i < 40; ++i) xs.push_back(param({2}, ("x" + std::to_string(i)).c_str()));
  const Tensor s = ops::call1(ops::Registry::get().at("autograd_test_sum_n"), xs);
  auto* node = dynamic_cast<autograd::OpNode*>(s.grad_fn().get());
  REQUIRE(node != nullptr);
  REQUIRE(node->inputs.size() == 40);
  CHECK_FALSE(node->inputs[0].is_meta());
  for (size_t i = 1; i < 40; ++i) {
    INFO(i);
    CHECK(node->inputs[i].is_meta());
  }
  autograd::backward(F::sum(s));
  for (const Tensor& x : xs) CHECK(vec(x.grad()) == std::vector<float>{1, 1});
}
