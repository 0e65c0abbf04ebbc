// The memory model: what one device holds at its peak.
//
//   weights + gradients + optimizer states   per parameter element, by precision:
//       f32 / tf32:  4 + 4 + 8   (AdamW's two moments)
//       bf16 / f16:  2 + 4 + 12  (16-bit weights, f32 gradients, f32 master weights and moments)
//     optimizer states divided by dp under ZeRO-1, and where replicas sharing one parameter
//     copy each update their share (shared_update: the weights too, one copy a node);
//     ZeRO-1's own exchange (no shared copy) sums its 1/dp segment of the gradients apart;
//   shared windows   CPU replicas summing gradients through shared memory (dp_window) hold a
//     slot each and one copy of the sums: (dp + 1) / dp f32 gradients a replica;
//   activations   the values autograd keeps for backward (the op registry's saves_inputs /
//     saves_outputs, views counted once with their storage) for each micro-batch in flight:
//       1F1B:  stage s of p holds up to p - s micro-batches (at most the micro-batch count),
//       GPipe: all of them;
//     with recomputation a stage keeps only its boundary inputs per micro-batch in flight, plus
//     one micro-batch's full activations while that one is recomputed and run backward; a stage
//     holding a single micro-batch (the last under 1F1B) never recomputes: it would save
//     nothing, as in Merak's shifted critical path schedule. Which stages recompute is the
//     Recompute mode's: all that can, or only those that do not fit the device without it;
//   working set   the largest transient of one node's backward: its input gradients, and its
//     output gradients, live next to everything above;
//   deferred      zero bubble's parameter gradients left for later: each separable op that
//     reads a parameter keeps its saved inputs and its output gradients from Backward to
//     WeightGrad. With several micro-batches a step, the previous micro-batch's (the next
//     forward runs before its WeightGrad), two on the last stage (whose WeightGrad of the
//     previous micro-batch follows the next Backward); with one, its output gradients alone
//     (its saved inputs are among the activations counted).
// Gradient buffers fill during backward while activations are freed. With several micro-batches
// a step (gradient accumulation, pipelining) they persist next to later micro-batches'
// activations and all terms add up; with one, the peak is the larger of (activations + working
// set) at the start of backward and the gradients at its end.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "merak/partition/hardware.h"

namespace merak::partition {

// A memory size in messages: GiB to one decimal ("71.8 GiB"); below 0.1 GiB, which that would
// show as 0.0, four digits in the largest of B, KiB and MiB that keeps them at 1 or more
// ("19.53 MiB", "1.074 B"), so that a small limit or need shows what it is.
std::string memory_text(double bytes);

// What the memory model needs of a pipeline schedule: how many micro-batches a stage holds. The
// shifted and interleaved schedules hold what 1F1B holds (per chunk); zero bubble one more,
// except on the last stage.
enum class Schedule { OneFOneB, GPipe, ZeroBubble };
const char* schedule_name(Schedule s);
// "1f1b", "gpipe", "zb"; throws std::invalid_argument
Schedule parse_schedule(const std::string& name);

// Recomputation: none; every stage that can (Full); or only the stages whose memory without it
// passes the device's (AsNeeded: the paper's stage-aware recomputation decided exactly, stage by
// stage, by the partitioner that sizes the stages).
enum class Recompute { None, Full, AsNeeded };
const char* recompute_name(Recompute r);
// "none", "full", "memory"; throws std::invalid_argument
Recompute parse_recompute(const std::string& name);

struct MemoryOptions {
  Precision precision = Precision::F32;
  Schedule schedule = Schedule::OneFOneB;
  int64_t micro_batches = 1;
  int64_t dp = 1;
  bool zero1 = false;
  // CPU replicas of one node that keep one shared parameter copy, each running AdamW on its
  // 1/dp share with moments for that share only (runtime::SharedCopy): ZeRO-1's sharding of
  // the optimizer state without the flag.
  bool shared_update = false;
  // CPU replicas of one node summing f32 gradients through a shared-memory window
  // (comm::NodeSum): a slot a member and one copy of the sums.
  bool dp_window = false;
  Recompute recompute = Recompute::None;
};

struct PerParameter {
  double weight = 0, grad = 0, optimizer = 0;  // bytes per parameter element
  double shared = 0;  // a rank's share of shared-memory windows (dp_window)
};
PerParameter bytes_per_parameter(const MemoryOptions& o);

// Micro-batches whose activations stage `stage` of `stages` holds at once.
int64_t in_flight(const MemoryOptions& o, int64_t stage, int64_t stages);
// Whether that stage may recompute its forward before backward: the mode allows it and the stage
// holds more than one micro-batch (with one there is nothing to save).
bool can_recompute(const MemoryOptions& o, int64_t stage, int64_t stages);

struct StageMemory {
  double weights = 0, grads = 0, optimizer = 0, activations = 0, working = 0;
  double shared = 0;  // this rank's share of shared-memory windows
  double deferred = 0;  // zero bubble's state kept for WeightGrad
  int64_t in_flight = 0;
  bool recompute = false;   // activations counted as the stage recomputing keeps them
  bool accumulates = true;  // several micro-batches a step: gradients live next to activations
  double total() const {
    const double transient = accumulates ? grads + activations + working + deferred
                                         : std::max(grads, activations + working + deferred);
    return weights + optimizer + shared + transient;
  }
};

// What a zero-bubble WeightGrad keeps of one micro-batch: the saved inputs and the output
// gradients of the stage's separable ops that read parameters.
struct DeferredBytes {
  double inputs = 0, grads = 0;
};

// One stage's memory from its parameter elements, one micro-batch's saved activation bytes,
// its boundary-input bytes per micro-batch, its largest backward working set and its
// zero-bubble WeightGrad state, recomputing or not (`recompute` is ignored where the stage
// cannot: can_recompute).
StageMemory stage_memory(const MemoryOptions& o, int64_t stage, int64_t stages, double params,
                         double activations, double boundary_in, double working, bool recompute,
                         const DeferredBytes& deferred = {});

}  // namespace merak::partition
