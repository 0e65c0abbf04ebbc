// The central correctness check of the 3D engine: a model trained for some steps under a
// (dp, pp, tp) layout gives, step by step, the loss of the single process (the (1, 1, 1) layout
// of the same trainer, run without MPI) within 1e-5 relative, for every schedule with
// recomputation on and off.
//
//   engine_equality --family gpt --reference FILE        one process: the trainer's losses
//                                                         (checked against the same at half the
//                                                         micro-batch: within 1e-6)
//   mpirun -np N engine_equality --family gpt --layout DP,PP,TP --expect FILE
//
// The second form runs every schedule x recompute combination in one launch (so CI pays for one
// MPI start-up per layout) and prints a table row per combination on rank 0; it exits 1 when any
// differs by more than the tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/node_all_reduce.h"
#include "merak/config/config.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine.h"
#include "merak/runtime/engine_comm.h"
#include "merak/train/plan.h"
#include "merak/train/trainer.h"

namespace {

using namespace merak;

constexpr double kTolerance = 1e-5;

// Small enough for CI (2 cores, 8 ranks): two layers, so pp 2 puts one on each stage; four
// micro-batches of two sequences, so dp 2 x pp 2 still pipelines two a replica. The early steps
// clip (norms above 1), so the global norm across ranks is exercised too.
std::string config_text(const std::string& family, const std::string& dropout) {
  std::string model = family == "bert"
                          ? "  family: bert\n  vocab: 260\n  ln_eps: 1.0e-12\n"
                          : "  family: gpt\n  vocab: 256\n";
  return "model:\n" + model +
         "  layers: 2\n  hidden: 64\n  heads: 4\n  max_seq: 16\n  dropout: " + dropout + "\n"
         "data:\n  source: generated\n  generated_tokens: 65536\n"
         "optimizer:\n  lr: 2.0e-3\n  beta1: 0.9\n  beta2: 0.95\n  weight_decay: 0.1\n"
         "  grad_clip: 1.0\n"
         "schedule:\n  warmup_steps: 4\n  decay: cosine\n  min_lr: 1.0e-4\n"
         "train:\n  steps: 20\n  batch: 8\n  micro_batch: 2\n  seq_len: 16\n  threads: 1\n"
         "  seed: 7\n";
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "engine_equality: %s\nusage: engine_equality --family gpt|bert "
               "[--dropout P] (--reference FILE | --layout DP,PP,TP --expect FILE)\n",
               problem.c_str());
  std::exit(2);
}

// The single process's per-step loss and norm.
std::vector<train::StepStats> single_process(const config::Config& cfg) {
  const std::unique_ptr<comm::Grid> grid = comm::Grid::single_process();
  train::Trainer trainer(cfg, *grid);
  std::vector<train::StepStats> steps;
  for (int64_t i = 0; i < cfg.train.steps; ++i) steps.push_back(trainer.step());
  return steps;
}

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

// The reference, written to `out`. The micro-batch size changes nothing but rounding, dropout
// included (its masks are drawn by each sample's row in the global batch; BERT's masked-LM loss
// is the mean over the global batch's predicted tokens, not a mean of micro-batches' means):
// the run at half the micro-batch must agree within 1e-6. It is what the sub-pipelined mode
// (each micro-batch run as two halves) computes, so every layout compares with the reference.
int reference(const config::Config& cfg, const std::string& out) {
  config::Config half = cfg;
  half.train.micro_batch = cfg.train.micro_batch / 2;
  const std::vector<train::StepStats> whole = single_process(cfg), halves = single_process(half);
  std::ofstream f(out);
  double worst = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "%a %a\n", whole[i].loss, whole[i].grad_norm);
    f << line;
    worst = std::max({worst, rel(halves[i].loss, whole[i].loss),
                      rel(halves[i].grad_norm, whole[i].grad_norm)});
  }
  std::printf("%s%s at micro-batch %lld and %lld: worst relative difference %.2g\n",
              cfg.model.family.c_str(), cfg.model.dropout > 0 ? " with dropout" : "",
              (long long)cfg.train.micro_batch, (long long)half.train.micro_batch, worst);
  return (f.flush() ? 0 : 1) | (worst <= 1e-6 ? 0 : 1);
}

struct Expected {
  std::vector<double> loss, norm;
};

Expected read_expected(const std::string& path) {
  Expected e;
  std::ifstream f(path);
  std::string a, b;
  while (f >> a >> b) {
    e.loss.push_back(std::strtod(a.c_str(), nullptr));
    e.norm.push_back(std::strtod(b.c_str(), nullptr));
  }
  return e;
}

int layout_run(const config::Config& base, const std::string& layout, const Expected& want) {
  int dp = 0, pp = 0, tp = 0;
  if (std::sscanf(layout.c_str(), "%d,%d,%d", &dp, &pp, &tp) != 3) usage("bad --layout");
  // Through the config's validation, as merak_train would see the layout.
  config::Config cfg = config::parse(
      config::to_yaml(base), base.path,
      {"parallel.dp=" + std::to_string(dp), "parallel.pp=" + std::to_string(pp),
       "parallel.tp=" + std::to_string(tp),
       // Buckets of 64 KiB, so the data-parallel sums of this small model come in several
       // buckets and the early ones start during backward.
       "parallel.bucket_mb=0.0625"});
  const bool root = comm::world_rank() == 0;
  MERAK_CHECK(int64_t(want.loss.size()) == cfg.train.steps, "expected ", cfg.train.steps,
              " reference losses, read ", want.loss.size());
  const train::BatchSource source(cfg);

  // Every schedule with recomputation off and on; with replicas, 1F1B under ZeRO-1 too; with
  // tensor parallelism, the sub-pipelined mode with and without recomputation.
  struct Combo {
    const char* schedule;
    const char* recompute;
    bool zero1;
    bool subpipeline;
    int virtual_stages = 1;
    bool shared_memory = true;  // replicas' sums through shared memory (false: MPI messages)
    bool shared_params = true;  // ... and one parameter copy there (false: one a replica)
    bool tp_shared = true;      // tp all-reduces through shared memory (false: MPI messages)
  };
  std::vector<Combo> combos;
  for (const char* schedule : {"gpipe", "1f1b", "shifted"})
    for (const char* recompute : {"none", "full"})
      combos.push_back({schedule, recompute, false, false});
  // Interleaved: two model chunks a rank (the plan cut into 2 pp model stages); zero bubble:
  // backward split into activation and parameter gradients.
  if (pp > 1)
    for (const char* recompute : {"none", "full"}) {
      combos.push_back({"interleaved", recompute, false, false, 2});
      combos.push_back({"zb", recompute, false, false});
    }
  if (dp > 1) {
    combos.push_back({"1f1b", "full", true, false});
    // The replicas' sums through MPI messages too (shared memory is the default on one node).
    combos.push_back({"1f1b", "none", false, false, 1, false});
    combos.push_back({"1f1b", "full", true, false, 1, false});
    // Shared-memory sums read in place, but a parameter copy a replica; ZeRO-1's own exchange
    // through shared memory.
    combos.push_back({"1f1b", "none", false, false, 1, true, false});
    combos.push_back({"1f1b", "full", true, false, 1, true, false});
  }
  if (tp > 1) {
    combos.push_back({"1f1b", "none", false, true});
    combos.push_back({"shifted", "full", false, true});
    if (pp > 1) combos.push_back({"zb", "none", false, true});
    // The tp all-reduces through MPI messages too (shared memory is the default on one node),
    // waited for and posted.
    combos.push_back({"1f1b", "none", false, false, 1, true, true, false});
    combos.push_back({"1f1b", "full", false, true, 1, true, true, false});
  }
  if (dp > 1 && pp > 1) combos.push_back({"zb", "none", true, false});  // ZeRO-1
  bool ok = true;
  for (const Combo& combo : combos) {
    const char* schedule = combo.schedule;
    const char* recompute = combo.recompute;
    cfg.parallel.schedule = schedule;
    cfg.parallel.recompute = recompute;
    cfg.parallel.zero1 = combo.zero1;
    cfg.parallel.tp_subpipeline = combo.subpipeline;
    cfg.parallel.virtual_stages = combo.virtual_stages;
    cfg.parallel.dp_shared_memory = combo.shared_memory;
    cfg.parallel.dp_shared_params = combo.shared_params;
    cfg.parallel.tp_shared_memory = combo.tp_shared;
    // The grid as merak_train makes it: its tp transport is chosen when it is built.
    const std::unique_ptr<comm::Grid> made = train::make_grid(cfg);
    comm::Grid& grid = *made;
    const partition::Plan plan = train::shared_plan(grid.world(), cfg);
    const runtime::MicroBatchFn batches =
        train::micro_batch_source(source, config::model_micro_batch_size(cfg));
    runtime::Engine engine(grid, plan, train::engine_options(cfg, plan));
    double worst = 0, worst_norm = 0;
    int overlapped = 0;
    int64_t deferred = 0;
    for (int64_t i = 0; i < cfg.train.steps; ++i) {
      const double lr =
          optim::scheduled_lr(i, cfg.train.steps, cfg.optimizer.lr,
                              cfg.schedule.warmup_steps, cfg.schedule.decay, cfg.schedule.min_lr);
      const runtime::EngineStepResult r = engine.step(i, lr, batches);
      overlapped = r.overlapped_buckets;
      deferred += r.deferred_all_reduces;
      worst = std::max(worst, rel(r.loss, want.loss[size_t(i)]));
      worst_norm = std::max(worst_norm, rel(r.grad_norm, want.norm[size_t(i)]));
      if (!(rel(r.loss, want.loss[size_t(i)]) <= kTolerance) && root)
        std::printf("  step %lld: loss %.9g, single process %.9g\n", (long long)i + 1, r.loss,
                    want.loss[size_t(i)]);
    }
    // The plan decides who recomputes and the engine follows it: under "full" every model
    // stage holding more than one micro-batch at once (all of them under GPipe; all but the
    // last otherwise), nobody under "none". Counted in ranks: under interleaved "full" the last
    // rank's first chunk still recomputes.
    int recomputing = 0;
    for (double r : runtime::all_gather_doubles(grid.world(), {engine.recomputes() ? 1.0 : 0.0}))
      recomputing += int(r);
    const std::string sc = schedule;
    const int want_recomputing =
        std::string(recompute) == "none" || config::model_micro_batches_per_replica(cfg) < 2 ? 0
        : sc == "gpipe" || sc == "interleaved" ? dp * pp * tp
                                               : dp * (pp - 1) * tp;
    // Only the first stage reads tokens and only the last reads targets.
    bool reads_right = true;
    for (int k = 0; k < engine.chunks(); ++k) {
      const int model_stage = k * pp + grid.coord().pp, last = pp * engine.chunks() - 1;
      for (const std::string& in : engine.program(k).data_inputs()) {
        const bool target = in == "targets" || in == "mlm_targets" || in == "nsp_labels";
        if ((target && model_stage != last) || (in == "tokens" && model_stage != 0))
          reads_right = false;
      }
    }
    int wrong_readers = 0;
    for (double r : runtime::all_gather_doubles(grid.world(), {reads_right ? 0.0 : 1.0}))
      wrong_readers += int(r);
    if (wrong_readers > 0 && root)
      std::printf("  %d ranks read data inputs their stage should not\n", wrong_readers);
    // With replicas (and no ZeRO-1) every rank starts some bucket's all-reduce during backward.
    double fewest_overlapped = 1e9;
    for (double n : runtime::all_gather_doubles(grid.world(), {double(overlapped)}))
      fewest_overlapped = std::min(fewest_overlapped, n);
    // ZeRO-1's own exchange runs after backward; with shared parameters it is the buckets'.
    const bool own_exchange = combo.zero1 && !(combo.shared_memory && combo.shared_params);
    const bool overlaps = dp == 1 || own_exchange || fewest_overlapped >= 1;
    if (!overlaps && root)
      std::printf("  a rank started no gradient bucket during backward\n");
    // Sub-pipelined: every rank posted its tp all-reduces without waiting; otherwise none did.
    double fewest_deferred = 1e18, most_deferred = 0;
    for (double n : runtime::all_gather_doubles(grid.world(), {double(deferred)})) {
      fewest_deferred = std::min(fewest_deferred, n);
      most_deferred = std::max(most_deferred, n);
    }
    const bool deferring = combo.subpipeline ? fewest_deferred > 0 : most_deferred == 0;
    if (!deferring && root)
      std::printf("  deferred tp all-reduces per rank: %.0f to %.0f\n", fewest_deferred,
                  most_deferred);
    // The sums travel as asked: replicas of one machine share memory unless told not to.
    const std::string transport = engine.dp_transport();
    const bool shared = transport.find("over shared memory") != std::string::npos ||
                        transport.rfind("shared memory", 0) == 0;
    // ... and the parameters are held as asked (shared ones make ZeRO-1 too).
    const bool params_shared = engine.dp_parameters().rfind("one shared copy", 0) == 0;
    // ... and so do the tp all-reduces.
    const std::string tp_transport = engine.tp_transport();
    const bool tp_shared = tp_transport.rfind("shared memory", 0) == 0;
    // The memory reports count each member's share of the shared windows: the data-parallel
    // ones at least (dp + 1) / dp of the parameters' size (a slot of inputs a member and one
    // copy of the sums), 1 / dp more with the shared parameter copy; the tp one's slots at
    // least a micro-batch's activations each.
    int64_t param_bytes = 0;
    for (const auto& named : engine.parameters()) param_bytes += named.second.nbytes();
    const int64_t held = engine.shared_memory_bytes();
    const int64_t window_copies = dp + 1 + (params_shared ? 1 : 0);  // over dp members
    const int64_t activation_bytes = config::model_micro_batch_size(cfg) * cfg.train.seq_len *
                                     cfg.model.hidden * int64_t(sizeof(float));
    const int64_t least = (shared ? window_copies * param_bytes / dp : 0) +
                          (tp_shared ? comm::NodeAllReduce::kSlots * activation_bytes : 0);
    const bool counted = least > 0 ? held >= least : held == 0;
    bool memory_right = true;
    for (double wrong : runtime::all_gather_doubles(grid.world(), {counted ? 0.0 : 1.0}))
      memory_right = memory_right && wrong == 0;
    if (!memory_right && root)
      std::printf("  shared-memory bytes left out of the memory report (rank 0 holds %lld)\n",
                  (long long)held);
    const bool transport_right =
        (dp == 1 ? transport.empty()
                 : shared == combo.shared_memory &&
                       params_shared == (combo.shared_memory && combo.shared_params)) &&
        (tp == 1 ? tp_transport.empty() : tp_shared == combo.tp_shared);
    if (!transport_right && root)
      std::printf("  data-parallel sums went by '%s', parameters: '%s'; tp all-reduces: '%s'\n",
                  transport.c_str(), engine.dp_parameters().c_str(), tp_transport.c_str());
    const bool pass = worst <= kTolerance && transport_right && recomputing == want_recomputing &&
                      wrong_readers == 0 && overlaps && deferring && memory_right;
    ok = ok && pass;
    if (root)
      std::printf("%s%s (%d,%d,%d) | %-7s%s%s | recompute %-4s (%d of %d ranks) | %lld steps | "
                  "max rel loss diff %.2e | max rel norm diff %.2e | %d buckets overlapped | "
                  "%s\n",
                  cfg.model.family.c_str(), cfg.model.dropout > 0 ? " with dropout" : "", dp, pp,
                  tp, schedule, combo.zero1 ? " zero1" : combo.subpipeline ? " sub-pipelined tp" : "",
                  dp > 1 && !combo.shared_memory ? " (mpi)"
                  : dp > 1 && !combo.shared_params ? " (params a replica)"
                  : tp > 1 && !combo.tp_shared     ? " (tp mpi)"
                                                   : "",
                  recompute, recomputing, dp * pp * tp, (long long)cfg.train.steps, worst,
                  worst_norm, int(fewest_overlapped > 1e8 ? 0 : fewest_overlapped),
                  pass ? "ok" : "FAIL");
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string family = "gpt", ref, layout, expect, dropout = "0.0";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--family") family = value;
    else if (arg == "--reference") ref = value;
    else if (arg == "--layout") layout = value;
    else if (arg == "--expect") expect = value;
    else if (arg == "--dropout") dropout = value;
    else usage("unknown argument '" + arg + "'");
  }
  const config::Config cfg = config::parse(config_text(family, dropout), family + "-equality.yaml");
  try {
    if (!ref.empty()) return reference(cfg, ref);
    if (layout.empty() || expect.empty()) usage("give --reference, or --layout and --expect");
    const Expected want = read_expected(expect);
    comm::MpiSession mpi(&argc, &argv);
    try {
      return layout_run(cfg, layout, want);
    } catch (const std::exception& e) {
      comm::abort_job(std::string("engine_equality: ") + e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_equality: %s\n", e.what());
    return 1;
  }
}
