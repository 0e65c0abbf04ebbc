#include "merak/runtime/simulator.h"

#include <algorithm>
#include <cstdint>

#include "merak/core/error.h"

namespace merak::runtime {

SimCosts SimCosts::uniform(int model_stages, double forward, double backward, double recompute,
                           double p2p) {
  SimCosts c;
  c.forward.assign(model_stages, forward);
  c.backward.assign(model_stages, backward);
  c.recompute.assign(model_stages, recompute);
  c.p2p = p2p;
  return c;
}

double SimResult::critical_time(Op op) const {
  double t = 0;
  for (const CriticalStep& s : critical_path)
    if (s.kind == CriticalStep::Instr && s.inst.op == op) t += s.end - s.start;
  return t;
}

std::string SimResult::report() const {
  std::string s;
  for (const std::string& v : violations) s += v + "\n";
  if (deadlocked) {
    s += "deadlock:\n";
    for (const BlockedRank& b : blocked)
      s += "  rank " + std::to_string(b.rank) + " blocked at " + std::to_string(b.index) + " (" +
           to_string(b.inst) + ") waiting for " + b.waits_for + "\n";
  }
  return s;
}

namespace {

bool is_send(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
bool is_recv(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }

// A message is named by what it carries, the model stage receiving it and the micro-batch: an
// index into a table (a layout search simulates hundreds of long pipelines).
using MessageKey = size_t;

struct Transfer {
  int from = 0, to = 0, send_index = 0;
  Instruction send{Op::SendActivation};
  double start = 0, end = 0;
  int link_prev = -1;      // the transfer before it on the same link
  bool link_bound = false;  // started when the link freed up, not when the send was issued
};

class Simulation {
 public:
  Simulation(const std::vector<Program>& programs, const SimCosts& costs, bool spans)
      : programs_(programs), costs_(costs), stages_(static_cast<int>(programs.size())),
        record_(spans) {
    MERAK_CHECK(stages_ >= 1, "simulate: no programs");
    const size_t n = costs.forward.size();
    MERAK_CHECK(n >= 1 && n % stages_ == 0, "simulate: costs for ", n,
                " model stages do not divide among ", stages_, " ranks");
    MERAK_CHECK(costs.backward.size() == n && costs.recompute.size() == n,
                "simulate: forward, backward and recompute costs need ", n, " entries each (got ",
                costs.backward.size(), ", ", costs.recompute.size(), ")");
    MERAK_CHECK(costs.reduce.empty() || costs.reduce.size() == static_cast<size_t>(stages_),
                "simulate: reduce costs need ", stages_, " entries, got ", costs.reduce.size());
    MERAK_CHECK(costs.optimizer.empty() || costs.optimizer.size() == static_cast<size_t>(stages_),
                "simulate: optimizer costs need ", stages_, " entries, got ",
                costs.optimizer.size());
    for (size_t g = 0; g < n; ++g)
      MERAK_CHECK(costs.forward[g] >= 0 && costs.backward[g] >= 0 && costs.recompute[g] >= 0,
                  "simulate: negative cost on model stage ", g);
    MERAK_CHECK(costs.p2p >= 0, "simulate: negative p2p cost ", costs.p2p);
    MERAK_CHECK(costs.concurrent >= 0 && costs.ranks_per_stage >= 1,
                "simulate: concurrent ", costs.concurrent, " and ranks_per_stage ",
                costs.ranks_per_stage, " (need >= 0 and >= 1)");
    v_ = static_cast<int>(n) / stages_;
  }

  SimResult run() {
    SimResult r;
    r.stages = stages_;
    r.virtual_stages = v_;
    int max_mb = -1;
    for (const Program& p : programs_)
      for (const Instruction& inst : p) max_mb = std::max(max_mb, inst.micro_batch);
    r.micro_batches = max_mb + 1;
    mbs_ = r.micro_batches;
    r.violations = check_programs(programs_, v_, r.micro_batches);

    pc_.assign(stages_, 0);
    clock_.assign(stages_, 0.0);
    waited_on_.assign(stages_, {});
    r.spans.assign(stages_, {});
    r.busy.assign(stages_, 0);
    r.wait.assign(stages_, 0);
    r.recompute.assign(stages_, 0);
    size_t instructions = 0;
    for (int rank = 0; rank < stages_; ++rank) {
      if (record_) {
        waited_on_[rank].reserve(programs_[rank].size());
        r.spans[rank].reserve(programs_[rank].size());
      }
      instructions += programs_[rank].size();
    }
    transfers_.reserve(instructions / 2);  // at most one a send
    sent_.assign(2 * size_t(stages_ * v_) * size_t(r.micro_batches), -1);
    link_last_.assign(size_t(stages_) * size_t(stages_), -1);
    if (costs_.concurrent > 0 && costs_.concurrent < double(stages_) * costs_.ranks_per_stage) {
      run_in_time_order(r);
    } else {
      // Each rank's time depends on the others' only through messages: every rank runs as far
      // as its messages allow, in turn, until none can go on.
      for (bool progress = true; progress;) {
        progress = false;
        for (int rank = 0; rank < stages_; ++rank)
          while (pc_[rank] < static_cast<int>(programs_[rank].size()) && execute(rank, r))
            progress = true;
      }
    }
    summarise(r);
    return r;
  }

 private:
  int model_stage(int rank, const Instruction& inst) const { return inst.chunk * stages_ + rank; }

  // The message a send produces or a receive consumes, and the peer rank; false when there is
  // no such peer (reported by the order checks).
  bool message(int rank, const Instruction& inst, MessageKey& key, int& peer) const {
    const int g = model_stage(rank, inst), last = stages_ * v_ - 1;
    int to = 0;
    bool grad = false;
    switch (inst.op) {
      case Op::SendActivation: to = g + 1; break;
      case Op::RecvActivation: to = g; peer = g - 1; break;
      case Op::SendGrad: to = g - 1; grad = true; break;
      case Op::RecvGrad: to = g; peer = g + 1; grad = true; break;
      default: return false;
    }
    if (is_send(inst.op)) peer = to;
    if (peer < 0 || peer > last || inst.chunk < 0 || inst.chunk >= v_ || inst.micro_batch < 0)
      return false;
    peer %= stages_;
    key = (size_t(grad) * size_t(last + 1) + size_t(to)) * size_t(mbs_) + size_t(inst.micro_batch);
    return true;
  }

  double compute_cost(int rank, const Instruction& inst) const {
    const int g = model_stage(rank, inst);
    const bool in_range = inst.chunk >= 0 && inst.chunk < v_;
    switch (inst.op) {
      case Op::Forward: return in_range ? costs_.forward[g] : 0;
      case Op::Backward: return in_range ? costs_.backward[g] : 0;
      case Op::Recompute: return in_range ? costs_.recompute[g] : 0;
      case Op::WeightGrad:
        return in_range && !costs_.weight_grad.empty() ? costs_.weight_grad[g] : 0;
      case Op::ReduceGrads: return costs_.reduce.empty() ? 0 : costs_.reduce[rank];
      case Op::OptimizerStep: return costs_.optimizer.empty() ? 0 : costs_.optimizer[rank];
      default: return 0;
    }
  }

  // Shared cores: a computation's length depends on how many ranks compute meanwhile, so time
  // advances for all ranks together, from one event (a computation ends, a wait ends) to the
  // next, every computing rank progressing at the rate of the interval.
  void run_in_time_order(SimResult& r) {
    std::vector<double> left(size_t(stages_), -1);  // full-speed seconds left; -1: not computing
    std::vector<double> began(size_t(stages_), 0);
    double now = 0;
    while (true) {
      // Every rank free at `now` goes on until it starts a computation or must wait (a send can
      // free a rank already passed: hence the repeat).
      for (bool progress = true; progress;) {
        progress = false;
        for (int rank = 0; rank < stages_; ++rank)
          while (left[size_t(rank)] < 0 && clock_[rank] <= now &&
                 pc_[rank] < static_cast<int>(programs_[rank].size())) {
            const double c = compute_cost(rank, programs_[rank][pc_[rank]]);  // 0: a message
            if (c > 0) {
              left[size_t(rank)] = c;
              began[size_t(rank)] = now;
              break;
            }
            if (!execute(rank, r)) break;
            progress = true;
          }
      }
      int computing = 0;
      double least = 0;
      for (int rank = 0; rank < stages_; ++rank)
        if (left[size_t(rank)] >= 0) {
          least = computing == 0 ? left[size_t(rank)] : std::min(least, left[size_t(rank)]);
          ++computing;
        }
      const double rate =
          std::min(1.0, costs_.concurrent / (double(computing) * costs_.ranks_per_stage));
      double next = computing > 0 ? now + least / rate : -1;
      for (int rank = 0; rank < stages_; ++rank)
        if (left[size_t(rank)] < 0 && clock_[rank] > now &&
            pc_[rank] < static_cast<int>(programs_[rank].size()) && (next < 0 || clock_[rank] < next))
          next = clock_[rank];
      if (next < 0) return;  // every rank finished, or the rest are blocked (a deadlock)
      // A computation ending is the event when it comes first: its work is then done exactly.
      const bool ends = computing > 0 && next == now + least / rate;
      const double done = ends ? least : (next - now) * rate;
      for (int rank = 0; rank < stages_; ++rank) {
        double& l = left[size_t(rank)];
        if (l < 0) continue;
        const Instruction& inst = programs_[rank][pc_[rank]];
        l -= done;
        if (l > 1e-9 * compute_cost(rank, inst)) continue;
        l = -1;
        record(rank, Span{rank, pc_[rank], inst, began[size_t(rank)], next}, -1, r);
      }
      now = next;
    }
  }

  // Books a finished instruction and moves the rank past it.
  void record(int rank, const Span& span, int waited, SimResult& r) {
    const double d = span.end - span.start;
    if (is_recv(span.inst.op)) r.wait[rank] += d;
    else r.busy[rank] += d;
    if (span.inst.op == Op::Recompute) r.recompute[rank] += d;
    if (record_) {
      waited_on_[rank].push_back(waited);
      r.spans[rank].push_back(span);
    }
    clock_[rank] = span.end;
    ++pc_[rank];
  }

  // Runs rank's next instruction; false when it is a receive whose message was not sent yet.
  bool execute(int rank, SimResult& r) {
    const int index = pc_[rank];
    const Instruction& inst = programs_[rank][index];
    const double t = clock_[rank];
    Span span{rank, index, inst, t, t};
    int waited = -1;
    MessageKey key = 0;
    int peer = 0;
    if (is_recv(inst.op)) {
      if (message(rank, inst, key, peer)) {
        const int sent = sent_[key];
        if (sent < 0) return false;
        const Transfer& tr = transfers_[size_t(sent)];
        span.end = std::max(t, tr.end);
        if (tr.end > t) waited = sent;
      }
    } else if (is_send(inst.op)) {
      if (message(rank, inst, key, peer) && sent_[key] < 0) {
        int& last = link_last_[size_t(rank) * size_t(stages_) + size_t(peer)];
        Transfer tr{rank, peer, index, inst, t, 0, last, false};
        if (tr.link_prev >= 0 && transfers_[tr.link_prev].end > t) {
          tr.start = transfers_[tr.link_prev].end;
          tr.link_bound = true;
        }
        tr.end = tr.start + costs_.p2p;
        sent_[key] = static_cast<int>(transfers_.size());
        last = static_cast<int>(transfers_.size());
        transfers_.push_back(tr);
      }
    } else {
      span.end = t + compute_cost(rank, inst);
    }
    record(rank, span, waited, r);
    return true;
  }

  // Who a blocked receive waits for, in words.
  std::string blocker(int rank, const Instruction& inst) const {
    MessageKey key = 0;
    int peer = 0;
    if (!message(rank, inst, key, peer)) return "a sender that does not exist";
    const Op send = inst.op == Op::RecvActivation ? Op::SendActivation : Op::SendGrad;
    const int g = model_stage(rank, inst) + (inst.op == Op::RecvActivation ? -1 : 1);
    const Instruction want{send, inst.micro_batch, g / stages_};
    const Program& p = programs_[peer];
    auto it = std::find(p.begin(), p.end(), want);
    std::string s = to_string(want) + " on rank " + std::to_string(peer);
    if (it == p.end()) return s + ", which never sends it";
    const int at = pc_[peer];
    s += " (at " + std::to_string(it - p.begin()) + ")";
    if (at < static_cast<int>(p.size()))
      s += ", itself blocked at " + std::to_string(at) + " (" + to_string(p[at]) + ")";
    return s;
  }

  void summarise(SimResult& r) {
    for (int rank = 0; rank < stages_; ++rank) {
      const Program& p = programs_[rank];
      if (pc_[rank] < static_cast<int>(p.size())) {
        r.deadlocked = true;
        r.blocked.push_back({rank, pc_[rank], p[pc_[rank]], blocker(rank, p[pc_[rank]])});
      }
    }
    double total_busy = 0;
    for (int rank = 0; rank < stages_; ++rank) {
      r.step_time = std::max(r.step_time, clock_[rank]);
      total_busy += r.busy[rank];
    }
    r.bubble = r.step_time > 0 ? 1 - total_busy / (stages_ * r.step_time) : 0;
    if (!r.deadlocked && record_) r.critical_path = critical_path(r);
  }

  // Walks back from the instruction that ends the step: along its rank while the rank was not
  // waiting, and into the sender (through the transfer, or the link's earlier transfer) where a
  // receive waited.
  std::vector<CriticalStep> critical_path(const SimResult& r) const {
    std::vector<CriticalStep> path;
    int rank = -1, index = -1;
    for (int q = 0; q < stages_; ++q)
      if (!r.spans[q].empty() && (rank < 0 || clock_[q] > clock_[rank])) {
        rank = q;
        index = static_cast<int>(r.spans[q].size()) - 1;
      }
    while (rank >= 0 && index >= 0) {
      const Span& s = r.spans[rank][index];
      int tid = waited_on_[rank][index];
      if (tid < 0) {
        if (s.end > s.start) path.push_back({CriticalStep::Instr, rank, rank, index, s.inst,
                                             s.start, s.end});
        --index;
        continue;
      }
      // Follow the transfers back to the send that started the chain.
      while (true) {
        const Transfer& tr = transfers_[tid];
        path.push_back({CriticalStep::Transfer, tr.from, tr.to, tr.send_index, tr.send, tr.start,
                        tr.end});
        if (!tr.link_bound) break;
        tid = tr.link_prev;
      }
      const Transfer& origin = transfers_[tid];
      rank = origin.from;
      index = origin.send_index - 1;
    }
    std::reverse(path.begin(), path.end());
    return path;
  }

  const std::vector<Program>& programs_;
  const SimCosts& costs_;
  int stages_, v_ = 1;
  bool record_;  // spans and the critical path
  std::vector<int> pc_;
  std::vector<double> clock_;
  std::vector<std::vector<int>> waited_on_;  // per span: the transfer its receive waited for
  std::vector<Transfer> transfers_;
  int mbs_ = 0;               // micro-batches: the message table's last dimension
  std::vector<int> sent_;       // message -> its transfer, -1 before it is sent
  std::vector<int> link_last_;  // link from * stages + to -> its latest transfer, -1: none
};

}  // namespace

SimResult simulate(const std::vector<Program>& programs, const SimCosts& costs, bool spans) {
  return Simulation(programs, costs, spans).run();
}

}  // namespace merak::runtime
