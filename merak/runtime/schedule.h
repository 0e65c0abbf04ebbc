// Pipeline schedules as data: a schedule is a pure function from (stage, stages, micro-batches,
// options) to the ordered list of instructions that pipeline rank runs in one training step.
// The engine executes these lists; the simulator (simulator.h) times and checks them.
//
// Communication semantics every schedule here is written for: sends are non-blocking (the engine
// posts them and waits for them before the step ends), receives block until the message is in.
// So a stage waits only at a Recv*, and a schedule deadlocks only when receives wait in a cycle.
#pragma once

#include <string>
#include <vector>

namespace merak::runtime {

enum class Op {
  Forward,         // run the stage's forward on micro-batch `micro_batch`
  Backward,        // run its backward (needs the forward's activations, kept or recomputed);
                   // under a zero-bubble schedule only the activation gradients
  WeightGrad,      // zero-bubble schedules: the parameter gradients Backward left for later
  Recompute,       // rebuild the checkpointed activations of a micro-batch ahead of its backward
  SendActivation,  // forward output -> next model stage
  RecvActivation,  // forward input <- previous model stage (blocks)
  SendGrad,        // gradient of the stage input -> previous model stage
  RecvGrad,        // gradient of the stage output <- next model stage (blocks)
  ReduceGrads,     // data-parallel gradient reduction, once per step
  OptimizerStep,   // once per step, after ReduceGrads
};

struct Instruction {
  Op op;
  int micro_batch = -1;  // -1 for ReduceGrads and OptimizerStep
  int chunk = 0;         // virtual stage on this rank (interleaved schedules); 0 otherwise

  bool operator==(const Instruction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

using Program = std::vector<Instruction>;

// Short names for logs and traces: F3, B3, W3, R3, SA3, RA3, SG3, RG3, AR, OPT; ".c" appended
// for chunk c > 0 ("F3.1").
std::string to_string(const Instruction& inst);
std::string to_string(Op op);
std::string to_string(const Program& program);  // space separated

enum class ScheduleKind {
  GPipe,                // all forwards, then all backwards
  OneFOneB,             // PipeDream-flush: warm-up forwards, then one forward / one backward
  ShiftedCriticalPath,  // Merak: 1F1B with recomputation moved off the critical path
  Interleaved1F1B,      // Megatron's virtual stages: each rank holds options.virtual_stages chunks
  ZeroBubble,           // 1F1B with backward split into activation and parameter gradients
};

// "gpipe", "1f1b", "shifted" (or "shifted_critical_path"), "interleaved", "zb" (or
// "zero_bubble"); anything else is an error naming the value and the accepted names.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string to_string(ScheduleKind kind);

struct ScheduleOptions {
  // Recomputation ratio per model stage (stages * virtual_stages entries, model stage
  // g = chunk * stages + rank), in [0, 1]: the share of the stage's forward that is checkpointed
  // and run again before its backward. Empty = no recomputation. Any ratio > 0 makes the
  // schedule emit Recompute(mb) for that stage; the ratio itself only scales its cost.
  std::vector<double> recompute;
  int virtual_stages = 1;       // Interleaved1F1B only
  bool reduce_and_step = true;  // end with ReduceGrads and OptimizerStep
};

Program gpipe(int stage, int stages, int micro_batches, const ScheduleOptions& options = {});
Program one_f_one_b(int stage, int stages, int micro_batches, const ScheduleOptions& options = {});
// Merak's shifted critical path schedule: 1F1B's order with two changes.
//  - The last stage never recomputes: its forward is followed at once by its backward, so it
//    holds one micro-batch and recomputing saves nothing, while its work is on the critical path.
//  - Every other stage runs Recompute(mb) before the blocking RecvGrad(mb) instead of after it
//    (recomputation needs no gradient). In the warm-up-to-steady hand-over and the cool-down,
//    where a stage waits for gradients, the recomputation fills the wait instead of delaying the
//    backward. So when the last stage is the slowest (it usually holds the LM head and loss),
//    the critical path runs along it and back through the other stages' backwards with no
//    recomputation on it; with a single micro-batch it never has any.
Program shifted_critical_path(int stage, int stages, int micro_batches,
                              const ScheduleOptions& options = {});
// Megatron-style interleaved 1F1B; needs micro_batches to be a multiple of stages.
Program interleaved_1f1b(int stage, int stages, int micro_batches,
                         const ScheduleOptions& options = {});
// Zero bubble in the manner of ZB-H1 (Qi et al., 2024): 1F1B's order, with each Backward
// computing only the activation gradients the previous stage waits for and a WeightGrad the
// parameters' one micro-batch later. Every stage but the last runs W(mb - 1) just before its
// blocking RecvGrad(mb), where 1F1B would wait for the next stage, and one warm-up forward more
// than 1F1B (so it holds one more micro-batch's activations), which runs while the first
// gradient is on its way; the last stage runs W(mb - 1) after sending B(mb)'s gradient, so the
// gradient never waits for a W. In the steady state no stage waits, and the drain's backwards
// travel back without the parameter products on their path.
Program zero_bubble(int stage, int stages, int micro_batches, const ScheduleOptions& options = {});

// Evaluation: each micro-batch's forward and its messages, nothing else (no backward, gradient
// reduction or update). Micro-batch after micro-batch, each through the rank's chunks in order
// (chunk c is model stage c * stages + stage), so every channel carries its messages in the
// order they are sent.
Program forward_only(int stage, int stages, int micro_batches, int virtual_stages = 1);

Program make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches,
                      const ScheduleOptions& options = {});
// Every rank's program.
std::vector<Program> make_schedules(ScheduleKind kind, int stages, int micro_batches,
                                    const ScheduleOptions& options = {});

// Whether the instruction moves a message between pipeline ranks (Send* or Recv*).
bool is_p2p(Op op);

// How the engine posts a program's messages: in batches, each posted as one unit (one
// ncclGroupStart/End). NCCL matches a pair's messages by posting order and runs what is posted
// apart one after another, so 1F1B's "send an activation, receive a gradient" must go together
// or two neighbours could each wait for the other. A batch is a run of consecutive Send* / Recv*
// instructions, and also takes the receives that follow it with only WeightGrad or Recompute
// instructions between (zero bubble's W fills the wait for the gradient it receives). A batch
// is posted at its first instruction; a receive is waited for where it stands in the program,
// which is where the simulator has it block. p2p_order.h proves every schedule safe under
// exactly this batching.
struct P2PBatches {
  std::vector<std::vector<size_t>> batches;  // instruction indices, in program order
  std::vector<int> batch_of;                 // per instruction: its batch, or -1
};
P2PBatches p2p_batches(const Program& program);

// Most micro-batches whose forward has run and whose backward has not, at any point of the
// program, per chunk summed over chunks: the count of activation sets the rank holds at once.
int peak_in_flight(const Program& program);

}  // namespace merak::runtime
