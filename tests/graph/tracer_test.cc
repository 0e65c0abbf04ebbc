// The tracer: what a traced GPT/BERT graph holds (module paths, initializer specs, the tied
// weight, inputs and outputs), that tracing allocates nothing, proto round trips, and errors.
#include "merak/graph/tracer.h"

#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>

#include "merak/config/config.h"
#include "merak/graph/convert.h"
#include "merak/graph/executor.h"
#include "merak/graph/summary.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "tests/graph/test_models.h"
#include "models/model.h"

using namespace merak;
using merak::graph::Model;
using merak::graph::Node;

namespace {

std::vector<const Node*> nodes_reading(const graph::Graph& g, const std::string& value) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes())
    for (const std::string& in : n.inputs())
      if (in == value) out.push_back(&n);
  return out;
}

const graph::Initializer* initializer(const graph::Graph& g, const std::string& name) {
  for (const auto& i : g.initializers())
    if (i.name() == name) return &i;
  return nullptr;
}

// A module with one parameter, for tracing hand-written functions.
class Scale : public nn::Module {
 public:
  Scale() : w(parameter("w", {3}, nn::Init::ones())) {}
  Tensor& w;
};

}  // namespace

TEST_CASE("a traced GPT has module paths, initializer specs and the tied weight read twice",
          "[graph][tracer]") {
  const models::ModelOptions o = test::small_gpt();
  auto model = models::make_model(o);
  const Model m = graph::trace_model(*model, 2, 12, 7);
  const graph::Graph& g = m.graph();
  CHECK(m.producer() == "merak-tracer");
  CHECK(g.name() == "gpt");
  CHECK(m.metadata().at("tokens") == "24");

  // Inputs and the single output.
  REQUIRE(g.inputs_size() == 2);
  CHECK(g.inputs(0).name() == "tokens");
  CHECK(g.inputs(1).name() == "targets");
  CHECK(g.inputs(0).type().dtype() == graph::DT_I64);
  CHECK(g.inputs(0).type().dims(1).size() == 12);
  REQUIRE(g.outputs_size() == 1);
  CHECK(g.outputs(0).name() == "loss");
  CHECK(g.outputs(0).type().dims_size() == 0);
  CHECK(g.nodes(g.nodes_size() - 1).op() == "cross_entropy");
  CHECK(g.nodes(g.nodes_size() - 1).outputs(0) == "loss");

  // Every parameter is an initializer with its init spec and no data.
  const auto params = model->parameters();
  REQUIRE(g.initializers_size() == int(params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& init = g.initializers(int(i));
    INFO(params[i].name);
    CHECK(init.name() == params[i].name);
    CHECK(init.trainable());
    CHECK(init.data().empty());
    CHECK(init.init().std() == Approx(params[i].init.std));
  }
  CHECK(initializer(g, "ln_f.weight")->init().kind() == graph::InitSpec::ONES);
  CHECK(initializer(g, "blocks.0.attn.qkv.bias")->init().kind() == graph::InitSpec::ZEROS);
  CHECK(initializer(g, "blocks.1.mlp.proj.weight")->init().std() == Approx(0.02 / 2.0));

  // Module paths: the MLP's first linear of block 1 reads that module's weight.
  const Node* fc = nullptr;
  for (const Node& n : g.nodes())
    if (n.module_path() == "blocks.1.mlp.fc") fc = &n;
  REQUIRE(fc);
  CHECK(fc->op() == "linear_gelu");  // GPT-2's GELU fused into the fc product
  CHECK(graph::attrs_of(*fc).s("approximate") == "tanh");
  CHECK(fc->outputs_size() == 2);  // y, and the product before GELU that backward reads
  CHECK(fc->inputs(1) == "blocks.1.mlp.fc.weight");
  CHECK(fc->inputs(2) == "blocks.1.mlp.fc.bias");
  // Attention's own ops (reshape, split, sdpa) sit under the attention module.
  bool sdpa_in_attn = false;
  for (const Node& n : g.nodes())
    if (n.op() == "sdpa")
      sdpa_in_attn = n.module_path().rfind("blocks.", 0) == 0 &&
                     n.module_path().find(".attn") != std::string::npos;
  CHECK(sdpa_in_attn);

  // Tied LM head: wte.weight feeds the embedding and the final linear.
  const auto readers = nodes_reading(g, "wte.weight");
  REQUIRE(readers.size() == 2);
  CHECK(readers[0]->op() == "embedding");
  CHECK(readers[0]->module_path() == "wte");
  CHECK(readers[1]->op() == "linear");
  CHECK(readers[1]->module_path().empty());  // the head is the root model's own op

  // Position ids come from the arange op on the tokens, not from a tensor of unknown origin.
  const auto from_tokens = nodes_reading(g, "tokens");
  bool arange = false;
  for (const Node* n : from_tokens) arange = arange || n->op() == "arange";
  CHECK(arange);

  // Names are unique; every node input is defined before it; every value has a type.
  std::set<std::string> defined, node_names;
  for (const auto& i : g.initializers()) defined.insert(i.name());
  for (const auto& i : g.inputs()) defined.insert(i.name());
  std::set<std::string> typed;
  for (const auto& v : g.values()) typed.insert(v.name());
  for (const Node& n : g.nodes()) {
    INFO(n.name());
    CHECK(node_names.insert(n.name()).second);
    CHECK(ops::Registry::get().find(n.op()));
    for (const std::string& in : n.inputs()) CHECK((in.empty() || defined.count(in)));
    for (const std::string& out : n.outputs()) {
      CHECK(defined.insert(out).second);
      CHECK(typed.count(out));
    }
  }
}

TEST_CASE("tracing allocates no memory, even for a GPT-2-small-sized model", "[graph][tracer]") {
  models::ModelOptions o;  // GPT-2 124M: 12 layers, 768 hidden, 1024 positions, 50257 tokens
  o.family = "gpt";
  o.layers = 12;
  o.hidden = 768;
  o.heads = 12;
  o.max_seq = 1024;
  o.vocab = 50257;
  auto model = models::make_model(o);
  const MemoryStats before = cpu_memory_stats();
  const auto start = std::chrono::steady_clock::now();
  const Model m = graph::trace_model(*model, 4, 1024, 1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const MemoryStats after = cpu_memory_stats();
  CHECK(after.allocations == before.allocations);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(seconds < 2.0);
  int64_t params = 0;
  for (const auto& i : m.graph().initializers()) {
    int64_t n = 1;
    for (const auto& d : i.type().dims()) n *= d.size();
    params += n;
  }
  CHECK(params == model->num_parameters());
  CHECK(params > 124000000);
  for (const auto& p : model->parameters()) CHECK(p.value.is_meta());
}

TEST_CASE("a traced BERT has its six inputs and every parameter", "[graph][tracer]") {
  auto model = models::make_model(test::small_bert());
  const Model m = graph::trace_model(*model, 2, 10, 3);
  const auto& g = m.graph();
  std::vector<std::string> inputs;
  for (const auto& i : g.inputs()) inputs.push_back(i.name());
  CHECK(inputs == std::vector<std::string>{"tokens", "segment_ids", "attention_mask", "mlm_targets",
                                           "nsp_labels", "mlm_weight"});
  CHECK(g.inputs(2).type().dtype() == graph::DT_BOOL);
  CHECK(g.inputs(4).type().dims_size() == 1);
  CHECK(g.inputs(5).type().dtype() == graph::DT_F32);  // mlm_weight [batch]
  CHECK(g.inputs(5).type().dims_size() == 1);
  CHECK(g.initializers_size() == int(model->parameters().size()));
  // The MLM decoder is tied to the word embedding.
  CHECK(nodes_reading(g, "word.weight").size() == 2);
  CHECK(nodes_reading(g, "mlm_bias").size() == 1);
  CHECK(nodes_reading(g, "attention_mask").size() == size_t(test::small_bert().layers));
}

TEST_CASE("a graph survives a proto round trip and runs the same", "[graph][tracer]") {
  auto model = models::make_model(test::small_gpt());
  const Model m = graph::trace_model(*model, 2, 8, 4);
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  Model back;
  REQUIRE(back.ParseFromString(bytes));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(m, back));
  CHECK(back.graph().nodes_size() == m.graph().nodes_size());

  const models::Batch b = test::gpt_batch(2, 8, 64);
  const std::map<std::string, Tensor> in{{"tokens", b.tokens}, {"targets", b.targets}};
  graph::Executor a(m, 4), c(back, 4);
  CHECK(a.run(in)[0].item() == c.run(in)[0].item());

  Model broken;
  CHECK_FALSE(broken.ParseFromString(bytes.substr(0, bytes.size() / 2)));
}

TEST_CASE(
    "trace: Meta tensors of unknown origin are errors naming the module; CPU constants "
    "are recorded with their data",
    "[graph][tracer]") {
  Scale module;
  const std::vector<graph::TraceInput> in{{"x", {3}, DType::F32}};
  const graph::TraceFn stray = [&](const std::vector<Tensor>& x) {
    const ops::ScopeGuard scope("head.norm");
    const Tensor unknown = Tensor::empty({3}, DType::F32, Device::meta());
    return std::vector<Tensor>{ops::add(ops::mul(x[0], module.w), unknown)};
  };
  CHECK_THROWS_WITH(
      graph::trace(module, 1, in, stray, {"y"}),
      Catch::Contains("module 'head.norm'") && Catch::Contains("reads a Meta tensor"));

  // The observer is gone after the failed trace: eager ops still run unrecorded.
  CHECK(ops::add(Tensor::ones({2}), Tensor::ones({2})).to_vector<float>() ==
        std::vector<float>{2, 2});

  const graph::TraceFn constant = [&](const std::vector<Tensor>& x) {
    const Tensor c = Tensor::from_vector<float>({1, 2, 3}, {3});
    return std::vector<Tensor>{ops::mul(x[0], module.w), ops::mul_scalar(c, 2.0)};
  };
  const Model m = graph::trace(module, 1, in, constant, {"y", "twice"});
  const auto& g = m.graph();
  REQUIRE(g.initializers_size() == 2);
  CHECK(g.initializers(0).name() == "w");
  CHECK(g.initializers(1).name() == "const_0");
  CHECK_FALSE(g.initializers(1).trainable());
  CHECK(g.initializers(1).data().size() == 3 * sizeof(float));
  graph::Executor ex(m, 1);
  const auto out = ex.run({{"x", Tensor::from_vector<float>({1, -1, 0.5f}, {3})}});
  CHECK(out[0].to_vector<float>() == std::vector<float>{1, -1, 0.5f});  // w = ones
  CHECK(out[1].to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(ex.parameters().size() == 1);

  // Outputs must come from ops, once each.
  const graph::TraceFn passthrough = [](const std::vector<Tensor>& x) { return x; };
  CHECK_THROWS_WITH(graph::trace(module, 1, in, passthrough, {"y"}),
                    Catch::Contains("output 'y' is not computed by any op"));
  const graph::TraceFn twice = [&](const std::vector<Tensor>& x) {
    const Tensor y = ops::mul(x[0], module.w);
    return std::vector<Tensor>{y, y};
  };
  CHECK_THROWS_WITH(graph::trace(module, 1, in, twice, {"a", "b"}),
                    Catch::Contains("are the same tensor"));
  CHECK_THROWS_WITH(graph::trace(module, 1, in, constant, {"w", "z"}),
                    Catch::Contains("'w' is already used"));
}

TEST_CASE("configs/gpt20b.yaml's 20B model traces in well under 10 s, allocating nothing",
          "[graph][tracer]") {
  const config::Config cfg = config::load("configs/gpt20b.yaml");
  auto model = models::make_model(cfg.model);
  const MemoryStats before = cpu_memory_stats();
  const auto start = std::chrono::steady_clock::now();
  const Model m = graph::trace_model(*model, 1, cfg.train.seq_len, cfg.train.seed);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(cpu_memory_stats().allocations == before.allocations);
  CHECK(seconds < 10.0);
  const graph::Summary s = graph::summarize(m);
  CHECK(s.parameters == model->num_parameters());
  CHECK(s.parameters > 20000000000);
  CHECK(s.ops.at("linear") == 3 * 44 + 1);
  CHECK(s.ops.at("linear_gelu") == 44);
  CHECK(s.ops.at("sdpa") == 44);
  CHECK(nodes_reading(m.graph(), "wte.weight").size() == 2);
  CHECK(s.flops_per_token() == Approx(model->flops_per_token(cfg.train.seq_len)).epsilon(0.02));
}

TEST_CASE("empty int-list attributes survive: full reductions and reshape to a scalar run",
          "[graph][tracer]") {
  // An empty list is a value of its own ("every dim", "scalar shape"), not a missing one.
  const graph::Attribute a = graph::to_proto(ops::AttrValue(std::vector<int64_t>{}));
  CHECK(a.value_case() == graph::Attribute::kInts);
  CHECK(std::get<std::vector<int64_t>>(graph::from_proto(a)).empty());

  Scale module;
  const std::vector<graph::TraceInput> in{{"x", {2, 3}, DType::F32}};
  const graph::TraceFn full = [&](const std::vector<Tensor>& x) {
    const Tensor y = ops::mul(x[0], module.w);
    return std::vector<Tensor>{ops::sum(y), ops::reshape(ops::mean(y, {0, 1}, true), {})};
  };
  const Model m = graph::trace(module, 1, in, full, {"total", "avg"});
  graph::Executor ex(m, 1);
  const auto out = ex.run({{"x", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}});
  CHECK(out[0].shape() == Shape{});
  CHECK(out[0].item() == 21);
  CHECK(out[1].shape() == Shape{});
  CHECK(out[1].item() == 3.5);
}
