// Static checks of a pipeline step's programs: every instruction in an order its data allows,
// and every micro-batch's work present exactly once on every model stage.
#include <string>
#include <vector>

#include "merak/runtime/simulator.h"

namespace merak::runtime {
namespace {

// What has happened to one micro-batch on one model stage so far.
struct MbState {
  int recv_act = 0, forward = 0, send_act = 0, recompute = 0, recv_grad = 0, backward = 0,
      send_grad = 0, weight_grad = 0;
};

class RankChecker {
 public:
  RankChecker(int rank, int stages, int v, int micro_batches, std::vector<std::string>& out)
      : rank_(rank), stages_(stages), v_(v), mbs_(micro_batches), out_(out),
        state_(static_cast<size_t>(v) * micro_batches) {}

  void run(const Program& p) {
    for (const Instruction& inst : p) split_ = split_ || inst.op == Op::WeightGrad;
    for (size_t i = 0; i < p.size(); ++i) step(p[i], static_cast<int>(i));
    finish();
  }

 private:
  void bad(const Instruction& inst, int at, const std::string& what) {
    out_.push_back("rank " + std::to_string(rank_) + ": " + to_string(inst) + " at " +
                   std::to_string(at) + " " + what);
  }

  void step(const Instruction& inst, int at) {
    if (inst.op == Op::ReduceGrads || inst.op == Op::OptimizerStep) return step_update(inst, at);
    if (inst.chunk < 0 || inst.chunk >= v_) return bad(inst, at, "has a chunk out of range");
    if (inst.micro_batch < 0 || inst.micro_batch >= mbs_)
      return bad(inst, at, "has a micro-batch out of range");
    const int g = inst.chunk * stages_ + rank_;
    const bool first = g == 0, last = g == stages_ * v_ - 1;
    MbState& s = state_[static_cast<size_t>(inst.chunk) * mbs_ + inst.micro_batch];
    switch (inst.op) {
      case Op::RecvActivation:
        if (first) bad(inst, at, "on the first model stage (nothing sends to it)");
        if (s.recv_act++) bad(inst, at, "repeats");
        break;
      case Op::Forward:
        if (!first && !s.recv_act) bad(inst, at, "before its RecvActivation");
        if (s.forward++) bad(inst, at, "repeats");
        break;
      case Op::SendActivation:
        if (last) bad(inst, at, "on the last model stage (no next stage)");
        if (!s.forward) bad(inst, at, "before its Forward");
        if (s.send_act++) bad(inst, at, "repeats");
        break;
      case Op::Recompute:
        if (!s.forward) bad(inst, at, "before its Forward");
        if (s.backward) bad(inst, at, "after its Backward");
        if (s.recompute++) bad(inst, at, "repeats");
        break;
      case Op::RecvGrad:
        if (last) bad(inst, at, "on the last model stage (nothing sends to it)");
        if (s.recv_grad++) bad(inst, at, "repeats");
        break;
      case Op::Backward:
        if (!s.forward) bad(inst, at, "before its Forward");
        if (!last && !s.recv_grad) bad(inst, at, "before its RecvGrad");
        if (s.backward++) bad(inst, at, "repeats");
        ++backwards_;
        break;
      case Op::WeightGrad:
        if (!s.backward) bad(inst, at, "before its Backward");
        if (s.weight_grad++) bad(inst, at, "repeats");
        ++weight_grads_;
        break;
      case Op::SendGrad:
        if (first) bad(inst, at, "on the first model stage (no previous stage)");
        if (!s.backward) bad(inst, at, "before its Backward");
        if (s.send_grad++) bad(inst, at, "repeats");
        break;
      default: break;
    }
  }

  void step_update(const Instruction& inst, int at) {
    if (backwards_ < v_ * mbs_) bad(inst, at, "before every Backward of the step");
    if (split_ && weight_grads_ < v_ * mbs_) bad(inst, at, "before every WeightGrad of the step");
    if (inst.op == Op::ReduceGrads && reduced_++) bad(inst, at, "repeats");
    if (inst.op == Op::OptimizerStep && stepped_++) bad(inst, at, "repeats");
    if (inst.op == Op::ReduceGrads && stepped_) bad(inst, at, "after OptimizerStep");
  }

  // Whatever a model stage must do for every micro-batch and did not.
  void finish() {
    for (int c = 0; c < v_; ++c) {
      const int g = c * stages_ + rank_;
      const bool first = g == 0, last = g == stages_ * v_ - 1;
      for (int mb = 0; mb < mbs_; ++mb) {
        const MbState& s = state_[static_cast<size_t>(c) * mbs_ + mb];
        std::string missing;
        if (!s.forward) missing += " Forward";
        if (!s.backward) missing += " Backward";
        if (split_ && !s.weight_grad) missing += " WeightGrad";
        if (!first && !s.recv_act) missing += " RecvActivation";
        if (!last && !s.send_act) missing += " SendActivation";
        if (!last && !s.recv_grad) missing += " RecvGrad";
        if (!first && !s.send_grad) missing += " SendGrad";
        if (!missing.empty())
          out_.push_back("rank " + std::to_string(rank_) + ": micro-batch " + std::to_string(mb) +
                         (v_ > 1 ? " chunk " + std::to_string(c) : "") + " lacks" + missing);
      }
    }
  }

  int rank_, stages_, v_, mbs_;
  std::vector<std::string>& out_;
  std::vector<MbState> state_;
  int backwards_ = 0, weight_grads_ = 0, reduced_ = 0, stepped_ = 0;
  bool split_ = false;  // the program splits backward (WeightGrad instructions)
};

}  // namespace

std::vector<std::string> check_programs(const std::vector<Program>& programs, int virtual_stages,
                                        int micro_batches) {
  std::vector<std::string> out;
  const int stages = static_cast<int>(programs.size());
  for (int r = 0; r < stages; ++r)
    RankChecker(r, stages, virtual_stages, micro_batches, out).run(programs[r]);
  return out;
}

}  // namespace merak::runtime
