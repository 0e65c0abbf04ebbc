// The partitioner end to end: a graph and a (dp, pp, tp) layout on a hardware profile become a
// Plan, with our split's stage estimates next to the two baselines'.
//
//   graph -> tensor-parallel pass (tp ranks' graphs) -> cost and memory model (tp rank 0's
//   graph) -> exact pipeline split -> plan (one program per rank)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "merak/partition/analysis.h"
#include "merak/partition/hardware.h"
#include "merak/partition/pipeline.h"
#include "merak/partition/plan.pb.h"
#include "merak/partition/shards.h"
#include "merak/partition/tensor_parallel.h"

namespace merak::partition {

// The most ranks a layout may have: far above the largest jobs run (about 10^5 devices), and
// low enough that everything sized by the rank count stays small.
constexpr int64_t kMaxRanks = int64_t(1) << 20;

struct Request {
  int64_t dp = 1, pp = 1, tp = 1;  // ranks: dp * pp * tp
  // Interleaved: the model is split into pp * virtual_stages stages, pipeline rank r holding
  // stages r, r + pp, ...; the plan's layout counts model stages.
  int64_t virtual_stages = 1;
  std::string schedule;        // the run's schedule by name, for reports; "": memory.schedule's
  Hardware hardware;
  MemoryOptions memory;        // dp is taken from above
  double memory_limit = 0;     // bytes per device (all of a rank's stages); <= 0: the hardware's
  // Only our split and its stage estimates: no baselines, no per-rank programs (a layout search
  // costs hundreds of layouts and builds the plan of the one it picks).
  bool estimates_only = false;
  // The programs of data-parallel replica 0 only (its pp x tp ranks; the plan's layout, groups
  // and predictions as in full): the other replicas' programs are the same graphs with other
  // rank numbers and group names, and a dry run shows none of them. Copying the graphs into
  // hundreds of replicas is otherwise most of a large dry run's time.
  bool first_replica_only = false;
};

struct Result {
  Plan plan;
  Partition ours;
  std::optional<Partition> uniform, balanced;
  std::vector<std::string> stage_modules;  // what each stage of ours holds, for people
  std::vector<std::string> notes;          // what the tensor-parallel pass recognised
  int64_t parameters = 0;                  // of the whole model
  int64_t nodes = 0;                       // of tp rank 0's graph
  double seconds = 0;                      // wall time of the partitioning
  // A layout search's prediction for this layout (its schedule simulated, with the gradient
  // exchange and the optimizer step), 0 where none ran; the plan keeps its own bound,
  // (micro-batches + fill) x slowest stage, so the plan is the same whoever made it.
  double simulated_step_seconds = 0;
};

// The graph as the tensor-parallel pass leaves it for `tp` ranks, analysed: what every split of
// it starts from, whatever dp, pp, schedule or memory options. A layout search prepares each
// (graph, tp) once. Not copyable (the facts point into the ranks' graphs); moves keep them.
struct PreparedGraph {
  PreparedGraph() = default;
  PreparedGraph(const PreparedGraph&) = delete;
  PreparedGraph& operator=(const PreparedGraph&) = delete;
  PreparedGraph(PreparedGraph&&) = default;
  PreparedGraph& operator=(PreparedGraph&&) = default;

  int64_t tp = 1;
  std::vector<TpRank> ranks;
  std::vector<std::string> notes;  // what the tensor-parallel pass recognised
  GraphFacts facts;                // of tp rank 0's graph
  int64_t parameters = 0;          // of the whole model
};
PreparedGraph prepare_graph(const graph::Model& model, int64_t tp);

// The memory a rank of `request`'s layout may plan with (memory_limit, or the hardware's usable
// memory: its share of a CPU node's), and a model stage's share of it: a rank holds
// virtual_stages of them, each fitted in a 1/virtual_stages share, so the rank's sum fits
// whatever the split (the exact split under a per-rank sum would couple stages the partitioner
// sizes one at a time).
double rank_memory_limit(const Request& request);
double stage_memory_limit(const Request& request);

// Throws NoFit when no split fits, Error on a bad graph or layout (naming what is wrong: more
// model stages than the graph has nodes, more than kMaxRanks ranks).
Result run_partition(const graph::Model& model, const Request& request);
// The same from a prepared graph (its tp must be the request's).
Result run_partition(const PreparedGraph& graph, const Request& request);

}  // namespace merak::partition
