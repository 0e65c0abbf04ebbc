// Every schedule through the simulator for pp 2..8 and micro-batches 1..32, recomputation off
// and on: no deadlock, dependency order, one forward and one backward per micro-batch and model
// stage, in-flight bounds, and the known bubble and step-time formulas.
#include <catch2/catch.hpp>

#include <map>
#include <tuple>

#include "merak/core/error.h"
#include "merak/runtime/schedule.h"
#include "merak/runtime/simulator.h"

using namespace merak::runtime;

namespace {

// Counts per (op, micro-batch, chunk) on one rank, straight from the program.
std::map<std::tuple<Op, int, int>, int> count_ops(const Program& p) {
  std::map<std::tuple<Op, int, int>, int> n;
  for (const Instruction& i : p) ++n[{i.op, i.micro_batch, i.chunk}];
  return n;
}

ScheduleOptions with_recompute(int model_stages, bool on) {
  ScheduleOptions o;
  if (on) o.recompute.assign(model_stages, 1.0);
  return o;
}

// Uniform costs; under zero bubble the backward (2) is split evenly into Backward and WeightGrad.
SimCosts costs_for(ScheduleKind kind, int S, bool recompute) {
  const bool split = kind == ScheduleKind::ZeroBubble;
  SimCosts c = SimCosts::uniform(S, 1.0, split ? 1.0 : 2.0, recompute ? 1.0 : 0.0, 0.1);
  if (split) c.weight_grad.assign(size_t(S), 1.0);
  return c;
}

}  // namespace

TEST_CASE("every schedule runs for pp 1..8 and micro-batches 1..32", "[schedule]") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                            ScheduleKind::ShiftedCriticalPath, ScheduleKind::ZeroBubble}) {
    const bool split = kind == ScheduleKind::ZeroBubble;
    for (int S = 1; S <= 8; ++S) {
      for (int M = 1; M <= 32; ++M) {
        for (bool rc : {false, true}) {
          INFO(to_string(kind) << " S=" << S << " M=" << M << " recompute=" << rc);
          const auto programs = make_schedules(kind, S, M, with_recompute(S, rc));
          const SimResult r = simulate(programs, costs_for(kind, S, rc));
          INFO(r.report());
          REQUIRE(r.ok());
          for (int s = 0; s < S; ++s) {
            INFO("rank " << s);
            auto n = count_ops(programs[s]);
            for (int mb = 0; mb < M; ++mb) {
              CHECK(n[{Op::Forward, mb, 0}] == 1);
              CHECK(n[{Op::Backward, mb, 0}] == 1);
              CHECK(n[{Op::WeightGrad, mb, 0}] == (split ? 1 : 0));
              // Merak's schedule never recomputes on the last stage; the others recompute every
              // micro-batch when asked to.
              const bool recomputes =
                  rc && !(kind == ScheduleKind::ShiftedCriticalPath && s == S - 1);
              CHECK(n[{Op::Recompute, mb, 0}] == (recomputes ? 1 : 0));
            }
            CHECK(n[{Op::ReduceGrads, -1, 0}] == 1);
            CHECK(n[{Op::OptimizerStep, -1, 0}] == 1);
            const int peak = peak_in_flight(programs[s]);
            if (kind == ScheduleKind::GPipe) CHECK(peak == M);
            // Zero bubble: one micro-batch more than 1F1B, except on the last stage.
            else if (split) CHECK(peak == std::min(s == S - 1 ? 1 : S - s + 1, M));
            else CHECK(peak == std::min(S - s, M));
          }
        }
      }
    }
  }
}

TEST_CASE("zero bubble is never slower than 1F1B for pp 1..8 and micro-batches 1..32",
          "[schedule]") {
  for (int S = 1; S <= 8; ++S) {
    for (int M = 1; M <= 32; ++M) {
      for (bool rc : {false, true}) {
        INFO("S=" << S << " M=" << M << " recompute=" << rc);
        const ScheduleOptions o = with_recompute(S, rc);
        const SimResult r = simulate(make_schedules(ScheduleKind::ZeroBubble, S, M, o),
                                     costs_for(ScheduleKind::ZeroBubble, S, rc));
        const SimResult base = simulate(make_schedules(ScheduleKind::OneFOneB, S, M, o),
                                        costs_for(ScheduleKind::OneFOneB, S, rc));
        REQUIRE(r.ok());
        REQUIRE(base.ok());
        CHECK(r.step_time <= base.step_time + 1e-9);
        // With a pipeline to fill and enough micro-batches, the split pays.
        if (S >= 2 && M >= S) CHECK(r.step_time < base.step_time - 0.5);
      }
    }
  }
  // The checker refuses a WeightGrad before its Backward and a step without every WeightGrad.
  Program bad = {{Op::Forward, 0}, {Op::WeightGrad, 0}, {Op::Backward, 0},
                 {Op::ReduceGrads, -1}, {Op::OptimizerStep, -1}};
  const SimResult r = simulate({bad}, SimCosts::uniform(1, 1, 1, 0));
  CHECK_FALSE(r.ok());
  CHECK(r.report().find("W0 at 1 before its Backward") != std::string::npos);
  Program missing = {{Op::Forward, 0}, {Op::Backward, 0}, {Op::WeightGrad, 0}, {Op::Forward, 1},
                     {Op::Backward, 1}, {Op::ReduceGrads, -1}, {Op::OptimizerStep, -1}};
  const SimResult m = simulate({missing}, SimCosts::uniform(1, 1, 1, 0));
  CHECK_FALSE(m.ok());
  CHECK(m.report().find("lacks WeightGrad") != std::string::npos);
}

TEST_CASE("GPipe and 1F1B bubble fraction is (S-1)/(M+S-1) for uniform costs", "[schedule]") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int S = 1; S <= 8; ++S) {
      for (int M = 1; M <= 32; ++M) {
        INFO(to_string(kind) << " S=" << S << " M=" << M);
        const SimResult r = simulate(make_schedules(kind, S, M), SimCosts::uniform(S, 1, 2, 0));
        REQUIRE(r.ok());
        CHECK(r.bubble == Approx(double(S - 1) / (M + S - 1)).margin(1e-12));
        CHECK(r.step_time == Approx((M + S - 1) * 3.0));
      }
    }
  }
}

TEST_CASE("GPipe step time with transfers: each of the 2 (S-1) hops adds p2p", "[schedule]") {
  // With p2p below forward and backward, transfers pipeline behind the compute, so only the
  // first forward's and the last backward's trips through the pipeline pay for them.
  const double F = 1, B = 2, p2p = 0.25;
  for (int S = 2; S <= 8; ++S)
    for (int M : {1, 5, 32}) {
      INFO("S=" << S << " M=" << M);
      const SimResult r = simulate(make_schedules(ScheduleKind::GPipe, S, M),
                                   SimCosts::uniform(S, F, B, 0, p2p));
      REQUIRE(r.ok());
      CHECK(r.step_time == Approx((M + S - 1) * (F + B) + 2 * (S - 1) * p2p));
    }
}

TEST_CASE("shifted critical path with recomputation is never slower than 1F1B with full "
          "recomputation", "[schedule]") {
  for (double p2p : {0.0, 0.2}) {
    for (int S = 2; S <= 8; ++S) {
      for (int M = 1; M <= 32; ++M) {
        INFO("S=" << S << " M=" << M << " p2p=" << p2p);
        const SimCosts c = SimCosts::uniform(S, 1, 2, 1, p2p);
        const ScheduleOptions o = with_recompute(S, true);
        const SimResult base = simulate(make_schedules(ScheduleKind::OneFOneB, S, M, o), c);
        const SimResult ours =
            simulate(make_schedules(ScheduleKind::ShiftedCriticalPath, S, M, o), c);
        REQUIRE(base.ok());
        REQUIRE(ours.ok());
        CHECK(ours.step_time <= base.step_time + 1e-9);
        // Without recomputation the two are the same schedule.
        const SimResult plain = simulate(make_schedules(ScheduleKind::OneFOneB, S, M),
                                         SimCosts::uniform(S, 1, 2, 0, p2p));
        const SimResult plain_ours =
            simulate(make_schedules(ScheduleKind::ShiftedCriticalPath, S, M),
                     SimCosts::uniform(S, 1, 2, 0, p2p));
        CHECK(plain_ours.step_time == Approx(plain.step_time));
      }
    }
  }
}

TEST_CASE("shifted critical path keeps recomputation off the critical path", "[schedule]") {
  const ScheduleOptions o = with_recompute(8, true);
  SECTION("one micro-batch: 1F1B recomputes on every stage's path, shifted on none") {
    for (int S = 2; S <= 8; ++S) {
      INFO("S=" << S);
      const ScheduleOptions os = with_recompute(S, true);
      const SimCosts c = SimCosts::uniform(S, 1, 2, 1, 0.1);
      const SimResult base = simulate(make_schedules(ScheduleKind::OneFOneB, S, 1, os), c);
      const SimResult ours =
          simulate(make_schedules(ScheduleKind::ShiftedCriticalPath, S, 1, os), c);
      CHECK(base.critical_time(Op::Recompute) == Approx(S * 1.0));
      CHECK(ours.critical_time(Op::Recompute) == 0);
      CHECK(base.step_time - ours.step_time == Approx(S * 1.0));
    }
  }
  SECTION("last stage slowest (it holds the LM head): no recomputation on the path") {
    for (int M : {2, 8, 32}) {
      INFO("M=" << M);
      SimCosts c = SimCosts::uniform(8, 1, 2, 1, 0.1);
      c.forward[7] = 1.5;  // last stage's F + B = 4.5 > the others' F + R + B = 4
      c.backward[7] = 3.0;
      const SimResult base = simulate(make_schedules(ScheduleKind::OneFOneB, 8, M, o), c);
      const SimResult ours =
          simulate(make_schedules(ScheduleKind::ShiftedCriticalPath, 8, M, o), c);
      CHECK(base.critical_time(Op::Recompute) >= M);
      CHECK(ours.critical_time(Op::Recompute) == 0);
      CHECK(ours.step_time < base.step_time);
    }
  }
}

TEST_CASE("interleaved 1F1B runs and shrinks the bubble", "[schedule]") {
  for (int v : {2, 3}) {
    for (int S = 2; S <= 8; ++S) {
      for (int M = S; M <= 32; M += S) {
        for (bool rc : {false, true}) {
          INFO("v=" << v << " S=" << S << " M=" << M << " recompute=" << rc);
          ScheduleOptions o = with_recompute(S * v, rc);
          o.virtual_stages = v;
          const auto programs = make_schedules(ScheduleKind::Interleaved1F1B, S, M, o);
          // Each chunk is 1/v of a rank's layers.
          const SimResult r = simulate(
              programs, SimCosts::uniform(S * v, 1.0 / v, 2.0 / v, rc ? 1.0 / v : 0, 0.0));
          INFO(r.report());
          REQUIRE(r.ok());
          for (int s = 0; s < S; ++s) {
            auto n = count_ops(programs[s]);
            for (int c = 0; c < v; ++c)
              for (int mb = 0; mb < M; ++mb) {
                CHECK(n[{Op::Forward, mb, c}] == 1);
                CHECK(n[{Op::Backward, mb, c}] == 1);
              }
          }
          const SimResult flat = simulate(make_schedules(ScheduleKind::OneFOneB, S, M,
                                                         with_recompute(S, rc)),
                                          SimCosts::uniform(S, 1, 2, rc ? 1 : 0, 0.0));
          CHECK(r.bubble < flat.bubble);
        }
      }
    }
  }
  ScheduleOptions o;
  o.virtual_stages = 2;
  CHECK_THROWS_WITH(interleaved_1f1b(0, 4, 6, o), Catch::Contains("multiple of the pipeline"));
}

TEST_CASE("1F1B programs read as expected", "[schedule]") {
  // Stage 1 of 3 with 3 micro-batches: one warm-up forward, then alternate, then cool down.
  CHECK(to_string(one_f_one_b(1, 3, 3)) ==
        "RA0 F0 SA0 RA1 F1 SA1 RG0 B0 SG0 RA2 F2 SA2 RG1 B1 SG1 RG2 B2 SG2 AR OPT");
  ScheduleOptions o;
  o.recompute = {1, 1, 1};
  CHECK(to_string(one_f_one_b(1, 3, 2, o)) ==
        "RA0 F0 SA0 RA1 F1 SA1 RG0 R0 B0 SG0 RG1 R1 B1 SG1 AR OPT");
  // Merak: recomputation before the blocking gradient receive; none on the last stage.
  CHECK(to_string(shifted_critical_path(1, 3, 2, o)) ==
        "RA0 F0 SA0 RA1 F1 SA1 R0 RG0 B0 SG0 R1 RG1 B1 SG1 AR OPT");
  CHECK(to_string(shifted_critical_path(2, 3, 2, o)) == "RA0 F0 B0 SG0 RA1 F1 B1 SG1 AR OPT");
  o.reduce_and_step = false;
  o.recompute = {1, 0};
  CHECK(to_string(gpipe(0, 2, 2, o)) == "F0 SA0 F1 SA1 RG0 R0 B0 RG1 R1 B1");
}

TEST_CASE("schedule arguments are checked", "[schedule]") {
  CHECK(parse_schedule_kind("1f1b") == ScheduleKind::OneFOneB);
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                         ScheduleKind::ShiftedCriticalPath, ScheduleKind::Interleaved1F1B})
    CHECK(parse_schedule_kind(to_string(k)) == k);
  CHECK_THROWS_WITH(parse_schedule_kind("zigzag"), Catch::Contains("'zigzag'"));
  CHECK_THROWS_WITH(one_f_one_b(4, 4, 8), Catch::Contains("stage 4 out of range"));
  CHECK_THROWS_WITH(gpipe(0, 4, 0), Catch::Contains("micro-batches must be >= 1"));
  ScheduleOptions o;
  o.recompute = {1, 1};
  CHECK_THROWS_WITH(one_f_one_b(0, 4, 8, o), Catch::Contains("expected 4 entries"));
  o.recompute = {1, 1, 1.5, 0};
  CHECK_THROWS_WITH(one_f_one_b(0, 4, 8, o), Catch::Contains("model stage 2"));
}
