#include "merak/train/trainer.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "merak/comm/mpi_env.h"
#include "merak/comm/mpi_communicator.h"
#include "merak/comm/nccl_communicator.h"
#include "merak/comm/staged_communicator.h"
#include "merak/core/allocator.h"
#include "merak/core/parallel.h"
#include "merak/cuda/runtime.h"
#include "merak/log/log.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine_comm.h"
#include "merak/runtime/schedule_recompute.h"
#include "merak/train/checkpointing.h"
#include "merak/graph/initializer_values.h"
#include "merak/train/model_graph.h"

namespace merak::train {
namespace {

// Intra-op threads of a rank when train.threads is 0 and MERAK_NUM_THREADS is unset: the ranks of
// a node share its cores rather than each taking all of them (8 ranks of 2 threads on 2 cores
// would run 16 threads), and a rank the launcher bound to fewer cores keeps to those.
int default_rank_threads(int local_ranks) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : cores;
  return std::max(1, std::min(usable, cores / std::max(1, local_ranks)));
}

optim::LossScalerOptions loss_scaling(const config::LossScaleConfig& l) {
  optim::LossScalerOptions o;
  o.dynamic = l.mode == "dynamic";
  o.initial = float(l.initial);
  o.growth = float(l.growth);
  o.backoff = float(l.backoff);
  o.growth_interval = l.growth_interval;
  o.hysteresis = l.hysteresis;
  o.min = float(l.min);
  return o;
}

}  // namespace

std::string mixed_transports(const config::Config& c, const std::vector<std::string>& chosen) {
  for (size_t r = 1; r < chosen.size(); ++r)
    if (chosen[r] != chosen[0])
      return c.path + ": key 'parallel.comm': " + c.parallel.comm + " chose " + chosen[0] +
             " on the node of rank 0 but " + chosen[r] + " on the node of rank " +
             std::to_string(r) + " (mpi where a node's ranks outnumber its GPUs): set "
             "parallel.comm: mpi, or give every node a GPU a rank";
  return "";
}

runtime::EngineOptions engine_options(const config::Config& c, const partition::Plan& plan) {
  runtime::EngineOptions o;
  o.compute = dtype_from_name(c.train.precision);
  o.loss_scale = loss_scaling(c.train.loss_scale);
  o.schedule = runtime::parse_schedule_kind(c.parallel.schedule);
  o.virtual_stages = int(c.parallel.virtual_stages);
  const int stages = int(c.parallel.pp * c.parallel.virtual_stages);  // model stages
  if (c.parallel.recompute == "ratio") {
    o.recompute = runtime::ratio_rule_recompute(stages, c.parallel.recompute_ratio);
  } else {
    o.recompute.assign(size_t(stages), 0.0);
    for (const partition::RankProgram& r : plan.ranks()) {
      MERAK_CHECK(r.pp() >= 0 && r.pp() < stages, "the plan's rank ", r.rank(), " is on stage ",
                  r.pp(), " of ", stages);
      if (r.recompute()) o.recompute[size_t(r.pp())] = 1.0;
    }
  }
  o.seed = c.train.seed;
  o.adamw.lr = c.optimizer.lr;
  o.adamw.beta1 = c.optimizer.beta1;
  o.adamw.beta2 = c.optimizer.beta2;
  o.adamw.eps = c.optimizer.eps;
  o.adamw.weight_decay = c.optimizer.weight_decay;
  o.grad_clip = c.optimizer.grad_clip;
  o.zero1 = c.parallel.zero1;
  o.tp_subpipeline = c.parallel.tp_subpipeline;
  o.micro_batch_rows = config::model_micro_batch_size(c);
  o.bucket_bytes = std::max<int64_t>(1, int64_t(c.parallel.bucket_mb * double(1 << 20)));
  o.dp_shared_memory = c.parallel.dp_shared_memory;
  o.dp_shared_params = c.parallel.dp_shared_params;
  return o;
}

runtime::MicroBatchFn micro_batch_source(const BatchSource& source, int64_t micro) {
  return [&source, micro](int64_t step, int64_t g, const std::vector<std::string>& names) {
    return source.inputs(step, g * micro, (g + 1) * micro, names);
  };
}

std::unique_ptr<comm::Grid> make_grid(const config::Config& c) {
  const config::ParallelConfig& p = c.parallel;
  if (p.dp * p.pp * p.tp == 1 && !comm::mpi_running()) return comm::Grid::single_process();
  const comm::GridShape shape{int(p.dp), int(p.pp), int(p.tp)};
  comm::GridOptions options;
  options.tp_shared_memory = p.tp_shared_memory;
  const comm::CommOptions comm_options{p.comm_timeout};
  if (c.train.device != "cuda")
    return std::make_unique<comm::Grid>(shape, comm::mpi_backend(comm_options), MPI_COMM_WORLD,
                                        options);

  // On GPUs the groups carry device memory: each rank's GPU and the transport first, agreed by
  // the job before any group is made.
  Device device;
  std::string transport, problem;
  try {
    const comm::NodePlace place = comm::node_place();
    std::string why;
    const int gpus = cuda::device_count(&why);
    device = choose_device(c, comm::world_rank(), place.local_rank, place.local_size, gpus, why);
    transport = gpu_transport(c, place.local_size, gpus);
  } catch (const SetupError& e) {
    problem = e.what();
  }
  {
    MPI_Comm dup;
    comm::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "make_grid: MPI_Comm_dup");
    comm::MpiCommunicator world(dup, "world");
    agree(world, problem);
    // Chosen per node: the whole job must use one.
    agree(world, mixed_transports(c, runtime::all_gather_bytes(world, transport)));
  }
  comm::CommFactory factory = transport == "nccl"
                                  ? comm::nccl_backend(comm_options, device.index)
                                  : comm::staged_backend(comm::mpi_backend(comm_options), device);
  return std::make_unique<comm::Grid>(shape, factory, MPI_COMM_WORLD, options);
}

std::string gpu_transport(const config::Config& c, int local_ranks, int device_count) {
  const std::string& want = c.parallel.comm;
  // NCCL puts one member of a group on a GPU: ranks sharing GPUs go through the host.
  const bool shared = local_ranks > device_count;
  if (want == "mpi" || (want == "auto" && shared)) return "mpi";
  if (shared)
    throw SetupError(c.path + ": key 'parallel.comm': nccl needs a GPU a rank, but " +
                     std::to_string(local_ranks) + " ranks share this node's " +
                     std::to_string(device_count) + " GPU" + (device_count == 1 ? "" : "s") +
                     " (parallel.comm: mpi, or auto, stages their messages through host memory)");
  return "nccl";
}

Device choose_device(const config::Config& c, int rank, int local_rank, int local_ranks,
                     int device_count, const std::string& why_none) {
  const std::string& device = c.train.device;
  if (device == "cpu") return Device::cpu();
  if (device != "cuda")
    throw SetupError(c.path + ": key 'train.device': '" + device +
                     "' is not available in this build (cpu, cuda)");
  if (device_count == 0)
    throw SetupError(c.path + ": key 'train.device': cuda, but no CUDA device was found (" +
                     why_none + ")");
  if (local_rank >= device_count && !c.train.gpus_share) {
    const config::ParallelConfig& p = c.parallel;
    throw SetupError(c.path + ": key 'parallel': dp " + std::to_string(p.dp) + " x pp " +
                     std::to_string(p.pp) + " x tp " + std::to_string(p.tp) + " puts " +
                     std::to_string(local_ranks) + " ranks on a node with " +
                     std::to_string(device_count) + " GPU" + (device_count == 1 ? "" : "s") +
                     ": rank " + std::to_string(rank) + " (local rank " +
                     std::to_string(local_rank) + ") has none (train.device: cuda; "
                     "train.gpus_share: true lets ranks share them)");
  }
  return Device::cuda(local_rank % device_count);
}

Trainer::Trainer(const config::Config& config, comm::Grid& grid, bool trace)
    : config_(config), grid_(grid) {
  const config::Config& c = config_;
  const int world = grid_.world().size();
  const comm::NodePlace place = comm::node_place();
  const unsigned cores = std::thread::hardware_concurrency();
  if (c.train.threads > 0 && cores > 0 && c.train.threads > int64_t(cores) && grid_.rank() == 0)
    log::warn("train.threads " + std::to_string(c.train.threads) + " is more than the " +
              std::to_string(cores) + " cores here: the threads will take turns on them");
  if (c.train.threads > 0)
    set_num_threads(int(c.train.threads));
  else if (world > 1 && threads_from_environment() == 0)
    set_num_threads(default_rank_threads(place.local_size));

  // Each rank's device, checked before anything else travels; the job agrees on the outcome.
  Device device;
  std::string problem;
  try {
    std::string why;
    const int gpus = c.train.device == "cuda" ? cuda::device_count(&why) : 0;
    device = choose_device(c, grid_.rank(), place.local_rank, place.local_size, gpus, why);
    // The groups must carry the memory the ranks compute in (make_grid builds them so).
    const DeviceType carried = grid_.pp().memory();
    if (world > 1 && carried != device.type)
      throw SetupError(c.path + ": key 'train.device': " + c.train.device + ", but the job's " +
                       "groups carry " + (carried == DeviceType::CPU ? "host" : "device") +
                       " memory (" + grid_.pp().backend() + "): build the grid with "
                       "train::make_grid");
  } catch (const SetupError& e) {
    problem = e.what();
  }
  agree(grid_.host(), problem);
  // The rank's GPU current from here on, on this thread, for what allocates on the current
  // device without being told which (the NCCL transport does this too; the staged one does not).
  if (device.is_cuda()) cuda::stream(device.index);

  // Rank 0 keeps the facts (an imported network's weights) of the import its plan came from.
  ModelFacts facts;
  const partition::Plan plan = shared_plan(grid_.host(), c, &facts);
  const bool have_facts = grid_.host().rank() == 0;
  options_ = engine_options(c, plan);
  options_.device = device;
  options_.trace = trace;
  engine_ = std::make_unique<runtime::Engine>(grid_, plan, options_);
  // The data is opened by the ranks whose stages read it; one that does not fit the model (a
  // vocabulary too small) stops them all.
  problem.clear();
  try {
    if (!engine_->data_inputs().empty()) {
      OpenedData opened;  // files both read (data.valid_split) are opened once
      data_ = std::make_unique<BatchSource>(c, Split::Train, &opened);
      batches_ = micro_batch_source(*data_, config::model_micro_batch_size(c));
      if (c.eval.every > 0) {
        valid_ = std::make_unique<BatchSource>(c, Split::Valid, &opened);
        valid_batches_ = micro_batch_source(*valid_, config::model_micro_batch_size(c));
      }
    }
  } catch (const config::ConfigError& e) {
    problem = e.what();
  } catch (const Error& e) {  // the data's own (a damaged shard or index): the file and where
    problem = e.what();
  }
  agree(grid_.host(), problem);
  // Every rank reads an imported network's file (a node without it, say) and takes its pieces
  // of the weights; the job agrees on the outcome, so a rank that cannot leaves none waiting.
  problem.clear();
  try {
    if (!have_facts) facts = model_facts(c);
    if (!facts.weights.empty())
      engine_->load_weights([&](const std::string& name) -> std::optional<Tensor> {
        auto it = facts.weights.find(name);
        if (it == facts.weights.end()) return std::nullopt;
        return graph::initializer_values(it->second);
      });
    facts.weights.clear();
  } catch (const SetupError& e) {
    problem = e.what();
  } catch (const Error& e) {
    if (c.model.onnx.empty()) throw;  // a built network's facts: the same on every rank
    problem = c.path + ": key 'model.onnx': " + c.model.onnx + ": " + e.what();
  }
  agree(grid_.host(), problem);
  flops_per_token_ = facts.flops_per_token;
  parameters_ = facts.parameters;
  parameter_names_ = facts.parameter_names;
  if (!c.model.init_from.empty()) load_initial_weights(c.model.init_from, parameter_names_);
  if (c.checkpoint.async && !c.checkpoint.dir.empty()) prepare_staging();
}

Trainer::~Trainer() {
  if (staging_touched_.joinable()) staging_touched_.join();
}

int64_t Trainer::predicted_memory_bytes() const {
  int64_t bytes = 0;
  for (int c = 0; c < engine_->chunks(); ++c) bytes += engine_->program(c).predicted().memory_bytes();
  return bytes;
}

StepStats Trainer::step() {
  const auto& t = config_.train;
  StepStats s;
  s.lr = optim::scheduled_lr(steps_, t.steps, config_.optimizer.lr, config_.schedule.warmup_steps,
                             config_.schedule.decay, config_.schedule.min_lr);
  const runtime::EngineStepResult r = engine_->step(steps_, s.lr, batches_);
  ++steps_;
  s.step = steps_;
  s.loss = r.loss;
  s.grad_norm = r.grad_norm;
  s.skipped = r.skipped;
  s.event = r.event;
  s.loss_scale = r.loss_scale;
  s.time = runtime::breakdown(r.ranks);
  s.seconds = s.time.step;
  s.tokens = double(t.batch) * double(t.seq_len);
  s.model_flops = flops_per_token_ * s.tokens;
  s.peak_mem_bytes = allocator_for(options_.device)->stats().peak_bytes +
                     (options_.device.is_cuda() ? 0 : engine_->shared_memory_bytes());
  return s;
}

EvalStats Trainer::evaluate() {
  MERAK_CHECK(config_.eval.every > 0, "Trainer::evaluate: eval.every is 0 (no validation data)");
  const auto start = std::chrono::steady_clock::now();
  EvalStats e;
  e.step = steps_;
  // The same eval.batches global batches every time, so evaluations compare step to step.
  double sum = 0;
  for (int64_t b = 0; b < config_.eval.batches; ++b) sum += engine_->evaluate(b, valid_batches_);
  e.loss = sum / double(config_.eval.batches);
  e.perplexity = std::exp(e.loss);
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return e;
}

}  // namespace merak::train
