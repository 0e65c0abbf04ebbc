// Point to point (rings, tags), argument errors, and the MPI backend's own behaviour: MPI
// errors as messages and the Tensor-facing calls.
#include <memory>

#include "merak/comm/grid.h"
#include "merak/core/allocator.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

// Each rank sends to the next and receives from the previous in one batch.
void ring(Ctx& c, Communicator& comm, const std::string& label, DType t, int64_t n) {
  const int me = comm.rank(), size = comm.size();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  KitArray out(c.kit, t, n), in(c.kit, t, n);
  HostArray h(t, n);
  h.fill([&](int64_t i) { return pattern(t, me, i); });
  out.upload(h);
  comm.batch(std::vector<P2P>{{P2P::Send, out.buffer(), next, 7},
                              {P2P::Recv, in.buffer(), prev, 7}});
  c.checks.expect_array(in.download(), [&](int64_t i) { return pattern(t, prev, i); },
                        detail::concat("ring ", dtype_name(t), " x", n, " on ", label));
}

}  // namespace

void case_ring(Ctx& c) {
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  std::unique_ptr<Grid> d;
  if (c.world == 8) d = std::make_unique<Grid>(GridShape{2, 2, 2}, c.kit.factory(c.options));
  for (DType t : {DType::F32, DType::BF16, DType::I64})
    for (int64_t n : {int64_t(1), int64_t(1) << 18}) {  // one element; 1 MiB of f32
      ring(c, g.world(), "world", t, n);
      if (d) ring(c, d->pp(), "pp of (2,2,2)", t, n);
    }
}

// A batch split into its receives and sends: the ring again, waiting for the receives first;
// where messages match by tag the receives finish while the peer has not yet posted the receive
// that this rank's send needs (on NCCL the one handle holds both and the sends are done).
void case_split_batch(Ctx& c) {
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  const int me = w.rank(), size = w.size();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  const int64_t n = int64_t(1) << 18;  // 1 MiB of f32: past any eager limit
  KitArray out(c.kit, DType::F32, n), in(c.kit, DType::F32, n);
  HostArray h(DType::F32, n);
  h.fill([&](int64_t i) { return pattern(DType::F32, me, i); });
  out.upload(h);
  Communicator::SplitBatch ring = w.ibatch_split(
      {{P2P::Send, out.buffer(), next, 7}, {P2P::Recv, in.buffer(), prev, 7}});
  if (!w.matches_tags()) c.checks.expect(ring.sends.done(), "one unit: the sends' handle is done");
  ring.receives.wait();
  c.checks.expect_array(in.download(), [&](int64_t i) { return pattern(DType::F32, prev, i); },
                        "split ring: received");
  ring.sends.wait();
  if (!w.matches_tags() || size < 2) return;
  // Rank 1 posts its receive of rank 0's message only after rank 0 says its own receive is in.
  KitArray token(c.kit, DType::I32, 1);
  if (me == 0) {
    Communicator::SplitBatch b = w.ibatch_split(
        {{P2P::Send, out.buffer(), 1, 4}, {P2P::Recv, in.buffer(), 1, 3}});
    b.receives.wait();
    c.checks.expect_array(in.download(), [&](int64_t i) { return pattern(DType::F32, 1, i); },
                          "the receives finished before the peer took the send");
    w.send(token.buffer(), 1, 5);
    b.sends.wait();
  } else if (me == 1) {
    Work sent = w.isend(out.buffer(), 0, 3);
    w.recv(token.buffer(), 0, 5);
    w.recv(in.buffer(), 0, 4);
    sent.wait();
    c.checks.expect_array(in.download(), [&](int64_t i) { return pattern(DType::F32, 0, i); },
                          "the send arrived after");
  }
  w.barrier();
}

void case_argument_errors(Ctx& c) {
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  const std::string W = std::to_string(c.world);
  KitArray a(c.kit, DType::F32, 16), b(c.kit, DType::F32, 16);
  const Buffer x = a.buffer(), y = b.buffer();
  c.checks.expect_error([&] { w.isend(x, c.world, 0); },
                        {"send on group 'world'", "peer " + W, "is not a rank of the group"},
                        "send to a peer outside the group");
  c.checks.expect_error([&] { w.irecv(x, 0, -2); }, {"recv", "negative tag -2"}, "negative tag");
  c.checks.expect_error([&] { w.ibroadcast(x, -1); }, {"broadcast", "root -1"}, "bad root");
  c.checks.expect_error(
      [&] { w.iall_gather(x, y, std::vector<int64_t>(c.world + 1, 1)); },
      {"all_gather on group 'world'", std::to_string(c.world + 1) + " counts for " + W + " ranks"},
      "all_gather with one count too many");
  std::vector<int64_t> counts(c.world, 1);
  counts[c.rank] = 16;
  c.checks.expect_error([&] { w.ireduce_scatter(x, y, ReduceOp::Sum, counts); },
                        {"reduce_scatter", "counts sum to", "the input has 16 elements"},
                        "reduce_scatter counts that do not add up");
  c.checks.expect_error([&] { w.iall_gather(x, y.slice(0, 3)); },
                        {"all_gather", "output has 3 elements"}, "all_gather output too small");
  const Device wrong = c.kit.device().is_cpu() ? Device::cuda(0) : Device::cpu();
  c.checks.expect_error(
      [&] { w.iall_reduce(Buffer(x.data, 16, DType::F32, wrong), ReduceOp::Sum); },
      {"all_reduce", "buffer in " + wrong.str() + " memory", std::string(c.kit.name()) +
                                                                 " backend needs"},
      "a buffer in the other kind of memory");
  c.checks.expect_error(
      [&] { w.iall_reduce(Buffer(x.data, 16, DType::Bool, c.kit.device()), ReduceOp::Max); },
      {"dtype bool is not supported"}, "bool buffer");
  w.barrier();  // nothing above was posted: the ranks are still in step
  c.checks.expect(true, "in step after the errors");
}

void case_mpi_tags(Ctx& c) {
  if (!c.kit.is_mpi()) return;  // NCCL matches a pair's operations in order, not by tag
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  const int next = (c.rank + 1) % c.world, prev = (c.rank + c.world - 1) % c.world;
  const DType t = DType::I32;
  const int64_t n = 5000;  // past the eager limit: the sends wait for their receives
  KitArray s1(c.kit, t, n), s2(c.kit, t, n), r1(c.kit, t, n), r2(c.kit, t, n);
  HostArray h(t, n);
  h.fill([&](int64_t i) { return pattern(t, c.rank, i); });
  s1.upload(h);
  h.fill([&](int64_t i) { return pattern(t, c.rank, i) + 100; });
  s2.upload(h);
  // Receives posted for tag 2 first, sends issued tag 1 first: matching goes by tag. Each
  // call is posted on its own, not as a batch.
  Work recv2 = w.irecv(r2.buffer(), prev, 2);
  Work recv1 = w.irecv(r1.buffer(), prev, 1);
  Work send1 = w.isend(s1.buffer(), next, 1);
  Work send2 = w.isend(s2.buffer(), next, 2);
  recv2.wait();
  recv1.wait();
  send1.wait();
  send2.wait();
  c.checks.expect_array(r1.download(), [&](int64_t i) { return pattern(t, prev, i); }, "tag 1");
  c.checks.expect_array(r2.download(), [&](int64_t i) { return pattern(t, prev, i) + 100; },
                        "tag 2");
}

void case_mpi_errors(Ctx& c) {
  if (!c.kit.is_mpi() || c.world < 2) return;
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  KitArray big(c.kit, DType::F32, 8), small(c.kit, DType::F32, 4);
  // A message longer than the receive buffer: MPI's truncation error, as a message.
  if (c.rank == 0) w.send(big.buffer(), 1, 9);
  if (c.rank == 1)
    c.checks.expect_error([&] { w.recv(small.buffer(), 0, 9); },
                          {"MPI_ERR_TRUNCATE", "recv of 4 f32 from peer 0 (world rank 0), tag 9",
                           "on group 'world'"},
                          "truncated receive");
  // A shorter one: MPI accepts it, the communicator does not.
  if (c.rank == 0) w.send(small.buffer().slice(0, 2), 1, 10);
  if (c.rank == 1)
    c.checks.expect_error([&] { w.recv(small.buffer(), 0, 10); },
                          {"recv of 4 f32 from peer 0", "the message has 2 elements, the buffer "
                                                        "holds 4"},
                          "short message");
  w.barrier();

  // A batch refused after its first operation could be posted, and one whose first receive
  // fails on arrival: neither leaves its other receive in flight, to take (into freed memory)
  // the message a later receive of the same tag is for.
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  const int bad_tag = found && tag_ub ? *tag_ub : 32767;
  auto retry = [&](int tag, const std::string& what) {
    w.barrier();
    if (c.rank == 1) {
      HostArray h(DType::F32, 4);
      h.fill([](int64_t i) { return 42 + i; });
      KitArray message(c.kit, DType::F32, 4);
      message.upload(h);
      w.send(message.buffer(), 0, tag);
    }
    if (c.rank == 0) {
      small.upload(HostArray(DType::F32, 4));
      w.recv(small.buffer(), 1, tag);
      c.checks.expect_array(small.download(), [](int64_t i) { return 42 + i; }, what);
    }
  };
  if (c.rank == 0) {
    KitArray r(c.kit, DType::F32, 4), s(c.kit, DType::F32, 4);
    c.checks.expect_error(
        [&] {
          w.batch(std::vector<P2P>{{P2P::Recv, r.buffer(), 1, 11}, {P2P::Send, s.buffer(), 1,
                                                                      bad_tag}});
        },
        {"is MPI_TAG_UB or above"}, "a batch with a refused tag");
  }
  retry(11, "a refused batch posts none of its operations");
  if (c.rank == 1) w.send(small.buffer().slice(0, 2), 0, 12);
  if (c.rank == 0) {
    KitArray r(c.kit, DType::F32, 4), r2(c.kit, DType::F32, 4);
    c.checks.expect_error(
        [&] {
          w.batch(std::vector<P2P>{{P2P::Recv, r.buffer(), 1, 12}, {P2P::Recv, r2.buffer(), 1,
                                                                      13}});
        },
        {"the message has 2 elements, the buffer holds 4"}, "a batch with a short message");
  }
  retry(13, "a failed batch cancels its other receives");
  w.barrier();
}

void case_mpi_tensors(Ctx& c) {
  if (!c.kit.is_mpi()) return;
  Grid g({1, 1, c.world}, c.kit.factory(c.options));
  Communicator& w = g.world();
  const double ranks_sum = c.world * (c.world + 1) / 2.0;

  Tensor t = Tensor::full({3, 5}, c.rank + 1);
  w.all_reduce(t, ReduceOp::Sum);
  bool all = true;
  for (float v : t.to_vector<float>()) all = all && v == ranks_sum;
  c.checks.expect(all, "all_reduce on a tensor");

  Tensor piece = Tensor::full({2}, c.rank, DType::BF16);
  Tensor gathered = Tensor::zeros({c.world, 2}, DType::BF16);
  w.all_gather(piece, gathered);
  HostArray h(DType::BF16, 2 * c.world);
  std::memcpy(h.data(), gathered.raw_data(), h.bytes());
  c.checks.expect_array(h, [](int64_t i) { return double(i / 2); }, "all_gather of bf16 tensors");

  // Gather in place: each rank's input is its own row of the output.
  Tensor rows = Tensor::zeros({c.world, 3}, DType::I64);
  rows.narrow(0, c.rank, 1).fill_(10 * c.rank);
  w.all_gather(rows.narrow(0, c.rank, 1), rows);
  std::vector<int64_t> got = rows.to_vector<int64_t>();
  all = true;
  for (int64_t i = 0; i < int64_t(got.size()); ++i) all = all && got[i] == 10 * (i / 3);
  c.checks.expect(all, "all_gather in place");

  c.checks.expect_error([&] { w.all_reduce(t.transpose(0, 1), ReduceOp::Sum); },
                        {"not contiguous"}, "a transposed view is refused");

  // A Work keeps the tensor it was posted on alive: the handle may be the only owner left.
  const int64_t before = cpu_memory_stats().live_bytes;
  Work work;
  {
    Tensor tmp = Tensor::full({1 << 16}, 1.0);
    work = w.iall_reduce(tmp, ReduceOp::Sum);
  }
  const int64_t during = cpu_memory_stats().live_bytes;
  work.wait();
  const int64_t after = cpu_memory_stats().live_bytes;
  c.checks.expect(during - before >= (int64_t(1) << 18) && after == before,
                  detail::concat("live bytes before ", before, ", in flight ", during,
                                 ", after ", after));
}

}  // namespace merak::comm::test
