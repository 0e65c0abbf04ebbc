// Discrete-event simulation of one pipeline training step: every rank's instruction list (from
// schedule.h) run against per-instruction costs. It checks the lists (dependency order, each
// micro-batch's work done exactly once), detects deadlock, and reports the step time, each
// rank's busy time, the bubble fraction and the critical path.
//
// Timing model: a rank runs its instructions one after another. Compute instructions take
// their cost. Sends take no rank time: the message enters the directed link (rank -> peer) and
// arrives p2p seconds after it starts; a link carries one message at a time, in send order.
// A receive ends when the message has arrived (at once if it already has). Where ranks share
// cores (SimCosts::concurrent), compute runs slower while more ranks compute at once.
#pragma once

#include <string>
#include <vector>

#include "merak/runtime/schedule.h"

namespace merak::runtime {

struct SimCosts {
  // Seconds per micro-batch, per model stage (stages * virtual_stages entries; model stage
  // g = chunk * stages + rank). recompute is the cost of one Recompute instruction, i.e.
  // ratio * forward for a stage that checkpoints a share `ratio` of its forward.
  // Under zero-bubble schedules backward is the cost of the activation-gradient half and
  // weight_grad that of a WeightGrad (empty: 0).
  std::vector<double> forward, backward, recompute, weight_grad;
  double p2p = 0;  // one activation or gradient transfer between neighbouring ranks
  // Seconds per rank (stages entries, or empty = 0): ReduceGrads and OptimizerStep.
  std::vector<double> reduce, optimizer;
  // Ranks that share cores (CPU ranks outnumbering a node's cores): each simulated rank stands
  // for ranks_per_stage processes that compute when it does (its tp and dp peers), and
  // `concurrent` processes can compute at full speed at once. While k ranks compute, each runs
  // at min(1, concurrent / (k * ranks_per_stage)) of its speed: the scheduler shares the cores
  // evenly. 0: no sharing (the costs hold whatever else runs).
  double concurrent = 0;
  int ranks_per_stage = 1;

  // Same costs on every model stage.
  static SimCosts uniform(int model_stages, double forward, double backward, double recompute,
                          double p2p = 0);
};

// One instruction as it ran.
struct Span {
  int rank = 0, index = 0;  // position in that rank's program
  Instruction inst{Op::Forward};
  double start = 0, end = 0;  // for a receive: from reaching it to the message's arrival
};

// A link of the critical path: an instruction (compute or a receive's wait) or a transfer.
struct CriticalStep {
  enum Kind { Instr, Transfer } kind = Instr;
  int rank = 0;   // Instr: the rank; Transfer: the sending rank
  int peer = 0;   // Transfer: the receiving rank
  int index = 0;  // Instr: position in the rank's program; Transfer: the send's position
  Instruction inst{Op::Forward};  // Transfer: the send
  double start = 0, end = 0;
};

struct BlockedRank {
  int rank = 0, index = 0;
  Instruction inst{Op::Forward};
  std::string waits_for;  // "SendActivation(3) on rank 1", or what is missing
};

struct SimResult {
  int stages = 0, virtual_stages = 1, micro_batches = 0;
  // Dependency-order and completeness problems, one line each ("rank 2: B3 at 7 before F3").
  std::vector<std::string> violations;
  bool deadlocked = false;
  std::vector<BlockedRank> blocked;  // ranks that could not finish (deadlock)

  double step_time = 0;            // when the last rank finished
  std::vector<double> busy;        // per rank: seconds of compute (everything but waiting)
  std::vector<double> wait;        // per rank: seconds blocked in receives
  std::vector<double> recompute;   // per rank: seconds of Recompute
  double bubble = 0;               // 1 - sum(busy) / (stages * step_time)
  std::vector<std::vector<Span>> spans;  // per rank, in program order
  std::vector<CriticalStep> critical_path;  // from the step's start to its end

  bool ok() const { return violations.empty() && !deadlocked; }
  // Seconds of the critical path spent in instructions of this op (waits excluded).
  double critical_time(Op op) const;
  // Violations and the deadlock, one line each; empty when ok().
  std::string report() const;
};

// Simulates one step. programs[r] is rank r's list; the micro-batch count is taken from the
// largest micro-batch index. Never throws for a bad schedule (that is what it reports); throws
// for costs of the wrong size or negative.
// Without `spans` the result has no spans and no critical path (the rest as with them): what a
// layout search, which simulates hundreds of long pipelines, reads.
SimResult simulate(const std::vector<Program>& programs, const SimCosts& costs, bool spans = true);

// The order checks alone (run by simulate() too): violations, one line each.
std::vector<std::string> check_programs(const std::vector<Program>& programs, int virtual_stages,
                                        int micro_batches);

}  // namespace merak::runtime
