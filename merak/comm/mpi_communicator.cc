#include "merak/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <thread>

#include "merak/comm/host_reduce.h"
#include "merak/comm/mpi_env.h"

namespace merak::comm {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16:  // no MPI type: 16-bit words, reduced by the user ops below
    case DType::F16: return MPI_UINT16_T;
    default: MERAK_FAIL("mpi: unsupported dtype ", dtype_name(t));
  }
}

template <DType D, ReduceOp O>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_half(D, O, in, inout, *len);
}

// The user-defined ops for bf16/f16, made once after MPI_Init and kept for the job.
struct HalfOps {
  MPI_Op bf16_sum, bf16_max, f16_sum, f16_max;
  HalfOps() {
    check_mpi(MPI_Op_create(&half_op<DType::BF16, ReduceOp::Sum>, 1, &bf16_sum), "MPI_Op_create");
    check_mpi(MPI_Op_create(&half_op<DType::BF16, ReduceOp::Max>, 1, &bf16_max), "MPI_Op_create");
    check_mpi(MPI_Op_create(&half_op<DType::F16, ReduceOp::Sum>, 1, &f16_sum), "MPI_Op_create");
    check_mpi(MPI_Op_create(&half_op<DType::F16, ReduceOp::Max>, 1, &f16_max), "MPI_Op_create");
  }
};

// Avg reduces as a sum; the division happens when the operation finishes.
MPI_Op mpi_op(ReduceOp op, DType t) {
  const bool max = op == ReduceOp::Max;
  if (t == DType::BF16 || t == DType::F16) {
    static const HalfOps ops;
    if (t == DType::BF16) return max ? ops.bf16_max : ops.bf16_sum;
    return max ? ops.f16_max : ops.f16_sum;
  }
  return max ? MPI_MAX : MPI_SUM;
}

OpInfo collective_info(const char* op, const Buffer& b, const char* reduce) {
  OpInfo info;
  info.op = op;
  info.count = b.numel;
  info.dtype = b.dtype;
  info.reduce = reduce;
  return info;
}

OpInfo p2p_info(const P2P& p) {
  OpInfo info;
  const bool send = p.kind == P2P::Send;
  info.op = send ? "send" : "recv";
  info.count = p.buffer.numel;
  info.dtype = p.buffer.dtype;
  info.role = send ? "to" : "from";
  info.peer = p.peer;
  info.tag = p.tag;
  return info;
}

// After a collective timed out: every member that timed out in it too says so to the others
// (one message with the reserved tag), and those not heard from within grace_s are named. MPI
// cannot tell which member has not joined a collective; the members waiting in it can.
std::string roll_call(const MpiCommunicator& group, double grace_s) {
  using Clock = std::chrono::steady_clock;
  const int n = group.size(), me = group.rank();
  static const int32_t here = 1;  // what is sent: sends may be in flight when the job ends
  std::vector<int32_t> heard(size_t(n), 0);
  std::vector<MPI_Request> recvs(size_t(n), MPI_REQUEST_NULL);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    MPI_Request send;
    if (MPI_Isend(&here, 1, MPI_INT32_T, p, group.roll_call_tag(), group.mpi_comm(), &send) ==
        MPI_SUCCESS)
      MPI_Request_free(&send);
    MPI_Irecv(&heard[size_t(p)], 1, MPI_INT32_T, p, group.roll_call_tag(), group.mpi_comm(),
              &recvs[size_t(p)]);
  }
  const auto start = Clock::now();
  for (;;) {
    int pending = 0;
    for (MPI_Request& r : recvs) {
      int flag = 1;
      if (r != MPI_REQUEST_NULL && MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 0;
      pending += flag ? 0 : 1;
    }
    if (pending == 0 || std::chrono::duration<double>(Clock::now() - start).count() > grace_s)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int> silent;
  for (int p = 0; p < n; ++p) {
    MPI_Request& r = recvs[size_t(p)];
    if (r == MPI_REQUEST_NULL) continue;
    silent.push_back(p);
    MPI_Cancel(&r);  // `heard` goes out of scope: the receive must be over first
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  std::string out = detail::concat("; roll call over ", grace_s, " s: ");
  if (silent.empty()) return out + "every member answered from this call";
  out += silent.size() == 1 ? "no answer from member " : "no answer from members ";
  const size_t shown = std::min<size_t>(silent.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    out += detail::concat(i ? ", " : "", silent[i], " (world rank ",
                          group.world_ranks()[size_t(silent[i])], ")");
  if (shown < silent.size()) out += detail::concat(" and ", silent.size() - shown, " more");
  return out;
}

class MpiWork : public WorkImpl {
 public:
  // A collective's work holds a roll call when it times out; a send or receive names its peer.
  MpiWork(const MpiCommunicator& comm, OpInfo info, bool collective)
      : comm_(comm), info_(std::move(info)), collective_(collective) {}
  ~MpiWork() override { cancel_p2p(); }

  // Receives to check on arrival: the message must fill the buffer exactly.
  struct Expect {
    int64_t count = -1;  // -1: nothing to check (sends, collectives)
    MPI_Datatype type = MPI_BYTE;
    OpInfo what;
  };

  std::vector<MPI_Request> reqs;     // one a call: an operation longer than a call is several
  std::vector<Expect> expects;       // per request
  std::vector<int> counts, displs;   // MPI reads these until the operation completes
  std::function<void()> on_finish;   // avg's division

  // Posts one call (`post` fills in the request), expecting `e` of it. A failure to post ends
  // what the work has posted already before it throws.
  template <typename Post>
  void add(Post post, Expect e = {}) {
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = post(&req);
    if (rc != MPI_SUCCESS) {
      cancel_p2p();
      check_mpi(rc, describe());
    }
    reqs.push_back(req);
    expects.push_back(std::move(e));
  }

  bool poll() override {
    bool pending = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Test(&reqs[i], &flag, &st);
      if (rc != MPI_SUCCESS) fail(describe() + ": " + mpi_error_string(rc));
      if (!flag) {
        pending = true;
        continue;
      }
      const Expect& e = expects[i];
      int got = 0;
      if (e.count >= 0 && MPI_Get_count(&st, e.type, &got) == MPI_SUCCESS && got != e.count)
        fail(detail::concat(e.what.str(comm_), ": the message has ", got,
                            " elements, the buffer holds ", e.count));
    }
    if (pending) return false;
    if (on_finish) on_finish();
    on_finish = nullptr;
    return true;
  }

  std::string describe() const override { return info_.str(comm_); }
  std::string roll_call(double grace_s) override {
    return collective_ ? comm::roll_call(comm_, grace_s) : "";
  }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    cancel_p2p();
    throw Error(msg);
  }
  // Ends the point-to-point requests still active, so that none writes into a buffer once the
  // work is gone (a failed batch's others, or a batch abandoned half-posted): receives are
  // cancelled and waited for, which returns at once or once a matched message is in; sends only
  // read their buffers, and one that cannot be cancelled is left to MPI. A collective cannot be
  // cancelled: its failure ends the job.
  void cancel_p2p() {
    if (collective_) return;
    for (size_t i = 0; i < reqs.size(); ++i) {
      MPI_Request& r = reqs[i];
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      if (expects[i].count >= 0)
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      else
        MPI_Request_free(&r);
    }
  }

  const MpiCommunicator& comm_;
  OpInfo info_;
  bool collective_;
};

// [begin, begin + count) in calls of at most `most` elements: f(offset, length) for each (one
// call with length 0 for an empty range, which collectives still need on every member).
template <typename F>
void in_calls(int64_t count, int64_t most, F f) {
  int64_t at = 0;
  do {
    const int64_t len = std::min(most, count - at);
    f(at, int(len));
    at += len;
  } while (at < count);
}

char* at_element(void* data, DType t, int64_t i) {
  return static_cast<char*>(data) + i * int64_t(dtype_size(t));
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, CommOptions options)
    : Communicator(comm, std::move(name), options), comm_(comm) {
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
            "communicator '" + this->name() + "': MPI_Comm_set_errhandler");
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  if (found && ub) tag_ub_ = *ub;
}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  // Collective in principle: skipped while a failure unwinds (see unwinding()).
  if (!fin && !unwinding() && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int64_t MpiCommunicator::max_count() const {
  return std::min<int64_t>(options().mpi_max_count, INT_MAX);
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_batch(const std::vector<P2P>& ops) {
  OpInfo info;
  if (ops.size() == 1) {
    info = p2p_info(ops[0]);
  } else {
    info.op = "batch";
    for (const P2P& p : ops) info.parts.push_back(p2p_info(p));
  }
  // Every operation is checked before any is posted: a refused one leaves none in flight.
  for (const P2P& p : ops) {
    MERAK_CHECK(p.tag < roll_call_tag(), info.str(*this), ": tag ", p.tag,
                " is MPI_TAG_UB or above (", roll_call_tag(), ", which the roll call keeps)");
    mpi_type(p.buffer.dtype);
  }
  auto work = std::make_unique<MpiWork>(*this, info, false);
  for (const P2P& p : ops) {
    const MPI_Datatype type = mpi_type(p.buffer.dtype);
    // A long message goes as several with the same tag; MPI matches them in posting order. (A
    // sender longer than its receiver by whole calls is then not MPI_ERR_TRUNCATE: its extra
    // calls would meet the pair's next receive. The engine's pairs post equal lengths.)
    in_calls(p.buffer.numel, max_count(), [&](int64_t at, int n) {
      void* data = at_element(p.buffer.data, p.buffer.dtype, at);
      if (p.kind == P2P::Send) {
        work->add([&](MPI_Request* r) {
          return MPI_Isend(data, n, type, p.peer, p.tag, comm_, r);
        });
      } else {
        work->add([&](MPI_Request* r) {
          return MPI_Irecv(data, n, type, p.peer, p.tag, comm_, r);
        }, {n, type, p2p_info(p)});
      }
    });
  }
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_all_reduce(const Buffer& b, ReduceOp op) {
  OpInfo info = collective_info("all_reduce", b, reduce_op_name(op));
  auto work = std::make_unique<MpiWork>(*this, info, true);
  const MPI_Datatype type = mpi_type(b.dtype);
  const MPI_Op mop = mpi_op(op, b.dtype);
  in_calls(b.numel, max_count(), [&](int64_t at, int n) {
    void* data = at_element(b.data, b.dtype, at);
    work->add([&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, n, type, mop, comm_, r);
    });
  });
  if (op == ReduceOp::Avg) {
    const int n = size();
    work->on_finish = [b, n] { divide_in_place(b.dtype, b.data, b.numel, n); };
  }
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_all_gather(const Buffer& in, const Buffer& out,
                                                           const std::vector<int64_t>& counts) {
  OpInfo info = collective_info("all_gather", out, nullptr);
  auto work = std::make_unique<MpiWork>(*this, info, true);
  const MPI_Datatype type = mpi_type(in.dtype);
  std::vector<int64_t> displs;
  int64_t offset = 0;
  for (int64_t c : counts) {
    displs.push_back(offset);
    offset += c;
  }
  char* mine = at_element(out.data, out.dtype, displs[size_t(rank())]);
  if (out.numel > max_count()) {
    // Past one call's counts and displacements: each member's part broadcast from it, in calls.
    if (in.numel > 0 && in.data != mine)
      std::memcpy(mine, in.data, size_t(in.numel) * dtype_size(in.dtype));
    for (int m = 0; m < size(); ++m)
      in_calls(counts[size_t(m)], max_count(), [&](int64_t at, int n) {
        void* data = at_element(out.data, out.dtype, displs[size_t(m)] + at);
        work->add([&](MPI_Request* r) { return MPI_Ibcast(data, n, type, m, comm_, r); });
      });
    return work;
  }
  for (size_t m = 0; m < counts.size(); ++m) {
    work->counts.push_back(int(counts[m]));
    work->displs.push_back(int(displs[m]));
  }
  // An input that already sits at this rank's place in the output is gathered in place.
  const void* send = (in.numel > 0 && in.data == mine) ? MPI_IN_PLACE : in.data;
  work->add([&](MPI_Request* r) {
    return MPI_Iallgatherv(send, int(in.numel), type, out.data, work->counts.data(),
                           work->displs.data(), type, comm_, r);
  });
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_reduce_scatter(const Buffer& in,
                                                               const Buffer& out, ReduceOp op,
                                                               const std::vector<int64_t>& counts) {
  OpInfo info = collective_info("reduce_scatter", in, reduce_op_name(op));
  auto work = std::make_unique<MpiWork>(*this, info, true);
  const MPI_Datatype type = mpi_type(in.dtype);
  const MPI_Op mop = mpi_op(op, in.dtype);
  if (in.numel > max_count()) {
    // Past one call's counts: each member's segment reduced to it, in calls.
    int64_t offset = 0;
    for (int m = 0; m < size(); ++m) {
      in_calls(counts[size_t(m)], max_count(), [&](int64_t at, int n) {
        const void* send = at_element(in.data, in.dtype, offset + at);
        void* recv = m == rank() ? at_element(out.data, out.dtype, at) : nullptr;
        work->add([&](MPI_Request* r) {
          return MPI_Ireduce(send, recv, n, type, mop, m, comm_, r);
        });
      });
      offset += counts[size_t(m)];
    }
  } else {
    for (int64_t c : counts) work->counts.push_back(int(c));
    work->add([&](MPI_Request* r) {
      return MPI_Ireduce_scatter(in.data, out.data, work->counts.data(), type, mop, comm_, r);
    });
  }
  if (op == ReduceOp::Avg) {
    const int n = size();
    work->on_finish = [out, n] { divide_in_place(out.dtype, out.data, out.numel, n); };
  }
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_broadcast(const Buffer& b, int root) {
  OpInfo info = collective_info("broadcast", b, nullptr);
  info.role = "from root";
  info.peer = root;
  auto work = std::make_unique<MpiWork>(*this, info, true);
  const MPI_Datatype type = mpi_type(b.dtype);
  in_calls(b.numel, max_count(), [&](int64_t at, int n) {
    void* data = at_element(b.data, b.dtype, at);
    work->add([&](MPI_Request* r) { return MPI_Ibcast(data, n, type, root, comm_, r); });
  });
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_barrier() {
  OpInfo info;
  info.op = "barrier";
  auto work = std::make_unique<MpiWork>(*this, info, true);
  work->add([&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  return work;
}

CommFactory mpi_backend(CommOptions options) {
  return [options](MPI_Comm group, const std::string& name) -> std::unique_ptr<Communicator> {
    return std::make_unique<MpiCommunicator>(group, name, options);
  };
}

const MpiCommunicator* as_mpi(const Communicator& group, std::string* why_not) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&group);
  if (!mpi) *why_not = std::string("the ") + group.backend() + " backend";
  return mpi;
}

}  // namespace merak::comm
