// Pipeline schedules compared in simulation with costs measured on this machine: one GPT block's
// forward and backward are timed (recomputation = a forward), its saved activations measured
// with the allocator's counters, and a pipeline of `--layers` such blocks over `--stages` ranks
// simulated. Under a device memory cap that forces recomputation it compares
//   1F1B with full recomputation (every stage checkpoints every block: Megatron/DeepSpeed's way)
//   against Merak's shifted critical path with stage-aware recomputation (each stage recomputes
//   the fewest whole blocks that fit its 1F1B in-flight activations under the cap),
// for a sweep of caps, and prints GPipe's and 1F1B's bubble fractions without recomputation.
//
//   bazel run //tools/bench:bench_schedules -- [--stages 8] [--micro-batches 32] [--layers 48]
//       [--hidden 512] [--heads 8] [--seq 256] [--batch 2] [--threads 1] [--cap-mb N]
//       [--trace FILE.json]
//
// Memory model per stage (bytes, fp32): static = 16 per parameter (weights, gradients, AdamW's
// two moments); per in-flight micro-batch each block keeps its activations, or only its input
// when recomputed. The cap is given as "static + the activations of N micro-batches" (--cap-mb,
// by default stages / 2, what the middle stage holds under 1F1B; the sweep shows the others),
// which 1F1B's first stages (holding up to S - s micro-batches) exceed.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/core/allocator.h"
#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/nn/transformer.h"
#include "merak/runtime/schedule.h"
#include "merak/runtime/schedule_recompute.h"
#include "merak/runtime/simulator.h"
#include "merak/runtime/simulator_trace.h"
#include "merak/core/median.h"

namespace {

using merak::Tensor;
using namespace merak::runtime;
using clock_type = std::chrono::steady_clock;

struct Options {
  int stages = 8, micro_batches = 32, layers = 48;
  int64_t hidden = 512, heads = 8, seq = 256, batch = 2;
  int threads = 1, repeats = 5;
  double cap_mb = 0;  // 0 = stages / 2: what the middle stage's 1F1B holds
  std::string trace;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--stages N] [--micro-batches N] [--layers N] [--hidden N] [--heads N]\n"
               "          [--seq N] [--batch N] [--threads N] [--repeats N] [--cap-mb X]\n"
               "          [--trace FILE.json]\n",
               argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const char* v = argv[++i];
    if (arg == "--stages") o.stages = std::atoi(v);
    else if (arg == "--micro-batches") o.micro_batches = std::atoi(v);
    else if (arg == "--layers") o.layers = std::atoi(v);
    else if (arg == "--hidden") o.hidden = std::atoll(v);
    else if (arg == "--heads") o.heads = std::atoll(v);
    else if (arg == "--seq") o.seq = std::atoll(v);
    else if (arg == "--batch") o.batch = std::atoll(v);
    else if (arg == "--threads") o.threads = std::atoi(v);
    else if (arg == "--repeats") o.repeats = std::atoi(v);
    else if (arg == "--cap-mb") o.cap_mb = std::atof(v);
    else if (arg == "--trace") o.trace = v;
    else usage(argv[0]);
  }
  if (o.stages < 2 || o.micro_batches < 1 || o.layers % o.stages != 0 || o.repeats < 1 ||
      o.threads < 1 || o.cap_mb < 0) {
    std::fprintf(stderr, "error: need --stages >= 2, --layers a multiple of --stages, "
                         "--micro-batches, --repeats, --threads >= 1, --cap-mb >= 0\n");
    std::exit(2);
  }
  if (o.cap_mb == 0) o.cap_mb = o.stages / 2;
  return o;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

using merak::median;

// One block, measured: seconds per micro-batch and bytes it saves for backward.
struct BlockCost {
  double forward = 0, backward = 0;
  double activation_bytes = 0, input_bytes = 0, parameters = 0;
};

BlockCost measure_block(const Options& o) {
  merak::nn::BlockOptions bo;
  bo.hidden = o.hidden;
  bo.heads = o.heads;
  bo.ffn_hidden = 4 * o.hidden;
  merak::nn::PreLnBlock block(bo);
  block.materialize(1);
  const merak::Shape shape{o.batch, o.seq, o.hidden};
  Tensor x = Tensor::empty(shape);
  merak::fill_normal(x, 7, 0, 1);
  x.set_requires_grad(true);
  Tensor dy = Tensor::empty(shape);
  merak::fill_normal(dy, 8, 0, 1);

  BlockCost c;
  c.parameters = static_cast<double>(block.num_parameters());
  c.input_bytes = 4.0 * o.batch * o.seq * o.hidden;
  std::vector<double> fwd, bwd;
  for (int i = 0; i < o.repeats + 1; ++i) {  // the first run warms caches and the allocator
    const int64_t live = merak::cpu_memory_stats().live_bytes;
    auto t0 = clock_type::now();
    Tensor y = block.forward(x);
    const double f = seconds_since(t0);
    // What the forward left allocated: its output and everything saved for backward.
    c.activation_bytes = static_cast<double>(merak::cpu_memory_stats().live_bytes - live);
    t0 = clock_type::now();
    merak::autograd::backward({y}, {dy});
    const double b = seconds_since(t0);
    if (i > 0) {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  c.forward = median(fwd);
  c.backward = median(bwd);
  return c;
}

// A send between ranks on one machine: two copies of the boundary tensor (into the transport's
// buffer and out of it), timed with memcpy.
double measure_p2p(double bytes, int repeats) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(a.size());
  std::vector<double> t;
  for (int i = 0; i < repeats + 1; ++i) {
    auto t0 = clock_type::now();
    std::memcpy(b.data(), a.data(), a.size());
    std::memcpy(a.data(), b.data(), a.size());
    if (i > 0) t.push_back(seconds_since(t0));
  }
  return median(t);
}

struct Pipeline {
  const Options& o;
  BlockCost block;
  double p2p;
  int per_stage() const { return o.layers / o.stages; }

  // Costs with stage s recomputing a share ratio[s] of its blocks.
  SimCosts costs(const std::vector<double>& ratio) const {
    SimCosts c = SimCosts::uniform(o.stages, per_stage() * block.forward,
                                   per_stage() * block.backward, 0, p2p);
    for (int s = 0; s < o.stages && !ratio.empty(); ++s) c.recompute[s] = ratio[s] * c.forward[s];
    return c;
  }
  StageMemory memory(int in_flight) const {
    StageMemory m;
    m.static_bytes = 16.0 * block.parameters * per_stage();
    m.activation_bytes = block.activation_bytes * per_stage();
    m.checkpoint_bytes = block.input_bytes * per_stage();
    m.in_flight = in_flight;
    return m;
  }
  SimResult run(ScheduleKind kind, const std::vector<double>& ratio) const {
    ScheduleOptions so;
    so.recompute = ratio;
    const SimResult r = simulate(make_schedules(kind, o.stages, o.micro_batches, so), costs(ratio));
    if (!r.ok()) {
      std::fprintf(stderr, "error: %s schedule failed in simulation:\n%s", to_string(kind).c_str(),
                   r.report().c_str());
      std::exit(1);
    }
    return r;
  }
};

std::string ratios(const std::vector<double>& r) {
  std::string s;
  char buf[16];
  for (double x : r) {
    std::snprintf(buf, sizeof buf, "%s%.2f", s.empty() ? "" : " ", x);
    s += buf;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  merak::set_num_threads(o.threads);
  std::printf("GPT block: hidden %lld, heads %lld, seq %lld, micro-batch %lld, %d thread(s)\n",
              (long long)o.hidden, (long long)o.heads, (long long)o.seq, (long long)o.batch,
              o.threads);
  Pipeline pl{o, measure_block(o), 0};
  pl.p2p = measure_p2p(pl.block.input_bytes, o.repeats);
  const BlockCost& b = pl.block;
  std::printf("measured per block: forward %.2f ms, backward %.2f ms (recompute = forward), "
              "activations %.1f MiB, input %.2f MiB; p2p %.3f ms\n",
              b.forward * 1e3, b.backward * 1e3, b.activation_bytes / (1 << 20),
              b.input_bytes / (1 << 20), pl.p2p * 1e3);
  std::printf("pipeline: %d layers over %d stages (%d per stage), %d micro-batches\n\n", o.layers,
              o.stages, pl.per_stage(), o.micro_batches);

  // Bubbles without recomputation.
  const SimResult gp = pl.run(ScheduleKind::GPipe, {});
  const SimResult ofob = pl.run(ScheduleKind::OneFOneB, {});
  const double formula = double(o.stages - 1) / (o.micro_batches + o.stages - 1);
  std::printf("no recomputation: GPipe step %.1f ms, bubble %.3f (holds %d micro-batches); "
              "1F1B step %.1f ms, bubble %.3f (holds up to %d); (S-1)/(M+S-1) = %.3f\n",
              gp.step_time * 1e3, gp.bubble, o.micro_batches, ofob.step_time * 1e3, ofob.bubble,
              std::min(o.stages, o.micro_batches), formula);
  if (o.micro_batches % o.stages == 0 && pl.per_stage() % 2 == 0) {
    // Interleaved 1F1B with two chunks of half the stage's blocks on every rank.
    ScheduleOptions so;
    so.virtual_stages = 2;
    SimCosts c = SimCosts::uniform(2 * o.stages, pl.per_stage() / 2 * b.forward,
                                   pl.per_stage() / 2 * b.backward, 0, pl.p2p);
    const SimResult il = simulate(
        make_schedules(ScheduleKind::Interleaved1F1B, o.stages, o.micro_batches, so), c);
    if (il.ok())
      std::printf("interleaved 1F1B (2 chunks per rank): step %.1f ms, bubble %.3f\n",
                  il.step_time * 1e3, il.bubble);
  }
  std::printf("\n");

  // In-flight micro-batches per stage, from the programs themselves (1F1B and shifted agree).
  std::vector<int> in_flight;
  for (const Program& p : make_schedules(ScheduleKind::ShiftedCriticalPath, o.stages,
                                         o.micro_batches))
    in_flight.push_back(peak_in_flight(p));

  const std::vector<double> full(o.stages, 1.0);
  const SimResult base = pl.run(ScheduleKind::OneFOneB, full);
  std::printf("%-7s %-44s %10s %10s %8s\n", "cap", "stage-aware ratios (memory-driven)",
              "1F1B+full", "shifted+SA", "speedup");
  std::vector<double> caps;
  for (double c = 1; c < std::min(o.stages, o.micro_batches); c += 1) caps.push_back(c);
  if (std::find(caps.begin(), caps.end(), o.cap_mb) == caps.end()) caps.push_back(o.cap_mb);
  std::sort(caps.begin(), caps.end());
  SimResult headline;
  std::vector<double> headline_ratio;
  for (double cap_mb : caps) {
    const StageMemory unit = pl.memory(1);
    const double cap = unit.static_bytes + cap_mb * unit.activation_bytes;
    std::vector<StageMemory> mem;
    for (int n : in_flight) mem.push_back(pl.memory(n));
    std::vector<double> ratio;
    try {
      ratio = memory_driven_recompute(mem, cap, pl.per_stage());
    } catch (const std::exception&) {
      std::printf("%-7.1f does not fit even with full recomputation\n", cap_mb);
      continue;
    }
    const SimResult ours = pl.run(ScheduleKind::ShiftedCriticalPath, ratio);
    std::printf("%-7.1f %-44s %8.1fms %8.1fms %7.3fx%s\n", cap_mb, ratios(ratio).c_str(),
                base.step_time * 1e3, ours.step_time * 1e3, base.step_time / ours.step_time,
                cap_mb == o.cap_mb ? "  <-" : "");
    if (cap_mb == o.cap_mb) {
      headline = ours;
      headline_ratio = ratio;
    }
  }
  std::printf("(cap = static + the activations of N micro-batches, per stage)\n\n");
  if (headline_ratio.empty()) return 0;

  // The headline, with the parts separated: what shifting alone and the stage-aware ratios alone
  // give, and Merak's ratio rule seeded with stage 0's memory-driven ratio.
  const SimResult shift_full = pl.run(ScheduleKind::ShiftedCriticalPath, full);
  const SimResult ofob_aware = pl.run(ScheduleKind::OneFOneB, headline_ratio);
  std::vector<double> rule = ratio_rule_recompute(o.stages, headline_ratio[0]);
  bool rule_fits = true;
  for (int s = 0; s < o.stages; ++s) {
    rule[s] = std::max(0.0, std::ceil(rule[s] * pl.per_stage() - 1e-9) / pl.per_stage());
    const StageMemory unit = pl.memory(1);
    rule_fits &= peak_memory(pl.memory(in_flight[s]), rule[s]) <=
                 unit.static_bytes + o.cap_mb * unit.activation_bytes;
  }
  const SimResult shift_rule = pl.run(ScheduleKind::ShiftedCriticalPath, rule);
  std::printf("at cap %.1f micro-batches:\n", o.cap_mb);
  std::printf("  1F1B + full recomputation                 %8.1f ms  bubble %.3f  critical-path "
              "recompute %.1f ms\n",
              base.step_time * 1e3, base.bubble, base.critical_time(Op::Recompute) * 1e3);
  std::printf("  shifted + full recomputation              %8.1f ms  (%.3fx)\n",
              shift_full.step_time * 1e3, base.step_time / shift_full.step_time);
  std::printf("  1F1B + stage-aware recomputation          %8.1f ms  (%.3fx)\n",
              ofob_aware.step_time * 1e3, base.step_time / ofob_aware.step_time);
  std::printf("  shifted + Merak's ratio rule              %8.1f ms  (%.3fx; ratios %s, %s the cap)\n",
              shift_rule.step_time * 1e3, base.step_time / shift_rule.step_time,
              ratios(rule).c_str(), rule_fits ? "within" : "EXCEEDS");
  std::printf("  shifted + stage-aware recomputation       %8.1f ms  bubble %.3f  critical-path "
              "recompute %.1f ms\n",
              headline.step_time * 1e3, headline.bubble,
              headline.critical_time(Op::Recompute) * 1e3);
  std::printf("speedup (shifted + stage-aware vs 1F1B + full recomputation): %.3fx "
              "(target >= 1.15x)\n",
              base.step_time / headline.step_time);
  if (!o.trace.empty()) {
    std::ofstream f(o.trace);
    f << chrome_trace_json(headline);
    std::printf("trace of the shifted + stage-aware step: %s\n", o.trace.c_str());
  }
  return 0;
}
