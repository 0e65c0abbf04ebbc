#include "merak/runtime/p2p_order.h"

#include <map>
#include <set>
#include <utility>

namespace merak::runtime {
namespace {

// What a message carries: an activation or a gradient of one micro-batch across one cut (the
// cut between model stages `cut` and `cut + 1`).
struct Message {
  bool grad = false;
  int micro_batch = 0;
  int cut = 0;
  bool operator==(const Message& o) const {
    return grad == o.grad && micro_batch == o.micro_batch && cut == o.cut;
  }
};

std::string describe(const Message& m) {
  return std::string(m.grad ? "gradient" : "activation") + " of micro-batch " +
         std::to_string(m.micro_batch) + " across cut " + std::to_string(m.cut) + "|" +
         std::to_string(m.cut + 1);
}

// One send or receive as a rank posts it.
struct Posted {
  int rank = 0, batch = 0;  // the rank and its batch (index among its p2p segments)
  Instruction inst{Op::Forward};
  bool send = false;
  int peer = 0;
  Message msg;
  int partner = -1;  // the matching operation on the peer, by channel order; -1: none
  bool done = false;
};

std::string rank_name(int r) { return "rank " + std::to_string(r); }

class Prover {
 public:
  Prover(const std::vector<Program>& programs, int v)
      : ranks_(int(programs.size())), v_(v < 1 ? 1 : v), batches_(programs.size()) {
    for (int r = 0; r < ranks_; ++r) post(r, programs[size_t(r)]);
  }

  P2POrderResult run() {
    match();
    simulate();
    for (const auto& b : batches_) result_.batches += int(b.size());
    return std::move(result_);
  }

 private:
  // The rank's batches (as the engine posts them), each operation with its peer and message.
  void post(int r, const Program& p) {
    const int last = ranks_ * v_ - 1;
    for (const std::vector<size_t>& posted : p2p_batches(p).batches) {
      const int batch = int(batches_[size_t(r)].size());
      batches_[size_t(r)].emplace_back();
      for (size_t i : posted) {
        const Instruction& in = p[i];
        const int g = in.chunk * ranks_ + r;  // the model stage
        Posted o;
        o.rank = r;
        o.batch = batch;
        o.inst = in;
        o.send = in.op == Op::SendActivation || in.op == Op::SendGrad;
        const bool to_next = in.op == Op::SendActivation || in.op == Op::RecvGrad;
        const int other = to_next ? g + 1 : g - 1;  // the neighbouring model stage
        if (in.chunk < 0 || in.chunk >= v_ || other < 0 || other > last) {
          result_.order.push_back(rank_name(r) + ": " + to_string(in) + " has no neighbour (" +
                                  (other < 0 ? "first" : "last") + " model stage or chunk out "
                                  "of range)");
          continue;
        }
        o.peer = other % ranks_;
        o.msg.grad = in.op == Op::SendGrad || in.op == Op::RecvGrad;
        o.msg.micro_batch = in.micro_batch;
        o.msg.cut = to_next ? g : g - 1;
        const std::pair<int, int> channel = o.send ? std::make_pair(r, o.peer)
                                                   : std::make_pair(o.peer, r);
        (o.send ? sends_ : recvs_)[channel].push_back(int(ops_.size()));
        batches_[size_t(r)].back().push_back(int(ops_.size()));
        ops_.push_back(o);
      }
    }
  }

  // Pairs each channel's k-th send with its k-th receive, and reports where they differ.
  void match() {
    std::set<std::pair<int, int>> channels;
    for (const auto& [c, _] : sends_) channels.insert(c);
    for (const auto& [c, _] : recvs_) channels.insert(c);
    for (const std::pair<int, int>& c : channels) {
      const std::vector<int>& s = sends_[c];
      const std::vector<int>& r = recvs_[c];
      const std::string name = rank_name(c.first) + " -> " + rank_name(c.second);
      bool reported = false;
      for (size_t k = 0; k < s.size() && k < r.size(); ++k) {
        Posted &a = ops_[size_t(s[k])], &b = ops_[size_t(r[k])];
        a.partner = r[k];
        b.partner = s[k];
        if (!reported && !(a.msg == b.msg)) {
          result_.order.push_back(name + ": message " + std::to_string(k) + " is " +
                                  to_string(a.inst) + " (" + describe(a.msg) +
                                  ") on the sender but " + to_string(b.inst) + " (" +
                                  describe(b.msg) + ") on the receiver");
          reported = true;  // the rest of the channel is off by the same slip
        }
      }
      if (s.size() != r.size()) {
        const bool more_sent = s.size() > r.size();
        const Posted& first = ops_[size_t((more_sent ? s : r)[std::min(s.size(), r.size())])];
        result_.order.push_back(name + ": " + std::to_string(s.size()) + " messages sent, " +
                                std::to_string(r.size()) + " received; the first unmatched is " +
                                to_string(first.inst) + " on " + rank_name(first.rank));
      }
    }
  }

  // Runs the batches: a rank's head batch finishes when each of its operations has met its
  // partner while the partner's batch was its rank's head.
  void simulate() {
    std::vector<size_t> head(size_t(ranks_), 0);
    std::vector<int> work;
    for (int r = 0; r < ranks_; ++r) work.push_back(r);
    while (!work.empty()) {
      const int r = work.back();
      work.pop_back();
      while (head[size_t(r)] < batches_[size_t(r)].size()) {
        bool finished = true;
        for (int i : batches_[size_t(r)][head[size_t(r)]]) {
          Posted& o = ops_[size_t(i)];
          if (o.done) continue;
          if (o.partner >= 0) {
            Posted& p = ops_[size_t(o.partner)];
            if (head[size_t(p.rank)] == size_t(p.batch)) {
              o.done = p.done = true;
              work.push_back(p.rank);  // its batch may be finished now
              continue;
            }
          }
          finished = false;
        }
        if (!finished) break;
        ++head[size_t(r)];
      }
    }
    report_waits(head);
  }

  std::string batch_text(int r, size_t b) const {
    std::string s = "[";
    for (int i : batches_[size_t(r)][b]) {
      if (s.size() > 1) s += ' ';
      s += to_string(ops_[size_t(i)].inst);
    }
    return s + "]";
  }

  void report_waits(const std::vector<size_t>& head) {
    // Who each blocked rank waits for: the peer of its first unfinished operation.
    std::map<int, int> waits_for;
    for (int r = 0; r < ranks_; ++r) {
      const size_t b = head[size_t(r)];
      if (b >= batches_[size_t(r)].size()) continue;
      for (int i : batches_[size_t(r)][b]) {
        const Posted& o = ops_[size_t(i)];
        if (o.done) continue;
        std::string line = rank_name(r) + " waits in batch " + std::to_string(b) + " " +
                           batch_text(r, b) + ": " + to_string(o.inst) + " ";
        if (o.partner < 0) {
          line += "has no matching " + std::string(o.send ? "receive" : "send") + " on " +
                  rank_name(o.peer);
        } else {
          const Posted& p = ops_[size_t(o.partner)];
          line += "needs " + to_string(p.inst) + " of " + rank_name(p.rank) + ", posted in its "
                  "batch " + std::to_string(p.batch) + " " + batch_text(p.rank, size_t(p.batch)) +
                  ", while it is at batch " + std::to_string(head[size_t(p.rank)]);
          waits_for[r] = p.rank;
        }
        result_.waits.push_back(line);
        break;
      }
    }
    if (waits_for.empty()) return;
    // Follow the waits from a blocked rank until one repeats: that is the cycle.
    std::vector<int> path;
    std::set<int> seen;
    for (int r = waits_for.begin()->first; waits_for.count(r) && !seen.count(r);
         r = waits_for[r]) {
      seen.insert(r);
      path.push_back(r);
    }
    const int back = path.empty() ? -1 : waits_for.count(path.back()) ? waits_for[path.back()]
                                                                      : -1;
    if (back < 0 || !seen.count(back)) return;  // the chain ends at a missing message
    std::string cycle = "cycle of waits:";
    bool in = false;
    for (int r : path) {
      in = in || r == back;
      if (in) cycle += " " + rank_name(r) + " ->";
    }
    result_.waits.push_back(cycle + " " + rank_name(back));
  }

  int ranks_, v_;
  std::vector<Posted> ops_;
  std::vector<std::vector<std::vector<int>>> batches_;  // per rank, per batch: ops_ indices
  std::map<std::pair<int, int>, std::vector<int>> sends_, recvs_;  // per (sender, receiver)
  P2POrderResult result_;
};

}  // namespace

std::string P2POrderResult::report() const {
  std::string s;
  for (const std::string& line : order) s += line + "\n";
  for (const std::string& line : waits) s += line + "\n";
  return s;
}

P2POrderResult check_p2p_order(const std::vector<Program>& programs, int virtual_stages) {
  return Prover(programs, virtual_stages).run();
}

}  // namespace merak::runtime
