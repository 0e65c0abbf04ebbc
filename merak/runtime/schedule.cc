#include "merak/runtime/schedule.h"

#include <algorithm>
#include <utility>

#include "merak/core/error.h"

namespace merak::runtime {

std::string to_string(Op op) {
  switch (op) {
    case Op::Forward: return "F";
    case Op::Backward: return "B";
    case Op::WeightGrad: return "W";
    case Op::Recompute: return "R";
    case Op::SendActivation: return "SA";
    case Op::RecvActivation: return "RA";
    case Op::SendGrad: return "SG";
    case Op::RecvGrad: return "RG";
    case Op::ReduceGrads: return "AR";
    case Op::OptimizerStep: return "OPT";
  }
  return "?";
}

std::string to_string(const Instruction& inst) {
  std::string s = to_string(inst.op);
  if (inst.micro_batch >= 0) s += std::to_string(inst.micro_batch);
  if (inst.chunk > 0) s += "." + std::to_string(inst.chunk);
  return s;
}

std::string to_string(const Program& program) {
  std::string s;
  for (const Instruction& inst : program) {
    if (!s.empty()) s += ' ';
    s += to_string(inst);
  }
  return s;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "shifted" || name == "shifted_critical_path") return ScheduleKind::ShiftedCriticalPath;
  if (name == "interleaved") return ScheduleKind::Interleaved1F1B;
  if (name == "zb" || name == "zero_bubble") return ScheduleKind::ZeroBubble;
  MERAK_FAIL("unknown pipeline schedule '", name,
             "' (expected gpipe, 1f1b, shifted, interleaved or zb)");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::ShiftedCriticalPath: return "shifted";
    case ScheduleKind::Interleaved1F1B: return "interleaved";
    case ScheduleKind::ZeroBubble: return "zb";
  }
  return "?";
}

namespace {

void check_arguments(int stage, int stages, int micro_batches, const ScheduleOptions& o) {
  MERAK_CHECK(stages >= 1, "pipeline stages must be >= 1, got ", stages);
  MERAK_CHECK(stage >= 0 && stage < stages, "pipeline stage ", stage, " out of range [0, ",
              stages, ")");
  MERAK_CHECK(micro_batches >= 1, "micro-batches must be >= 1, got ", micro_batches);
  MERAK_CHECK(o.virtual_stages >= 1, "virtual stages must be >= 1, got ", o.virtual_stages);
  const size_t model_stages = static_cast<size_t>(stages) * o.virtual_stages;
  MERAK_CHECK(o.recompute.empty() || o.recompute.size() == model_stages,
              "recompute ratios: expected ", model_stages, " entries (one per model stage), got ",
              o.recompute.size());
  for (size_t g = 0; g < o.recompute.size(); ++g)
    MERAK_CHECK(o.recompute[g] >= 0 && o.recompute[g] <= 1, "recompute ratio of model stage ", g,
                " must be in [0, 1], got ", o.recompute[g]);
}

// Whether model stage g checkpoints its forward.
bool recomputes(const ScheduleOptions& o, int g) {
  return !o.recompute.empty() && o.recompute[g] > 0;
}

// Builds a program for one rank of a non-interleaved pipeline, instruction by instruction.
class Builder {
 public:
  Builder(int stage, int stages, bool recompute)
      : stage_(stage), stages_(stages), recompute_(recompute) {}

  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }

  void forward(int mb) {
    if (!first()) emit(Op::RecvActivation, mb);
    emit(Op::Forward, mb);
    if (!last()) emit(Op::SendActivation, mb);
  }
  // Where the recomputation goes relative to the gradient receive is the schedule's choice:
  // after it (recompute_early = false) is what checkpointing inside backward gives; before it
  // lets the recomputation run while the gradient is still on its way.
  void backward(int mb, bool recompute_early) {
    if (recompute_ && recompute_early) emit(Op::Recompute, mb);
    if (!last()) emit(Op::RecvGrad, mb);
    if (recompute_ && !recompute_early) emit(Op::Recompute, mb);
    emit(Op::Backward, mb);
    if (!first()) emit(Op::SendGrad, mb);
  }
  void weight_grad(int mb) { emit(Op::WeightGrad, mb); }
  void finish(bool reduce_and_step) {
    if (!reduce_and_step) return;
    emit(Op::ReduceGrads, -1);
    emit(Op::OptimizerStep, -1);
  }
  Program take() { return std::move(program_); }

 private:
  void emit(Op op, int mb) { program_.push_back({op, mb, 0}); }
  int stage_, stages_;
  bool recompute_;
  Program program_;
};

}  // namespace

Program gpipe(int stage, int stages, int micro_batches, const ScheduleOptions& options) {
  check_arguments(stage, stages, micro_batches, options);
  MERAK_CHECK(options.virtual_stages == 1, "gpipe has no virtual stages (got ",
              options.virtual_stages, ")");
  Builder b(stage, stages, recomputes(options, stage));
  for (int mb = 0; mb < micro_batches; ++mb) b.forward(mb);
  for (int mb = 0; mb < micro_batches; ++mb) b.backward(mb, /*recompute_early=*/false);
  b.finish(options.reduce_and_step);
  return b.take();
}

Program forward_only(int stage, int stages, int micro_batches, int virtual_stages) {
  ScheduleOptions options;
  options.virtual_stages = virtual_stages;
  check_arguments(stage, stages, micro_batches, options);
  const int model_stages = stages * virtual_stages;
  Program program;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int c = 0; c < virtual_stages; ++c) {
      const int g = c * stages + stage;
      if (g > 0) program.push_back({Op::RecvActivation, mb, c});
      program.push_back({Op::Forward, mb, c});
      if (g < model_stages - 1) program.push_back({Op::SendActivation, mb, c});
    }
  return program;
}

Program one_f_one_b(int stage, int stages, int micro_batches, const ScheduleOptions& options) {
  check_arguments(stage, stages, micro_batches, options);
  MERAK_CHECK(options.virtual_stages == 1, "1f1b has no virtual stages (use interleaved), got ",
              options.virtual_stages);
  Builder b(stage, stages, recomputes(options, stage));
  // Stage s runs S - s - 1 forwards before its first backward, so it holds at most S - s
  // micro-batches' activations.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int mb = 0; mb < warmup; ++mb) b.forward(mb);
  for (int mb = warmup; mb < micro_batches; ++mb) {
    b.forward(mb);
    b.backward(mb - warmup, /*recompute_early=*/false);
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb)
    b.backward(mb, /*recompute_early=*/false);
  b.finish(options.reduce_and_step);
  return b.take();
}

Program shifted_critical_path(int stage, int stages, int micro_batches,
                              const ScheduleOptions& options) {
  check_arguments(stage, stages, micro_batches, options);
  MERAK_CHECK(options.virtual_stages == 1, "shifted has no virtual stages, got ",
              options.virtual_stages);
  const bool last = stage == stages - 1;
  Builder b(stage, stages, !last && recomputes(options, stage));
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int mb = 0; mb < warmup; ++mb) b.forward(mb);
  for (int mb = warmup; mb < micro_batches; ++mb) {
    b.forward(mb);
    b.backward(mb - warmup, /*recompute_early=*/true);
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb)
    b.backward(mb, /*recompute_early=*/true);
  b.finish(options.reduce_and_step);
  return b.take();
}

Program zero_bubble(int stage, int stages, int micro_batches, const ScheduleOptions& options) {
  check_arguments(stage, stages, micro_batches, options);
  MERAK_CHECK(options.virtual_stages == 1, "zb has no virtual stages, got ",
              options.virtual_stages);
  const bool last = stage == stages - 1;
  Builder b(stage, stages, recomputes(options, stage));
  int due = -1;  // the micro-batch whose WeightGrad comes next
  auto backward = [&](int mb) {
    if (!last && due >= 0) b.weight_grad(due);  // fills the wait for RecvGrad(mb)
    b.backward(mb, /*recompute_early=*/false);
    if (last && due >= 0) b.weight_grad(due);   // after SendGrad(mb): B(mb) went first
    due = mb;
  };
  // One forward more than 1F1B before the first backward (not on the last stage, whose
  // backward others wait for): it runs while the first gradient is on its way.
  const int warmup = last ? 0 : std::min(stages - stage, micro_batches);
  for (int mb = 0; mb < warmup; ++mb) b.forward(mb);
  for (int mb = warmup; mb < micro_batches; ++mb) {
    b.forward(mb);
    backward(mb - warmup);
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb) backward(mb);
  if (due >= 0) b.weight_grad(due);
  b.finish(options.reduce_and_step);
  return b.take();
}

Program interleaved_1f1b(int stage, int stages, int micro_batches,
                         const ScheduleOptions& options) {
  check_arguments(stage, stages, micro_batches, options);
  const int v = options.virtual_stages;
  MERAK_CHECK(micro_batches % stages == 0, "interleaved 1f1b needs micro-batches (",
              micro_batches, ") to be a multiple of the pipeline stages (", stages, ")");
  // Work units of this rank: M * v forwards and as many backwards. Micro-batches go through
  // the chunks in groups of `stages`: unit k is micro-batch (k / (S v)) S + k % S on chunk
  // (k / S) % v for forwards, and on chunk v - 1 - (k / S) % v for backwards (the last chunk's
  // backward comes first).
  // One chunk a rank is 1F1B, message for message.
  if (v == 1) return one_f_one_b(stage, stages, micro_batches, options);
  const int units = micro_batches * v;
  auto unit_mb = [&](int k) { return (k / (stages * v)) * stages + k % stages; };
  auto fwd_chunk = [&](int k) { return (k / stages) % v; };
  auto bwd_chunk = [&](int k) { return v - 1 - (k / stages) % v; };
  const int last_g = stages * v - 1;
  // Compute units in order: forwards (k >= 0) and backwards (~k).
  std::vector<int> order;
  // Warm-up: the first backward on this rank needs the micro-batch to have passed through all
  // later ranks' chunks and come back: 2 (S - s - 1) forwards for the ranks after this one, plus
  // (v - 1) S for the earlier chunks of the first group.
  const int warmup = std::min(2 * (stages - stage - 1) + (v - 1) * stages, units);
  for (int k = 0; k < warmup; ++k) order.push_back(k);
  for (int k = warmup; k < units; ++k) {
    order.push_back(k);
    order.push_back(~(k - warmup));
  }
  for (int k = units - warmup; k < units; ++k) order.push_back(~k);
  // Messages go as in Megatron's interleaved schedule: each direction's receive for the next
  // unit comes right after the send of the unit before (activations after a forward, gradients
  // after a backward), so every rank shifts its messages one hop around the ring together.
  // Received where a unit needs them instead, rank s's last chunk and rank s + 1's first would
  // each wait for the other when messages match by order (p2p_order.h checks every case).
  Program p;
  auto emit = [&](Op op, int mb, int chunk) { p.push_back({op, mb, chunk}); };
  auto recv_forward = [&](int k) {
    if (k >= units) return;
    const int c = fwd_chunk(k);
    if (c * stages + stage > 0) emit(Op::RecvActivation, unit_mb(k), c);
  };
  auto recv_backward = [&](int k) {
    if (k >= units) return;
    const int c = bwd_chunk(k);
    if (c * stages + stage < last_g) emit(Op::RecvGrad, unit_mb(k), c);
  };
  recv_forward(0);
  if (warmup == 0) recv_backward(0);
  for (int unit : order) {
    if (unit >= 0) {
      const int k = unit, c = fwd_chunk(k), mb = unit_mb(k), g = c * stages + stage;
      emit(Op::Forward, mb, c);
      if (g < last_g) emit(Op::SendActivation, mb, c);
      recv_forward(k + 1);
      if (k + 1 == warmup) recv_backward(0);  // the first backward's gradient
    } else {
      const int k = ~unit, c = bwd_chunk(k), mb = unit_mb(k), g = c * stages + stage;
      if (recomputes(options, g)) emit(Op::Recompute, mb, c);
      emit(Op::Backward, mb, c);
      if (g > 0) emit(Op::SendGrad, mb, c);
      recv_backward(k + 1);
    }
  }
  if (options.reduce_and_step) {
    emit(Op::ReduceGrads, -1, 0);
    emit(Op::OptimizerStep, -1, 0);
  }
  return p;
}

Program make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches,
                      const ScheduleOptions& options) {
  switch (kind) {
    case ScheduleKind::GPipe: return gpipe(stage, stages, micro_batches, options);
    case ScheduleKind::OneFOneB: return one_f_one_b(stage, stages, micro_batches, options);
    case ScheduleKind::ShiftedCriticalPath:
      return shifted_critical_path(stage, stages, micro_batches, options);
    case ScheduleKind::Interleaved1F1B:
      return interleaved_1f1b(stage, stages, micro_batches, options);
    case ScheduleKind::ZeroBubble: return zero_bubble(stage, stages, micro_batches, options);
  }
  MERAK_FAIL("unknown schedule kind");
}

std::vector<Program> make_schedules(ScheduleKind kind, int stages, int micro_batches,
                                    const ScheduleOptions& options) {
  std::vector<Program> programs;
  for (int s = 0; s < stages; ++s)
    programs.push_back(make_schedule(kind, s, stages, micro_batches, options));
  return programs;
}

bool is_p2p(Op op) {
  return op == Op::SendActivation || op == Op::RecvActivation || op == Op::SendGrad ||
         op == Op::RecvGrad;
}

P2PBatches p2p_batches(const Program& program) {
  P2PBatches out;
  out.batch_of.assign(program.size(), -1);
  bool open = false;     // the last batch may still take instructions
  bool skipped = false;  // ... but only receives: a WeightGrad or Recompute lies between
  for (size_t i = 0; i < program.size(); ++i) {
    const Op op = program[i].op;
    if (!is_p2p(op)) {
      // Neither consumes nor produces a message: a later receive may still join the batch.
      const bool neutral = op == Op::WeightGrad || op == Op::Recompute;
      open = open && neutral;
      skipped = skipped || neutral;
      continue;
    }
    const bool recv = op == Op::RecvActivation || op == Op::RecvGrad;
    if (!open || (skipped && !recv)) {
      out.batches.emplace_back();
      skipped = false;
    }
    out.batch_of[i] = int(out.batches.size()) - 1;
    out.batches.back().push_back(i);
    open = true;
  }
  return out;
}

int peak_in_flight(const Program& program) {
  int now = 0, peak = 0;
  for (const Instruction& inst : program) {
    if (inst.op == Op::Forward) peak = std::max(peak, ++now);
    if (inst.op == Op::Backward) --now;
  }
  return peak;
}

}  // namespace merak::runtime
