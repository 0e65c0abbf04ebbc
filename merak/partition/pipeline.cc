#include "merak/partition/pipeline.h"

#include <algorithm>
#include <cmath>

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
// O(n) memory and O(1) a step. Only splits costing less than `bound` are looked for (a split
// known to cost that much makes it an upper bound on the answer: scans stop there), and where
// `room` is given, cell (s, j) is skipped unless room->first[j] <= s + 1 and room->second[j] <=
// p - s - 1: the fewest stages, each below the bound, that can cover nodes [0, j) and [j, n).
// Returns the cuts, empty when nothing below the bound is finite.
using Room = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
template <class Walk>
std::vector<int64_t> min_max_cuts(int64_t n, int64_t p, Walk& walk, double* best,
                                  double bound = kInf, const Room* room = nullptr) {
  std::vector<double> prev(size_t(n + 1), kInf), next(size_t(n + 1), kInf);
  std::vector<std::vector<int64_t>> arg(size_t(p + 1), std::vector<int64_t>(size_t(n + 1), -1));
  prev[0] = 0;
  for (int64_t s = 0; s < p; ++s) {
    std::fill(next.begin(), next.end(), kInf);
    // Stage s ends at j; every later stage needs at least one node.
    for (int64_t j = s + 1; j <= n - (p - s - 1); ++j) {
      if (s + 1 == p && j != n) continue;
      if (room && (room->first[size_t(j)] > s + 1 || room->second[size_t(j)] > p - s - 1))
        continue;
      double out = bound;
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
      if (arg[size_t(s + 1)][size_t(j)] >= 0) next[size_t(j)] = out;
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

// Our split's walk: a stage costs its time as the recomputation mode runs it (StageModel::
// recomputes), and is not allowed beyond the memory limit or where it splits a shared parameter's
// readers off the first and last stage (StageModel::keeps_ties).
class TimeWalk {
 public:
  TimeWalk(const StageModel& model, int64_t stages, double limit)
      : model_(model), stages_(stages), limit_(limit),
        mode_(model.memory_options().recompute) {}
  void start(int64_t s, int64_t j) {
    s_ = s;
    c_ = model_.empty(j);
    closed_ = false;
  }
  void grow() { model_.grow(c_); }
  // The stage's compute: its time without the transfers, which only grows as it grows (without
  // recomputation unless the mode always recomputes: its least).
  double floor() const {
    return closed_ ? kInf
                   : model_.compute(s_, stages_, c_.first, c_.end, mode_ == Recompute::Full);
  }
  double cost(double best) {
    if (!model_.keeps_ties(s_, stages_, c_)) return kInf;
    // Memory is only asked of a stage that may win: under AsNeeded, its time without
    // recomputing is the least it can take.
    if (mode_ == Recompute::AsNeeded) {
      const double t = model_.time(s_, stages_, c_.first, c_.end, false);
      if (t >= best) return t;
    }
    const bool recompute = model_.recomputes(s_, stages_, c_, limit_);
    const double t = model_.time(s_, stages_, c_.first, c_.end, recompute);
    if (t >= best || limit_ <= 0) return t;
    if (model_.memory(s_, stages_, c_, recompute) <= limit_) return t;
    // Past the limit; once even the memory floor is, every larger stage is too.
    closed_ = model_.memory_floor(s_, stages_, c_) > limit_;
    return kInf;
  }

 private:
  const StageModel& model_;
  int64_t stages_;
  double limit_;
  Recompute mode_;
  int64_t s_ = 0;
  StageContents c_;
  bool closed_ = false;
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
                   const std::string& method, double memory_limit) {
  Partition p;
  p.method = method;
  p.cuts = cuts;
  const int64_t stages = int64_t(cuts.size()) - 1;
  for (int64_t s = 0; s < stages; ++s)
    p.stages.push_back(
        model.estimate(s, stages, cuts[size_t(s)], cuts[size_t(s + 1)], memory_limit));
  return p;
}

namespace {

// A split into p stages each of which `fits`, found from the last stage to the first: the cuts
// from which stages s .. p-1 reach the end, each stage [c, e) ending at the nearest such cut e
// above c of stage s + 1. Each cut is visited once a stage, its stage grown a node from the
// last (restarted where e moves); once `open` fails for a stage (a floor, which only rises as
// the stage grows, passed its cap), no larger stage with that end fits and the cuts down to
// the next e are skipped. Returns the cuts, empty when none is found. Exact (finds a split whenever one exists) when a stage that fits still fits with
// nodes taken off its right end, as memory does (its boundary inputs sit at its left): then
// the nearest end is the best.
template <class Open, class Fits>
std::vector<int64_t> split_from_the_end(const StageModel& model, int64_t p, Open open, Fits fits) {
  const int64_t n = model.nodes();
  // end[s][c]: where stage s starting at c ends, -1 when stages s .. p-1 cannot reach n from c.
  std::vector<std::vector<int64_t>> end(size_t(p), std::vector<int64_t>(size_t(n + 1), -1));
  std::vector<char> reach(size_t(n + 1), 0), here(size_t(n + 1), 0);
  reach[size_t(n)] = 1;
  for (int64_t s = p - 1; s >= 0; --s) {
    std::fill(here.begin(), here.end(), 0);
    int64_t e = -1;  // the nearest reachable cut above c
    bool shut = true;
    StageContents c;
    for (int64_t at = n - 1; at >= s; --at) {
      if (reach[size_t(at + 1)]) {
        e = at + 1;
        c = model.empty(e);
        shut = false;
      }
      if (shut) continue;
      model.grow(c);  // [at, e)
      if (!open(s, c)) {
        shut = true;  // nothing larger ending at e fits
        continue;
      }
      if ((s > 0 || at == 0) && fits(s, c)) {
        here[size_t(at)] = 1;
        end[size_t(s)][size_t(at)] = e;
      }
    }
    std::swap(reach, here);
  }
  if (!reach[0]) return {};
  std::vector<int64_t> cuts = {0};
  for (int64_t s = 0; s < p; ++s) cuts.push_back(end[size_t(s)][size_t(cuts.back())]);
  return cuts;
}

// A split each of whose stages fits in `cap` bytes, recomputing wherever the mode lets a stage
// (its least memory), and (with `ties`) keeps_ties; empty when there is none. Exact for memory,
// the kind split_from_the_end needs; ties are that kind too except for a middle stage that
// holds every reader of a shared parameter (taking its last reader off breaks the tie), which
// this may miss: partition_pipeline's exact search settles that case.
std::vector<int64_t> split_under_memory(const StageModel& model, int64_t p, double cap,
                                        bool ties = true) {
  return split_from_the_end(
      model, p,
      [&](int64_t s, const StageContents& c) { return model.memory_floor(s, p, c) <= cap; },
      [&](int64_t s, const StageContents& c) {
        return (!ties || model.keeps_ties(s, p, c)) && model.memory(s, p, c, true) <= cap;
      });
}

// The shared parameters, for messages: "'w' (nodes 'a' .. 'b')", the first few.
std::string shared_params_text(const StageModel& model) {
  const GraphFacts& g = model.graph();
  std::string out;
  const std::vector<int>& shared = model.shared_params();
  for (size_t k = 0; k < shared.size() && k < 3; ++k) {
    const ValueFacts& v = g.values[size_t(shared[k])];
    const std::string& first = g.nodes[size_t(v.readers.front())].node->name();
    const std::string& last = g.nodes[size_t(v.readers.back())].node->name();
    out += (k ? ", '" : "'") + v.name + "' (nodes '" + first + "' .. '" + last + "')";
  }
  if (shared.size() > 3) out += " and " + std::to_string(shared.size() - 3) + " more";
  return out;
}

// An upper bound on the best split's cost: splits found by split_from_the_end whose stages each
// cost (as our walk prices them: time as the mode runs the stage, past the memory limit not
// allowed) at most t, t bisected between the least possible (the compute shared evenly) and the
// whole graph's time. (Time is not exact there: a stage's transfers depend on its right cut.)
// +inf when none is found at any t.
double found_split_cost(const StageModel& model, int64_t p, double limit) {
  const int64_t n = model.nodes();
  auto cost = [&](int64_t s, const StageContents& c) {
    if (!model.keeps_ties(s, p, c)) return kInf;
    const bool recompute = model.recomputes(s, p, c, limit);
    if (limit > 0 && model.memory(s, p, c, recompute) > limit) return kInf;
    return model.time(s, p, c.first, c.end, recompute);
  };
  auto split_cost = [&](double t) {
    const std::vector<int64_t> cuts = split_from_the_end(
        model, p,
        [&](int64_t s, const StageContents& c) {
          return model.compute(s, p, c.first, c.end, false) <= t &&
                 (limit <= 0 || model.memory_floor(s, p, c) <= limit);
        },
        [&](int64_t s, const StageContents& c) { return cost(s, c) <= t; });
    double worst = cuts.empty() ? kInf : 0;
    for (int64_t s = 0; s < p && !cuts.empty(); ++s)
      worst = std::max(worst, cost(s, model.contents(cuts[size_t(s)], cuts[size_t(s + 1)])));
    return worst;
  };
  double lo = model.compute(0, 1, 0, n, false) / double(p);
  double hi = 2 * model.time(0, p, 0, n, true) + 1;  // no stage costs more (or none fits)
  double best = split_cost(hi);
  if (!std::isfinite(best)) return kInf;
  hi = best;
  for (int k = 0; k < 30 && hi > lo * 1.01; ++k) {  // within 1%: a bound, not the answer
    const double mid = 0.5 * (lo + hi);
    const double got = split_cost(mid);
    if (std::isfinite(got)) {
      best = std::min(best, got);
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return best;
}

// For each cut c, the fewest stages whose compute (forward and backward, no recomputation: a
// stage's least time) each stays below `bound` that can cover nodes [0, c), and [c, n): greedy
// stages as long as they can be are fewest. A node heavier than the bound alone makes n + 1.
Room stage_room(const StageModel& model, double bound) {
  const int64_t n = model.nodes();
  auto least = [&](int64_t i, int64_t j) { return model.compute(0, 1, i, j, false); };
  Room room{std::vector<int64_t>(size_t(n + 1), 0), std::vector<int64_t>(size_t(n + 1), 0)};
  int64_t start = 0, count = 1;
  bool stuck = false;  // a node alone reaches the bound: no prefix past it can be covered
  for (int64_t c = 1; c <= n; ++c) {
    stuck = stuck || least(c - 1, c) >= bound;
    if (!stuck && least(start, c) >= bound) start = c - 1, ++count;
    room.first[size_t(c)] = stuck ? n + 1 : count;
  }
  int64_t end = n;
  count = 1;
  stuck = false;
  for (int64_t c = n - 1; c >= 0; --c) {
    stuck = stuck || least(c, c + 1) >= bound;
    if (!stuck && least(c, end) >= bound) end = c + 1, ++count;
    room.second[size_t(c)] = stuck ? n + 1 : count;
  }
  return room;
}

}  // namespace

Partition partition_pipeline(const StageModel& model, int64_t stages, double memory_limit) {
  const int64_t n = model.nodes();
  MERAK_CHECK(stages >= 1, "pipeline stages must be >= 1, got ", stages);
  MERAK_CHECK(n >= stages, "the graph has ", n, " nodes, too few for ", stages,
              " pipeline stages");
  TimeWalk walk(model, stages, memory_limit);
  double best = 0;
  std::vector<int64_t> cuts;
  const bool shared = !model.shared_params().empty();
  const bool fits = memory_limit <= 0 || !split_under_memory(model, stages, memory_limit).empty();
  // Whether memory alone, the ties aside, allows a split (a split that keeps them is one).
  const bool fits_untied =
      fits || (shared && !split_under_memory(model, stages, memory_limit, false).empty());
  if (fits) {
    // A split that fits bounds the answer from above: the exact search then only looks below it
    // (a hair above, so that split itself can be the answer) and skips the cells no split
    // below it passes through. Exact either way; many times faster on deep graphs.
    const double known = found_split_cost(model, stages, memory_limit);
    if (std::isfinite(known)) {
      const double bound = known * (1 + 1e-9);
      const Room room = stage_room(model, bound);
      cuts = min_max_cuts(n, stages, walk, &best, bound, &room);
    }
    if (cuts.empty()) cuts = min_max_cuts(n, stages, walk, &best);
  } else if (fits_untied) {
    // Memory alone allows a split: whether one also keeps the ties, the exact search decides.
    cuts = min_max_cuts(n, stages, walk, &best);
  }
  if (cuts.empty() && shared && fits_untied) {
    // A parameter read on two stages is summed over the first and the last only (the grid's
    // tied group): no split keeps its readers there, or on one stage.
    const std::string what = "no split into " + std::to_string(stages) +
                             " pipeline stages keeps the readers of each shared parameter on "
                             "the first and last stage or all on one stage: " +
                             shared_params_text(model);
    TimeWalk unlimited(model, stages, 0);
    if (memory_limit <= 0 || min_max_cuts(n, stages, unlimited, &best).empty())
      throw Error(what);
    throw NoFit(what + ", within " + memory_text(memory_limit) + " per device",
                min_peak_memory(model, stages));
  }
  if (cuts.empty())
    throw NoFit("no split into " + std::to_string(stages) + " pipeline stages fits in " +
                    memory_text(memory_limit) + " per device",
                min_peak_memory(model, stages));
  return evaluate(model, cuts, "ours", memory_limit);
}

double min_peak_memory(const StageModel& model, int64_t stages) {
  // Bisect the cap, then close the last gap one achievable peak at a time. Under the ties where
  // the greedy search finds a split at all; where it finds none (a middle stage must hold every
  // reader of a shared parameter, which it may miss), without them: a lower bound, not a false
  // "too few nodes".
  const bool ties = !split_under_memory(model, stages, kInf).empty();
  auto split_under = [&](double cap) { return split_under_memory(model, stages, cap, ties); };
  auto peak = [&](const std::vector<int64_t>& cuts) {
    double m = 0;
    for (int64_t s = 0; s < stages; ++s)
      m = std::max(m, model.memory(s, stages, model.contents(cuts[size_t(s)], cuts[size_t(s + 1)]),
                                   true));
    return m;
  };
  const std::vector<int64_t> any = split_under(kInf);
  MERAK_CHECK(!any.empty(), "the graph has ", model.nodes(), " nodes, too few for ", stages,
              " pipeline stages");
  double lo = 0, hi = peak(any);  // no split fits under lo; one peaks at hi
  while (hi - lo > hi * 1e-9) {
    const double mid = 0.5 * (lo + hi);
    const std::vector<int64_t> cuts = split_under(mid);
    if (cuts.empty())
      lo = mid;
    else
      hi = peak(cuts);
  }
  for (;;) {
    const std::vector<int64_t> cuts = split_under(std::nextafter(hi, 0.0));
    if (cuts.empty()) return hi;
    hi = peak(cuts);
  }
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
                                        int64_t stages, double memory_limit) {
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
  return evaluate(model, cuts, "uniform layers", memory_limit);
}

std::optional<Partition> parameter_balanced(const StageModel& model, const Blocks& blocks,
                                            int64_t stages, double memory_limit) {
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
  return evaluate(model, cuts, "parameter-balanced", memory_limit);
}

}  // namespace merak::partition
