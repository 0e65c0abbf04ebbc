// The p2p-order proof: every schedule, as the engine batches its messages, matches in order on
// every channel and never waits in a cycle (pp 2..8 x micro-batches 1..32 x virtual stages 1..4,
// recomputation off and on); and the proof does catch hand-made programs that would hang or
// mismatch.
#include <catch2/catch.hpp>

#include "merak/runtime/p2p_order.h"
#include "merak/runtime/schedule.h"

using namespace merak::runtime;

namespace {

Instruction in(Op op, int mb, int chunk = 0) { return {op, mb, chunk}; }

}  // namespace

TEST_CASE("consecutive sends and receives go as one batch", "[p2p_order]") {
  const Program p = {in(Op::RecvActivation, 1), in(Op::Forward, 1),   in(Op::SendActivation, 1),
                     in(Op::RecvGrad, 0),       in(Op::Backward, 0),  in(Op::SendGrad, 0),
                     in(Op::RecvActivation, 2), in(Op::WeightGrad, 0), in(Op::RecvGrad, 1),
                     in(Op::Recompute, 1),      in(Op::SendGrad, 1),  in(Op::ReduceGrads, -1)};
  const P2PBatches b = p2p_batches(p);
  using Batch = std::vector<size_t>;
  REQUIRE(b.batches.size() == 4);
  CHECK(b.batches[0] == Batch{0});
  CHECK(b.batches[1] == Batch{2, 3});     // SA1 RG0
  CHECK(b.batches[2] == Batch{5, 6, 8});  // SG0 RA2, and RG1 past the WeightGrad
  CHECK(b.batches[3] == Batch{10});       // a send past a WeightGrad starts a batch
  CHECK(b.batch_of == std::vector<int>{0, -1, 1, 1, -1, 2, 2, -1, 2, -1, 3, -1});
}

TEST_CASE("every schedule's messages match in order and cannot deadlock", "[p2p_order]") {
  int cases = 0;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                            ScheduleKind::ShiftedCriticalPath, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::ZeroBubble}) {
    const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
    for (int v = 1; v <= (interleaved ? 4 : 1); ++v)
      for (int S = 2; S <= 8; ++S)
        for (int M = 1; M <= 32; ++M) {
          if (interleaved && M % S != 0) continue;  // the schedule's own requirement
          for (bool rc : {false, true}) {
            ScheduleOptions o;
            o.virtual_stages = v;
            if (rc) o.recompute.assign(size_t(S * v), 1.0);
            const P2POrderResult r = check_p2p_order(make_schedules(kind, S, M, o), v);
            INFO(to_string(kind) << " pp=" << S << " mb=" << M << " v=" << v << " recompute="
                                 << rc << "\n" << r.report());
            REQUIRE(r.ok());
            REQUIRE(r.batches > 0);
            ++cases;
          }
        }
  }
  // 4 schedules x 7 x 32 + interleaved's multiples of pp at v = 1..4, each with and without
  // recomputation.
  CHECK(cases == 2 * (4 * 7 * 32 + 4 * (16 + 10 + 8 + 6 + 5 + 4 + 4)));
}

TEST_CASE("a send and a receive posted apart by both neighbours is a cycle", "[p2p_order]") {
  // Each rank sends first, in a batch of its own, and only then receives: under order matching
  // without buffering, rank 0's send waits for rank 1's receive, which waits behind rank 1's send,
  // which waits for rank 0's receive.
  const std::vector<Program> p = {
      {in(Op::Forward, 0), in(Op::SendActivation, 0), in(Op::Forward, 1), in(Op::RecvGrad, 0),
       in(Op::Backward, 0)},
      {in(Op::Backward, 0), in(Op::SendGrad, 0), in(Op::Backward, 1), in(Op::RecvActivation, 0),
       in(Op::Forward, 0)},
  };
  const P2POrderResult r = check_p2p_order(p);
  CHECK(r.order.empty());
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.waits.size() == 3);
  CHECK(r.waits[0] == "rank 0 waits in batch 0 [SA0]: SA0 needs RA0 of rank 1, posted in its "
                      "batch 1 [RA0], while it is at batch 0");
  CHECK(r.waits[2] == "cycle of waits: rank 0 -> rank 1 -> rank 0");

  // The same two exchanges, each posted as one batch, finish.
  const std::vector<Program> grouped = {
      {in(Op::Forward, 0), in(Op::SendActivation, 0), in(Op::RecvGrad, 0), in(Op::Backward, 0)},
      {in(Op::Backward, 0), in(Op::SendGrad, 0), in(Op::RecvActivation, 0), in(Op::Forward, 0)},
  };
  const P2POrderResult g = check_p2p_order(grouped);
  INFO(g.report());
  CHECK(g.ok());
}

TEST_CASE("receives in another order than the sends are reported per channel", "[p2p_order]") {
  const std::vector<Program> p = {
      {in(Op::Forward, 0), in(Op::SendActivation, 0), in(Op::Forward, 1),
       in(Op::SendActivation, 1)},
      {in(Op::RecvActivation, 1), in(Op::Forward, 1), in(Op::RecvActivation, 0),
       in(Op::Forward, 0)},
  };
  const P2POrderResult r = check_p2p_order(p);
  REQUIRE(r.order.size() == 1);
  CHECK(r.order[0] == "rank 0 -> rank 1: message 0 is SA0 (activation of micro-batch 0 across "
                      "cut 0|1) on the sender but RA1 (activation of micro-batch 1 across cut "
                      "0|1) on the receiver");
}

TEST_CASE("a message nobody receives leaves its sender waiting", "[p2p_order]") {
  const std::vector<Program> p = {
      {in(Op::Forward, 0), in(Op::SendActivation, 0), in(Op::Forward, 1),
       in(Op::SendActivation, 1)},
      {in(Op::RecvActivation, 0), in(Op::Forward, 0)},
  };
  const P2POrderResult r = check_p2p_order(p);
  REQUIRE(r.order.size() == 1);
  CHECK(r.order[0] == "rank 0 -> rank 1: 2 messages sent, 1 received; the first unmatched is "
                      "SA1 on rank 0");
  REQUIRE(r.waits.size() == 1);
  CHECK(r.waits[0] == "rank 0 waits in batch 1 [SA1]: SA1 has no matching receive on rank 1");
}

TEST_CASE("interleaved chunks talk around the ring: the last rank feeds the first",
          "[p2p_order]") {
  ScheduleOptions o;
  o.virtual_stages = 2;
  const std::vector<Program> p = make_schedules(ScheduleKind::Interleaved1F1B, 2, 4, o);
  // Swap two of rank 1's chunk-0 -> chunk-1 sends to rank 0: the proof sees the ring channel.
  std::vector<Program> bad = p;
  std::vector<size_t> at;
  for (size_t i = 0; i < bad[1].size(); ++i)
    if (bad[1][i].op == Op::SendActivation && bad[1][i].chunk == 0) at.push_back(i);
  REQUIRE(at.size() == 4);
  std::swap(bad[1][at[0]], bad[1][at[1]]);
  CHECK(check_p2p_order(p, 2).ok());
  const P2POrderResult r = check_p2p_order(bad, 2);
  REQUIRE_FALSE(r.order.empty());
  CHECK(r.order[0].rfind("rank 1 -> rank 0: message 0 is SA1 ", 0) == 0);
}

TEST_CASE("evaluation's forward-only programs match in order and cannot deadlock",
          "[p2p_order]") {
  for (int v = 1; v <= 4; ++v)
    for (int S = 1; S <= 8; ++S)
      for (int M = 1; M <= 12; ++M) {
        std::vector<Program> programs;
        for (int s = 0; s < S; ++s) programs.push_back(forward_only(s, S, M, v));
        const P2POrderResult r = check_p2p_order(programs, v);
        INFO("pp=" << S << " mb=" << M << " v=" << v << "\n" << r.report());
        REQUIRE(r.ok());
        // Each micro-batch's forward once on every chunk, and nothing but forwards and
        // activation messages.
        for (const Program& p : programs) {
          int forwards = 0;
          for (const Instruction& i : p) {
            forwards += i.op == Op::Forward;
            REQUIRE((i.op == Op::Forward || i.op == Op::SendActivation ||
                     i.op == Op::RecvActivation));
          }
          REQUIRE(forwards == M * v);
        }
      }
}
