// What a stage holds, grown a node at a time (StageModel::grow), against a count from scratch
// over every stage [i, j) of small graphs: each parameter, constant and saved activation once,
// bit for bit (the pipeline split walks stages this way instead of keeping (n+1)^2 tables); and
// the memory floor the split stops on: never above the memory, and growing with the stage.
#include <set>

#include "merak/partition/pipeline.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

// The stage's items from their definition: every value used or saved by a node in [i, j).
StageContents from_scratch(const GraphFacts& g, const CostModel& cost, int64_t i, int64_t j) {
  std::set<int> read, saved;
  for (int64_t k = i; k < j; ++k) {
    for (int id : g.nodes[size_t(k)].inputs)
      if (id >= 0) read.insert(id);
    for (int root : g.nodes[size_t(k)].saved) saved.insert(root);
  }
  StageContents c;
  c.first = i;
  c.end = j;
  for (int id : read) {
    const ValueFacts& v = g.values[size_t(id)];
    if (v.kind == ValueFacts::Kind::Param) c.params += double(v.meta.numel());
    if (v.kind == ValueFacts::Kind::Constant) c.constants += double(v.meta.nbytes());
  }
  for (int root : saved) {
    const ValueFacts& v = g.values[size_t(root)];
    if (v.kind != ValueFacts::Kind::Param && v.kind != ValueFacts::Kind::Constant)
      c.activations += cost.value_bytes(v.meta);
  }
  return c;
}

}  // namespace

TEST_CASE("a stage grown node by node holds each of its items once, as counted from scratch",
          "[partition]") {
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    const graph::Model m = test::trace(test::tiny_gpt(3), 2, 8);
    const GraphFacts g = analyze(m.graph());
    Placement place;
    place.pp = 4;
    const CostModel cost(test::profile("a100-80g"), precision, place);
    MemoryOptions mem;
    mem.precision = precision;
    mem.micro_batches = 8;
    mem.recompute = Recompute::Full;
    const StageModel model(g, cost, mem);
    const int64_t n = model.nodes();
    for (int64_t j = 1; j <= n; ++j) {
      StageContents c = model.empty(j);
      double floor = 0, working = 0;
      while (c.first > 0) {
        model.grow(c);
        // The working set: the largest of the stage's nodes' own.
        working = std::max(working, model.contents(c.first, c.first + 1).working);
        const StageContents want = from_scratch(g, cost, c.first, j);
        INFO("precision " << precision_name(precision) << ", stage [" << c.first << ", " << j
                          << ")");
        CHECK(c.params == want.params);
        CHECK(c.constants == want.constants);
        CHECK(c.activations == want.activations);
        CHECK(c.working == working);
        CHECK(c.params == model.params(c.first, j));
        // The floor leaves out the boundary inputs only: below the memory either way, and
        // growing.
        for (int64_t s : {int64_t(0), int64_t(3)})
          for (bool recompute : {false, true}) {
            const double memory = model.memory(s, 4, c, recompute);
            CHECK(memory == model.memory(s, 4, c.first, j, recompute));
            CHECK(model.memory_floor(s, 4, c) <= memory);
          }
        CHECK(model.memory_floor(0, 4, c) >= floor);
        floor = model.memory_floor(0, 4, c);
      }
    }
  }
}
