// The exact pipeline split against brute force over every cut (with and without a memory cap
// that binds), the smallest memory when nothing fits, the baselines' cuts, block detection and
// the stage descriptions.
#include "merak/partition/pipeline.h"

#include <functional>

#include "merak/partition/describe.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

struct Setup {
  graph::Model model;
  GraphFacts facts;
  CostModel cost;
  MemoryOptions memory;
  StageModel stages;

  Setup(graph::Model m, int64_t pp, const MemoryOptions& mem)
      : model(std::move(m)),
        facts(analyze(model.graph())),
        cost(test::profile("a100-80g"), Precision::BF16, placement(pp)),
        memory(mem),
        stages(facts, cost, memory) {}

  static Placement placement(int64_t pp) {
    Placement p;
    p.pp = pp;
    return p;
  }
};

// Every split into p stages, and every choice of which stages recompute that the mode allows
// (none: no stage; full: every stage; memory: any subset): the smallest slowest-stage time among
// those within `limit` (<= 0: any), and the smallest largest-stage memory. (A choice to recompute
// counts only where a stage can: the models ignore it elsewhere.)
void brute_force(const StageModel& m, int64_t p, double limit, double* best_time,
                 double* best_memory) {
  const int64_t n = m.nodes();
  const Recompute mode = m.memory_options().recompute;
  const uint32_t all = (1u << p) - 1;
  *best_time = INFINITY;
  *best_memory = INFINITY;
  std::vector<int64_t> cuts(size_t(p + 1));
  cuts[0] = 0;
  cuts[size_t(p)] = n;
  std::function<void(int64_t)> go = [&](int64_t s) {
    if (s == p) {
      for (uint32_t mask = 0; mask <= all; ++mask) {
        if ((mode == Recompute::None && mask != 0) || (mode == Recompute::Full && mask != all))
          continue;
        double t = 0, mem = 0;
        for (int64_t k = 0; k < p; ++k) {
          const bool rc = (mask >> k) & 1;
          t = std::max(t, m.time(k, p, cuts[size_t(k)], cuts[size_t(k + 1)], rc));
          mem = std::max(mem, m.memory(k, p, cuts[size_t(k)], cuts[size_t(k + 1)], rc));
        }
        *best_memory = std::min(*best_memory, mem);
        if (limit <= 0 || mem <= limit) *best_time = std::min(*best_time, t);
      }
      return;
    }
    for (int64_t c = cuts[size_t(s - 1)] + 1; c <= n - (p - s); ++c) {
      cuts[size_t(s)] = c;
      go(s + 1);
    }
  };
  go(1);
}

}  // namespace

TEST_CASE("the pipeline split is exact: it matches brute force over every cut", "[partition]") {
  MemoryOptions mem;
  mem.precision = Precision::BF16;
  mem.micro_batches = 8;
  int capped_cases = 0;  // splits where the fastest is not also the leanest, so a cap binds
  int mixed_cases = 0;   // capped splits under "memory" where some stages recompute, some not
  for (Recompute recompute : {Recompute::None, Recompute::Full, Recompute::AsNeeded})
    for (int64_t p : {2, 3, 4}) {
      mem.recompute = recompute;
      Setup s(test::trace(test::tiny_gpt(2), 4, 16), p, mem);
      double best_time = 0, best_memory = 0;
      brute_force(s.stages, p, 0, &best_time, &best_memory);
      const Partition free = partition_pipeline(s.stages, p, 0);
      INFO("p " << p << ", recompute " << recompute_name(recompute));
      CHECK(free.max_time() == Approx(best_time).epsilon(1e-12));
      CHECK(min_peak_memory(s.stages, p) == Approx(best_memory).epsilon(1e-12));

      // A cap between the smallest possible memory and what the fastest split needs binds.
      const double cap = 0.5 * (best_memory + free.max_memory());
      if (!(cap < free.max_memory())) continue;  // the fastest split is the leanest too
      ++capped_cases;
      double capped_time = 0, unused = 0;
      brute_force(s.stages, p, cap, &capped_time, &unused);
      const Partition capped = partition_pipeline(s.stages, p, cap);
      CHECK(capped.max_time() == Approx(capped_time).epsilon(1e-12));
      CHECK(capped.max_memory() <= cap);
      CHECK(capped.max_time() >= free.max_time());
      // Under "memory" each stage recomputes exactly where it would not fit without (the
      // estimates say which); across caps from the leanest to the fastest split's memory some
      // splits mix stages that do and stages that do not.
      if (recompute != Recompute::AsNeeded) continue;
      for (int k = 0; k <= 16; ++k) {
        const double c = best_memory + (free.max_memory() - best_memory) * k / 16.0;
        const Partition split = partition_pipeline(s.stages, p, c);
        int recomputing = 0;
        for (int64_t q = 0; q < p; ++q) {
          const StageEstimate& e = split.stages[size_t(q)];
          recomputing += e.memory.recompute;
          CHECK(e.recompute == (e.memory.recompute ? e.fwd : 0.0));
          CHECK(e.memory.recompute ==
                (q + 1 < p && s.stages.memory(q, p, e.first, e.end, false) > c));
        }
        if (recomputing > 0 && recomputing < p - 1) ++mixed_cases;
      }
    }
  CHECK(capped_cases >= 3);
  CHECK(mixed_cases >= 1);
}

TEST_CASE("when nothing fits, the error gives the smallest memory any split needs",
          "[partition]") {
  MemoryOptions mem;
  mem.precision = Precision::BF16;
  Setup s(test::trace(test::tiny_gpt(2), 4, 16), 2, mem);
  const double need = min_peak_memory(s.stages, 2);
  try {
    partition_pipeline(s.stages, 2, need * 0.99);
    FAIL("expected NoFit");
  } catch (const NoFit& e) {
    CHECK(e.needed == Approx(need));
    CHECK(std::string(e.what()).find("no split into 2 pipeline stages fits") != std::string::npos);
  }
  CHECK(partition_pipeline(s.stages, 2, need).max_memory() <= need);
  CHECK_THROWS_WITH(partition_pipeline(s.stages, s.stages.nodes() + 1, 0),
                    Catch::Contains("too few for"));
}

TEST_CASE("blocks come from module paths; baselines cut only between them", "[partition]") {
  MemoryOptions mem;
  mem.precision = Precision::BF16;
  Setup s(test::trace(test::tiny_gpt(6), 2, 8), 3, mem);
  const graph::Graph& g = s.model.graph();
  const Blocks b = find_blocks(g);
  REQUIRE(b.found());
  CHECK(b.prefix == "blocks");
  REQUIRE(b.starts.size() == 6);
  for (size_t k = 0; k < 6; ++k)
    CHECK(g.nodes(int(b.starts[k])).module_path().rfind("blocks." + std::to_string(k), 0) == 0);
  CHECK(g.nodes(int(b.end)).module_path() == "ln_f");

  // Uniform: 2 blocks a stage, embeddings with the first, head with the last.
  const auto uniform = uniform_layers(s.stages, b, 3);
  REQUIRE(uniform);
  CHECK(uniform->cuts == std::vector<int64_t>{0, b.starts[2], b.starts[4], s.stages.nodes()});
  CHECK(describe_stage(g, b, uniform->cuts[0], uniform->cuts[1]) ==
        "arange, wpe, wte, add, blocks.0-1");
  CHECK(describe_stage(g, b, uniform->cuts[2], uniform->cuts[3]) ==
        "blocks.4-5, ln_f, linear, cross_entropy");
  // 7 blocks over 3 stages: 3, 2, 2.
  Setup s7(test::trace(test::tiny_gpt(7), 2, 8), 3, mem);
  const Blocks b7 = find_blocks(s7.model.graph());
  CHECK(uniform_layers(s7.stages, b7, 3)->cuts[1] == b7.starts[3]);

  // Parameter-balanced: units are whole blocks plus the embedding and head parts; the split
  // minimises the largest stage's parameters (checked against every unit split).
  const auto balanced = parameter_balanced(s.stages, b, 3);
  REQUIRE(balanced);
  std::vector<int64_t> units = {0};
  for (int64_t st : b.starts) units.push_back(st);
  units.push_back(b.end);
  units.push_back(s.stages.nodes());
  double best = INFINITY;
  for (size_t i = 1; i < units.size(); ++i)
    for (size_t j = i + 1; j + 1 < units.size() + 1; ++j) {
      if (j >= units.size()) continue;
      const double worst = std::max({s.stages.params(0, units[i]),
                                     s.stages.params(units[i], units[j]),
                                     s.stages.params(units[j], s.stages.nodes())});
      best = std::min(best, worst);
    }
  double got = 0;
  for (const StageEstimate& e : balanced->stages) got = std::max(got, e.params);
  CHECK(got == Approx(best));
  for (int64_t c : balanced->cuts)
    CHECK(std::find(units.begin(), units.end(), c) != units.end());

  // Ours is never slower than either (their cuts are among ours).
  const Partition ours = partition_pipeline(s.stages, 3, 0);
  CHECK(ours.max_time() <= uniform->max_time() * (1 + 1e-12));
  CHECK(ours.max_time() <= balanced->max_time() * (1 + 1e-12));

  // No blocks, or more stages than units: no baseline.
  CHECK_FALSE(uniform_layers(s.stages, b, 7));
  CHECK_FALSE(uniform_layers(s.stages, Blocks{}, 2));
  CHECK_FALSE(parameter_balanced(s.stages, b, 9));
}

TEST_CASE("the token embedding shared with the LM head counts on first and last stage",
          "[partition]") {
  MemoryOptions mem;
  mem.precision = Precision::BF16;
  Setup s(test::trace(test::tiny_gpt(2), 2, 8), 2, mem);
  const Blocks b = find_blocks(s.model.graph());
  const Partition split = evaluate(s.stages, {0, b.starts[1], s.stages.nodes()}, "half");
  // Each stage holds the tied table: the stages' parameters exceed the model's by it.
  const double total = s.stages.params(0, s.stages.nodes());
  const double wte = 96 * 32;
  CHECK(split.stages[0].params + split.stages[1].params == Approx(total + wte));
}
