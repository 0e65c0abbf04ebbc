#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/core/philox.h"
#include "merak/graph/tracer.h"
#include "merak/nn/layers.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "models/bert.h"
#include "models/gpt.h"

using namespace merak;
using models::ModelOptions;

namespace {

ModelOptions tiny_gpt() {
  ModelOptions o;
  o.family = "gpt";
  o.layers = 2;
  o.hidden = 32;
  o.heads = 4;
  o.max_seq = 16;
  o.vocab = 64;
  return o;
}

Tensor ids(const Shape& shape, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = int64_t(philox_at(seed, uint64_t(i))[0] % uint64_t(vocab));
  return t;
}

models::Batch lm_batch(int64_t b, int64_t t, int64_t vocab) {
  models::Batch batch;
  batch.tokens = ids({b, t}, vocab, 1);
  batch.targets = ids({b, t}, vocab, 2);
  return batch;
}

}  // namespace

TEST_CASE("GPT parameters have hierarchical names and GPT-2's count", "[nn][gpt]") {
  auto model = models::make_model(tiny_gpt());
  const auto params = model->named_parameters();
  CHECK(params.front().first == "wte.weight");
  CHECK(params[1].first == "wpe.weight");
  CHECK(params[2].first == "blocks.0.ln_1.weight");
  CHECK(params[4].first == "blocks.0.attn.qkv.weight");
  CHECK(params.back().first == "ln_f.bias");
  // GPT-2: V C + T C + L (12 C^2 + 13 C) + 2 C (tied head adds nothing).
  const int64_t c = 32, l = 2, v = 64, t = 16;
  CHECK(model->num_parameters() == v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c);
  // Unmaterialised parameters are Meta: no memory.
  for (const auto& [name, p] : params) CHECK(p.is_meta());
  CHECK_THROWS_WITH(models::make_model([] { ModelOptions o; o.family = "llama"; return o; }()),
                    Catch::Contains("unknown model family 'llama'"));
}

TEST_CASE("materialize draws each parameter from its name; shards equal slices", "[nn]") {
  auto a = models::make_model(tiny_gpt());
  auto b = models::make_model(tiny_gpt());
  a->materialize(7);
  b->materialize(7);
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    CHECK(pa[i].value.to_vector<float>() == pb[i].value.to_vector<float>());
  // GPT-2 init: residual projections get 0.02 / sqrt(2 L), others 0.02, LayerNorm ones/zeros.
  for (const auto& p : pa) {
    if (p.name == "blocks.1.mlp.proj.weight") CHECK(p.init.std == Approx(0.02 / std::sqrt(4.0)));
    if (p.name == "blocks.1.mlp.fc.weight") CHECK(p.init.std == Approx(0.02));
    if (p.name == "ln_f.weight") CHECK(p.value.to_vector<float>() == std::vector<float>(32, 1.0f));
  }
  // A column shard of the QKV weight drawn alone equals the slice of the full one.
  const auto& qkv = pa[4];
  REQUIRE(qkv.name == "blocks.0.attn.qkv.weight");
  Tensor shard = Tensor::empty({96, 8});
  nn::initialize(shard, qkv.name, qkv.init, 7, SliceOf{{96, 32}, {0, 16}});
  CHECK(shard.to_vector<float>() == qkv.value.narrow(1, 16, 8).contiguous().to_vector<float>());
  // Another seed gives other weights.
  auto c = models::make_model(tiny_gpt());
  c->materialize(8);
  CHECK(c->parameters()[0].value.to_vector<float>() != pa[0].value.to_vector<float>());
}

TEST_CASE("GPT loss at initialisation is close to log(vocab) and gradients reach every "
          "parameter", "[nn][gpt]") {
  auto model = models::make_model(tiny_gpt());
  model->materialize(1);
  const Tensor loss = model->loss(lm_batch(2, 16, 64));
  CHECK(loss.shape().empty());
  CHECK(loss.item() == Approx(std::log(64.0)).margin(0.1));
  autograd::backward(loss);
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == p.shape());
  }
  CHECK_THROWS_WITH(model->loss(lm_batch(1, 17, 64)), Catch::Contains("max_seq"));
}

TEST_CASE("recomputing every block gives the same loss and gradients", "[nn][recompute]") {
  auto run = [](bool recompute, double dropout) {
    ModelOptions o = tiny_gpt();
    o.dropout = dropout;
    auto model = models::make_model(o);
    model->set_recompute(recompute);
    model->materialize(3);
    set_rng_stream(11);
    const Tensor loss = model->loss(lm_batch(2, 16, 64));
    autograd::backward(loss);
    std::vector<std::vector<float>> out{{float(loss.item())}};
    for (const auto& [name, p] : model->named_parameters()) out.push_back(p.grad().to_vector<float>());
    return out;
  };
  for (double dropout : {0.0, 0.2}) {
    const auto plain = run(false, dropout), ckpt = run(true, dropout);
    REQUIRE(plain.size() == ckpt.size());
    for (size_t i = 0; i < plain.size(); ++i)
      for (size_t j = 0; j < plain[i].size(); ++j)
        REQUIRE(ckpt[i][j] == Approx(plain[i][j]).epsilon(1e-5).margin(1e-7));
  }
}

TEST_CASE("dropout: identity in eval mode, re-derivable masks in training", "[nn]") {
  auto model = models::make_model([] { ModelOptions o = tiny_gpt(); o.dropout = 0.5; return o; }());
  model->materialize(1);
  const models::Batch b = lm_batch(1, 8, 64);
  auto& gpt = static_cast<models::Gpt&>(*model);
  set_rng_stream(1);
  const auto train1 = gpt.logits(b.tokens).to_vector<float>();
  const auto train1_again = gpt.logits(b.tokens).to_vector<float>();
  set_rng_stream(2);
  const auto train2 = gpt.logits(b.tokens).to_vector<float>();
  CHECK(train1 == train1_again);  // same stream, same masks
  CHECK(train1 != train2);        // next micro-batch, new masks
  model->train(false);
  const auto eval1 = gpt.logits(b.tokens).to_vector<float>();
  set_rng_stream(3);
  CHECK(gpt.logits(b.tokens).to_vector<float>() == eval1);
  CHECK_THROWS_WITH(nn::Dropout(1.0), Catch::Contains("outside [0, 1)"));
}

namespace {

// Each dropout call's module path and key, in call order.
struct DropoutCalls : ops::OpObserver {
  DropoutCalls() { ops::add_observer(this); }
  ~DropoutCalls() override { ops::remove_observer(this); }
  void on_op(const ops::OpDef& op, const std::vector<Tensor>&, std::vector<Tensor>&,
             const ops::Attrs& attrs) override {
    if (op.name == "dropout") calls.emplace_back(ops::current_scope(), attrs.i("key"));
  }
  std::vector<std::pair<std::string, int64_t>> calls;
};

}  // namespace

TEST_CASE("dropout: each residual branch of a block draws its own mask", "[nn][dropout]") {
  for (const std::string family : {"gpt", "bert"}) {
    INFO(family);
    ModelOptions o = tiny_gpt();
    o.family = family;
    o.dropout = 0.5;
    auto model = models::make_model(o);
    model->materialize(5);
    models::Batch b = lm_batch(1, 8, 64);
    b.segment_ids = Tensor::zeros({1, 8}, DType::I64);
    b.attention_mask = Tensor::full({1, 8}, 1, DType::Bool);
    b.mlm_targets = b.targets;
    b.nsp_labels = Tensor::from_vector<int64_t>({1}, {1});
    set_rng_stream(4);
    DropoutCalls seen;
    model->loss(b);
    // The embedding's dropout, then the attention and MLP branches of each layer.
    const std::string block = family == "gpt" ? "blocks.0" : "layers.0";
    REQUIRE(seen.calls.size() == 1 + 2 * size_t(o.layers));
    CHECK(seen.calls[1].first == block + ".attn_drop");
    CHECK(seen.calls[2].first == block + ".mlp_drop");
    std::set<int64_t> keys;
    for (const auto& call : seen.calls) keys.insert(call.second);
    CHECK(keys.size() == seen.calls.size());
    // Same stream and shape: the two branches' masks differ only through their keys.
    const Tensor ones = Tensor::full({4, 32}, 1, DType::F32);
    CHECK(ops::dropout(ones, 0.5, uint64_t(seen.calls[1].second), 4).to_vector<float>() !=
          ops::dropout(ones, 0.5, uint64_t(seen.calls[2].second), 4).to_vector<float>());
  }
  // The traced graph (what the runtime runs) carries the same distinct keys.
  ModelOptions o = tiny_gpt();
  o.dropout = 0.1;
  auto model = models::make_model(o);
  const auto g = graph::trace_model(*model, 1, 8, 5);
  std::set<std::string> names;
  std::set<int64_t> keys;
  for (const auto& n : g.graph().nodes()) {
    if (n.op() != "dropout") continue;
    names.insert(n.name());
    keys.insert(n.attrs().at("key").i());
  }
  CHECK(names.count("blocks.0.attn_drop/dropout_0") == 1);
  CHECK(names.count("blocks.0.mlp_drop/dropout_0") == 1);
  CHECK(keys.size() == 1 + 2 * size_t(o.layers));
}

TEST_CASE("BERT: MLM + NSP loss at init, padding masked, names", "[nn][bert]") {
  ModelOptions o;
  o.family = "bert";
  o.layers = 2;
  o.hidden = 32;
  o.heads = 4;
  o.max_seq = 16;
  o.vocab = 70;
  auto model = models::make_model(o);
  model->materialize(2);
  models::Batch b;
  b.tokens = ids({2, 12}, 70, 3);
  b.segment_ids = Tensor::zeros({2, 12}, DType::I64);
  b.attention_mask = Tensor::full({2, 12}, 1, DType::Bool);
  b.mlm_targets = Tensor::full({2, 12}, -100, DType::I64);
  b.mlm_targets.data<int64_t>()[3] = 5;
  b.mlm_targets.data<int64_t>()[15] = 9;
  b.nsp_labels = Tensor::from_vector<int64_t>({0, 1}, {2});
  const Tensor loss = model->loss(b);
  CHECK(loss.item() == Approx(std::log(70.0) + std::log(2.0)).margin(0.3));
  autograd::backward(loss);
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
  // Masking the last key of row 0 changes row 0's encoding but not row 1's.
  auto& bert = static_cast<models::Bert&>(*model);
  const Tensor h0 = bert.encode(b);
  b.attention_mask.data<bool>()[11] = false;
  const Tensor h1 = bert.encode(b);
  const auto v0 = h0.to_vector<float>(), v1 = h1.to_vector<float>();
  const size_t row = 12 * 32;
  CHECK(std::vector<float>(v0.begin(), v0.begin() + row) !=
        std::vector<float>(v1.begin(), v1.begin() + row));
  CHECK(std::vector<float>(v0.begin() + row, v0.end()) ==
        std::vector<float>(v1.begin() + row, v1.end()));
}

TEST_CASE("to() moves parameters as new leaves in another dtype, names and values kept", "[nn]") {
  auto model = models::make_model(tiny_gpt());
  model->materialize(7);
  const auto before = model->parameters();
  model->to(Device::cpu(), DType::F64);
  const auto after = model->parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    const Tensor& v = after[i].value;
    CHECK(v.dtype() == DType::F64);
    CHECK(v.requires_grad());
    CHECK(v.name() == before[i].name);
    CHECK(v.shape() == before[i].value.shape());
    const std::vector<float> f = before[i].value.to_vector<float>();
    const std::vector<double> d = v.to_vector<double>();
    REQUIRE(d.size() == f.size());
    for (size_t k = 0; k < d.size(); ++k) REQUIRE(d[k] == double(f[k]));
  }
  // The model computes with the moved parameters: gradients land on them.
  const Tensor loss = model->loss(lm_batch(2, 8, 64));
  autograd::backward(loss);
  CHECK(model->parameters()[0].value.grad().defined());
  CHECK_FALSE(before[0].value.grad().defined());

  auto meta = models::make_model(tiny_gpt());
  CHECK_THROWS_WITH(meta->to(Device::cpu()), Catch::Contains("not materialised"));
}
