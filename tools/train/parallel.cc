#include "tools/train/parallel.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "merak/comm/grid.h"
#include "merak/core/allocator.h"
#include "merak/core/parallel.h"
#include "merak/graph/tracer.h"
#include "merak/optim/adamw.h"
#include "merak/partition/hardware.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/plan_builder.h"
#include "merak/runtime/engine_comm.h"
#include "merak/runtime/engine_replay.h"
#include "merak/runtime/schedule_recompute.h"
#include "merak/runtime/simulator_trace.h"
#include "tools/common/fma_peak.h"
#include "tools/train/progress.h"
#include "tools/train/trainer.h"

namespace merak::train {
namespace {

// Intra-op threads a rank when train.threads is 0 and MERAK_NUM_THREADS is unset: the ranks of
// a node share its cores rather than each taking all of them (8 ranks of 2 threads on 2 cores
// would run 16 threads), and a rank mpirun bound to fewer cores keeps to those.
int default_rank_threads() {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : cores;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  return std::max(1, std::min(usable, cores / std::max(1, local_ranks)));
}

// Prefixes of the broadcast plan: the plan's bytes, or an error to rethrow.
constexpr char kPlan = 'P', kSetupError = 'S', kOtherError = 'E';

// The run replayed in the simulator with the costs it measured, next to the measured step.
void print_replay(const std::vector<runtime::TraceSpan>& spans, const comm::GridShape& shape,
                  const runtime::EngineOptions& options, int micro_batches,
                  std::vector<double> step_seconds) {
  if (step_seconds.empty()) return;
  runtime::ScheduleOptions so;
  so.recompute = options.recompute;
  so.virtual_stages = options.virtual_stages;
  const runtime::SimResult sim = runtime::simulate(
      runtime::make_schedules(options.schedule, shape.pp, micro_batches, so),
      runtime::measured_costs(spans, shape, options.virtual_stages));
  std::sort(step_seconds.begin(), step_seconds.end());
  const double measured = step_seconds[step_seconds.size() / 2];
  std::printf("simulator with the measured costs: step %.1f ms, bubble %.0f%% | measured: %.1f ms "
              "(median of %zu steps) | simulated / measured %.3f\n",
              1e3 * sim.step_time, 100 * sim.bubble, 1e3 * measured, step_seconds.size(),
              sim.step_time / measured);
}

}  // namespace

partition::Plan make_plan(const config::Config& c) {
  const config::ParallelConfig& p = c.parallel;
  partition::Request req;
  req.dp = p.dp;
  // Interleaved: pp * virtual_stages model stages, each rank running every pp-th (the engine
  // maps them). The memory estimate then counts one chunk a rank, a fraction of what it holds.
  req.pp = p.pp * p.virtual_stages;
  req.tp = p.tp;
  try {
    req.hardware = partition::load_hardware(partition::find_hardware(p.hardware));
  } catch (const partition::HardwareError& e) {
    throw SetupError(c.path + ": key 'parallel.hardware': " + e.what());
  }
  req.memory.precision = partition::Precision::F32;  // the CPU engine trains in f32
  req.memory.schedule = p.schedule == "gpipe" ? partition::Schedule::GPipe
                        : p.schedule == "zb"  ? partition::Schedule::ZeroBubble
                                              : partition::Schedule::OneFOneB;
  req.memory.micro_batches = config::model_micro_batches_per_replica(c);
  req.memory.recompute = p.recompute != "none";
  req.memory.zero1 = p.zero1;
  auto model = models::make_model(model_options(c.model));
  const graph::Model traced =
      graph::trace_model(*model, config::model_micro_batch_size(c), c.train.seq_len, c.train.seed);
  try {
    return partition::run_partition(traced, req).plan;
  } catch (const partition::NoFit& e) {
    throw SetupError(c.path + ": the model does not fit dp " + std::to_string(p.dp) + ", pp " +
                     std::to_string(p.pp) + ", tp " + std::to_string(p.tp) + " on '" +
                     p.hardware + "': " + e.what());
  } catch (const Error& e) {
    throw SetupError(c.path + ": cannot split the model over dp " + std::to_string(p.dp) +
                     ", pp " + std::to_string(p.pp) + ", tp " + std::to_string(p.tp) + ": " +
                     e.what());
  }
}

partition::Plan shared_plan(comm::Communicator& world, const config::Config& c) {
  std::string bytes;
  if (world.rank() == 0) {
    try {
      bytes = kPlan + partition::plan_bytes(make_plan(c));
    } catch (const SetupError& e) {
      bytes = kSetupError + std::string(e.what());
    } catch (const std::exception& e) {
      bytes = kOtherError + std::string(e.what());
    }
  }
  bytes = runtime::broadcast_bytes(world, bytes, 0);
  MERAK_CHECK(!bytes.empty(), "no plan came from rank 0");
  const std::string body = bytes.substr(1);
  if (bytes[0] == kSetupError) throw SetupError(body);
  if (bytes[0] == kOtherError) throw Error(body);
  partition::Plan plan;
  MERAK_CHECK(plan.ParseFromString(body), "the plan from rank 0 does not parse");
  return plan;
}

runtime::EngineOptions engine_options(const config::Config& c) {
  runtime::EngineOptions o;
  o.schedule = runtime::parse_schedule_kind(c.parallel.schedule);
  o.virtual_stages = int(c.parallel.virtual_stages);
  const int stages = int(c.parallel.pp * c.parallel.virtual_stages);  // model stages
  if (c.parallel.recompute == "full") o.recompute.assign(size_t(stages), 1.0);
  if (c.parallel.recompute == "ratio")
    o.recompute = runtime::ratio_rule_recompute(stages, c.parallel.recompute_ratio);
  o.seed = c.train.seed;
  o.adamw.lr = c.optimizer.lr;
  o.adamw.beta1 = c.optimizer.beta1;
  o.adamw.beta2 = c.optimizer.beta2;
  o.adamw.eps = c.optimizer.eps;
  o.adamw.weight_decay = c.optimizer.weight_decay;
  o.grad_clip = c.optimizer.grad_clip;
  o.zero1 = c.parallel.zero1;
  o.tp_subpipeline = c.parallel.tp_subpipeline;
  o.bucket_bytes = std::max<int64_t>(1, int64_t(c.parallel.bucket_mb * double(1 << 20)));
  o.dp_shared_memory = c.parallel.dp_shared_memory;
  o.dp_shared_params = c.parallel.dp_shared_params;
  o.tp_shared_memory = c.parallel.tp_shared_memory;
  return o;
}

runtime::MicroBatchFn micro_batch_source(const BatchSource& source, int64_t micro) {
  return [&source, micro](int64_t step, int64_t g, const std::vector<std::string>& names) {
    return source.inputs(step, g * micro, (g + 1) * micro, names);
  };
}

int run_parallel(const config::Config& c, const ParallelRun& run) {
  const config::ParallelConfig& p = c.parallel;
  const auto& t = c.train;
  // Said before anything starts, rather than training on the CPU when a GPU was asked for.
  if (t.device != "cpu")
    throw SetupError(c.path + ": key 'train.device': " + t.device + ": the 3D engine runs its " +
                     "ranks on the CPU in this build (one-process training runs on cuda)");
  if (t.threads > 0)
    set_num_threads(int(t.threads));
  else if (!std::getenv("MERAK_NUM_THREADS"))
    set_num_threads(default_rank_threads());
  comm::Grid grid({int(p.dp), int(p.pp), int(p.tp)});
  const bool root = grid.rank() == 0;
  const partition::Plan plan = shared_plan(grid.world(), c);

  runtime::EngineOptions options = engine_options(c);
  options.trace = !run.trace.empty();
  runtime::Engine engine(grid, plan, options);
  std::unique_ptr<BatchSource> source;
  if (!engine.data_inputs().empty()) source = std::make_unique<BatchSource>(c);
  const runtime::MicroBatchFn batches =
      source ? micro_batch_source(*source, config::model_micro_batch_size(c))
             : runtime::MicroBatchFn();

  std::ofstream metrics;
  if (root && !run.metrics.empty()) {
    metrics.open(run.metrics);
    if (!metrics) throw SetupError("cannot write metrics file '" + run.metrics + "'");
  }
  const int world = grid.world().size();
  // Only rank 0 reports; the others skip the measurement (and do not disturb it much).
  const double peak_core = root ? bench::measured_fma_peak_gflops() : 0;
  const double peak_rank = peak_core * num_threads();
  const double flops_per_token =
      models::make_model(model_options(c.model))->flops_per_token(t.seq_len);
  if (root) {
    std::printf("merak_train: %s | %s, %lld layers, hidden %lld, %lld heads | dp %lld, pp %lld, "
                "tp %lld on %d ranks\n",
                c.path.c_str(), c.model.family.c_str(), (long long)c.model.layers,
                (long long)c.model.hidden, (long long)c.model.heads, (long long)p.dp,
                (long long)p.pp, (long long)p.tp, world);
    std::printf("  batch %lld x seq %lld in %lld micro-batches of %lld per replica, schedule %s, "
                "recompute %s, %lld steps, %d thread%s a rank, peak %.0f GFLOP/s a rank\n",
                (long long)t.batch, (long long)t.seq_len,
                (long long)config::micro_batches_per_replica(c),
                (long long)config::micro_batch_size(c), p.schedule.c_str(), p.recompute.c_str(),
                (long long)t.steps, num_threads(), num_threads() == 1 ? "" : "s", peak_rank);
    if (!engine.dp_transport().empty() && engine.dp_parameters().empty())
      std::printf("  data-parallel gradient sums: %s\n", engine.dp_transport().c_str());
    else if (!engine.dp_transport().empty())
      std::printf("  data-parallel gradient sums: %s, buckets of %g MiB; parameters: %s\n",
                  engine.dp_transport().c_str(), p.bucket_mb, engine.dp_parameters().c_str());
    if (!engine.tp_transport().empty())
      std::printf("  tensor-parallel all-reduces: %s\n", engine.tp_transport().c_str());
    std::fflush(stdout);
  }

  double first_loss = 0, last_loss = 0, tokens = 0, seconds = 0, flops = 0;
  std::vector<double> step_seconds;  // after the first (one-time warm-up)
  for (int64_t i = 0; i < t.steps; ++i) {
    StepStats s;
    s.lr = optim::scheduled_lr(i, t.steps, c.optimizer.lr, c.schedule.warmup_steps,
                               c.schedule.decay, c.schedule.min_lr);
    const runtime::EngineStepResult r = engine.step(i, s.lr, batches);
    const runtime::StepBreakdown b = runtime::breakdown(r.ranks);
    s.step = i + 1;
    s.loss = r.loss;
    s.grad_norm = r.grad_norm;
    s.seconds = b.step;
    s.tokens = double(t.batch) * double(t.seq_len);
    s.model_flops = flops_per_token * s.tokens;
    s.peak_mem_bytes = cpu_memory_stats().peak_bytes + engine.shared_memory_bytes();
    if (i == 0) first_loss = s.loss;
    last_loss = s.loss;
    if (i > 0) {
      step_seconds.push_back(b.step);
      tokens += s.tokens;
      seconds += s.seconds;
      flops += s.model_flops;
    }
    if (!root) continue;
    const StepReport rep = report(s, peak_rank * world);
    if (metrics.is_open()) metrics << json_line(rep) << "\n" << std::flush;
    if (s.step == 1 || s.step % t.log_interval == 0 || s.step == t.steps) {
      const double step_s = b.step > 0 ? b.step : 1;
      std::printf("%s | per rank %.1f GFLOP/s | compute %.0f%% (recompute %.0f%%), p2p wait "
                  "%.0f%%, collectives %.0f%%, bubble %.0f%%\n",
                  log_line(rep, t.steps).c_str(), rep.gflops / world,
                  100 * b.compute / step_s, 100 * b.recompute / step_s,
                  100 * b.p2p_wait / step_s, 100 * b.collectives / step_s, 100 * b.bubble);
      std::fflush(stdout);
    }
  }
  if (!run.trace.empty()) {
    const std::vector<runtime::TraceSpan> spans =
        runtime::gather_spans(grid.world(), engine.spans());
    if (root) {
      std::vector<std::string> names;
      for (int r = 0; r < world; ++r) {
        const comm::GridCoord co = comm::grid_coord(grid.shape(), r);
        names.push_back("rank " + std::to_string(r) + " (dp " + std::to_string(co.dp) + ", pp " +
                        std::to_string(co.pp) + ", tp " + std::to_string(co.tp) + ")");
      }
      std::ofstream f(run.trace);
      f << runtime::chrome_trace_json(names, spans);
      if (!f.flush()) throw SetupError("cannot write trace file '" + run.trace + "'");
      std::printf("trace: %s (%zu spans from %d ranks)\n", run.trace.c_str(), spans.size(), world);
      print_replay(spans, grid.shape(), options, engine.micro_batches(), step_seconds);
    }
  }
  if (root) {
    const double tps = seconds > 0 ? tokens / seconds : 0;
    const double gf = seconds > 0 ? flops / seconds / 1e9 : 0;
    std::printf("done: %lld steps | loss %.4f -> %.4f | %.0f tok/s %s | %.1f GFLOP/s (%.1f a "
                "rank, %.0f%% of peak)\n",
                (long long)t.steps, first_loss, last_loss, tps,
                steady_rate(step_seconds, double(t.batch) * double(t.seq_len)).c_str(), gf,
                gf / world, peak_rank > 0 ? 100 * gf / world / peak_rank : 0);
  }
  return 0;
}

}  // namespace merak::train
