#include "merak/partition/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace merak::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Min-max DP over cut points. cost(s, i, j) is stage s's cost over nodes [i, j), or +inf when
// the stage is not allowed; lower(s, i, j), when given, is a bound on cost that only grows as i
// falls (lets the scan over i stop early). Returns the cuts, empty when nothing is finite.
std::vector<int64_t> min_max_cuts(int64_t n, int64_t p,
                                  const std::function<double(int64_t, int64_t, int64_t)>& cost,
                                  const std::function<double(int64_t, int64_t, int64_t)>& lower,
                                  double* best) {
  std::vector<double> prev(size_t(n + 1), kInf), next(size_t(n + 1), kInf);
  std::vector<std::vector<int64_t>> arg(size_t(p + 1), std::vector<int64_t>(size_t(n + 1), -1));
  prev[0] = 0;
  for (int64_t s = 0; s < p; ++s) {
    std::fill(next.begin(), next.end(), kInf);
    // Stage s ends at j; every later stage needs at least one node.
    for (int64_t j = s + 1; j <= n - (p - s - 1); ++j) {
      if (s + 1 == p && j != n) continue;
      double& out = next[size_t(j)];
      for (int64_t i = j - 1; i >= s; --i) {
        if (lower && lower(s, i, j) >= out) break;
        if (prev[size_t(i)] >= out) continue;
        const double c = cost(s, i, j);
        const double v = std::max(prev[size_t(i)], c);
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
  const bool limited = memory_limit > 0;
  const std::vector<NodeTime>& t = model.node_times();
  std::vector<double> fwd(size_t(n + 1), 0), bwd(size_t(n + 1), 0);  // prefix sums
  for (int64_t k = 0; k < n; ++k) {
    fwd[size_t(k + 1)] = fwd[size_t(k)] + t[size_t(k)].fwd;
    bwd[size_t(k + 1)] = bwd[size_t(k)] + t[size_t(k)].bwd;
  }
  auto cost = [&](int64_t s, int64_t i, int64_t j) {
    if (limited && model.memory(s, stages, i, j) > memory_limit) return kInf;
    return model.time(s, stages, i, j);
  };
  // The stage's compute time: a lower bound of its cost that grows as the stage grows.
  auto lower = [&](int64_t s, int64_t i, int64_t j) {
    const double f = fwd[size_t(j)] - fwd[size_t(i)];
    return f * (recomputes(model.memory_options(), s, stages) ? 2 : 1) + bwd[size_t(j)] -
           bwd[size_t(i)];
  };
  double best = 0;
  const std::vector<int64_t> cuts = min_max_cuts(n, stages, cost, lower, &best);
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
  auto cost = [&](int64_t s, int64_t i, int64_t j) { return model.memory(s, stages, i, j); };
  double best = 0;
  min_max_cuts(model.nodes(), stages, cost, nullptr, &best);
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
  auto cost = [&](int64_t, int64_t i, int64_t j) { return prefix[size_t(j)] - prefix[size_t(i)]; };
  auto lower = [&](int64_t, int64_t i, int64_t j) { return prefix[size_t(j)] - prefix[size_t(i)]; };
  double best = 0;
  const std::vector<int64_t> unit_cuts = min_max_cuts(units, stages, cost, lower, &best);
  std::vector<int64_t> cuts;
  for (int64_t u : unit_cuts) cuts.push_back(bounds[size_t(u)]);
  return evaluate(model, cuts, "parameter-balanced");
}

}  // namespace merak::partition
