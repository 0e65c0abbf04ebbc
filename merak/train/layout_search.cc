#include "merak/train/layout_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "merak/config/validate.h"
#include "merak/partition/cost.h"
#include "merak/partition/hardware.h"
#include "merak/partition/memory.h"
#include "merak/runtime/engine_comm.h"
#include "merak/runtime/schedule.h"
#include "merak/runtime/simulator.h"
#include "merak/train/model_graph.h"

namespace merak::train {
namespace {

constexpr size_t kShown = 5;           // layouts printed, and the prune's yardstick
constexpr int64_t kMaxMicroBatch = 8;  // larger micro-batches rarely pay: memory for no bubble
// Micro-batches a replica runs a step: the simulator replays each (the largest configs run
// hundreds).
constexpr int64_t kMaxMicroBatches = 65536;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Ascending, in O(sqrt(n)): each divisor d up to the root pairs with n / d above it.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d <= n / d; ++d)
    if (n % d == 0) {
      low.push_back(d);
      if (d != n / d) high.push_back(n / d);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// The divisors of n up to `most`, ascending, in O(most).
std::vector<int64_t> divisors_up_to(int64_t n, int64_t most) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, most); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool is_auto(const config::Config& c, const std::string& key) {
  const auto& keys = c.parallel.auto_keys;
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The most model stages the search tries: a built network's layers. An imported network's are
// in its graph, which the partitioner cuts wherever a layout asks.
int64_t stage_cap(const config::Config& c) {
  return c.model.onnx.empty() ? c.model.layers : std::numeric_limits<int64_t>::max();
}

// The model's facts for the search (no weights): an imported network is read at the first of
// the layouts' micro-batch sizes its file takes (an export of fixed shapes takes one).
ModelFacts searched_facts(const config::Config& c, const std::vector<Layout>& layouts) {
  std::set<int64_t> sizes;
  for (const Layout& l : layouts) sizes.insert(config::model_micro_batch_size(with_layout(c, l)));
  std::optional<SetupError> first;
  for (int64_t size : sizes) {
    try {
      return model_facts(c, size, /*weights=*/false);
    } catch (const SetupError& e) {
      if (c.model.onnx.empty()) throw;
      if (!first) first = e;
    }
  }
  if (!first) return model_facts(c, 0, false);
  throw *first;
}

// Model FLOPs of a step: forward + backward of the global batch, no recomputation.
double step_flops(const config::Config& c, const ModelFacts& facts) {
  return facts.flops_per_token * double(c.train.batch) * double(c.train.seq_len);
}

// Every valid layout of `world` ranks for the config's auto keys (the others as given).
std::vector<Layout> enumerate(const config::Config& c, int64_t world, int64_t per_node) {
  const config::ParallelConfig& p = c.parallel;
  std::vector<int64_t> tps = {p.tp};
  if (is_auto(c, "parallel.tp")) {
    tps.clear();
    for (int64_t t : divisors_up_to(world, per_node))
      // (An imported network's heads are in its graph: a tp that cannot split them is dropped
      // when its graph is prepared.)
      if (c.model.heads % t == 0 || !c.model.onnx.empty()) tps.push_back(t);
  }
  std::vector<Layout> out;
  for (int64_t tp : tps)
    for (int64_t pp : is_auto(c, "parallel.pp") ? divisors(world / std::max<int64_t>(tp, 1))
                                                 : std::vector<int64_t>{p.pp}) {
      // An auto pp stops at a stage a layer; a fixed one is the partitioner's to split (it cuts
      // inside blocks, as the run does).
      if (world % (tp * pp) != 0 || (is_auto(c, "parallel.pp") && pp > stage_cap(c))) continue;
      const int64_t dp = world / (tp * pp);
      if ((!is_auto(c, "parallel.dp") && dp != p.dp) || c.train.batch % dp != 0) continue;
      const int64_t per_replica = c.train.batch / dp;
      std::vector<int64_t> mbs;
      if (is_auto(c, "train.micro_batch")) {
        mbs = divisors_up_to(per_replica, kMaxMicroBatch);
      } else {
        config::Config fixed = c;
        fixed.parallel.dp = dp;
        mbs.push_back(config::micro_batch_size(fixed));
      }
      // Left to the search, recomputation is decided stage by stage from the memory model
      // ("memory": none where a stage fits without it, full where it must): its slowest stage
      // is never slower than recomputing everywhere or nowhere gives.
      const std::string recompute = is_auto(c, "parallel.recompute") ? "memory" : p.recompute;
      std::vector<std::string> schedules = {p.schedule};
      if (is_auto(c, "parallel.schedule"))
        schedules = pp == 1 ? std::vector<std::string>{"1f1b"}
                            : std::vector<std::string>{"1f1b", "gpipe", "zb", "interleaved",
                                                       "shifted"};
      const std::vector<bool> zero1s = is_auto(c, "parallel.zero1") && dp > 1
                                           ? std::vector<bool>{false, true}
                                           : std::vector<bool>{is_auto(c, "parallel.zero1")
                                                                   ? false
                                                                   : p.zero1};
      for (int64_t mb : mbs)
        for (const std::string& sc : mb > 0 && per_replica / mb <= kMaxMicroBatches
                                         ? schedules
                                         : std::vector<std::string>{})
          for (bool z : zero1s) {
            if (sc == "shifted" && recompute == "none") continue;  // it moves recomputation
            Layout l{dp, pp, tp, mb, 1, sc, recompute, z};
            if (sc == "interleaved")
              l.virtual_stages = is_auto(c, "parallel.virtual_stages") ? 2 : p.virtual_stages;
            else if (!is_auto(c, "parallel.virtual_stages"))
              l.virtual_stages = p.virtual_stages;
            // More stages than layers: not searched for, but a fixed pp (and a fixed v, or one
            // a non-interleaved schedule ignores) is the user's to choose.
            if (l.pp * l.virtual_stages > stage_cap(c) &&
                (is_auto(c, "parallel.pp") ||
                 (sc == "interleaved" && is_auto(c, "parallel.virtual_stages"))))
              continue;
            // The config's own rules (interleaved's micro-batch multiple, ZeRO-1 with 16-bit
            // replicas, ...): a layout the run would refuse is not a candidate.
            if (config::detail::first_problem(with_layout(c, l))) continue;
            out.push_back(l);
          }
    }
  return out;
}

// The schedule's fill and drain as a factor on the busy time: a bound no pipeline beats.
double fill_factor(const Layout& l, int64_t micro_batches) {
  if (l.schedule == "zb") return 1;  // zero bubble may hide nearly all of it
  const double fill = double(l.pp - 1) / double(l.virtual_stages);
  return (double(micro_batches) + fill) / double(micro_batches);
}

// The layout's step: its stages' estimates replayed in the simulator under its schedule, plus
// the gradient reduction that the last micro-batch's backward leaves exposed.
Prediction predict(const config::Config& c, const Layout& l, const partition::Request& req,
                   const partition::Result& r, const ModelFacts& facts) {
  const std::vector<partition::StageEstimate>& st = r.ours.stages;
  const int model_stages = int(st.size());
  const int micro_batches = int(config::model_micro_batches_per_replica(c));
  runtime::SimCosts costs;
  runtime::ScheduleOptions so;
  so.virtual_stages = int(l.virtual_stages);
  const bool zb = l.schedule == "zb";
  for (const partition::StageEstimate& s : st) {
    costs.forward.push_back(s.fwd);
    // Zero bubble splits backward into its activation and parameter gradients: a matmul's two
    // backward products have the same FLOPs, so each half is half the time.
    costs.backward.push_back(zb ? s.bwd / 2 : s.bwd);
    if (zb) costs.weight_grad.push_back(s.bwd / 2);
    costs.recompute.push_back(s.recompute);
    so.recompute.push_back(s.memory.recompute ? 1.0 : 0.0);
    costs.p2p = std::max(costs.p2p, s.p2p);
  }
  // CPU ranks outnumbering the cores take turns: every stage's tp and dp peers compute with it.
  const int64_t world = l.dp * l.pp * l.tp;
  const double concurrent = req.hardware.concurrent_ranks(world);
  if (concurrent < double(world)) {
    costs.concurrent = concurrent;
    costs.ranks_per_stage = int(l.dp * l.tp);
  }
  const runtime::SimResult sim = runtime::simulate(
      runtime::make_schedules(runtime::parse_schedule_kind(l.schedule), int(l.pp), micro_batches,
                              so),
      costs, /*spans=*/false);
  Prediction p;
  p.bubble = sim.bubble;
  const partition::Placement place{l.dp, l.pp, l.tp, l.virtual_stages};
  const partition::CostModel cost(req.hardware, req.memory.precision, place);
  // A rank holds virtual_stages model stages: r, r + pp, ... (one without interleaving).
  std::vector<double> rank_params(size_t(l.pp), 0.0);
  for (int s = 0; s < model_stages; ++s) rank_params[size_t(s % l.pp)] += st[size_t(s)].params;
  // Gradient reduction: each rank's gradients (all its stages') over its dp replicas. Bucketed
  // all-reduces overlap the last micro-batch's backward of the rank's last stage to finish only
  // (its first: the gradients are final then); ZeRO-1's reduce-scatter follows backward and its
  // all-gather of the updated parameters the optimizer step, the same bytes as one all-reduce
  // and none of it hidden.
  if (l.dp > 1) {
    const double grad_bytes = req.memory.precision == partition::Precision::F32 ? 4 : 2;
    for (int r = 0; r < int(l.pp); ++r) {
      const double reduce =
          cost.all_reduce_seconds(rank_params[size_t(r)] * grad_bytes, l.dp, cost.dp_link());
      p.exposed_dp_seconds =
          std::max(p.exposed_dp_seconds, l.zero1 ? reduce : reduce - st[size_t(r)].bwd);
    }
  }
  // The optimizer step after it, on every rank at once: the slowest rank's (where the replicas
  // split the update, it runs its 1 / dp share).
  // (ZeRO-1, or CPU replicas sharing one parameter copy: the request says, as the runtime picks).
  const double update_share =
      l.dp > 1 && (req.memory.zero1 || req.memory.shared_update) ? 1.0 / double(l.dp) : 1.0;
  // Every rank at once: where ranks share cores, each at its share of them.
  const double shared_rate = req.hardware.all_busy_share(world);
  for (double params : rank_params)
    p.optimizer_seconds =
        std::max(p.optimizer_seconds,
                 cost.optimizer_seconds(params, params * update_share) / shared_rate);
  p.step_seconds = sim.step_time + std::max(0.0, p.exposed_dp_seconds) + p.optimizer_seconds;
  p.tokens_per_s = double(c.train.batch * c.train.seq_len) / p.step_seconds;
  p.tflops_per_device = step_flops(c, facts) / p.step_seconds / double(world) / 1e12;
  // A rank's own peak: a CPU node's ranks split its cores.
  const double peak = cost.hardware().peak(req.memory.precision) * shared_rate;
  p.mfu = peak > 0 ? p.tflops_per_device * 1e12 / peak : 0;
  p.rank_memory.assign(size_t(l.pp), 0.0);
  for (int s = 0; s < model_stages; ++s) {
    p.stage_memory.push_back(st[size_t(s)].memory.total());
    p.rank_memory[size_t(s % l.pp)] += st[size_t(s)].memory.total();
    p.stage_recompute.push_back(st[size_t(s)].memory.recompute);
  }
  return p;
}


}  // namespace

std::string Layout::str() const {
  std::string s = "dp " + std::to_string(dp) + ", pp " + std::to_string(pp) + ", tp " +
                  std::to_string(tp) + ", micro-batch " + std::to_string(micro_batch) + ", " +
                  schedule;
  if (virtual_stages > 1) s += " x" + std::to_string(virtual_stages);
  s += ", recompute " + recompute;
  if (zero1) s += ", zero1";
  return s;
}

config::Config with_layout(const config::Config& c, const Layout& l) {
  config::Config out = c;
  config::ParallelConfig& p = out.parallel;
  p.dp = l.dp, p.pp = l.pp, p.tp = l.tp;
  p.schedule = l.schedule, p.virtual_stages = l.virtual_stages;
  p.recompute = l.recompute, p.zero1 = l.zero1;
  out.train.micro_batch = l.micro_batch;
  p.micro_batches = 0;  // the micro-batch size says it
  p.auto_keys.clear();
  return out;
}

LayoutSearch search_layouts(const config::Config& c, int64_t world, int64_t devices_per_node) {
  const auto start = std::chrono::steady_clock::now();
  LayoutSearch s;
  s.world = world;
  partition::Hardware hw;
  try {
    hw = partition::load_hardware(partition::find_hardware(c.parallel.hardware));
  } catch (const partition::HardwareError& e) {
    throw SetupError(c.path + ": key 'parallel.hardware': " + e.what());
  }
  s.devices_per_node = devices_per_node > 0 ? devices_per_node : hw.devices_per_node;
  if (world < 1) throw SetupError("a job needs at least one rank, got " + std::to_string(world));
  if (world > partition::kMaxRanks)
    throw SetupError("a job of " + std::to_string(world) + " ranks: the layout search plans up "
                     "to " + std::to_string(partition::kMaxRanks) + " ranks");
  if (!is_auto(c, "parallel.tp") && c.parallel.tp > s.devices_per_node)
    throw SetupError(c.path + ": key 'parallel.tp': tp " + std::to_string(c.parallel.tp) +
                     " spans nodes of " + std::to_string(s.devices_per_node) + " devices on '" +
                     hw.name + "' (tensor parallelism all-reduces every layer: keep it within a "
                     "node, tp <= " + std::to_string(s.devices_per_node) +
                     ", or give nodes of more devices with --gpus-per-node)");
  std::vector<Layout> layouts = enumerate(c, world, s.devices_per_node);
  s.candidates = int64_t(layouts.size());
  if (layouts.empty())
    throw SetupError(c.path + ": no layout of " + std::to_string(world) + " rank" +
                     (world == 1 ? "" : "s") + " suits the fixed keys (dp x pp x tp must be " +
                     std::to_string(world) + ", train.batch " + std::to_string(c.train.batch) +
                     " divisible by dp into at most " + std::to_string(kMaxMicroBatches) +
                     " micro-batches a replica, tp dividing the " +
                     (c.model.onnx.empty() ? std::to_string(c.model.heads) : "network's") +
                     " heads within a node of " + std::to_string(s.devices_per_node) + ")");

  // Layouts that differ only in ZeRO-1 form one group (ZeRO-1 saves memory and optimizer time
  // and exposes its gradient exchange: either may win); each variant that fits is costed and
  // the group's fastest is ranked.
  const ModelFacts facts = searched_facts(c, layouts);
  const double flops_per_step = step_flops(c, facts);
  const partition::Precision precision = partition::parse_precision(c.train.precision);
  // No rank computes faster than its peak at the best efficiency any of its kernels reaches.
  partition::Hardware node_hw = hw;
  node_hw.devices_per_node = s.devices_per_node;
  // A CPU rank's share of its node's cores, over the step.
  const partition::Hardware rank_hw = node_hw.for_world(world);
  const double sustained = rank_hw.peak(precision) *
                           node_hw.all_busy_share(world) *
                           std::max(hw.gemm.efficiency, hw.compute_efficiency);
  const double limit = rank_hw.usable_memory();
  struct Group {
    std::vector<Layout> variants;  // cheapest technique first
    double bound = 0;              // no variant's step can be shorter
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> group_of;
  double closest_need = 0;  // the least memory any skipped or refused layout asked for
  Layout closest;
  auto note_need = [&](double need, const Layout& l) {
    if (closest_need == 0 || need < closest_need) closest_need = need, closest = l;
  };
  for (const Layout& l : layouts) {
    // Memory no split can get under (weights, gradients, optimizer state): not partitioned.
    partition::MemoryOptions mem;
    mem.precision = precision, mem.dp = l.dp, mem.zero1 = l.zero1;
    const config::Config lc = with_layout(c, l);
    mem.shared_update = replicas_share_update(lc, node_hw);
    mem.dp_window = replicas_sum_in_shared_memory(lc, node_hw);
    const partition::PerParameter per = partition::bytes_per_parameter(mem);
    const double static_bytes = double(facts.parameters) / double(l.tp * l.pp) *
                                (per.weight + per.grad + per.optimizer + per.shared);
    if (static_bytes > limit) {
      note_need(static_bytes, l);
      continue;
    }
    Layout base = l;
    base.zero1 = is_auto(c, "parallel.zero1") ? false : l.zero1;
    auto [it, fresh] = group_of.emplace(base.str(), groups.size());
    if (fresh) {
      // Recomputation only adds to this (the refined bound below counts it where it must be).
      const double compute = flops_per_step / (double(world) * sustained);
      const int64_t m = config::model_micro_batches_per_replica(lc);
      groups.push_back({{}, compute * fill_factor(l, m)});
    }
    groups[it->second].variants.push_back(l);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) { return a.bound < b.bound; });

  // Traced once per micro-batch size, through the tensor-parallel pass and analysed once per tp.
  std::map<int64_t, graph::Model> traces;
  std::map<std::pair<int64_t, int64_t>, partition::PreparedGraph> prepared;
  // (micro-batch, tp) the tp pass refused, and its reason.
  std::map<std::pair<int64_t, int64_t>, std::string> unshardable;
  // One micro-batch's compute over the whole graph on one rank of the key's tp (collectives
  // left out): whatever the split, the pipeline's stages share it.
  struct Work {
    double busy = 0, forward = 0;  // seconds: forward + backward, and forward alone
  };
  std::map<std::pair<int64_t, int64_t>, Work> work_per_micro_batch;
  auto graph_key = [&](const Layout& l) {
    return std::make_pair(config::model_micro_batch_size(with_layout(c, l)), l.tp);
  };
  // Traces and prepares what a group needs (not thread-safe: done before a wave starts).
  auto get_ready = [&](const Group& g) {
    for (const Layout& l : g.variants) {
      const auto key = graph_key(l);
      if (prepared.count(key) || unshardable.count(key)) continue;
      auto trace = traces.find(key.first);
      if (trace == traces.end()) {
        try {
          trace = traces.emplace(key.first, model_graph(c, key.first)).first;
        } catch (const SetupError& e) {
          // An imported export of fixed shapes takes one micro-batch size.
          if (c.model.onnx.empty()) throw;
          unshardable.emplace(key, e.what());
          continue;
        }
      }
      try {
        const auto at = prepared.emplace(key, partition::prepare_graph(trace->second, l.tp)).first;
        const partition::CostModel cost(node_hw, precision, {world / l.tp, 1, l.tp});
        const partition::GraphFacts& f = at->second.facts;
        Work w;
        for (size_t n = 0; n < f.nodes.size(); ++n) {
          const partition::NodeTime t = cost.node_time(f, int(n));
          w.forward += t.fwd - t.fwd_comm;
          w.busy += t.fwd - t.fwd_comm + t.bwd - t.bwd_comm;
        }
        work_per_micro_batch[key] = w;
      } catch (const Error& e) {
        unshardable.emplace(key, e.what());  // this tp cannot split the graph: no variant can
      }
    }
  };
  // A tighter bound than the group's, once its graph is prepared, on the slowest stage's time
  // T per micro-batch (communication left out), stretched by the pipeline's fill. With B the
  // graph's work and F its forward: T >= B / pp. When every stage that can recomputes (full,
  // ratio) and the pipeline holds several micro-batches, all stages but the last add their
  // forward again; the last stage's forward is at most T, so pp T >= B + F - T,
  // T >= (B + F) / (pp + 1). (Recomputation "memory" may leave every stage without it.)
  auto refined_bound = [&](const Group& g) {
    const Layout& l = g.variants.front();
    const auto it = work_per_micro_batch.find(graph_key(l));
    if (it == work_per_micro_batch.end()) return g.bound;
    const Work& w = it->second;
    const int64_t m = config::model_micro_batches_per_replica(with_layout(c, l));
    const double pp = double(l.pp);
    const double fill = fill_factor(l, m);
    double bound = w.busy / pp * double(m) * fill;
    // The shifted schedule moves recomputation into the drain's idle time: no fill on top.
    if ((l.recompute == "full" || l.recompute == "ratio") && m > 1)
      bound = std::max(bound, (w.busy + w.forward) / (pp + 1) * double(m) *
                                  (l.schedule == "shifted" ? 1.0 : fill));
    return std::max(g.bound, bound);
  };
  const graph::Model untraced;
  // A group's fastest variant that fits, partitioned and simulated (read-only on shared state).
  struct Outcome {
    std::optional<Ranked> ranked;
    int64_t costed = 0;
    std::vector<std::pair<double, Layout>> needs;  // memory the refused variants asked for
    std::string refusal;  // why the group's graph cannot be split so (memory aside)
    Layout refused;
  };
  auto evaluate = [&](const Group& g) {
    Outcome out;
    for (const Layout& l : g.variants) {
      const auto key = graph_key(l);
      if (const auto u = unshardable.find(key); u != unshardable.end()) {
        out.refusal = u->second, out.refused = l;
        break;
      }
      const config::Config lc = with_layout(c, l);
      ++out.costed;
      // The request alone: the graph comes prepared (a copy of the trace for each candidate
      // would cost more than its split).
      PartitionInput in = partition_input(lc, &untraced, s.devices_per_node);
      in.request.estimates_only = true;
      partition::Result r;
      try {
        r = partition::run_partition(prepared.at(key), in.request);
      } catch (const partition::NoFit& e) {
        out.needs.emplace_back(e.needed, l);
        continue;  // the other variant may make room
      } catch (const Error& e) {
        // A split this graph cannot take (fewer nodes than stages): no variant can.
        out.refusal = e.what(), out.refused = l;
        break;
      }
      // Shifted differs from 1F1B only where a stage recomputes: without, it is its twin.
      const auto recomputes = [](const partition::StageEstimate& e) { return e.memory.recompute; };
      if (l.schedule == "shifted" && is_auto(c, "parallel.schedule") &&
          std::none_of(r.ours.stages.begin(), r.ours.stages.end(), recomputes))
        continue;
      Ranked ranked{l, predict(lc, l, in.request, r, facts)};
      if (!out.ranked || ranked.predicted.step_seconds < out.ranked->predicted.step_seconds)
        out.ranked = std::move(ranked);
    }
    return out;
  };
  // Waves of groups, one a thread, in bound order; their outcomes merged in that order, so the
  // ranking does not depend on the thread count or timing.
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::string refusal;  // the first group's (in bound order) that could not be split
  Layout refused;
  auto pruned = [&](const Group& g) {
    return s.ranked.size() >= kShown && g.bound >= s.ranked[kShown - 1].predicted.step_seconds;
  };
  for (size_t at = 0; at < groups.size() && !pruned(groups[at]);) {
    const size_t end = std::min(groups.size(), at + threads);
    for (size_t k = at; k < end; ++k) get_ready(groups[k]);
    // Groups whose refined bound cannot beat the fifth best so far are not costed: they could
    // not enter the five shown whatever the rest of this wave gives (the ranking stays the
    // same for any thread count).
    std::vector<bool> skip(end - at, false);
    for (size_t k = at; k < end; ++k)
      skip[k - at] = s.ranked.size() >= kShown &&
                     refined_bound(groups[k]) >= s.ranked[kShown - 1].predicted.step_seconds;
    std::vector<Outcome> outcomes(end - at);
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> errors(end - at);
    for (size_t k = at; k < end; ++k)
      pool.emplace_back([&, k] {
        try {
          if (!skip[k - at]) outcomes[k - at] = evaluate(groups[k]);
        } catch (...) {
          errors[k - at] = std::current_exception();
        }
      });
    for (std::thread& t : pool) t.join();
    for (size_t k = 0; k < outcomes.size(); ++k) {
      if (errors[k]) std::rethrow_exception(errors[k]);
      s.costed += outcomes[k].costed;
      for (const auto& [need, l] : outcomes[k].needs) note_need(need, l);
      if (refusal.empty()) refusal = outcomes[k].refusal, refused = outcomes[k].refused;
      if (!outcomes[k].ranked) continue;
      auto pos = std::upper_bound(s.ranked.begin(), s.ranked.end(), *outcomes[k].ranked,
                                  [](const Ranked& x, const Ranked& y) {
                                    return x.predicted.step_seconds < y.predicted.step_seconds;
                                  });
      s.ranked.insert(pos, *outcomes[k].ranked);
    }
    at = end;
  }
  if (s.ranked.empty()) {
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // No layout came near memory's limit: every one failed to split, say why.
    if (closest_need == 0)
      throw SetupError(c.path + ": no layout of " + std::to_string(world) + " rank" +
                       (world == 1 ? "" : "s") + " can split the model: " +
                       (refusal.empty() ? "none was costed" : refused.str() + ": " + refusal));
    // Memory per device scales about as 1 / (pp * tp): that many times the ranks gives room.
    const double factor = std::ceil(closest_need / limit);
    const int64_t more = int64_t(factor) * world;
    using partition::memory_text;
    throw SetupError(c.path + ": no layout of " + std::to_string(world) + " rank" +
                     (world == 1 ? "" : "s") + " fits '" + hw.name + "' (" +
                     memory_text(double(rank_hw.memory_bytes)) + " a device): the closest (" +
                     closest.str() + ") needs " + memory_text(closest_need) +
                     " a device; try about " + std::to_string(more) +
                     " ranks, or a device with more memory (a plan fills " + memory_text(limit) +
                     " of it: the rest is kept for what the memory model does not count)");
  }
  // The winner's plan as the run makes it, from the graph prepared for it (it fits: its split
  // was costed with the same request), the programs of its first data-parallel replica only.
  s.chosen = with_layout(c, s.ranked.front().layout);
  s.input = partition_input(s.chosen, &traces.at(config::model_micro_batch_size(s.chosen)),
                            s.devices_per_node);
  s.input.request.first_replica_only = true;
  s.result = partition::run_partition(prepared.at(graph_key(s.ranked.front().layout)),
                                      s.input.request);
  s.result.simulated_step_seconds = s.ranked.front().predicted.step_seconds;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

std::string search_table(const LayoutSearch& s) {
  std::ostringstream os;
  os << "layout search: " << s.world << " rank" << (s.world == 1 ? "" : "s") << ", "
     << s.devices_per_node << " a node: " << s.candidates << " layouts, " << s.costed
     << " partitioned and simulated, " << s.ranked.size() << " fit; "
     << fmt("%.2f s", s.seconds) << "\n";
  os << "   #  step s     tokens/s  TFLOP/s/dev   MFU  bubble  dp exposed    max mem  layout\n";
  for (size_t i = 0; i < std::min(kShown, s.ranked.size()); ++i) {
    const Prediction& p = s.ranked[i].predicted;
    const double mem = *std::max_element(p.rank_memory.begin(), p.rank_memory.end());
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %2zu  %7.3f  %11.0f  %11.2f  %4.0f%%  %5.0f%%  %8.1f ms  %9s  ", i + 1,
                  p.step_seconds, p.tokens_per_s, p.tflops_per_device, 100 * p.mfu,
                  100 * p.bubble, 1e3 * p.exposed_dp_seconds,
                  partition::memory_text(mem).c_str());
    os << line << s.ranked[i].layout.str() << "\n";
  }
  os << "chosen: " << s.ranked.front().layout.str() << "\n";
  return os.str();
}

std::string search_json(const LayoutSearch& s) {
  // The layout, with which model stages recompute under it (the last stage of a 1F1B pipeline
  // holds one micro-batch and never does).
  auto layout = [](const Ranked& r) {
    const Layout& l = r.layout;
    std::ostringstream o;
    o << "{\"dp\": " << l.dp << ", \"pp\": " << l.pp << ", \"tp\": " << l.tp
      << ", \"micro_batch\": " << l.micro_batch << ", \"schedule\": \"" << l.schedule
      << "\", \"virtual_stages\": " << l.virtual_stages << ", \"recompute\": \"" << l.recompute
      << "\", \"recompute_stages\": [";
    for (size_t i = 0; i < r.predicted.stage_recompute.size(); ++i)
      o << (i ? ", " : "") << (r.predicted.stage_recompute[i] ? "true" : "false");
    o << "], \"zero1\": " << (l.zero1 ? "true" : "false") << "}";
    return o.str();
  };
  auto predicted = [](const Prediction& p) {
    std::ostringstream o;
    o << "{\"step_seconds\": " << fmt("%.6g", p.step_seconds)
      << ", \"tokens_per_s\": " << fmt("%.6g", p.tokens_per_s)
      << ", \"tflops_per_gpu\": " << fmt("%.6g", p.tflops_per_device)
      << ", \"mfu\": " << fmt("%.4f", p.mfu) << ", \"bubble\": " << fmt("%.4f", p.bubble)
      << ", \"exposed_dp_seconds\": " << fmt("%.6g", p.exposed_dp_seconds)
      << ", \"optimizer_seconds\": " << fmt("%.6g", p.optimizer_seconds)
      << ", \"memory_bytes\": [";
    for (size_t i = 0; i < p.stage_memory.size(); ++i)
      o << (i ? ", " : "") << fmt("%.0f", p.stage_memory[i]);
    o << "], \"rank_memory_bytes\": [";
    for (size_t i = 0; i < p.rank_memory.size(); ++i)
      o << (i ? ", " : "") << fmt("%.0f", p.rank_memory[i]);
    o << "]}";
    return o.str();
  };
  std::ostringstream os;
  os << "\"search\": {\"world\": " << s.world << ", \"devices_per_node\": " << s.devices_per_node
     << ", \"candidates\": " << s.candidates << ", \"costed\": " << s.costed
     << ", \"fit\": " << s.ranked.size() << ", \"seconds\": " << fmt("%.3f", s.seconds)
     << ", \"best\": [";
  for (size_t i = 0; i < std::min(kShown, s.ranked.size()); ++i)
    os << (i ? ", " : "") << "{\"layout\": " << layout(s.ranked[i])
       << ", \"predicted\": " << predicted(s.ranked[i].predicted) << "}";
  os << "]},\n\"layout\": " << layout(s.ranked.front())
     << ",\n\"predicted\": " << predicted(s.ranked.front().predicted);
  return os.str();
}

config::Config resolve_layout(const config::Config& c, comm::Communicator& world) {
  if (c.parallel.auto_keys.empty()) return c;
  // Rank 0's answer as text: 'L' and the layout's fields, or 'E' and the error.
  std::string answer;
  if (world.rank() == 0) {
    try {
      const LayoutSearch s = search_layouts(c, world.size(), 0);
      std::fputs(search_table(s).c_str(), stdout);
      std::fflush(stdout);
      const Layout& l = s.ranked.front().layout;
      std::ostringstream o;
      o << "L " << l.dp << " " << l.pp << " " << l.tp << " " << l.micro_batch << " "
        << l.virtual_stages << " " << l.schedule << " " << l.recompute << " " << int(l.zero1);
      answer = o.str();
    } catch (const std::exception& e) {
      answer = std::string("E ") + e.what();
    }
  }
  answer = runtime::broadcast_bytes(world, answer, 0);
  if (answer.rfind("E ", 0) == 0) throw SetupError(answer.substr(2));
  std::istringstream in(answer.substr(2));
  Layout l;
  int zero1 = 0;
  in >> l.dp >> l.pp >> l.tp >> l.micro_batch >> l.virtual_stages >> l.schedule >> l.recompute >>
      zero1;
  l.zero1 = zero1 != 0;
  MERAK_CHECK(!in.fail(), "the layout from rank 0 does not parse: ", answer);
  return with_layout(c, l);
}

}  // namespace merak::train
