// The one training loop's state: the data, plan, engine and optimizer a config describes, on this
// process's place in the grid. One process is the (1, 1, 1) layout (comm::Grid::single_process,
// no MPI); a job of dp * pp * tp ranks runs the same code on every rank. Devices, precision and
// transports are chosen here once, at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/config/config.h"
#include "merak/core/device.h"
#include "merak/partition/plan.pb.h"
#include "merak/runtime/engine.h"
#include "merak/runtime/engine_trace.h"
#include "merak/train/batches.h"
#include "merak/train/plan.h"

namespace merak::train {

struct CheckpointSaved {
  std::string step_dir;
  int64_t bytes = 0;       // written by every rank together
  double seconds = 0;      // from its start to its publication, as the slowest rank saw it
  double blocked = 0;      // of that, the step loop held up (the slowest rank's)
};

struct PendingCheckpoint;  // a save whose files are being written in the background

struct StepStats {
  int64_t step = 0;        // 1-based, after the update
  double loss = 0;         // mean over the global batch
  double lr = 0;
  double grad_norm = 0;    // before clipping
  bool skipped = false;    // f16: gradients overflowed somewhere, the update was not applied
  std::string event;       // f16: what the loss scaler did this step, if anything
  double loss_scale = 0;   // 16-bit compute: the loss scale for the next step; 0 in f32
  double seconds = 0;      // wall time of the step (the slowest rank's)
  double tokens = 0;       // tokens in the global batch
  double model_flops = 0;  // model FLOPs of the step (flops_per_token * tokens)
  int64_t peak_mem_bytes = 0;   // this rank's high-water mark since the start
  runtime::StepBreakdown time;  // where the ranks' time went
};

// An evaluation: the mean loss over eval.batches global batches of the validation data.
struct EvalStats {
  int64_t step = 0;         // training steps done when it ran
  double loss = 0;
  double perplexity = 0;    // exp(loss)
  double seconds = 0;
};

// The engine settings a config and its plan describe (schedule, recomputation per stage,
// optimizer, seed, transports; the device is the Trainer's to add). Which model stages recompute
// is the plan's choice (parallel.recompute none, full or memory: the partitioner decided it
// with the memory model), or Merak's ratio rule under parallel.recompute ratio.
runtime::EngineOptions engine_options(const config::Config& config, const partition::Plan& plan);

// Micro-batch g of a step is rows [g * micro, (g + 1) * micro) of the step's global batch.
runtime::MicroBatchFn micro_batch_source(const BatchSource& source, int64_t micro);

// The grid of the config's layout for this process: alone (one rank, MPI not running) the
// single process's, without MPI; otherwise over MPI_COMM_WORLD, its transports chosen here once:
// on cpu MPI (parallel.tp_shared_memory: the tp group through shared memory); on cuda each
// rank's GPU (choose_device) and gpu_transport's choice, NCCL or MPI staged through host memory.
// Collective in a job; setup errors reach every rank alike.
std::unique_ptr<comm::Grid> make_grid(const config::Config& config);

// How a cuda job's groups carry tensors, "nccl" or "mpi" (staged through host memory), for
// parallel.comm on a node of `local_ranks` ranks and `device_count` GPUs: auto is NCCL unless
// ranks share a GPU, which NCCL refuses (then nccl asked for is a SetupError naming the key).
std::string gpu_transport(const config::Config& config, int local_ranks, int device_count);
// Why the transports the ranks chose on their nodes (gpu_transport's, in world rank order) cannot
// make one job, "" when they agree: NCCL members and staged ones would meet in different first
// collectives and hang.
std::string mixed_transports(const config::Config& config, const std::vector<std::string>& chosen);

// The device rank `rank` (local rank `local_rank` of `local_ranks` on its node, which has
// `device_count` GPUs) trains on. cuda: the GPU of its node-local rank; a rank left without one
// is a SetupError naming the key, both counts and the rank, unless train.gpus_share (ranks then
// share the GPUs round robin). No GPU at all is a SetupError with the runtime's reason
// (`why_none`). Pure: the Trainer feeds it the node's figures.
Device choose_device(const config::Config& config, int rank, int local_rank, int local_ranks,
                     int device_count, const std::string& why_none);

class Trainer {
 public:
  // Collective over grid.world() (its shape must be the config's layout): every rank checks its
  // device and the job agrees before the plan is made on rank 0 and shared; then each rank builds
  // its engine and, where its stages read data, the batch source. Throws SetupError (on every
  // rank alike) for what the user can fix.
  Trainer(const config::Config& config, comm::Grid& grid, bool trace = false);
  ~Trainer();

  // One training step (collective). Skipped steps (f16 overflow) still count and consume their
  // batch.
  StepStats step();
  int64_t steps_done() const { return steps_; }
  // Evaluation on the validation data (collective; eval.every > 0): forward only, no effect on
  // the parameters, the optimizer, training's data order or its dropout streams.
  EvalStats evaluate();

  const config::Config& config() const { return config_; }
  comm::Grid& grid() { return grid_; }
  runtime::Engine& engine() { return *engine_; }
  const runtime::EngineOptions& options() const { return options_; }
  Device device() const { return options_.device; }
  double flops_per_token() const { return flops_per_token_; }
  int64_t parameters() const { return parameters_; }  // of the whole model
  // What the partitioner's memory model predicts this rank holds at its peak (weights,
  // gradients, optimizer state, activations; every chunk's).
  int64_t predicted_memory_bytes() const;

  // Checkpoints (checkpointing.cc; collective, every rank alike). Saves the state after the
  // steps done so far as a step of checkpoint directory `dir`, keeping the newest `keep` (0:
  // all); a problem on any rank (an unwritable path, a full disk) is a SetupError on every rank
  // naming the path, and the previous step stays `latest`.
  CheckpointSaved save_checkpoint(const std::string& dir, int64_t keep);
  // The same in the background: the state is copied to host memory now and each rank's file
  // written by a thread while training goes on; finish_checkpoint (at a later step boundary,
  // on every rank: once checkpoint_written, or before the next save and at the end) waits for
  // the files, then publishes the step, or raises the SetupError that stopped a write (and
  // `latest` stays where it was). One save at a time.
  void start_checkpoint(const std::string& dir, int64_t keep);
  bool checkpoint_pending() const { return pending_ != nullptr; }
  // Whether every rank's file of the pending save is written (collective; cheap): the step loop
  // publishes it then, without waiting for a write still going.
  bool checkpoint_written();
  CheckpointSaved finish_checkpoint();
  // Loads step directory `step_dir` (written in any layout): the next step is the one after it.
  // A damaged, foreign or incomplete checkpoint is a SetupError on every rank naming the file
  // or tensor, before any rank trains.
  void resume_from(const std::string& step_dir);

 private:
  config::Config config_;
  comm::Grid& grid_;
  runtime::EngineOptions options_;
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<PendingCheckpoint> pending_;
  std::vector<Tensor> staging_;  // host copies of the state for background saves, reused
  std::thread staging_touched_;  // faulting staging_'s pages in while training starts
  void prepare_staging();        // checkpointing.cc
  void start(const std::string& dir, int64_t keep, bool background);  // checkpointing.cc
  void agree_or_discard(const PendingCheckpoint& p, const std::string& problem);
  // model.init_from: the whole model's weights from a safetensors file (Merak's names or
  // GPT-2's), cut to this rank's shards; problems are SetupErrors naming the key and file. Rank 0
  // warns about tensors of the file that none of `parameters` (the model's) reads.
  void load_initial_weights(const std::string& path, const std::vector<std::string>& parameters);
  runtime::MicroBatchFn batches_;
  std::unique_ptr<BatchSource> valid_;  // eval.every > 0: the validation data
  runtime::MicroBatchFn valid_batches_;
  double flops_per_token_ = 0;
  int64_t parameters_ = 0;
  std::vector<std::string> parameter_names_;  // the whole model's trainable ones, global names
  int64_t steps_ = 0;
};

}  // namespace merak::train
