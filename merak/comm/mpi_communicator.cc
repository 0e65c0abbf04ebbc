#include "merak/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
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

  // Receives to check on arrival: the message must fill the buffer exactly.
  struct Expect {
    int64_t count = -1;  // -1: nothing to check (sends, collectives)
    MPI_Datatype type = MPI_BYTE;
    OpInfo what;
  };

  std::vector<MPI_Request> reqs;
  std::vector<Expect> expects;
  std::vector<int> counts, displs;  // MPI reads these until the operation completes
  std::function<void()> on_finish;   // avg's division

  bool poll() override {
    bool pending = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Test(&reqs[i], &flag, &st);
      if (rc != MPI_SUCCESS) throw Error(describe() + ": " + mpi_error_string(rc));
      if (!flag) {
        pending = true;
        continue;
      }
      const Expect& e = expects[i];
      int got = 0;
      if (e.count >= 0 && MPI_Get_count(&st, e.type, &got) == MPI_SUCCESS && got != e.count)
        throw Error(detail::concat(e.what.str(comm_), ": the message has ", got,
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
  const MpiCommunicator& comm_;
  OpInfo info_;
  bool collective_;
};

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
  if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int MpiCommunicator::to_int(const OpInfo& info, int64_t n) const {
  MERAK_CHECK(n <= INT_MAX, info.str(*this), ": ", n,
              " elements exceed MPI's int count; split the operation");
  return int(n);
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_batch(const std::vector<P2P>& ops) {
  OpInfo info;
  if (ops.size() == 1) {
    info = p2p_info(ops[0]);
  } else {
    info.op = "batch";
    for (const P2P& p : ops) info.parts.push_back(p2p_info(p));
  }
  auto work = std::make_unique<MpiWork>(*this, info, false);
  for (const P2P& p : ops) {
    MERAK_CHECK(p.tag < roll_call_tag(), info.str(*this), ": tag ", p.tag,
                " is MPI_TAG_UB or above (", roll_call_tag(), ", which the roll call keeps)");
    const MPI_Datatype type = mpi_type(p.buffer.dtype);
    const int n = to_int(info, p.buffer.numel);
    MPI_Request req;
    MpiWork::Expect e;
    int rc;
    if (p.kind == P2P::Send) {
      rc = MPI_Isend(p.buffer.data, n, type, p.peer, p.tag, comm_, &req);
    } else {
      rc = MPI_Irecv(p.buffer.data, n, type, p.peer, p.tag, comm_, &req);
      e = {n, type, p2p_info(p)};
    }
    check_mpi(rc, info.str(*this));
    work->reqs.push_back(req);
    work->expects.push_back(e);
  }
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_all_reduce(const Buffer& b, ReduceOp op) {
  OpInfo info = collective_info("all_reduce", b, reduce_op_name(op));
  auto work = std::make_unique<MpiWork>(*this, info, true);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, b.data, to_int(info, b.numel), mpi_type(b.dtype),
                           mpi_op(op, b.dtype), comm_, &req),
            info.str(*this));
  work->reqs = {req};
  work->expects.resize(1);
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
  to_int(info, out.numel);  // displacements are ints too
  int64_t offset = 0;
  for (int64_t c : counts) {
    work->counts.push_back(int(c));
    work->displs.push_back(int(offset));
    offset += c;
  }
  const MPI_Datatype type = mpi_type(in.dtype);
  // An input that already sits at this rank's place in the output is gathered in place.
  const char* mine = static_cast<const char*>(out.data) +
                     int64_t(work->displs[rank()]) * int64_t(dtype_size(out.dtype));
  const void* send = (in.numel > 0 && in.data == mine) ? MPI_IN_PLACE : in.data;
  MPI_Request req;
  check_mpi(MPI_Iallgatherv(send, int(in.numel), type, out.data, work->counts.data(),
                            work->displs.data(), type, comm_, &req),
            info.str(*this));
  work->reqs = {req};
  work->expects.resize(1);
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_reduce_scatter(const Buffer& in,
                                                               const Buffer& out, ReduceOp op,
                                                               const std::vector<int64_t>& counts) {
  OpInfo info = collective_info("reduce_scatter", in, reduce_op_name(op));
  auto work = std::make_unique<MpiWork>(*this, info, true);
  to_int(info, in.numel);
  for (int64_t c : counts) work->counts.push_back(int(c));
  MPI_Request req;
  check_mpi(MPI_Ireduce_scatter(in.data, out.data, work->counts.data(), mpi_type(in.dtype),
                                mpi_op(op, in.dtype), comm_, &req),
            info.str(*this));
  work->reqs = {req};
  work->expects.resize(1);
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
  MPI_Request req;
  check_mpi(MPI_Ibcast(b.data, to_int(info, b.numel), mpi_type(b.dtype), root, comm_, &req),
            info.str(*this));
  work->reqs = {req};
  work->expects.resize(1);
  return work;
}

std::unique_ptr<WorkImpl> MpiCommunicator::post_barrier() {
  OpInfo info;
  info.op = "barrier";
  auto work = std::make_unique<MpiWork>(*this, info, true);
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm_, &req), info.str(*this));
  work->reqs = {req};
  work->expects.resize(1);
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
