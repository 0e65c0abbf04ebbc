// How a rank's gradients become the job's and its parameters are updated: the one interface the
// engine's step goes through, whatever the data-parallel strategy and transport. The strategy is
// chosen once, when the engine is built (make_data_parallel):
//   - one replica: AdamW on this rank's parameters (on the f32 masters under mixed precision);
//   - replicas, a parameter copy each: bucketed gradient sums overlapping backward (through
//     shared memory on one node, MPI's all-reduce otherwise), then AdamW on every replica;
//   - replicas sharing one parameter copy on a node: the same sums read in place, each replica
//     updating its segments of the buckets (ZeRO-1 in effect);
//   - ZeRO-1 across nodes (or with shared parameters off): a reduce-scatter after backward,
//     AdamW on this replica's segment, an all-gather of the updated parameters.
// The step calls, in order: begin_step; gradient_ready for each parameter the step's last
// backward finishes (when watches_backward); finish_backward; reduce (after the tied sums);
// sum_of_squares; step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine.h"
#include "merak/runtime/engine_pieces.h"
#include "merak/runtime/mixed_precision.h"

namespace merak::runtime {

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  // Before the step's first backward: what the last step left (summed gradients that are views
  // of shared memory) is let go.
  virtual void begin_step() {}
  // Whether the strategy starts work while backward runs: then the engine reports each parameter
  // (by index) whose gradient the step's last backward has finished.
  virtual bool watches_backward() const { return false; }
  virtual void gradient_ready(size_t /*index*/) {}
  // After backward: the sums started during it are done. Returns how many started early.
  virtual int finish_backward() { return 0; }
  // Whether the gradients finish_backward left are memory the replicas share (the tied sum
  // writes to a copy).
  virtual bool shares_gradients() const { return false; }
  // After the tied sums, every parameter's gradient contiguous in `grads`: the rest of the
  // reduction over the replicas.
  virtual void reduce(const std::vector<Tensor>& /*grads*/) {}
  // This replica's part of the squared norm of the summed gradients `grads` over the parameters
  // `count` selects (each parameter counted by exactly one replica).
  virtual double sum_of_squares(const std::vector<Tensor>& grads,
                                const std::function<bool(size_t)>& count) const = 0;
  // The update with learning rate `lr`, every gradient multiplied by `grad_scale` (clipping over
  // the loss scale) as it is read.
  virtual void step(double lr, float grad_scale) = 0;

  // Checkpoints: the AdamW this replica steps and which piece of the parameters each of its
  // tensors is (its moments are those pieces'); whether those pieces are this replica's alone
  // (sharded: it writes them) or a copy every replica keeps (replica 0 writes them).
  virtual optim::AdamW& adamw() = 0;
  virtual std::vector<ParamPiece> adamw_pieces() const = 0;
  virtual bool state_sharded() const { return false; }

  // For the start-up report: how the sums travel ("shared memory", "MPI all-reduce (...)",
  // "ZeRO-1 over ..."; empty for one replica) and how the replicas hold their parameters ("one
  // shared copy, ...", "a copy a replica (...)"; empty for one replica and ZeRO-1's exchange).
  virtual std::string transport() const { return ""; }
  virtual std::string parameters() const { return ""; }
  // This rank's part of the shared-memory windows, which no allocator counts.
  virtual int64_t shared_bytes() const { return 0; }
};

// The strategy `options` and the group call for. `params` are the rank's parameters (the 16-bit
// copies under mixed precision, whose f32 masters `mixed` holds; null in f32). Collective over
// `dp`.
std::unique_ptr<DataParallel> make_data_parallel(comm::Communicator& dp,
                                                 const std::vector<optim::Param>& params,
                                                 const EngineOptions& options,
                                                 MixedPrecision* mixed);

}  // namespace merak::runtime
