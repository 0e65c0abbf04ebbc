// The automatic layout: for the keys a config leaves to `auto` (parallel: auto, or dp, pp, tp,
// train.micro_batch, schedule, virtual_stages, recompute, zero1 one by one), every candidate of
// the job's world size is costed by the partitioner that will split it (the one request builder,
// partition_input) and its pipeline replayed in the schedule simulator; the fastest predicted
// step that fits device memory wins. Rank 0 searches and every rank takes its answer.
//
// Candidates are costed cheapest-bound first: a layout's step cannot be shorter than its share
// of the model's FLOPs at the profile's sustained peak times its schedule's fill and drain, so
// once that bound passes the fifth-best prediction the rest are not partitioned at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/config/config.h"
#include "merak/train/plan.h"

namespace merak::train {

struct Layout {
  int64_t dp = 1, pp = 1, tp = 1, micro_batch = 1, virtual_stages = 1;
  std::string schedule = "1f1b", recompute = "none";
  bool zero1 = false;
  std::string str() const;  // "dp 4, pp 4, tp 4, micro-batch 1, 1f1b, recompute full"
};

struct Prediction {
  double step_seconds = 0;
  double tokens_per_s = 0;
  double tflops_per_device = 0;  // model FLOPs (no recomputation) per device-second
  double mfu = 0;                // of the profile's dense peak at the run's precision
  double bubble = 0;             // idle share of the pipeline's ranks in the simulated step
  double exposed_dp_seconds = 0; // gradient reduction left after the last backward
  double optimizer_seconds = 0;  // the optimizer step, after the reduction
  std::vector<double> stage_memory;   // bytes, per model stage
  std::vector<double> rank_memory;    // bytes, per pipeline rank (its model stages summed)
  std::vector<bool> stage_recompute; // per model stage: whether it recomputes its forward
};

struct Ranked {
  Layout layout;
  Prediction predicted;
};

struct LayoutSearch {
  int64_t world = 1, devices_per_node = 1;
  std::vector<Ranked> ranked;   // every layout that fits (with ZeRO-1 or without, whichever
                                // is faster), fastest first
  int64_t candidates = 0;       // valid layouts of the world size
  int64_t costed = 0;           // of them, partitioned and simulated
  double seconds = 0;
  config::Config chosen;        // the config with the winner's layout, no key left to auto
  PartitionInput input;         // the winner's partition request and its answer: its plan
  partition::Result result;     // holds data-parallel replica 0's programs only (what a dry run
                                // shows; a job makes its full plan with shared_plan)
};

// The config with `layout` in place of its auto keys (and every other key as it was).
config::Config with_layout(const config::Config& c, const Layout& layout);

// Searches the layouts of `world` ranks, `devices_per_node` to a node (0: the hardware
// profile's). Throws SetupError when none fits (naming the closest one's memory and a world
// size that would give it room) or the request is impossible (tp beyond a node).
LayoutSearch search_layouts(const config::Config& c, int64_t world, int64_t devices_per_node);

// The five best, one line each, and the winner ("layout search: ..."), for people.
std::string search_table(const LayoutSearch& s);
// The same as JSON members: "search", "layout", "predicted" (no surrounding braces).
std::string search_json(const LayoutSearch& s);

// A job's config with its auto keys chosen: rank 0 of `world` searches and prints the table,
// every rank gets the winner (a SetupError on rank 0 is thrown on every rank). Unchanged when
// nothing is auto.
config::Config resolve_layout(const config::Config& c, comm::Communicator& world);

}  // namespace merak::train
