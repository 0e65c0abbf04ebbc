#include "merak/partition/stage_model.h"

#include <algorithm>

namespace merak::partition {

StageModel::StageModel(const GraphFacts& g, const CostModel& cost, const MemoryOptions& memory)
    : g_(g), cost_(cost), mem_(memory), n_(int64_t(g.nodes.size())) {
  const size_t n = size_t(n_);
  times_.resize(n);
  fwd_sum_.assign(n + 1, 0);
  bwd_sum_.assign(n + 1, 0);
  fwd_flops_sum_.assign(n + 1, 0);
  bwd_flops_sum_.assign(n + 1, 0);
  // Gradients accumulate on every micro-batch of a step but the first: a micro-batch's backward
  // carries that share of the additions.
  const double micro_batches = double(std::max<int64_t>(1, memory.micro_batches));
  const double accumulating = (micro_batches - 1) / micro_batches;
  for (size_t k = 0; k < n; ++k) {
    times_[k] = cost.node_time(g, int(k));
    times_[k].bwd += accumulating * times_[k].accumulate;
    const NodeFacts& nf = g.nodes[k];
    fwd_sum_[k + 1] = fwd_sum_[k] + times_[k].fwd;
    bwd_sum_[k + 1] = bwd_sum_[k] + times_[k].bwd;
    fwd_flops_sum_[k + 1] = fwd_flops_sum_[k] + nf.cost.fwd_flops;
    bwd_flops_sum_[k + 1] = bwd_flops_sum_[k] + (nf.recorded ? nf.cost.bwd_flops : 0);
  }

  // Boundaries: value v crosses every cut c with producer < c <= last reader.
  std::vector<double> d_bytes(n + 2, 0), d_grad(n + 2, 0);
  std::vector<int64_t> d_count(n + 2, 0), d_grad_count(n + 2, 0);
  for (const ValueFacts& v : g.values) {
    if (v.kind != ValueFacts::Kind::Node || v.readers.empty() || v.readers.back() <= v.producer)
      continue;
    const double b = cost.value_bytes(v.meta);
    const size_t lo = size_t(v.producer + 1), hi = size_t(v.readers.back() + 1);
    d_bytes[lo] += b;
    d_bytes[hi] -= b;
    d_count[lo] += 1;
    d_count[hi] -= 1;
    if (v.requires_grad) {
      d_grad[lo] += b;
      d_grad[hi] -= b;
      d_grad_count[lo] += 1;
      d_grad_count[hi] -= 1;
    }
  }
  cross_bytes_.assign(n + 1, 0);
  cross_grad_bytes_.assign(n + 1, 0);
  cross_count_.assign(n + 1, 0);
  cross_grad_count_.assign(n + 1, 0);
  double b = 0, gb = 0;
  int64_t c = 0, gc = 0;
  for (size_t k = 0; k <= n; ++k) {
    b += d_bytes[k];
    gb += d_grad[k];
    c += d_count[k];
    gc += d_grad_count[k];
    cross_bytes_[k] = k == 0 || k == n ? 0 : std::max(b, 0.0);
    cross_grad_bytes_[k] = k == 0 || k == n ? 0 : std::max(gb, 0.0);
    cross_count_[k] = k == 0 || k == n ? 0 : c;
    cross_grad_count_[k] = k == 0 || k == n ? 0 : gc;
  }

  // Parameters (trainable elements), constants (bytes: no gradient or optimizer state) and
  // saved activations, each counted once per stage that uses it.
  std::vector<std::pair<double, std::vector<int>>> params, constants, saved;
  for (const ValueFacts& v : g.values) {
    if (v.readers.empty()) continue;
    if (v.kind == ValueFacts::Kind::Param) params.push_back({double(v.meta.numel()), v.readers});
    if (v.kind == ValueFacts::Kind::Constant)
      constants.push_back({double(v.meta.nbytes()), v.readers});
  }
  std::vector<std::vector<int>> savers(g.values.size());
  for (size_t k = 0; k < n; ++k)
    for (int root : g.nodes[k].saved) savers[size_t(root)].push_back(int(k));
  for (size_t r = 0; r < savers.size(); ++r) {
    const ValueFacts& v = g.values[r];
    if (savers[r].empty() || v.kind == ValueFacts::Kind::Param ||
        v.kind == ValueFacts::Kind::Constant)
      continue;
    saved.push_back({cost.value_bytes(v.meta), savers[r]});
  }
  params_ = file_uses(params);
  shared_lo_.resize(n);
  shared_hi_.resize(n);
  for (size_t k = 0; k < n; ++k) shared_lo_[k] = shared_hi_[k] = int64_t(k);
  for (size_t id = 0; id < g.values.size(); ++id) {
    const ValueFacts& v = g.values[id];
    if (v.kind != ValueFacts::Kind::Param || v.readers.size() < 2) continue;
    shared_.push_back(int(id));
    for (int r : v.readers) {
      shared_lo_[size_t(r)] = std::min<int64_t>(shared_lo_[size_t(r)], v.readers.front());
      shared_hi_[size_t(r)] = std::max<int64_t>(shared_hi_[size_t(r)], v.readers.back());
    }
  }
  constants_ = file_uses(constants);
  saved_ = file_uses(saved);

  // Working set of a node's backward: the gradients of its outputs and of its non-parameter
  // inputs, alive together while it runs.
  work_.assign(n, 0);
  for (size_t k = 0; k < n; ++k) {
    const NodeFacts& nf = g.nodes[k];
    if (!nf.recorded) continue;
    double w = 0;
    for (int id : nf.outputs)
      if (g.values[size_t(id)].requires_grad) w += cost.value_bytes(g.values[size_t(id)].meta);
    std::vector<int> seen;
    for (int id : nf.inputs) {
      if (id < 0 || std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      const ValueFacts& v = g.values[size_t(id)];
      if (v.requires_grad && v.kind != ValueFacts::Kind::Param) w += cost.value_bytes(v.meta);
    }
    work_[k] = w;
  }

  // Zero bubble's WeightGrad state: a separable op that reads a parameter keeps its saved
  // (non-parameter) inputs and receives its output gradients at Backward, and lets them go at
  // WeightGrad. Other schedules keep none.
  deferred_.assign(n, {});
  for (size_t k = 0; k < n && memory.schedule == Schedule::ZeroBubble; ++k) {
    const NodeFacts& nf = g.nodes[k];
    if (!nf.recorded || !nf.op->separable_grads) continue;
    const bool reads_param = std::any_of(nf.inputs.begin(), nf.inputs.end(), [&](int id) {
      return id >= 0 && g.values[size_t(id)].kind == ValueFacts::Kind::Param;
    });
    if (!reads_param) continue;
    DeferredBytes& d = deferred_[k];
    for (int id : nf.outputs)
      if (g.values[size_t(id)].requires_grad) d.grads += cost.value_bytes(g.values[size_t(id)].meta);
    for (int root : nf.saved) {
      const ValueFacts& v = g.values[size_t(root)];
      if (v.kind != ValueFacts::Kind::Param && v.kind != ValueFacts::Kind::Constant)
        d.inputs += cost.value_bytes(v.meta);
    }
  }
}

StageModel::Uses StageModel::file_uses(
    const std::vector<std::pair<double, std::vector<int>>>& items) const {
  Uses uses(static_cast<size_t>(n_));
  for (const auto& [size, nodes] : items)
    for (size_t k = 0; k < nodes.size(); ++k)
      uses[size_t(nodes[k])].push_back({size, k + 1 < nodes.size() ? int64_t(nodes[k + 1]) : n_});
  return uses;
}

StageContents StageModel::empty(int64_t j) const {
  StageContents c;
  c.first = c.end = j;
  c.shared_first = j;
  c.shared_last = j - 1;
  return c;
}

void StageModel::grow(StageContents& c) const {
  const size_t i = size_t(--c.first);
  // An item used at i and again before `end` is counted already (at that later use).
  for (const Use& u : params_[i])
    if (u.next >= c.end) c.params += u.size;
  for (const Use& u : constants_[i])
    if (u.next >= c.end) c.constants += u.size;
  for (const Use& u : saved_[i])
    if (u.next >= c.end) c.activations += u.size;
  c.working = std::max(c.working, work_[i]);
  c.deferred.inputs += deferred_[i].inputs;
  c.deferred.grads += deferred_[i].grads;
  c.shared_first = std::min(c.shared_first, shared_lo_[i]);
  c.shared_last = std::max(c.shared_last, shared_hi_[i]);
}

StageContents StageModel::contents(int64_t i, int64_t j) const {
  StageContents c = empty(j);
  while (c.first > i) grow(c);
  return c;
}

double StageModel::memory(int64_t stage, int64_t stages, const StageContents& c,
                          bool recompute) const {
  return stage_memory(mem_, stage, stages, c.params, c.activations, cross_bytes_[size_t(c.first)],
                      c.working, recompute, c.deferred)
             .total() +
         c.constants;
}

double StageModel::memory_floor(int64_t stage, int64_t stages, const StageContents& c) const {
  // Recomputing (where the mode lets the stage) never keeps more: boundary inputs aside, it
  // holds one micro-batch's activations where it would hold several.
  return stage_memory(mem_, stage, stages, c.params, c.activations, 0, c.working, true,
                      c.deferred)
             .total() +
         c.constants;
}

bool StageModel::recomputes(int64_t stage, int64_t stages, const StageContents& c,
                            double limit) const {
  if (!can_recompute(mem_, stage, stages)) return false;
  if (mem_.recompute == Recompute::Full) return true;
  return limit > 0 && memory(stage, stages, c, false) > limit;
}

double StageModel::p2p(int64_t stage, int64_t stages, int64_t i, int64_t j) const {
  double t = 0;
  if (stage > 0)
    t += cost_.p2p_seconds(cross_bytes_[size_t(i)] + cross_grad_bytes_[size_t(i)],
                           cross_count_[size_t(i)] + cross_grad_count_[size_t(i)],
                           cost_.pp_link(stage - 1));
  if (stage + 1 < stages)
    t += cost_.p2p_seconds(cross_bytes_[size_t(j)] + cross_grad_bytes_[size_t(j)],
                           cross_count_[size_t(j)] + cross_grad_count_[size_t(j)],
                           cost_.pp_link(stage));
  return t;
}

double StageModel::compute(int64_t stage, int64_t stages, int64_t i, int64_t j,
                           bool recompute) const {
  const double fwd = fwd_sum_[size_t(j)] - fwd_sum_[size_t(i)];
  const double bwd = bwd_sum_[size_t(j)] - bwd_sum_[size_t(i)];
  return fwd + bwd + (recompute && can_recompute(mem_, stage, stages) ? fwd : 0);
}

double StageModel::time(int64_t stage, int64_t stages, int64_t i, int64_t j,
                        bool recompute) const {
  return compute(stage, stages, i, j, recompute) + p2p(stage, stages, i, j);
}

double StageModel::memory(int64_t stage, int64_t stages, int64_t i, int64_t j,
                          bool recompute) const {
  return memory(stage, stages, contents(i, j), recompute);
}

StageEstimate StageModel::estimate(int64_t stage, int64_t stages, int64_t i, int64_t j,
                                   double limit) const {
  StageEstimate e;
  e.first = i;
  e.end = j;
  const StageContents c = contents(i, j);
  const bool recompute = recomputes(stage, stages, c, limit);
  e.fwd = fwd_sum_[size_t(j)] - fwd_sum_[size_t(i)];
  e.bwd = bwd_sum_[size_t(j)] - bwd_sum_[size_t(i)];
  e.recompute = recompute ? e.fwd : 0;
  e.p2p = p2p(stage, stages, i, j);
  e.fwd_flops = fwd_flops_sum_[size_t(j)] - fwd_flops_sum_[size_t(i)];
  e.bwd_flops = bwd_flops_sum_[size_t(j)] - bwd_flops_sum_[size_t(i)];
  e.params = c.params;
  e.memory = stage_memory(mem_, stage, stages, c.params, c.activations, cross_bytes_[size_t(i)],
                          c.working, recompute, c.deferred);
  e.memory.weights += c.constants;
  return e;
}

std::vector<int> StageModel::boundary(int64_t c) const {
  std::vector<int> out;
  if (c <= 0 || c >= n_) return out;
  for (size_t id = 0; id < g_.values.size(); ++id) {
    const ValueFacts& v = g_.values[id];
    if (v.kind == ValueFacts::Kind::Node && !v.readers.empty() && v.producer < c &&
        v.readers.back() >= c)
      out.push_back(int(id));
  }
  return out;
}

}  // namespace merak::partition
