// Asynchronous operations: posting returns while a peer is still busy, compute runs while the
// operation is in flight, several operations on different groups can be outstanding at once;
// and a barrier really waits for the last rank.
#include <chrono>
#include <memory>
#include <thread>

#include "merak/comm/grid.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Stand-in for a layer's compute: a dependent chain the compiler cannot drop.
double compute(int64_t steps) {
  volatile double x = 1;
  for (int64_t i = 0; i < steps; ++i) x = x * 0.999999 + 1e-6;
  return x;
}

}  // namespace

void case_async_overlap(Ctx& c) {
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  const DType t = DType::F32;
  const int64_t n = 1 << 16;

  if (c.world >= 2) {
    // The last rank is late by 0.5 s. Everyone else's post returns at once, test() says "not
    // yet", compute proceeds, and wait() ends only after the late rank has joined.
    const int late = c.world - 1;
    const double delay = 0.5;
    KitArray a(c.kit, t, n);
    HostArray h(t, n);
    h.fill([&](int64_t i) { return pattern(t, c.rank, i); });
    a.upload(h);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    if (c.rank == late) sleep_s(delay);
    Work work = w.iall_reduce(a.buffer(), ReduceOp::Sum);
    const double post_s = since(start);
    if (c.rank != late) {
      c.checks.expect(post_s < delay / 2, detail::concat("posting took ", post_s, " s"));
      c.checks.expect(!work.test(), "test() is false while a peer has not posted");
    }
    double busy = 0;
    int polls = 0;
    do {  // compute, looking in on the operation now and then
      busy += compute(20000);
      polls += work.test() ? 0 : 1;
    } while (since(start) < delay / 2);
    work.wait();
    const double waited = since(start);
    c.checks.expect(busy > 0 && work.done(), "compute ran and the operation finished");
    if (c.rank != late) {
      c.checks.expect(polls > 0, "the operation was in flight during compute");
      c.checks.expect(waited >= delay * 0.8,
                      detail::concat("wait() returned after ", waited, " s, before the late rank "
                                     "posted at ", delay, " s"));
    }
    double want[11];
    for (int k = 0; k < 11; ++k) {
      want[k] = 0;
      for (int q = 0; q < c.world; ++q) want[k] += pattern(t, q, k);
    }
    c.checks.expect_array(a.download(), [&](int64_t i) { return want[i % 11]; },
                          "delayed all_reduce result");
  }

  // Three operations on different groups in flight together, finished in reverse order.
  if (c.world == 8) {
    Grid d({2, 2, 2}, c.kit.factory(c.options));
    KitArray r(c.kit, t, n), gin(c.kit, t, n), gout(c.kit, t, 2 * n), b(c.kit, t, n);
    HostArray h(t, n);
    h.fill([&](int64_t i) { return pattern(t, c.rank, i); });
    r.upload(h);
    gin.upload(h);
    b.upload(h);
    Work w1 = d.tp().iall_reduce(r.buffer(), ReduceOp::Max);
    Work w2 = d.dp().iall_gather(gin.buffer(), gout.buffer());
    Work w3 = d.pp().ibroadcast(b.buffer(), 0);
    compute(100000);
    w3.wait();
    w2.wait();
    w1.wait();
    const auto& tp = d.tp().world_ranks();
    const auto& dp = d.dp().world_ranks();
    const int pp0 = d.pp().world_ranks()[0];
    c.checks.expect_array(r.download(),
                          [&](int64_t i) {
                            return std::max(pattern(t, tp[0], i), pattern(t, tp[1], i));
                          },
                          "outstanding all_reduce(max) on tp");
    c.checks.expect_array(gout.download(),
                          [&](int64_t i) { return pattern(t, dp[i / n], i % n); },
                          "outstanding all_gather on dp");
    c.checks.expect_array(b.download(), [&](int64_t i) { return pattern(t, pp0, i); },
                          "outstanding broadcast on pp");
  }
}

void case_barrier(Ctx& c) {
  if (c.world < 2) return;
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  const double delay = 0.4;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  if (c.rank == 0) sleep_s(delay);
  g.world().barrier();
  const double waited = since(start);
  if (c.rank != 0)
    c.checks.expect(waited >= delay * 0.8,
                    detail::concat("barrier returned after ", waited, " s, before rank 0 came at ",
                                   delay, " s"));
  // An empty batch and a barrier on a group of one finish at once.
  c.checks.expect(g.world().ibatch({}).done(), "an empty batch is finished");
}

}  // namespace merak::comm::test
