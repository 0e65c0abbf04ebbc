// Every collective, for every dtype, on groups of 2, 4 and 8 ranks, from 1 element to 16 MiB,
// with even and uneven all_gather / reduce_scatter, against results worked out from the
// pattern.
#include <algorithm>
#include <memory>

#include "merak/comm/grid.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

const DType kDtypes[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64};

bool is_int(DType t) { return t == DType::I32 || t == DType::I64; }

// pattern() repeats every 11 elements, so the reduction over the group does too: the expected
// result of element i is table[i % 11].
std::vector<double> reduced(DType t, ReduceOp op, int size) {
  std::vector<double> table(11);
  for (int k = 0; k < 11; ++k) {
    double sum = 0, max = -1e300;
    for (int q = 0; q < size; ++q) {
      const double v = pattern(t, q, k);
      sum += v;
      max = std::max(max, v);
    }
    if (op == ReduceOp::Sum) table[k] = sum;
    if (op == ReduceOp::Max) table[k] = max;
    // Integers divide toward zero, as NCCL's ncclAvg does.
    if (op == ReduceOp::Avg) table[k] = is_int(t) ? double(int64_t(sum) / size) : sum / size;
  }
  return table;
}

// Float avg is exact when the group size is a power of two (the sums are small integers);
// otherwise allow the dtype's rounding.
double avg_tolerance(DType t, int size) {
  if (is_int(t) || (size & (size - 1)) == 0) return 0;
  return t == DType::BF16 ? 0.05 : t == DType::F16 ? 0.01 : 1e-5;
}

// Uneven counts around m: some ranks contribute nothing.
std::vector<int64_t> uneven_counts(int size, int64_t m) {
  std::vector<int64_t> counts(size);
  for (int j = 0; j < size; ++j) counts[j] = j % 3 == 1 ? 0 : m + j;
  return counts;
}

std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t j = 1; j < counts.size(); ++j) displs[j] = displs[j - 1] + counts[j - 1];
  return displs;
}

struct Group {
  std::string label;
  Communicator* comm;
};

class Runner {
 public:
  Runner(Ctx& c, const Group& g, DType t, int64_t n) : c_(c), g_(g), t_(t), n_(n) {}

  std::string what(const std::string& op) const {
    return detail::concat(op, " ", dtype_name(t_), " x", n_, " on ", g_.label);
  }

  HostArray mine(int64_t count) const {
    HostArray h(t_, count);
    const int r = g_.comm->rank();
    h.fill([&](int64_t i) { return pattern(t_, r, i); });
    return h;
  }

  void all_reduce(ReduceOp op) {
    KitArray a(c_.kit, t_, n_);
    a.upload(mine(n_));
    g_.comm->all_reduce(a.buffer(), op);
    const std::vector<double> want = reduced(t_, op, g_.comm->size());
    const double tol = op == ReduceOp::Avg ? avg_tolerance(t_, g_.comm->size()) : 0;
    c_.checks.expect_array(a.download(), [&](int64_t i) { return want[i % 11]; },
                           what(op == ReduceOp::Sum   ? "all_reduce(sum)"
                                : op == ReduceOp::Avg ? "all_reduce(avg)"
                                                      : "all_reduce(max)"),
                           tol);
  }

  // Rank j contributes counts[j] elements (pattern of rank j); the output is their concat.
  void all_gather(const std::vector<int64_t>& counts, bool even) {
    const std::vector<int64_t> displs = offsets(counts);
    const int64_t total = displs.back() + counts.back();
    const int r = g_.comm->rank();
    KitArray in(c_.kit, t_, counts[r]), out(c_.kit, t_, total);
    in.upload(mine(counts[r]));
    if (even)
      g_.comm->all_gather(in.buffer(), out.buffer());
    else
      g_.comm->all_gather(in.buffer(), out.buffer(), counts);
    c_.checks.expect_array(
        out.download(),
        [&](int64_t i) {
          const int j = int(std::upper_bound(displs.begin(), displs.end(), i) - displs.begin()) - 1;
          return pattern(t_, j, i - displs[j]);
        },
        what(even ? "all_gather" : "all_gather(uneven)"));
  }

  // Every rank offers the whole pattern; rank r keeps segment r of the reduction.
  void reduce_scatter(const std::vector<int64_t>& counts, ReduceOp op, bool even) {
    const std::vector<int64_t> displs = offsets(counts);
    const int64_t total = displs.back() + counts.back();
    const int r = g_.comm->rank();
    KitArray in(c_.kit, t_, total), out(c_.kit, t_, counts[r]);
    in.upload(mine(total));
    if (even)
      g_.comm->reduce_scatter(in.buffer(), out.buffer(), op);
    else
      g_.comm->reduce_scatter(in.buffer(), out.buffer(), op, counts);
    const std::vector<double> want = reduced(t_, op, g_.comm->size());
    const double tol = op == ReduceOp::Avg ? avg_tolerance(t_, g_.comm->size()) : 0;
    c_.checks.expect_array(
        out.download(), [&](int64_t i) { return want[(displs[r] + i) % 11]; },
        what(detail::concat(even ? "reduce_scatter(" : "reduce_scatter_uneven(",
                            reduce_op_name(op), ")")),
        tol);
  }

  // The last rank of the group broadcasts; the others start from a value outside the pattern.
  void broadcast() {
    const int root = g_.comm->size() - 1;
    KitArray a(c_.kit, t_, n_);
    HostArray h = mine(n_);
    if (g_.comm->rank() != root) h.fill([](int64_t) { return 99; });
    a.upload(h);
    g_.comm->broadcast(a.buffer(), root);
    c_.checks.expect_array(a.download(), [&](int64_t i) { return pattern(t_, root, i); },
                           what("broadcast"));
  }

 private:
  Ctx& c_;
  Group g_;
  DType t_;
  int64_t n_;
};

}  // namespace

void case_collectives(Ctx& c) {
  // Groups of 8, 2, 2 and 4 ranks on an 8-rank job; world and tp = world otherwise.
  std::unique_ptr<Grid> a, b;
  std::vector<Group> groups;
  if (c.world == 8) {
    a = std::make_unique<Grid>(GridShape{2, 2, 2}, c.kit.factory(c.options));
    b = std::make_unique<Grid>(GridShape{1, 2, 4}, c.kit.factory(c.options));
    groups = {{"world", &a->world()},
              {"tp of (2,2,2)", &a->tp()},
              {"dp of (2,2,2)", &a->dp()},
              {"tp of (1,2,4)", &b->tp()}};
  } else {
    a = std::make_unique<Grid>(GridShape{1, 1, c.world}, c.kit.factory(c.options));
    groups = {{"world", &a->world()}, {"tp of (1,1,world)", &a->tp()}};
  }

  for (const Group& g : groups) {
    for (DType t : kDtypes) {
      for (int64_t n : {int64_t(1), int64_t(3), int64_t(1031), int64_t(65537)}) {
        Runner run(c, g, t, n);
        run.all_reduce(ReduceOp::Sum);
        run.all_reduce(ReduceOp::Avg);
        run.all_reduce(ReduceOp::Max);
        const int size = g.comm->size();
        run.all_gather(std::vector<int64_t>(size, n), true);
        run.all_gather(uneven_counts(size, n), false);
        run.reduce_scatter(std::vector<int64_t>(size, n), ReduceOp::Sum, true);
        run.reduce_scatter(uneven_counts(size, n), ReduceOp::Avg, false);
        run.reduce_scatter(uneven_counts(size, n), ReduceOp::Max, false);
        run.broadcast();
      }
    }
  }

  // 16 MiB messages on the whole job: all_reduce in every dtype, the rest in f32 and bf16.
  const Group& world = groups[0];
  const int size = world.comm->size();
  for (DType t : kDtypes) {
    const int64_t n = (int64_t(16) << 20) / int64_t(dtype_size(t));
    Runner run(c, world, t, n);
    run.all_reduce(ReduceOp::Sum);
    if (t != DType::F32 && t != DType::BF16) continue;
    run.all_reduce(ReduceOp::Avg);
    run.all_reduce(ReduceOp::Max);
    run.broadcast();
    // Output (all_gather) and input (reduce_scatter) of 16 MiB.
    run.all_gather(std::vector<int64_t>(size, n / size), true);
    run.reduce_scatter(std::vector<int64_t>(size, n / size), ReduceOp::Sum, true);
  }
}

// The MPI backend with calls of at most 7 elements: every operation longer than that is posted
// as several calls (as past MPI's int counts), and must give the same results.
void case_mpi_split(Ctx& c) {
  if (!c.kit.is_mpi()) return;
  CommOptions options = c.options;
  options.mpi_max_count = 7;
  Grid g({1, 1, c.world}, c.kit.factory(options));
  const Group world{"world, calls of 7", &g.world()};
  const int size = world.comm->size();
  for (DType t : {DType::F32, DType::BF16, DType::I64}) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(50)}) {
      Runner run(c, world, t, n);
      run.all_reduce(ReduceOp::Sum);
      run.all_reduce(ReduceOp::Avg);
      run.broadcast();
      run.all_gather(std::vector<int64_t>(size, n), true);
      run.all_gather(uneven_counts(size, n), false);
      run.reduce_scatter(std::vector<int64_t>(size, n), ReduceOp::Sum, true);
      run.reduce_scatter(uneven_counts(size, n), ReduceOp::Avg, false);
      run.reduce_scatter(uneven_counts(size, n), ReduceOp::Max, false);
    }
  }
  // In place: each rank's input is its own part of the output.
  const int64_t n = 10;
  KitArray out(c.kit, DType::F32, n * size);
  HostArray h(DType::F32, n * size);
  const auto gathered = [&](int64_t i) { return pattern(DType::F32, int(i / n), i % n); };
  h.fill([&](int64_t i) { return i / n == world.comm->rank() ? gathered(i) : -1; });
  out.upload(h);
  world.comm->all_gather(out.buffer().slice(n * world.comm->rank(), n), out.buffer());
  c.checks.expect_array(out.download(), gathered, "all_gather in place, calls of 7");
  // Point to point: a ring of 50 elements, as 8 messages each way.
  const int me = world.comm->rank(), next = (me + 1) % size, prev = (me + size - 1) % size;
  KitArray send(c.kit, DType::I64, 50), recv(c.kit, DType::I64, 50);
  HostArray mine(DType::I64, 50);
  mine.fill([&](int64_t i) { return pattern(DType::I64, me, i); });
  send.upload(mine);
  world.comm->batch(std::vector<P2P>{{P2P::Send, send.buffer(), next, 7},
                                     {P2P::Recv, recv.buffer(), prev, 7}});
  c.checks.expect_array(recv.download(), [&](int64_t i) { return pattern(DType::I64, prev, i); },
                        "ring of 50 i64, calls of 7");
}

}  // namespace merak::comm::test
