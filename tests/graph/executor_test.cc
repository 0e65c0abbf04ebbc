// The executor: a traced graph run with real tensors gives the eager model's loss and gradients
// (same seed, same weights), intermediate values die after their last reader, and bad inputs or
// graphs are errors that name the input, node or value.
#include "merak/graph/executor.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/core/philox.h"
#include "merak/graph/convert.h"
#include "merak/graph/tracer.h"
#include "merak/ops/registry.h"
#include "tests/graph/test_models.h"

using namespace merak;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double(x[i]) - double(y[i])));
  return m;
}

std::map<std::string, Tensor> feed(const models::Batch& b, const graph::Model& m) {
  std::map<std::string, Tensor> in;
  for (const auto& v : m.graph().inputs()) {
    const std::string& n = v.name();
    in[n] = n == "tokens"           ? b.tokens
            : n == "targets"        ? b.targets
            : n == "segment_ids"    ? b.segment_ids
            : n == "attention_mask" ? b.attention_mask
            : n == "mlm_targets"    ? b.mlm_targets
            : n == "mlm_weight"     ? b.mlm_weight
                                    : b.nsp_labels;
  }
  return in;
}

// Eager loss and gradients against the traced graph's, same seed and rng stream.
// `eager_recompute`: the eager model checkpoints every block (the traced graph is the same).
void check_same_as_eager(const models::ModelOptions& o, const models::Batch& batch, uint64_t seed,
                         bool eager_recompute = false) {
  const int64_t b = batch.tokens.size(0), t = batch.tokens.size(1);
  auto eager = models::make_model(o);
  eager->set_recompute(eager_recompute);
  eager->materialize(seed);
  set_rng_stream(5);
  const Tensor loss = eager->loss(batch);
  autograd::backward(loss);

  auto traced_model = models::make_model(o);
  const graph::Model m = graph::trace_model(*traced_model, b, t, seed);
  graph::Executor ex(m, seed);
  set_rng_stream(5);
  const std::vector<Tensor> out = ex.run(feed(batch, m));
  REQUIRE(out.size() == 1);
  autograd::backward(out[0]);

  INFO("eager loss " << loss.item() << ", graph loss " << out[0].item());
  CHECK(std::fabs(loss.item() - out[0].item()) <= 1e-6);
  const auto eager_params = eager->named_parameters();
  const auto graph_params = ex.parameters();
  REQUIRE(graph_params.size() == eager_params.size());
  double worst = 0;
  for (size_t i = 0; i < eager_params.size(); ++i) {
    const auto& [name, p] = eager_params[i];
    INFO(name);
    REQUIRE(graph_params[i].first == name);
    // Same initial weights (drawn from the init spec), same gradients.
    CHECK(max_abs_diff(ex.value(name), p.detach()) == 0);
    REQUIRE(p.grad().defined());
    REQUIRE(graph_params[i].second.grad().defined());
    const double d = max_abs_diff(graph_params[i].second.grad(), p.grad());
    CHECK(d <= 1e-6);
    worst = std::max(worst, d);
  }
  UNSCOPED_INFO("worst gradient difference " << worst);
}

}  // namespace

TEST_CASE("trace-then-execute equals eager GPT: loss and every gradient", "[graph][executor]") {
  const models::ModelOptions o = test::small_gpt();
  check_same_as_eager(o, test::gpt_batch(2, 12, o.vocab), 11);
}

TEST_CASE("trace-then-execute equals eager GPT with dropout and recomputation",
          "[graph][executor]") {
  models::ModelOptions o = test::small_gpt();
  o.dropout = 0.2;
  check_same_as_eager(o, test::gpt_batch(3, 16, o.vocab), 12, /*eager_recompute=*/true);
}

TEST_CASE("trace-then-execute equals eager BERT: loss and every gradient", "[graph][executor]") {
  const models::ModelOptions o = test::small_bert();
  check_same_as_eager(o, test::bert_batch(2, 10, o.vocab), 13);
}

TEST_CASE("executor: dropout masks follow the caller's rng stream", "[graph][executor]") {
  models::ModelOptions o = test::small_gpt();
  o.dropout = 0.3;
  auto model = models::make_model(o);
  const graph::Model m = graph::trace_model(*model, 1, 8, 2);
  graph::Executor ex(m, 2);
  const auto in = feed(test::gpt_batch(1, 8, o.vocab), m);
  set_rng_stream(1);
  const double a = ex.run(in)[0].item();
  const double a_again = ex.run(in)[0].item();
  set_rng_stream(2);
  const double b = ex.run(in)[0].item();
  CHECK(a == a_again);
  CHECK(a != b);
}

TEST_CASE("executor: evaluation drops nothing, attention probabilities included",
          "[graph][executor]") {
  models::ModelOptions o = test::small_gpt();
  auto plain_model = models::make_model(o);
  const graph::Model plain = graph::trace_model(*plain_model, 2, 12, 5);
  o.dropout = 0.4;
  auto drop_model = models::make_model(o);
  const graph::Model drop = graph::trace_model(*drop_model, 2, 12, 5);
  int dropping_attention = 0;
  for (const graph::Node& n : drop.graph().nodes())
    if (n.op() == "sdpa" && graph::attrs_of(n).f("dropout") == 0.4) ++dropping_attention;
  REQUIRE(dropping_attention == o.layers);
  autograd::NoGradGuard no_grad;
  graph::Executor with(drop, 5), without(plain, 5);
  const auto in = feed(test::gpt_batch(2, 12, o.vocab), plain);
  set_rng_stream(3);
  const double reference = without.run(in)[0].item();
  with.set_training(false);
  CHECK(with.run(in)[0].item() == reference);
  with.set_training(true);
  CHECK(with.run(in)[0].item() != reference);  // training does drop
}

TEST_CASE("executor: intermediate values are freed after their last use", "[graph][executor]") {
  // Without autograd holding them, only a few values of a 4-layer GPT are alive at a time.
  models::ModelOptions o = test::small_gpt();
  o.layers = 4;
  o.hidden = 64;
  o.max_seq = 64;
  auto model = models::make_model(o);
  const graph::Model m = graph::trace_model(*model, 4, 64, 3);
  graph::Executor ex(m, 3);
  const auto in = feed(test::gpt_batch(4, 64, o.vocab), m);
  // What keeping every value would cost: the outputs of the ops that allocate (views share
  // their input's storage), at 4 bytes an element (an undercount for i64 values).
  std::set<std::string> allocating;
  for (const auto& n : m.graph().nodes())
    if (!ops::Registry::get().at(n.op()).view)
      allocating.insert(n.outputs().begin(), n.outputs().end());
  int64_t activations = 0;
  for (const auto& v : m.graph().values()) {
    if (!allocating.count(v.name())) continue;
    int64_t n = 4;
    for (const auto& d : v.type().dims()) n *= d.size();
    activations += n;
  }
  autograd::NoGradGuard no_grad;
  const int64_t live = cpu_memory_stats().live_bytes;
  reset_cpu_peak();
  const Tensor loss = ex.run(in)[0];
  const int64_t peak = cpu_memory_stats().peak_bytes - live;
  INFO("peak " << peak << " bytes, all node outputs " << activations << " bytes");
  CHECK(peak < activations / 4);
  CHECK(std::isfinite(loss.item()));
}

TEST_CASE("executor errors name the input, node or value", "[graph][executor]") {
  auto model = models::make_model(test::small_gpt());
  const graph::Model m = graph::trace_model(*model, 2, 12, 1);
  graph::Executor ex(m, 1);
  const models::Batch b = test::gpt_batch(2, 12, 64);
  CHECK_THROWS_WITH(ex.run({{"tokens", b.tokens}}),
                    Catch::Contains("graph input 'targets' is missing"));
  CHECK_THROWS_WITH(
      ex.run({{"tokens", test::ids({2, 8}, 64, 1)}, {"targets", b.targets}}),
      Catch::Contains("graph input 'tokens'") && Catch::Contains("expected i64[2, 12]"));
  CHECK_THROWS_WITH(ex.run({{"tokens", b.tokens}, {"targets", Tensor::zeros({2, 12})}}),
                    Catch::Contains("graph input 'targets'") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(ex.run({{"tokens", b.tokens}, {"targets", b.targets}, {"mask", b.tokens}}),
                    Catch::Contains("'mask' is not an input"));
  CHECK_THROWS_WITH(ex.value("nope.weight"), Catch::Contains("no initializer 'nope.weight'"));

  // A symbolic dim binds from the inputs and must agree between them.
  graph::Model sym = m;
  for (int i = 0; i < 2; ++i)
    sym.mutable_graph()->mutable_inputs(i)->mutable_type()->mutable_dims(0)->set_symbol("batch");
  graph::Executor ex_sym(sym, 1);
  CHECK(std::isfinite(ex_sym.run({{"tokens", b.tokens}, {"targets", b.targets}})[0].item()));
  CHECK_THROWS_WITH(ex_sym.run({{"tokens", b.tokens}, {"targets", test::ids({3, 12}, 64, 2)}}),
                    Catch::Contains("graph input 'targets'") && Catch::Contains("'batch'"));

  // Broken graphs fail at construction, naming the node.
  graph::Model bad_op = m;
  bad_op.mutable_graph()->mutable_nodes(3)->set_op("frobnicate");
  CHECK_THROWS_WITH(graph::Executor(bad_op, 1),
                    Catch::Contains("'frobnicate' is not a registry op") &&
                        Catch::Contains(m.graph().nodes(3).name()));
  graph::Model dangling = m;
  dangling.mutable_graph()->mutable_nodes(5)->set_inputs(0, "ghost");
  CHECK_THROWS_WITH(graph::Executor(dangling, 1), Catch::Contains("input 'ghost' is not") &&
                                                      Catch::Contains(m.graph().nodes(5).name()));
  graph::Model no_output = m;
  no_output.mutable_graph()->mutable_outputs(0)->set_name("lost");
  CHECK_THROWS_WITH(graph::Executor(no_output, 1), Catch::Contains("output 'lost'"));
  // An op that rejects its inputs at run time: the node is named.
  graph::Model bad_attr = m;
  for (auto& n : *bad_attr.mutable_graph()->mutable_nodes())
    if (n.op() == "reshape") {
      (*n.mutable_attrs())["shape"].mutable_ints()->set_values(0, 1000);
      graph::Executor bad(bad_attr, 1);
      CHECK_THROWS_WITH(bad.run({{"tokens", b.tokens}, {"targets", b.targets}}),
                        Catch::Contains("node '" + n.name() + "'"));
      break;
    }
}
