// The numbers the pipeline partition works on: for a topologically ordered graph of n nodes,
// the time of any contiguous stage [i, j) in O(1) from prefix sums, and its memory from what
// the stage holds (StageContents), grown a node at a time: O(n) memory whatever the split, where
// tables of every [i, j) would take (n+1)^2 doubles each (330 MB for a 1T-parameter GPT).
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

// What stage [first, end) holds: parameter elements, constant bytes and saved-activation bytes
// (each item once, however many of its nodes use it) and its largest backward working set.
// All sizes are whole or half bytes and elements, far below 2^52, so sums are exact in any order.
struct StageContents {
  int64_t first = 0, end = 0;
  double params = 0, constants = 0, activations = 0, working = 0;
  // The first and last node reading a shared parameter that a node of the stage reads (the
  // stage's own bounds when none): keeps_ties() compares them with the stage's.
  int64_t shared_first = 0, shared_last = -1;
  DeferredBytes deferred;  // one micro-batch's zero-bubble WeightGrad state (memory.h)
};

class StageModel {
 public:
  StageModel(const GraphFacts& g, const CostModel& cost, const MemoryOptions& memory);

  int64_t nodes() const { return n_; }
  const GraphFacts& graph() const { return g_; }
  const CostModel& cost() const { return cost_; }
  const MemoryOptions& memory_options() const { return mem_; }

  // Stage `stage` of `stages` holding nodes [i, j), recomputing its forward or not (`recompute`
  // counts only where the stage can: can_recompute). compute() is time() without the boundary
  // transfers: it only grows as the stage grows.
  double time(int64_t stage, int64_t stages, int64_t i, int64_t j, bool recompute) const;
  double compute(int64_t stage, int64_t stages, int64_t i, int64_t j, bool recompute) const;
  double memory(int64_t stage, int64_t stages, int64_t i, int64_t j, bool recompute) const;

  // Nodes [j, j): empty, ready to grow. grow() adds the node before `first`, in O(the items
  // that node uses): a scan over i = j-1, j-2, ... costs O(j - i) in all. contents() is the
  // same walk from scratch, O(j - i).
  StageContents empty(int64_t j) const;
  void grow(StageContents& c) const;
  StageContents contents(int64_t i, int64_t j) const;
  // The memory of stage `stage` of `stages` holding `c`; floor() is the least of it over the
  // choices the mode allows, leaving out the boundary inputs kept under recomputation, so it
  // only grows as the stage grows leftwards (memory() need not: the boundary at `first` moves)
  // and no stage [i', end), i' <= first, needs less.
  double memory(int64_t stage, int64_t stages, const StageContents& c, bool recompute) const;
  double memory_floor(int64_t stage, int64_t stages, const StageContents& c) const;

  // Trainable parameters read by more than one node (value indices, ascending): on two stages,
  // such a parameter is tied, its copies' gradients summed over the grid's tied group, which is
  // the first and the last stage (interleaved: chunk 0 of pipeline rank 0 and the last chunk of
  // the last pipeline rank; the plan counts these model stages 0 and stages - 1).
  const std::vector<int>& shared_params() const { return shared_; }
  // Whether stage `stage` of `stages` holding `c` keeps to that: the first and last stage may
  // read any parameter; a middle one only parameters all of whose readers it holds.
  bool keeps_ties(int64_t stage, int64_t stages, const StageContents& c) const {
    return stage == 0 || stage + 1 == stages ||
           (c.shared_first >= c.first && c.shared_last < c.end);
  }

  // Whether the stage holding `c` recomputes under the mode on a device of `limit` bytes (<= 0:
  // no limit): Full wherever it can; AsNeeded where it can and would not fit the limit without.
  bool recomputes(int64_t stage, int64_t stages, const StageContents& c, double limit) const;
  // The stage's times, FLOPs and memory as the mode runs it on a device of `limit` bytes.
  StageEstimate estimate(int64_t stage, int64_t stages, int64_t i, int64_t j, double limit) const;

  // Values crossing cut c (ascending value index), their bytes, and whether each carries a
  // gradient back.
  std::vector<int> boundary(int64_t c) const;
  double boundary_bytes(int64_t c) const { return cross_bytes_[size_t(c)]; }

  // Per node: seconds forward and backward (compute and tensor-parallel collectives).
  const std::vector<NodeTime>& node_times() const { return times_; }
  // Parameter elements of nodes [i, j) (each parameter once, tied ones on every stage using it).
  double params(int64_t i, int64_t j) const { return contents(i, j).params; }

 private:
  double p2p(int64_t stage, int64_t stages, int64_t i, int64_t j) const;
  // An item (parameter, constant, saved activation) used by a node: its size and the item's
  // next use after this one (n when none). A stage counts an item at its first use in it,
  // so growing [i + 1, j) to [i, j) adds the items used at i whose next use is at j or later.
  struct Use {
    double size;
    int64_t next;
  };
  using Uses = std::vector<std::vector<Use>>;  // per node
  // The uses of `items` (size, ascending nodes using it), filed by node.
  Uses file_uses(const std::vector<std::pair<double, std::vector<int>>>& items) const;

  const GraphFacts& g_;
  const CostModel& cost_;
  MemoryOptions mem_;
  int64_t n_;
  std::vector<NodeTime> times_;
  std::vector<double> fwd_sum_, bwd_sum_, fwd_flops_sum_, bwd_flops_sum_;  // prefix sums
  std::vector<double> cross_bytes_, cross_grad_bytes_;  // per cut
  std::vector<int64_t> cross_count_, cross_grad_count_;
  Uses params_, constants_, saved_;  // elements, bytes, bytes
  std::vector<double> work_;         // per node: its backward's working set
  std::vector<DeferredBytes> deferred_;  // per node: what a zero-bubble WeightGrad keeps of it
  std::vector<int> shared_;
  // Per node: the first and last node reading a shared parameter it reads (itself when none).
  std::vector<int64_t> shared_lo_, shared_hi_;
};

}  // namespace merak::partition
