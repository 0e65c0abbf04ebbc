// The plan emitter: a pipeline split and the tensor-parallel ranks' graphs become one
// RankProgram per rank of the (dp, pp, tp) grid.
#pragma once

#include <string>
#include <vector>

#include "merak/partition/pipeline.h"
#include "merak/partition/plan.pb.h"
#include "merak/partition/shards.h"

namespace merak::partition {

struct PlanSettings {
  int64_t dp = 1, pp = 1, tp = 1;
  std::string hardware;
  MemoryOptions memory;
  bool first_replica_only = false;  // programs of dp rank 0 only (Request::first_replica_only)
};

// Group names, as the tp ops' group attribute and Plan.groups spell them.
std::string tp_group_name(int64_t pp, int64_t dp);
std::string dp_group_name(int64_t pp, int64_t tp);
std::string pp_group_name(int64_t dp, int64_t tp);
std::string tied_group_name(int64_t dp, int64_t tp);

// `tp_ranks[t]` is tensor-parallel rank t's graph (tp_ranks.size() == settings.tp); `ours`
// splits tp rank 0's graph, which `model` (its StageModel) describes.
Plan build_plan(const std::vector<TpRank>& tp_ranks, const StageModel& model,
                const Partition& ours, const PlanSettings& settings);

// The plan's bytes with deterministic serialisation (maps inside node attributes sorted): the
// same inputs give the same bytes.
std::string plan_bytes(const Plan& plan);

}  // namespace merak::partition
