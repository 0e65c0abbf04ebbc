#include "merak/partition/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace merak::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Min-max DP over cut points: the split of n nodes into p contiguous stages whose costliest
// stage costs least. `walk` prices stage s ending at j as it grows leftwards, one node a step:
//   start(s, j)   the stage is [j, j), empty
//   grow()        it takes the node before it, becoming [i, j) for i = j-1, j-2, ... in turn
//   floor()       no stage [i', j), i' <= i, costs less (so the scan stops once it reaches the
//                 best found); growing with the stage, as a compute time or a memory does
//   cost(best)    the cost of [i, j), +inf when the stage is not allowed; any value >= best when
//                 the cost is (a walk may skip what cannot win)
// Growing instead of pricing each [i, j) from scratch keeps what a stage holds a running sum:
// O(n) memory and O(1) a step. Returns the cuts, empty when nothing is finite.
template <class Walk>
std::vector<int64_t> min_max_cuts(int64_t n, int64_t p, Walk& walk, double* best) {
  std::vector<double> prev(size_t(n + 1), kInf), next(size_t(n + 1), kInf);
  std::vector<std::vector<int64_t>> arg(size_t(p + 1), std::vector<int64_t>(size_t(n + 1), -1));
  prev[0] = 0;
  for (int64_t s = 0; s < p; ++s) {
    std::fill(next.begin(), next.end(), kInf);
    // Stage s ends at j; every later stage needs at least one node.
    for (int64_t j = s + 1; j <= n - (p - s - 1); ++j) {
      if (s + 1 == p && j != n) continue;
      double& out = next[size_t(j)];
      walk.start(s, j);
      for (int64_t i = j - 1; i >= s; --i) {
        walk.grow();
        if (walk.floor() >= out) break;
        if (prev[size_t(i)] >= out) continue;
        const double v = std::max(prev[size_t(i)], walk.cost(out));
        if (v < out) {
          out = v;
          arg[size_t(s + 1)][size_t(j)] = i;
        }
      }
    }
    std::swap(prev, next);
  }
  *best = prev[size_t(n)];
  if (!std::isfinite(*best)) return {};
  std::vector<int64_t> cuts(size_t(p + 1));
  cuts[size_t(p)] = n;
  for (int64_t s = p; s > 0; --s) cuts[size_t(s - 1)] = arg[size_t(s)][size_t(cuts[size_t(s)])];
  return cuts;
}

// Our split's walk: a stage costs its time, and is not allowed beyond the memory limit.
class TimeWalk {
 public:
  TimeWalk(const StageModel& model, int64_t stages, double limit)
      : model_(model), stages_(stages), limit_(limit) {}
  void start(int64_t s, int64_t j) {
    s_ = s;
    c_ = model_.empty(j);
    closed_ = false;
  }
  void grow() { model_.grow(c_); }
  // The stage's compute: its time without the transfers, which only grows as it grows.
  double floor() const {
    return closed_ ? kInf : model_.compute(s_, stages_, c_.first, c_.end);
  }
  double cost(double best) {
    const double t = model_.time(s_, stages_, c_.first, c_.end);
    if (t >= best || limit_ <= 0) return t;  // the memory is only asked of a stage that may win
    if (model_.memory(s_, stages_, c_) <= limit_) return t;
    // Past the limit; once even the memory floor is, every larger stage is too.
    closed_ = model_.memory_floor(s_, stages_, c_) > limit_;
    return kInf;
  }

 private:
  const StageModel& model_;
  int64_t stages_;
  double limit_;
  int64_t s_ = 0;
  StageContents c_;
  bool closed_ = false;
};

// The smallest memory's walk: a stage costs its memory.
class MemoryWalk {
 public:
  MemoryWalk(const StageModel& model, int64_t stages) : model_(model), stages_(stages) {}
  void start(int64_t s, int64_t j) {
    s_ = s;
    c_ = model_.empty(j);
  }
  void grow() { model_.grow(c_); }
  double floor() const { return model_.memory_floor(s_, stages_, c_); }
  double cost(double) const { return model_.memory(s_, stages_, c_); }

 private:
  const StageModel& model_;
  int64_t stages_;
  int64_t s_ = 0;
  StageContents c_;
};

// The parameter-balanced walk over units: a stage costs the parameters of its units.
class PrefixWalk {
 public:
  explicit PrefixWalk(const std::vector<double>& prefix) : prefix_(prefix) {}
  void start(int64_t, int64_t j) { i_ = j_ = j; }
  void grow() { --i_; }
  double floor() const { return prefix_[size_t(j_)] - prefix_[size_t(i_)]; }
  double cost(double) const { return floor(); }

 private:
  const std::vector<double>& prefix_;
  int64_t i_ = 0, j_ = 0;
};

}  // namespace

double Partition::max_time() const {
  double m = 0;
  for (const StageEstimate& s : stages) m = std::max(m, s.time());
  return m;
}

double Partition::mean_time() const {
  double sum = 0;
  for (const StageEstimate& s : stages) sum += s.time();
  return stages.empty() ? 0 : sum / double(stages.size());
}

double Partition::max_memory() const {
  double m = 0;
  for (const StageEstimate& s : stages) m = std::max(m, s.memory.total());
  return m;
}

Partition evaluate(const StageModel& model, const std::vector<int64_t>& cuts,
                   const std::string& method) {
  Partition p;
  p.method = method;
  p.cuts = cuts;
  const int64_t stages = int64_t(cuts.size()) - 1;
  for (int64_t s = 0; s < stages; ++s)
    p.stages.push_back(model.estimate(s, stages, cuts[size_t(s)], cuts[size_t(s + 1)]));
  return p;
}

Partition partition_pipeline(const StageModel& model, int64_t stages, double memory_limit) {
  const int64_t n = model.nodes();
  MERAK_CHECK(stages >= 1, "pipeline stages must be >= 1, got ", stages);
  MERAK_CHECK(n >= stages, "the graph has ", n, " nodes, too few for ", stages,
              " pipeline stages");
  TimeWalk walk(model, stages, memory_limit);
  double best = 0;
  const std::vector<int64_t> cuts = min_max_cuts(n, stages, walk, &best);
  if (cuts.empty()) {
    const double need = min_peak_memory(model, stages);
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.1f", memory_limit / double(1 << 30));
    throw NoFit("no split into " + std::to_string(stages) + " pipeline stages fits in " + limit +
                    " GiB per device",
                need);
  }
  return evaluate(model, cuts, "ours");
}

double min_peak_memory(const StageModel& model, int64_t stages) {
  MemoryWalk walk(model, stages);
  double best = 0;
  min_max_cuts(model.nodes(), stages, walk, &best);
  return best;
}

namespace {

// Units for the baselines: the embedding part, each block, the head part (the first and last
// are dropped when empty). Returns unit start nodes plus the node count at the end.
std::vector<int64_t> unit_bounds(const StageModel& model, const Blocks& blocks) {
  std::vector<int64_t> b;
  if (blocks.starts.front() > 0) b.push_back(0);
  for (int64_t s : blocks.starts) b.push_back(s);
  if (blocks.end < model.nodes()) b.push_back(blocks.end);
  b.push_back(model.nodes());
  return b;
}

}  // namespace

std::optional<Partition> uniform_layers(const StageModel& model, const Blocks& blocks,
                                        int64_t stages) {
  if (!blocks.found()) return std::nullopt;
  const int64_t layers = int64_t(blocks.starts.size());
  if (layers < stages) return std::nullopt;
  // Megatron wants layers % stages == 0; otherwise the first stages take one more.
  std::vector<int64_t> cuts = {0};
  int64_t block = 0;
  for (int64_t s = 0; s + 1 < stages; ++s) {
    block += layers / stages + (s < layers % stages ? 1 : 0);
    cuts.push_back(blocks.starts[size_t(block)]);
  }
  cuts.push_back(model.nodes());
  return evaluate(model, cuts, "uniform layers");
}

std::optional<Partition> parameter_balanced(const StageModel& model, const Blocks& blocks,
                                            int64_t stages) {
  if (!blocks.found()) return std::nullopt;
  const std::vector<int64_t> bounds = unit_bounds(model, blocks);
  const int64_t units = int64_t(bounds.size()) - 1;
  if (units < stages) return std::nullopt;
  // Each parameter counts once, in the first unit that reads it (a tied LM head adds nothing).
  std::vector<double> prefix(size_t(units + 1), 0);
  for (int64_t u = 0; u < units; ++u)
    prefix[size_t(u + 1)] = model.params(0, bounds[size_t(u + 1)]);
  PrefixWalk walk(prefix);
  double best = 0;
  const std::vector<int64_t> unit_cuts = min_max_cuts(units, stages, walk, &best);
  std::vector<int64_t> cuts;
  for (int64_t u : unit_cuts) cuts.push_back(bounds[size_t(u)]);
  return evaluate(model, cuts, "parameter-balanced");
}

}  // namespace merak::partition
