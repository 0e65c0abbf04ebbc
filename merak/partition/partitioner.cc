#include "merak/partition/partitioner.h"

#include <chrono>

#include "merak/partition/blocks.h"
#include "merak/partition/describe.h"
#include "merak/partition/plan_builder.h"
#include "merak/partition/tensor_parallel.h"

namespace merak::partition {

PreparedGraph prepare_graph(const graph::Model& model, int64_t tp) {
  MERAK_CHECK(tp >= 1, "tp must be >= 1, got ", tp);
  PreparedGraph g;
  g.tp = tp;
  for (const graph::Initializer& init : model.graph().initializers())
    if (init.trainable()) {
      int64_t n = 1;
      for (const graph::Dim& d : init.type().dims()) n *= d.size();
      g.parameters += n;
    }
  if (tp == 1) {
    g.ranks.push_back(whole_model(model));
  } else {
    TpPass pass = shard_tensor_parallel(model, tp);
    g.ranks = std::move(pass.ranks);
    g.notes = std::move(pass.notes);
  }
  g.facts = analyze(g.ranks[0].model.graph());
  return g;
}

Result run_partition(const graph::Model& model, const Request& req) {
  const auto start = std::chrono::steady_clock::now();
  MERAK_CHECK(req.dp >= 1 && req.pp >= 1 && req.tp >= 1, "dp, pp and tp must be >= 1, got dp ",
              req.dp, ", pp ", req.pp, ", tp ", req.tp);
  Result r = run_partition(prepare_graph(model, req.tp), req);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

Result run_partition(const PreparedGraph& g, const Request& req) {
  const auto start = std::chrono::steady_clock::now();
  MERAK_CHECK(req.dp >= 1 && req.pp >= 1 && req.tp == g.tp, "dp and pp must be >= 1 and tp ",
              "the prepared graph's ", g.tp, ", got dp ", req.dp, ", pp ", req.pp, ", tp ", req.tp);
  Result r;
  r.parameters = g.parameters;
  r.notes = g.notes;
  const std::vector<TpRank>& ranks = g.ranks;
  const GraphFacts& facts = g.facts;
  r.nodes = int64_t(facts.nodes.size());
  MemoryOptions mem = req.memory;
  mem.dp = req.dp;
  Placement placement;
  placement.dp = req.dp;
  placement.pp = req.pp;
  placement.tp = req.tp;
  const CostModel cost(req.hardware, mem.precision, placement);
  const StageModel stages(facts, cost, mem);
  // A rank's memory (its share of a CPU node's).
  const double limit =
      req.memory_limit > 0 ? req.memory_limit : double(cost.hardware().memory_bytes);
  r.ours = partition_pipeline(stages, req.pp, limit);
  if (req.estimates_only) {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  const Blocks blocks = find_blocks(ranks[0].model.graph());
  r.uniform = uniform_layers(stages, blocks, req.pp, limit);
  r.balanced = parameter_balanced(stages, blocks, req.pp, limit);
  for (size_t s = 0; s + 1 < r.ours.cuts.size(); ++s)
    r.stage_modules.push_back(
        describe_stage(ranks[0].model.graph(), blocks, r.ours.cuts[s], r.ours.cuts[s + 1]));

  PlanSettings settings;
  settings.dp = req.dp;
  settings.pp = req.pp;
  settings.tp = req.tp;
  settings.hardware = req.hardware.name;
  settings.memory = mem;
  settings.first_replica_only = req.first_replica_only;
  r.plan = build_plan(ranks, stages, r.ours, settings);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace merak::partition
