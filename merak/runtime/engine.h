// The 3D engine: each rank runs its RankProgram from the partitioner's plan with a pipeline
// schedule, over the process grid.
//
// Per step the rank walks its schedule's instruction list (schedule.h):
//   Forward(mb)    the stage graph on micro-batch mb (graph::Executor, recorded by autograd);
//                  the first stage reads tokens, the last its targets, each only the data inputs
//                  its graph names; other inputs are the boundary activations received.
//                  A recomputing stage runs it without recording and keeps only its inputs.
//   Recompute(mb)  the same forward again, recorded, ahead of its backward.
//   Backward(mb)   autograd from the stage's outputs seeded with the received gradients (the
//                  loss, on the last stage, seeded with 1 / micro-batches of the whole job).
//   Send/Recv      activations forward and gradients back over the pipeline group, posted in
//                  the schedule's batches (p2p_batches: what goes together goes as one NCCL
//                  group); a receive waits for its batch's receives where it stands (under
//                  NCCL the batch as a whole); the handle of a finished send (and with it the
//                  communicator's hold on its tensor) is dropped at the first instruction that
//                  finds it finished, and every one by the step's end.
//   ReduceGrads    tied-weight gradients summed over the first and last stage, then
//                  data-parallel sums in buckets (or, under ZeRO-1, a reduce-scatter that leaves
//                  each replica its segment), then the global gradient norm over the whole job
//                  (each shard counted once) and clipping.
//   OptimizerStep  AdamW on the local shards (ZeRO-1: on the segment, then an all-gather).
// Tensor-parallel ops in the stage graph reduce over the rank's tp group (engine_tp.h).
// Parameters are drawn shard by shard from the (seed, global name)-keyed initialiser, so the
// losses equal the single process's (the (1, 1, 1) layout) up to reduction order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "merak/checkpoint/store.h"
#include "merak/comm/grid.h"
#include "merak/core/tensor.h"
#include "merak/optim/adamw.h"
#include "merak/optim/loss_scaler.h"
#include "merak/partition/plan.pb.h"
#include "merak/runtime/engine_trace.h"
#include "merak/runtime/schedule.h"

namespace merak::runtime {

// The data inputs `names` of micro-batch `micro_batch` (numbered over the whole job: replica
// r's m-th is r * micro_batches + m) of step `step`, by graph input name.
using MicroBatchFn = std::function<std::map<std::string, Tensor>(
    int64_t step, int64_t micro_batch, const std::vector<std::string>& names)>;

struct EngineOptions {
  // Where this rank's parameters, activations, received values, gradients and optimizer state
  // live. The batches arrive on the host and are moved there.
  Device device = Device::cpu();
  // What forward and backward compute in: f32, or bf16 / f16 with f32 master weights and
  // moments (mixed_precision.h); f16 scales the loss as `loss_scale` says.
  DType compute = DType::F32;
  optim::LossScalerOptions loss_scale;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  // Model chunks per rank, > 1 with the interleaved schedule only: the plan then has
  // pp * virtual_stages model stages and rank (d, r, t) runs stages r, r + pp, ...
  int virtual_stages = 1;
  // Recomputation per model stage (ScheduleOptions::recompute): a stage with a ratio > 0
  // recomputes its whole forward where its schedule says so. Empty: none.
  std::vector<double> recompute;
  uint64_t seed = 42;               // parameter initialisation (the trainer's train.seed)
  // Samples in one of the plan's micro-batches: dropout draws each sample's masks by its row
  // in the global batch, the same however the batch is cut (0: by micro-batch alone).
  int64_t micro_batch_rows = 0;
  optim::AdamWOptions adamw;
  double grad_clip = 1.0;           // global-norm clipping over the whole job; 0 = off
  int64_t bucket_bytes = 1 << 20;   // data-parallel gradient buckets
  bool dp_shared_memory = true;     // replicas on one node sum through shared memory
  // ... and keep one parameter copy there, each updating its share (engine_shared_update.h)
  bool dp_shared_params = true;
  bool zero1 = false;               // optimizer state sharded over dp (engine_zero.h)
  // Sub-pipelined tensor parallelism: each schedule slot runs two of the plan's micro-batches
  // (the halves of a micro-batch twice their size, which the plan must be made for) interleaved,
  // so that one half's tensor-parallel all-reduce is in flight while the other half computes,
  // in forward and backward (engine_split.h). Needs tp > 1 and an even number of plan
  // micro-batches.
  bool tp_subpipeline = false;
  bool trace = false;  // keep a span per instruction of the last kTraceSteps steps (spans())
};

struct EngineStepResult {
  double loss = 0;       // mean over the global batch, as one process computes it
  double grad_norm = 0;  // of the whole model, before clipping (and unscaled)
  bool skipped = false;  // f16: some rank's gradients overflowed; no rank applied the update
  std::string event;     // f16: what the loss scaler did this step, if anything
  double loss_scale = 0;  // 16-bit compute: the scale the next step uses; 0 in f32
  int overlapped_buckets = 0;  // data-parallel buckets whose all-reduce started during backward
  int64_t deferred_all_reduces = 0;  // tensor-parallel all-reduces posted without waiting
  StepTimes times;       // this rank's
  std::vector<StepTimes> ranks;  // every rank's, in rank order
};

class Engine {
 public:
  // Collective over the grid's world. Checks the plan against the grid (layout, rank) and
  // materialises this rank's shards.
  Engine(comm::Grid& grid, const partition::Plan& plan, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One training step with learning rate `lr` (collective; every rank the same step and lr).
  EngineStepResult step(int64_t step, double lr, const MicroBatchFn& batches);
  // The mean loss over one global batch of `batches` (served as for step(), called with
  // `index` in place of the step), forward only (collective): no gradients, no dropout, the
  // parameters, optimizer and training's dropout streams untouched. Every rank returns it.
  double evaluate(int64_t index, const MicroBatchFn& batches);

  // The plan's program of this rank's chunk (model stage chunk * pp + the rank's stage).
  const partition::RankProgram& program(int chunk = 0) const;
  int chunks() const;                     // model chunks this rank runs (virtual stages)
  std::vector<std::string> data_inputs() const;  // every chunk's, sorted
  // How data-parallel gradient sums travel ("shared memory", "MPI all-reduce (...)", "ZeRO-1
  // over ..."); empty without dp.
  std::string dp_transport() const;
  // How data-parallel replicas hold their parameters ("one shared copy, ..."); empty at dp 1
  // and under ZeRO-1's own exchange (replicas on several nodes, or shared parameters off).
  std::string dp_parameters() const;
  // How tensor-parallel all-reduces travel ("shared memory", "MPI all-reduce (...)"); empty at
  // tp 1.
  std::string tp_transport() const;
  // This rank's share of the shared-memory windows (data-parallel gradient sums, the replicas'
  // one parameter copy, each over its members; the tensor-parallel all-reduce slots), which the
  // CPU allocator's counts leave out.
  int64_t shared_memory_bytes() const;
  const Program& instructions() const;  // this rank's schedule for one step
  bool recomputes() const;              // whether the schedule has one of its chunks recompute
  int micro_batches() const;            // per replica and step
  // This rank's parameters (local shards) by global name. Their memory may be the engine's
  // (replicas sharing one copy): clone what must outlive it.
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  // Spans of the last kTraceSteps steps when options.trace (seconds since the engine started,
  // the same instant on every rank).
  const std::vector<TraceSpan>& spans() const;

  // Checkpoints (engine_checkpoint.h). The pieces of the training state this rank writes: its
  // f32 parameters (the masters under mixed precision) and AdamW moments, each element of the
  // job's state written by exactly one rank (replica 0, or the replica whose slice it is; tp
  // rank 0 for replicated tensors; the first stage for tied ones), on the host: views of host
  // state (valid until the next step changes it), copies of device state.
  std::vector<checkpoint::Piece> checkpoint_pieces();
  // The scalar state every rank shares: the optimizer's step count, the loss scaler's state.
  std::map<std::string, std::string> checkpoint_scalars() const;
  // Every shard this rank holds, and its optimizer state, from a checkpoint of any layout.
  // Throws checkpoint::CheckpointError for what the checkpoint lacks or got wrong. The caller
  // synchronises the ranks after it (replicas may share one parameter copy).
  void load_checkpoint(const checkpoint::Index& index);
  // Every shard this rank holds cut from the whole tensor `full(name)` gives for its global name,
  // asked for one at a time so that only one is held (the masters under mixed precision, their
  // 16-bit copies rounded from them). A name `full` has none for (nullopt) or of another shape
  // throws naming it and both shapes. The optimizer state stays as it is (fresh).
  void load_weights(const std::function<std::optional<Tensor>(const std::string&)>& full);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace merak::runtime
