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

double rank_memory_limit(const Request& req) {
  return req.memory_limit > 0 ? req.memory_limit
                              : req.hardware.for_world(req.dp * req.pp * req.tp).usable_memory();
}

double stage_memory_limit(const Request& req) {
  return rank_memory_limit(req) / double(std::max<int64_t>(1, req.virtual_stages));
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
  MERAK_CHECK(req.dp >= 1 && req.pp >= 1 && req.virtual_stages >= 1 && req.tp == g.tp,
              "dp, pp and virtual_stages must be >= 1 and tp the prepared graph's ", g.tp,
              ", got dp ", req.dp, ", pp ", req.pp, ", virtual_stages ", req.virtual_stages,
              ", tp ", req.tp);
  Result r;
  r.parameters = g.parameters;
  r.notes = g.notes;
  const std::vector<TpRank>& ranks = g.ranks;
  const GraphFacts& facts = g.facts;
  r.nodes = int64_t(facts.nodes.size());
  // Before anything sized by the layout (the cost model's links, a program a rank); divided so
  // that no product overflows.
  MERAK_CHECK(req.pp <= r.nodes && req.virtual_stages <= r.nodes / req.pp, "the graph has ",
              r.nodes, " nodes, too few for pp ", req.pp, " x ", req.virtual_stages,
              " pipeline stages");
  MERAK_CHECK(req.dp <= kMaxRanks / (req.pp * req.tp), "dp ", req.dp, " x pp ", req.pp,
              " x tp ", req.tp, " is more than the ", kMaxRanks, " ranks a layout may have");
  const int64_t v = req.virtual_stages, model_stages = req.pp * v;
  MemoryOptions mem = req.memory;
  mem.dp = req.dp;
  Placement placement;
  placement.dp = req.dp;
  placement.pp = req.pp;
  placement.tp = req.tp;
  placement.virtual_stages = v;
  const CostModel cost(req.hardware, mem.precision, placement);
  const StageModel stages(facts, cost, mem);
  const double rank_limit = rank_memory_limit(req), limit = stage_memory_limit(req);
  try {
    r.ours = partition_pipeline(stages, model_stages, limit);
  } catch (const NoFit& e) {
    if (v == 1) throw;
    // The stage-level reason after it: a split that misses only for the tied readers says so.
    throw NoFit("no split into " + std::to_string(model_stages) + " model stages, " +
                    std::to_string(v) + " a rank, fits in " + memory_text(rank_limit) +
                    " per device (" + e.what() + ")",
                e.needed * double(v));
  }
  if (req.estimates_only) {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  const Blocks blocks = find_blocks(ranks[0].model.graph());
  r.uniform = uniform_layers(stages, blocks, model_stages, limit);
  r.balanced = parameter_balanced(stages, blocks, model_stages, limit);
  for (size_t s = 0; s + 1 < r.ours.cuts.size(); ++s)
    r.stage_modules.push_back(
        describe_stage(ranks[0].model.graph(), blocks, r.ours.cuts[s], r.ours.cuts[s + 1]));

  PlanSettings settings;
  settings.dp = req.dp;
  settings.pp = model_stages;
  settings.tp = req.tp;
  settings.hardware = req.hardware.name;
  settings.memory = mem;
  settings.first_replica_only = req.first_replica_only;
  r.plan = build_plan(ranks, stages, r.ours, settings);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace merak::partition
