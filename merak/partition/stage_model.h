// The numbers the pipeline partition works on: for a topologically ordered graph of n nodes,
// the time and memory of any contiguous stage [i, j) in O(1), from prefix sums and presence
// tables built once.
//
// Cut c sits before node c. The boundary at a cut is every value produced before it and read at
// or after it (graph inputs and parameters excepted: each stage reads its own data inputs and
// holds its own parameters); stages talk to neighbours only, so a value read two stages later
// is relayed through the stage between.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/partition/analysis.h"
#include "merak/partition/cost.h"
#include "merak/partition/memory.h"

namespace merak::partition {

struct StageEstimate {
  int64_t first = 0, end = 0;          // nodes [first, end)
  double fwd = 0, bwd = 0, recompute = 0, p2p = 0;  // seconds per micro-batch
  double fwd_flops = 0, bwd_flops = 0;
  double params = 0;                   // elements
  StageMemory memory;
  double time() const { return fwd + bwd + recompute + p2p; }
};

class StageModel {
 public:
  StageModel(const GraphFacts& g, const CostModel& cost, const MemoryOptions& memory);

  int64_t nodes() const { return n_; }
  const GraphFacts& graph() const { return g_; }
  const CostModel& cost() const { return cost_; }
  const MemoryOptions& memory_options() const { return mem_; }

  // Stage `stage` of `stages` holding nodes [i, j).
  double time(int64_t stage, int64_t stages, int64_t i, int64_t j) const;
  double memory(int64_t stage, int64_t stages, int64_t i, int64_t j) const;
  StageEstimate estimate(int64_t stage, int64_t stages, int64_t i, int64_t j) const;

  // Values crossing cut c (ascending value index), their bytes, and whether each carries a
  // gradient back.
  std::vector<int> boundary(int64_t c) const;
  double boundary_bytes(int64_t c) const { return cross_bytes_[size_t(c)]; }

  // Per node: seconds forward and backward (compute and tensor-parallel collectives).
  const std::vector<NodeTime>& node_times() const { return times_; }
  // Parameter elements of nodes [i, j) (each parameter once, tied ones on every stage using it).
  double params(int64_t i, int64_t j) const { return params_[idx(i, j)]; }

 private:
  size_t idx(int64_t i, int64_t j) const { return size_t(i) * size_t(n_ + 1) + size_t(j); }
  double p2p(int64_t stage, int64_t stages, int64_t i, int64_t j) const;
  // Fills table[i][j] = sum of bytes of the items with a position in [i, j).
  void presence(const std::vector<std::pair<double, std::vector<int>>>& items,
                std::vector<double>& table) const;

  const GraphFacts& g_;
  const CostModel& cost_;
  MemoryOptions mem_;
  int64_t n_;
  std::vector<NodeTime> times_;
  std::vector<double> fwd_sum_, bwd_sum_, fwd_flops_sum_, bwd_flops_sum_;  // prefix sums
  std::vector<double> cross_bytes_, cross_grad_bytes_;  // per cut
  std::vector<int64_t> cross_count_, cross_grad_count_;
  std::vector<double> params_, constants_, activations_, working_;  // (n+1)^2 tables
};

}  // namespace merak::partition
