// The simulator on hand-written programs: timing by hand, deadlocks, order violations, the
// critical path and the Chrome-trace export.
#include <catch2/catch.hpp>

#include <string>

#include "merak/runtime/schedule.h"
#include "merak/runtime/simulator.h"
#include "merak/runtime/simulator_trace.h"

using namespace merak::runtime;

namespace {

Instruction I(Op op, int mb = -1) { return {op, mb, 0}; }

bool any_contains(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("two ranks, one micro-batch, timed by hand", "[simulator]") {
  // Rank 0: F0 (1s), send; wait for the gradient; B0 (2s). Rank 1: receive, F0 (3s), B0 (4s).
  const std::vector<Program> p = {
      {I(Op::Forward, 0), I(Op::SendActivation, 0), I(Op::RecvGrad, 0), I(Op::Backward, 0)},
      {I(Op::RecvActivation, 0), I(Op::Forward, 0), I(Op::Backward, 0), I(Op::SendGrad, 0)},
  };
  SimCosts c;
  c.forward = {1, 3};
  c.backward = {2, 4};
  c.recompute = {0, 0};
  c.p2p = 0.5;
  const SimResult r = simulate(p, c);
  REQUIRE(r.ok());
  // Activation arrives at 1.5; rank 1 computes to 8.5; gradient arrives at 9; B0 ends at 11.
  CHECK(r.step_time == Approx(11));
  CHECK(r.spans[1][0].end == Approx(1.5));   // rank 1's receive waited until then
  CHECK(r.spans[0][2].start == Approx(1));   // rank 0 reached its receive at 1 ...
  CHECK(r.spans[0][2].end == Approx(9));     // ... and it completed at 9
  CHECK(r.busy[0] == Approx(3));
  CHECK(r.busy[1] == Approx(7));
  CHECK(r.wait[0] == Approx(8));
  CHECK(r.bubble == Approx(1 - 10.0 / 22));
  // Critical path: F0 on 0, transfer, F0 and B0 on 1, transfer, B0 on 0; gapless.
  REQUIRE(r.critical_path.size() == 6);
  CHECK(r.critical_path[0].inst == I(Op::Forward, 0));
  CHECK(r.critical_path[1].kind == CriticalStep::Transfer);
  CHECK(r.critical_path[3].rank == 1);
  CHECK(r.critical_path[4].inst == I(Op::SendGrad, 0));
  CHECK(r.critical_path[5].rank == 0);
  for (size_t i = 1; i < r.critical_path.size(); ++i)
    CHECK(r.critical_path[i].start == Approx(r.critical_path[i - 1].end));
}

TEST_CASE("a link carries one message at a time", "[simulator]") {
  // GPipe on two ranks, transfers (3s) slower than forwards (1s): rank 1's forwards are paced by
  // the link, the last activation arriving at 1 + 3M.
  const int M = 5;
  const SimResult r = simulate(make_schedules(ScheduleKind::GPipe, 2, M),
                               SimCosts::uniform(2, 1, 1, 0, 3.0));
  REQUIRE(r.ok());
  const Program p1 = gpipe(1, 2, M);
  for (size_t i = 0; i < p1.size(); ++i)
    if (p1[i] == I(Op::Forward, M - 1)) CHECK(r.spans[1][i].start == Approx(1 + 3.0 * M));
}

TEST_CASE("the critical path is gapless and spans the step", "[simulator]") {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ShiftedCriticalPath}) {
    for (int S : {2, 5, 8}) {
      for (int M : {1, 7, 16}) {
        INFO(to_string(kind) << " S=" << S << " M=" << M);
        SimCosts c = SimCosts::uniform(S, 1, 2, 1, 0.3);
        c.forward[S / 2] = 1.7;  // an unbalanced stage
        ScheduleOptions o;
        o.recompute.assign(S, 0.5);
        const SimResult r = simulate(make_schedules(kind, S, M, o), c);
        REQUIRE(r.ok());
        REQUIRE_FALSE(r.critical_path.empty());
        CHECK(r.critical_path.front().start == 0);
        CHECK(r.critical_path.back().end == Approx(r.step_time));
        for (size_t i = 1; i < r.critical_path.size(); ++i)
          CHECK(r.critical_path[i].start == Approx(r.critical_path[i - 1].end));
      }
    }
  }
}

TEST_CASE("deadlock is reported with what each rank waits for", "[simulator]") {
  SECTION("a cycle of receives") {
    // Rank 0 waits for a gradient before sending the activation rank 1 waits for.
    const std::vector<Program> p = {
        {I(Op::Forward, 0), I(Op::RecvGrad, 0), I(Op::SendActivation, 0), I(Op::Backward, 0)},
        {I(Op::RecvActivation, 0), I(Op::Forward, 0), I(Op::Backward, 0), I(Op::SendGrad, 0)},
    };
    const SimResult r = simulate(p, SimCosts::uniform(2, 1, 1, 0));
    CHECK(r.violations.empty());  // the order on each rank is fine; together they hang
    REQUIRE(r.deadlocked);
    REQUIRE(r.blocked.size() == 2);
    CHECK(r.blocked[0].rank == 0);
    CHECK(r.blocked[0].inst == I(Op::RecvGrad, 0));
    CHECK(r.blocked[0].waits_for.find("SG0 on rank 1") != std::string::npos);
    CHECK(r.blocked[0].waits_for.find("blocked at 0 (RA0)") != std::string::npos);
    CHECK(r.blocked[1].waits_for.find("SA0 on rank 0") != std::string::npos);
    CHECK(r.report().find("deadlock") != std::string::npos);
    CHECK_FALSE(r.ok());
  }
  SECTION("a message nobody sends") {
    Program p0 = one_f_one_b(0, 2, 2), p1 = one_f_one_b(1, 2, 2);
    p0.erase(std::find(p0.begin(), p0.end(), I(Op::SendActivation, 1)));
    const SimResult r = simulate({p0, p1}, SimCosts::uniform(2, 1, 1, 0));
    REQUIRE(r.deadlocked);
    // Rank 1 waits for the activation that never comes, rank 0 for rank 1's gradient.
    REQUIRE(r.blocked.size() == 2);
    CHECK(r.blocked[1].inst == I(Op::RecvActivation, 1));
    CHECK(r.blocked[1].waits_for.find("never sends it") != std::string::npos);
    CHECK(r.blocked[0].inst == I(Op::RecvGrad, 1));
    CHECK(r.blocked[0].waits_for.find("itself blocked at 4 (RA1)") != std::string::npos);
    CHECK(any_contains(r.violations, "rank 0: micro-batch 1 lacks SendActivation"));
  }
}

TEST_CASE("dependency-order violations are found", "[simulator]") {
  const SimCosts c = SimCosts::uniform(1, 1, 1, 1);
  auto violations = [&](const Program& p) { return simulate({p}, c).violations; };
  CHECK(any_contains(violations({I(Op::Backward, 0), I(Op::Forward, 0)}),
                     "rank 0: B0 at 0 before its Forward"));
  CHECK(any_contains(violations({I(Op::Forward, 0), I(Op::Backward, 0), I(Op::Recompute, 0)}),
                     "R0 at 2 after its Backward"));
  CHECK(any_contains(violations({I(Op::Recompute, 0), I(Op::Forward, 0), I(Op::Backward, 0)}),
                     "R0 at 0 before its Forward"));
  CHECK(any_contains(violations({I(Op::Forward, 0), I(Op::Forward, 0), I(Op::Backward, 0)}),
                     "F0 at 1 repeats"));
  CHECK(any_contains(violations({I(Op::Forward, 1), I(Op::Backward, 1)}),
                     "micro-batch 0 lacks Forward Backward"));
  CHECK(any_contains(violations({I(Op::Forward, 0), I(Op::ReduceGrads), I(Op::Backward, 0)}),
                     "AR at 1 before every Backward"));
  CHECK(any_contains(violations({I(Op::Forward, 0), I(Op::SendActivation, 0), I(Op::Backward, 0)}),
                     "SA0 at 1 on the last model stage"));
  CHECK(violations({I(Op::Forward, 0), I(Op::Recompute, 0), I(Op::Backward, 0), I(Op::ReduceGrads),
                    I(Op::OptimizerStep)})
            .empty());
  // Across ranks: a forward before its activation arrives, a backward before its gradient.
  const std::vector<Program> two = {
      {I(Op::Forward, 0), I(Op::Backward, 0), I(Op::SendActivation, 0), I(Op::RecvGrad, 0)},
      {I(Op::Forward, 0), I(Op::RecvActivation, 0), I(Op::SendGrad, 0), I(Op::Backward, 0)},
  };
  const SimResult r = simulate(two, SimCosts::uniform(2, 1, 1, 0));
  CHECK(any_contains(r.violations, "rank 0: B0 at 1 before its RecvGrad"));
  CHECK(any_contains(r.violations, "rank 0: SA0 at 2") == false);
  CHECK(any_contains(r.violations, "rank 1: F0 at 0 before its RecvActivation"));
  CHECK(any_contains(r.violations, "rank 1: SG0 at 2 before its Backward"));
  CHECK_FALSE(r.ok());
}

TEST_CASE("ranks sharing cores slow each other while they compute at once", "[simulator]") {
  // GPipe, two ranks, two micro-batches, every forward and backward 1 s, no transfer time, the
  // two ranks on one core. Rank 0's F0 runs alone [0, 1]; its F1 and rank 1's F0 then share the
  // core, each at half speed, both ending at 3; rank 1's F1 runs alone [3, 4].
  SimCosts c = SimCosts::uniform(2, 1, 1, 0);
  c.concurrent = 1;
  const SimResult r = simulate(make_schedules(ScheduleKind::GPipe, 2, 2), c);
  REQUIRE(r.ok());
  const Program p0 = gpipe(0, 2, 2), p1 = gpipe(1, 2, 2);
  for (size_t i = 0; i < p0.size(); ++i)
    if (p0[i] == I(Op::Forward, 1)) {
      CHECK(r.spans[0][i].start == Approx(1));
      CHECK(r.spans[0][i].end == Approx(3));
    }
  for (size_t i = 0; i < p1.size(); ++i) {
    if (p1[i] == I(Op::Forward, 0)) CHECK(r.spans[1][i].end == Approx(3));
    if (p1[i] == I(Op::Forward, 1)) CHECK(r.spans[1][i].end == Approx(4));
  }
  // One core that never idles: the step is all the work, 8 s (without sharing: 6 s).
  CHECK(r.step_time == Approx(8));
  CHECK(simulate(make_schedules(ScheduleKind::GPipe, 2, 2), SimCosts::uniform(2, 1, 1, 0))
            .step_time == Approx(6));
}

TEST_CASE("on one shared core a step takes all its work, whatever the schedule", "[simulator]") {
  // With instant transfers some rank always computes, and one core does one second of work a
  // second: the step is the sum of every cost (times the processes each rank stands for).
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                            ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubble}) {
    for (int S : {2, 4}) {
      for (int M : {4, 8}) {
        for (int per_stage : {1, 2}) {
          INFO(to_string(kind) << " S=" << S << " M=" << M << " per stage " << per_stage);
          ScheduleOptions o;
          o.virtual_stages = kind == ScheduleKind::Interleaved1F1B ? 2 : 1;
          const int model_stages = S * o.virtual_stages;
          SimCosts c = SimCosts::uniform(model_stages, 1, 2, 0);
          c.forward[1] = 1.5;  // unbalanced
          if (kind == ScheduleKind::ZeroBubble) c.weight_grad.assign(model_stages, 0.5);
          c.optimizer.assign(S, 0.25);
          c.concurrent = 1;
          c.ranks_per_stage = per_stage;
          const SimResult r = simulate(make_schedules(kind, S, M, o), c);
          REQUIRE(r.ok());
          double work = 0.25 * S;
          for (int g = 0; g < model_stages; ++g)
            work += M * (c.forward[g] + c.backward[g] +
                         (c.weight_grad.empty() ? 0 : c.weight_grad[g]));
          CHECK(r.step_time == Approx(work * per_stage));
          // Shared cores never make a step shorter than it is on a core each.
          SimCosts own = c;
          own.concurrent = 0;
          CHECK(r.step_time >= simulate(make_schedules(kind, S, M, o), own).step_time);
        }
      }
    }
  }
}

TEST_CASE("costs of the wrong shape are errors", "[simulator]") {
  const auto p = make_schedules(ScheduleKind::OneFOneB, 4, 4);
  CHECK_THROWS_WITH(simulate(p, SimCosts::uniform(3, 1, 1, 1)), Catch::Contains("3 model stages"));
  SimCosts c = SimCosts::uniform(4, 1, 1, 1);
  c.reduce = {1, 1};
  CHECK_THROWS_WITH(simulate(p, c), Catch::Contains("reduce costs need 4"));
  c = SimCosts::uniform(4, 1, 1, 1);
  c.backward[2] = -1;
  CHECK_THROWS_WITH(simulate(p, c), Catch::Contains("model stage 2"));
}

TEST_CASE("Chrome trace of a simulated step", "[simulator]") {
  ScheduleOptions o;
  o.recompute = {1, 1, 0};
  const SimResult r = simulate(make_schedules(ScheduleKind::OneFOneB, 3, 4, o),
                               SimCosts::uniform(3, 1e-3, 2e-3, 1e-3, 1e-4));
  REQUIRE(r.ok());
  const std::string json = chrome_trace_json(r);
  CHECK(json.rfind("{\"traceEvents\": [", 0) == 0);
  // One complete event per instruction that took time (waits included), one track per rank.
  size_t events = 0, pos = 0;
  while ((pos = json.find("\"ph\": \"X\"", pos)) != std::string::npos) ++events, ++pos;
  size_t expected = 0;
  for (const auto& rank : r.spans)
    for (const Span& s : rank) expected += s.end > s.start;
  CHECK(events == expected);
  CHECK(trace_spans(r).size() == expected);
  CHECK(json.find("\"name\": \"rank 2\"") != std::string::npos);
  CHECK(json.find("\"name\": \"R0\", \"cat\": \"recompute\"") != std::string::npos);
  CHECK(json.find("\"name\": \"wait RA0\", \"cat\": \"wait\"") != std::string::npos);
  // F0 on rank 0: 0 to 1 ms.
  CHECK(json.find("\"name\": \"F0\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": 0, "
                  "\"tid\": 0, \"ts\": 0.000, \"dur\": 1000.000") != std::string::npos);
  // Brackets and braces balance (names hold none).
  int depth = 0;
  for (char ch : json) {
    depth += (ch == '{' || ch == '[') - (ch == '}' || ch == ']');
    REQUIRE(depth >= 0);
  }
  CHECK(depth == 0);
  // Caller-supplied names are escaped.
  CHECK(chrome_trace_json({"a\"b"}, {}).find("\"a\\\"b\"") != std::string::npos);
}
