// Pipeline-stage partition: split the topologically ordered nodes into contiguous stages.
//
// Ours is exact: a dynamic program over every cut point finds the split that minimises the
// slowest stage's time (forward + backward + recompute + boundary transfers, StageModel) among
// all splits whose every stage fits in device memory, each stage recomputing as the memory
// options' mode says (under AsNeeded: only where it would not fit otherwise). O(stages *
// nodes^2) steps of O(1) at worst, each stage grown a node at a time from its end; a scan stops
// where the stage's compute time alone exceeds the best found, or its memory without boundary
// inputs (which only grows) passes the limit. Two things make it fast on deep graphs without
// giving up exactness: whether any split fits is settled first in O(stages * nodes) (stages
// from the last, each ending at the nearest cut the later stages reach from: memory only falls
// as a stage loses nodes at its right end), and a split that fits, found the same way under a
// bisected time cap, bounds the answer, so the program only looks below it and skips the cut
// points no cheaper split passes through.
//
// A trainable parameter read on two stages is tied: the runtime sums its copies' gradients over
// the grid's tied group, the first and the last stage. So every split (ours, as planned and
// searched) keeps the readers of a parameter read by several nodes on the first and last stage,
// or all on one stage; where none can, partition_pipeline says so, naming the parameter.
//
// The baselines, on the same cost model: uniform layers per stage (Megatron: the blocks split
// evenly, embeddings on the first stage, head on the last) and parameter-balanced stages
// (DeepSpeed's and Merak's partition_method "parameters": blocks, embedding and head as units,
// split to minimise the largest stage's parameter count).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "merak/partition/blocks.h"
#include "merak/partition/stage_model.h"

namespace merak::partition {

struct Partition {
  std::string method;               // "ours", "uniform layers", "parameter-balanced"
  std::vector<int64_t> cuts;        // stages + 1 entries: 0, ..., nodes
  std::vector<StageEstimate> stages;
  double max_time() const;
  double mean_time() const;
  double imbalance() const { return max_time() / mean_time(); }  // slowest / mean
  double max_memory() const;
};

// Thrown when no split fits: `needed` is the smallest per-device memory any split would need.
class NoFit : public std::runtime_error {
 public:
  NoFit(const std::string& what, double needed) : std::runtime_error(what), needed(needed) {}
  double needed;
};

// The stage estimates of a given split on a device of `memory_limit` bytes (<= 0: no limit;
// under Recompute::AsNeeded it decides which stages recompute).
Partition evaluate(const StageModel& model, const std::vector<int64_t>& cuts,
                   const std::string& method, double memory_limit = 0);

// Exact min-max split into `stages` stages of at most `memory_limit` bytes each (<= 0: no
// limit) that keeps every shared parameter's readers as above. Throws NoFit, or an Error when
// there are fewer nodes than stages or no split keeps the ties (whatever the memory).
Partition partition_pipeline(const StageModel& model, int64_t stages, double memory_limit);

// The smallest per-device memory of any split into `stages` stages (the feasibility test above
// under a bisected cap: exact, but for a shared parameter whose readers a middle stage must hold
// together, where it is the bound without that rule).
double min_peak_memory(const StageModel& model, int64_t stages);

// Baselines; nullopt when the graph has no block stack or fewer units than stages. Their stages
// are estimated as evaluate() does.
std::optional<Partition> uniform_layers(const StageModel& model, const Blocks& blocks,
                                        int64_t stages, double memory_limit = 0);
std::optional<Partition> parameter_balanced(const StageModel& model, const Blocks& blocks,
                                            int64_t stages, double memory_limit = 0);

}  // namespace merak::partition
