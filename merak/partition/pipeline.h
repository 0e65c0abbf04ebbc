// Pipeline-stage partition: split the topologically ordered nodes into contiguous stages.
//
// Ours is exact: a dynamic program over every cut point finds the split that minimises the
// slowest stage's time (forward + backward + recompute + boundary transfers, StageModel) among
// all splits whose every stage fits in device memory. O(stages * nodes^2) steps of O(1) at
// worst, each stage grown a node at a time from its end; a scan stops where the stage's compute
// time alone exceeds the best found, or its memory without boundary inputs (which only grows)
// passes the limit. The memory of a stage is only asked where its time would win.
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

// The stage estimates of a given split.
Partition evaluate(const StageModel& model, const std::vector<int64_t>& cuts,
                   const std::string& method);

// Exact min-max split into `stages` stages of at most `memory_limit` bytes each (<= 0: no
// limit). Throws NoFit, or an Error when there are fewer nodes than stages.
Partition partition_pipeline(const StageModel& model, int64_t stages, double memory_limit);

// The smallest per-device memory of any split into `stages` stages (exact, same DP on memory).
double min_peak_memory(const StageModel& model, int64_t stages);

// Baselines; nullopt when the graph has no block stack or fewer units than stages.
std::optional<Partition> uniform_layers(const StageModel& model, const Blocks& blocks,
                                        int64_t stages);
std::optional<Partition> parameter_balanced(const StageModel& model, const Blocks& blocks,
                                            int64_t stages);

}  // namespace merak::partition
