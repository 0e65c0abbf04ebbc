// The tensor-parallel pass: what it rewrites (column/row-parallel linears with their collectives,
// shards of the fused QKV weight per head, local-head reshapes, vocabulary-parallel embedding and
// loss), that the rewritten ranks simulated in threads give the unsplit graph's loss and
// gradients (with and without pipeline stages, with an uneven vocabulary split), and the errors.
#include "merak/partition/tensor_parallel.h"

#include "merak/graph/convert.h"
#include "merak/graph/tracer.h"
#include "merak/nn/layers.h"
#include "merak/ops/functional.h"
#include "merak/partition/analysis.h"
#include "merak/partition/partitioner.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

const graph::Node* find(const graph::Graph& g, const std::string& name) {
  for (const graph::Node& n : g.nodes())
    if (n.name() == name) return &n;
  return nullptr;
}

Plan plan(const graph::Model& m, int64_t pp, int64_t tp) {
  Request r;
  r.pp = pp;
  r.tp = tp;
  r.hardware = test::profile("cpu-local");
  r.memory.micro_batches = 2;
  return run_partition(m, r).plan;
}

// x -> a -> relu -> b with GELU (linear_gelu) -> c: b can only be column-parallel.
class ThreeLinears : public nn::Module {
 public:
  nn::Linear& a = add<nn::Linear>("a", 8, 16);
  nn::Linear& b = add<nn::Linear>("b", 16, 16);
  nn::Linear& c = add<nn::Linear>("c", 16, 8);
};

// An elementwise dropout on output 0 of node `after`, as a graph that drops inside a split region
// would have it (our models drop after the row-parallel reductions, or inside sdpa).
void insert_dropout(graph::Model& m, const std::string& after, double p, int64_t key) {
  graph::Graph& g = *m.mutable_graph();
  for (int i = 0; i < g.nodes_size(); ++i) {
    if (g.nodes(i).name() != after) continue;
    const std::string y = g.nodes(i).outputs(0), pre = y + "/before_dropout";
    for (const graph::ValueInfo& v : g.values())
      if (v.name() == y) {
        graph::ValueInfo copy = v;
        copy.set_name(pre);
        *g.add_values() = copy;
        break;
      }
    g.mutable_nodes(i)->set_outputs(0, pre);
    graph::Node d;
    d.set_name(after + "/dropout");
    d.set_op("dropout");
    d.add_inputs(pre);
    d.add_outputs(y);
    d.set_module_path(g.nodes(i).module_path());
    graph::set_attrs(d, ops::Attrs().set("p", p).set("key", key));
    g.mutable_nodes()->Add(std::move(d));
    for (int j = g.nodes_size() - 1; j > i + 1; --j) g.mutable_nodes()->SwapElements(j, j - 1);
    return;
  }
  FAIL("no node " << after);
}

}  // namespace

TEST_CASE("linear_gelu is only ever a column-parallel linear", "[partition]") {
  ThreeLinears module;
  const graph::TraceFn fn = [&](const std::vector<Tensor>& x) {
    const Tensor h = ops::relu(module.a.forward(x[0]));
    return std::vector<Tensor>{module.c.forward(module.b.forward_gelu(h, "tanh"))};
  };
  const graph::Model m = graph::trace(module, 1, {{"x", {4, 8}, DType::F32}}, fn, {"y"});
  const TpPass pass = shard_tensor_parallel(m, 2);
  // The region is b (column) to c (row); a, which could only end a region at b, stays whole.
  const auto& shards = pass.ranks[0].shards;
  CHECK(shards.at("b.weight").split == "column");
  CHECK(shards.at("c.weight").split == "row");
  CHECK(shards.at("a.weight").split == "replicated");
  CHECK(pass.notes[0] == "1 regions split (0 attention over heads, 1 MLP): 1 column-parallel and "
                         "1 row-parallel linears");
}

TEST_CASE("the pass splits attention by heads, the MLP by features, the vocabulary by rows",
          "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(2, 97), 2, 8);
  const TpPass pass = shard_tensor_parallel(m, 2);
  REQUIRE(pass.ranks.size() == 2);
  REQUIRE_FALSE(pass.notes.empty());
  CHECK(pass.notes[0] == "4 regions split (2 attention over heads, 2 MLP): 4 column-parallel and "
                         "4 row-parallel linears");
  for (int64_t r = 0; r < 2; ++r) {
    const graph::Graph& g = pass.ranks[size_t(r)].model.graph();
    const auto& shards = pass.ranks[size_t(r)].shards;
    // QKV [96, 32]: rank r holds heads 2r, 2r+1 of Q, of K and of V: three boxes of 16 rows.
    const ShardSpec& qkv = shards.at("blocks.0.attn.qkv.weight");
    CHECK(qkv.split == "column");
    REQUIRE(qkv.boxes.size() == 3);
    for (int p = 0; p < 3; ++p) {
      CHECK(qkv.boxes[size_t(p)].offsets == Shape{p * 32 + r * 16, 0});
      CHECK(qkv.boxes[size_t(p)].sizes == Shape{16, 32});
    }
    CHECK(shards.at("blocks.0.attn.qkv.bias").boxes.size() == 3);
    // The projections are split by input columns; their biases stay whole, added once reduced.
    const ShardSpec& proj = shards.at("blocks.0.mlp.proj.weight");
    CHECK(proj.split == "row");
    CHECK(proj.concat_dim == 1);
    CHECK(proj.boxes[0].offsets == Shape{0, r * 64});
    CHECK(proj.boxes[0].sizes == Shape{32, 64});
    CHECK(shards.at("blocks.0.mlp.proj.bias").split == "replicated");
    CHECK(shards.at("blocks.0.ln_1.weight").split == "replicated");
    CHECK(shards.at("wpe.weight").split == "replicated");
    // 97 vocabulary rows: 49 on rank 0, 48 on rank 1.
    const ShardSpec& wte = shards.at("wte.weight");
    CHECK(wte.split == "vocab");
    CHECK(wte.boxes[0].offsets == Shape{r == 0 ? 0 : 49, 0});
    CHECK(wte.boxes[0].sizes == Shape{r == 0 ? 49 : 48, 32});

    // Collectives where partial results meet, and the local head count in the reshapes.
    CHECK(find(g, "blocks.0.attn.qkv/linear_0/tp_copy")->op() == "tp_copy");
    CHECK(find(g, "blocks.0.attn.proj/linear_0/tp_all_reduce")->op() == "tp_all_reduce");
    const graph::Node* bias = find(g, "blocks.0.attn.proj/linear_0/tp_bias");
    REQUIRE(bias);
    CHECK(bias->outputs(0) == "blocks.0.attn.proj/linear_0:0");
    const ops::Attrs reshape = graph::attrs_of(*find(g, "blocks.0.attn/reshape_0"));
    CHECK(reshape.ints("shape") == std::vector<int64_t>{2, 8, 3, 2, 8});
    // Attention's dropout draws the unsplit run's masks of the rank's heads 2r, 2r + 1 of 4.
    const ops::Attrs attention = graph::attrs_of(*find(g, "blocks.0.attn/sdpa_0"));
    CHECK(attention.i("head_start") == 2 * r);
    CHECK(attention.i("heads") == 4);
    CHECK(find(g, "wte/embedding_0")->op() == "tp_embedding");
    CHECK(find(g, "cross_entropy_0")->op() == "tp_cross_entropy");
    CHECK(graph::attrs_of(*find(g, "cross_entropy_0")).i("start") == (r == 0 ? 0 : 49));
    // The rewritten graph is consistent (inference would throw) and ends in the full loss.
    const GraphFacts f = analyze(g);
    CHECK(f.values[size_t(f.find("loss"))].meta.shape == Shape{});
    CHECK(f.values[size_t(f.find("blocks.0.mlp.fc/linear_gelu_0:0"))].meta.shape == Shape{2, 8, 64});
  }
}

TEST_CASE("tensor-parallel ranks simulated in threads equal the unsplit graph", "[partition]") {
  const uint64_t seed = 5;
  SECTION("tp 2") {
    const graph::Model m = test::trace(test::tiny_gpt(2), 2, 16, seed);
    const auto batch = test::gpt_batch(2, 16, 96);
    test::check_same_step(run_step(plan(m, 1, 2), batch, seed), test::unsplit_step(m, batch, seed));
  }
  SECTION("tp 2 x pp 2, a vocabulary of 97 split 49 + 48") {
    const graph::Model m = test::trace(test::tiny_gpt(3, 97), 2, 16, seed);
    const auto batch = test::gpt_batch(2, 16, 97);
    test::check_same_step(run_step(plan(m, 2, 2), batch, seed), test::unsplit_step(m, batch, seed));
  }
  SECTION("tp 4, one head per rank") {
    const graph::Model m = test::trace(test::tiny_gpt(1), 3, 8, seed);
    const auto batch = test::gpt_batch(3, 8, 96);
    test::check_same_step(run_step(plan(m, 1, 4), batch, seed), test::unsplit_step(m, batch, seed));
  }
  SECTION("dropout, attention probabilities included, at tp 2 and tp 4") {
    models::ModelOptions o = test::tiny_gpt(2);
    o.dropout = 0.3;
    const graph::Model m = test::trace(o, 2, 16, seed);
    const auto batch = test::gpt_batch(2, 16, 96);
    set_rng_stream(0);  // run_step's rank threads draw from stream 0
    for (int64_t tp : {2, 4})
      test::check_same_step(run_step(plan(m, 1, tp), batch, seed),
                            test::unsplit_step(m, batch, seed));
  }
  SECTION("elementwise dropouts inside split regions draw the unsplit run's masks") {
    // One on the fused QKV output (a rank holds three runs of it: its heads of Q, K and V), one
    // on the MLP's hidden features (one run).
    graph::Model m = test::trace(test::tiny_gpt(2), 2, 16, seed);
    insert_dropout(m, "blocks.0.attn.qkv/linear_0", 0.3, 11);
    insert_dropout(m, "blocks.1.mlp.fc/linear_gelu_0", 0.5, 12);
    const auto batch = test::gpt_batch(2, 16, 96);
    set_rng_stream(0);
    const TpPass pass = shard_tensor_parallel(m, 2);
    const ops::Attrs qkv =
        graph::attrs_of(*find(pass.ranks[1].model.graph(), "blocks.0.attn.qkv/linear_0/dropout"));
    CHECK(qkv.i("split_dim") == 2);
    CHECK(qkv.i("split_size") == 96);
    CHECK(qkv.i("split_start") == 16);
    CHECK(qkv.i("split_runs") == 3);
    for (int64_t tp : {2, 4})
      test::check_same_step(run_step(plan(m, 1, tp), batch, seed),
                            test::unsplit_step(m, batch, seed));
  }
}

TEST_CASE("the pass completes an op's defaulted attributes before localising them",
          "[partition]") {
  // A graph written without sdpa's defaulted attributes (head_start, heads) runs unsplit, the
  // executor completing them; the pass must complete them too.
  graph::Model m = test::trace(test::tiny_gpt(1), 2, 16, 5);
  int stripped = 0;
  for (graph::Node& n : *m.mutable_graph()->mutable_nodes())
    if (n.op() == "sdpa") {
      n.mutable_attrs()->erase("head_start");
      n.mutable_attrs()->erase("heads");
      ++stripped;
    }
  REQUIRE(stripped == 1);
  const TpPass pass = shard_tensor_parallel(m, 2);
  CHECK(graph::attrs_of(*find(pass.ranks[1].model.graph(), "blocks.0.attn/sdpa_0"))
            .i("head_start") == 2);
}

TEST_CASE("heads or features not divisible by tp are an error naming the sizes", "[partition]") {
  // 4 heads over 3 ranks.
  CHECK_THROWS_WITH(shard_tensor_parallel(test::trace(test::tiny_gpt(1), 2, 8), 3),
                    Catch::Contains("into 4 attention heads, not divisible by 3"));
  // Hidden 48 splits over 2, its 3 heads do not.
  models::ModelOptions o = test::tiny_gpt(1);
  o.hidden = 48;
  o.heads = 3;
  CHECK_THROWS_WITH(shard_tensor_parallel(test::trace(o, 2, 8), 2),
                    Catch::Contains("3 attention heads, not divisible by 2"));
  // An MLP of 100 features over 8 ranks (4 heads of 8 do not divide either: heads are named
  // first only when they are the coarser unit).
  o = test::tiny_gpt(1);
  o.ffn_hidden = 100;
  CHECK_THROWS_WITH(shard_tensor_parallel(test::trace(o, 2, 8), 8),
                    Catch::Contains("not divisible by 8"));
  // A vocabulary smaller than tp.
  o = test::tiny_gpt(1, 3);
  CHECK_THROWS_WITH(shard_tensor_parallel(test::trace(o, 2, 8), 4),
                    Catch::Contains("3 vocabulary rows, fewer than tp"));
}
