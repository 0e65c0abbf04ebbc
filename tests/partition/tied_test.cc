// Tied parameters: a trainable parameter read on two pipeline stages has its copies' gradients
// summed over the grid's tied group, the first and the last (model) stage. The partitioner keeps
// every reader of a shared parameter there (or all readers on one stage), even where the time
// balance alone would put GPT's LM head on a middle stage; a split that does not is refused by
// the plan builder, naming the parameter and its stages.
#include <catch2/catch.hpp>

#include <set>

#include "merak/partition/blocks.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/plan_builder.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;
using Catch::Matchers::Contains;

namespace {

Request request(int64_t pp, int64_t v, double limit = 0) {
  Request r;
  r.pp = pp;
  r.virtual_stages = v;
  r.hardware = test::profile("cpu-local");
  r.memory.precision = r.hardware.precision;
  r.memory.micro_batches = 2 * pp;
  r.memory_limit = limit;
  return r;
}

// The model stages whose programs hold `param`.
std::set<int64_t> stages_holding(const Plan& plan, const std::string& param) {
  std::set<int64_t> on;
  for (const RankProgram& rp : plan.ranks())
    for (const ParamShard& ps : rp.params())
      if (ps.name() == param) on.insert(rp.pp());
  return on;
}

// `m` with block 2's first MLP weight replaced by block 1's: one parameter shared by two
// middle layers, as an imported model may have.
graph::Model shared_middle(graph::Model m) {
  graph::Graph& g = *m.mutable_graph();
  for (graph::Node& node : *g.mutable_nodes())
    for (std::string& in : *node.mutable_inputs())
      if (in == "blocks.2.mlp.fc.weight") in = "blocks.1.mlp.fc.weight";
  auto& inits = *g.mutable_initializers();
  for (auto it = inits.begin(); it != inits.end(); ++it)
    if (it->name() == "blocks.2.mlp.fc.weight") {
      inits.erase(it);
      break;
    }
  return m;
}

}  // namespace

TEST_CASE("the tied LM head stays on the last stage however many stages", "[partition]") {
  // One layer over 8 model stages: balanced on time alone, the last stage held only the
  // cross-entropy and the head (which reads wte.weight) sat on a middle one; interleaved, on
  // pipeline rank 0's own later chunk.
  const graph::Model m = test::trace(test::tiny_gpt(1), 1, 16);
  for (const auto& [pp, v] : std::vector<std::pair<int64_t, int64_t>>{{8, 1}, {4, 2}, {2, 4}}) {
    CAPTURE(pp, v);
    const Result r = run_partition(m, request(pp, v));
    const int64_t last = pp * v - 1;
    CHECK(stages_holding(r.plan, "wte.weight") == std::set<int64_t>{0, last});
    REQUIRE(r.plan.tied_params_size() == 1);
    CHECK(r.plan.tied_params(0) == "wte.weight");
  }
}

TEST_CASE("a parameter shared by middle layers stays on one stage or is refused", "[partition]") {
  const graph::Model m = shared_middle(test::trace(test::tiny_gpt(4), 1, 16));
  const Blocks blocks = find_blocks(m.graph());
  REQUIRE(blocks.starts.size() == 4);
  const std::string shared = "blocks.1.mlp.fc.weight";

  // Blocks 1 and 2 on middle stages of their own: the plan builder refuses the split.
  const std::vector<int64_t> cuts = {0, blocks.starts[1], blocks.starts[2], blocks.starts[3],
                                     int64_t(m.graph().nodes_size())};
  CHECK_THROWS_WITH(test::plan_with_cuts(m, cuts),
                    Contains("parameter '" + shared + "' is read on pipeline stages 1, 2 of 4"));

  // The partitioner keeps both readers on one stage (or on the first and last).
  const Result r = run_partition(m, request(4, 1));
  const std::set<int64_t> on = stages_holding(r.plan, shared);
  CHECK((on.size() == 1 || on == std::set<int64_t>{0, 3}));

  // Where memory leaves no room for that, it says so, naming the parameter: under some limit
  // that the unshared model's split into 6 stages fits, the shared one's does not.
  const graph::Model unshared = test::trace(test::tiny_gpt(4), 1, 16);
  const double peak = run_partition(unshared, request(6, 1)).ours.max_memory();
  std::string refusal;
  for (double f = 1; f > 0.3 && refusal.empty(); f -= 0.02) {
    try {
      run_partition(unshared, request(6, 1, f * peak));
    } catch (const NoFit&) {
      break;  // memory alone binds from here on
    }
    try {
      run_partition(m, request(6, 1, f * peak));
    } catch (const NoFit& e) {
      refusal = e.what();
    }
  }
  CHECK_THAT(refusal, Contains("keeps the readers of each shared parameter") &&
                          Contains("'" + shared + "'"));
}
