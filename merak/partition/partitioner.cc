#include "merak/partition/partitioner.h"

#include <chrono>

#include "merak/partition/blocks.h"
#include "merak/partition/describe.h"
#include "merak/partition/plan_builder.h"
#include "merak/partition/tensor_parallel.h"

namespace merak::partition {

Result run_partition(const graph::Model& model, const Request& req) {
  const auto start = std::chrono::steady_clock::now();
  MERAK_CHECK(req.dp >= 1 && req.pp >= 1 && req.tp >= 1, "dp, pp and tp must be >= 1, got dp ",
              req.dp, ", pp ", req.pp, ", tp ", req.tp);
  Result r;
  for (const graph::Initializer& init : model.graph().initializers())
    if (init.trainable()) {
      int64_t n = 1;
      for (const graph::Dim& d : init.type().dims()) n *= d.size();
      r.parameters += n;
    }

  std::vector<TpRank> ranks;
  if (req.tp == 1) {
    ranks.push_back(whole_model(model));
  } else {
    TpPass pass = shard_tensor_parallel(model, req.tp);
    ranks = std::move(pass.ranks);
    r.notes = std::move(pass.notes);
  }
  const GraphFacts facts = analyze(ranks[0].model.graph());
  r.nodes = int64_t(facts.nodes.size());
  MemoryOptions mem = req.memory;
  mem.dp = req.dp;
  Placement placement;
  placement.dp = req.dp;
  placement.pp = req.pp;
  placement.tp = req.tp;
  const CostModel cost(req.hardware, mem.precision, placement);
  const StageModel stages(facts, cost, mem);
  const double limit = req.memory_limit > 0 ? req.memory_limit : double(req.hardware.memory_bytes);
  r.ours = partition_pipeline(stages, req.pp, limit);
  const Blocks blocks = find_blocks(ranks[0].model.graph());
  r.uniform = uniform_layers(stages, blocks, req.pp);
  r.balanced = parameter_balanced(stages, blocks, req.pp);
  for (size_t s = 0; s + 1 < r.ours.cuts.size(); ++s)
    r.stage_modules.push_back(
        describe_stage(ranks[0].model.graph(), blocks, r.ours.cuts[s], r.ours.cuts[s + 1]));

  PlanSettings settings;
  settings.dp = req.dp;
  settings.pp = req.pp;
  settings.tp = req.tp;
  settings.hardware = req.hardware.name;
  settings.memory = mem;
  r.plan = build_plan(ranks, stages, r.ours, settings);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace merak::partition
