#include "merak/comm/nccl_communicator.h"

#include <sched.h>

#include <chrono>
#include <thread>

#include "merak/comm/mpi_env.h"
#include "merak/cuda/runtime.h"

namespace merak::comm {

namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(what + ": CUDA error: " + cudaGetErrorString(e));
}

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string("NCCL error: ") + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: MERAK_FAIL("nccl: unsupported dtype ", dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  MERAK_FAIL("nccl: unknown reduce op");
}

// NCCL calls between ncclGroupStart and ncclGroupEnd; the first failure wins.
template <typename Calls>
ncclResult_t grouped(Calls calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t first = calls();
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

// Keeps the first failing result of a series of calls.
struct FirstError {
  ncclResult_t r = ncclSuccess;
  void operator+=(ncclResult_t x) {
    if (r == ncclSuccess && x != ncclSuccess && x != ncclInProgress) r = x;
  }
};

void pause(long spins, double waited) {
  if (spins < 64) return;
  if (waited < 0.01)
    sched_yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

OpInfo op_info(const char* op, const Buffer& b, const char* reduce = nullptr) {
  OpInfo info;
  info.op = op;
  info.count = b.numel;
  info.dtype = b.dtype;
  info.reduce = reduce;
  return info;
}

class NcclWork : public WorkImpl {
 public:
  NcclWork(const NcclCommunicator& comm, OpInfo info, cudaEvent_t done)
      : comm_(comm), info_(std::move(info)), done_(done) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  bool poll() override {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_.nccl_comm(), &async);
    if (async != ncclSuccess && async != ncclInProgress)
      throw Error(describe() + ": " + nccl_text(async, comm_.nccl_comm()));
    cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, describe());
    return true;
  }
  std::string describe() const override { return info_.str(comm_); }
  void abort() override { ncclCommAbort(comm_.nccl_comm()); }

 private:
  const NcclCommunicator& comm_;
  OpInfo info_;
  cudaEvent_t done_;
};

// An MPI request waited on with the communicator's timeout (the unique id's broadcast).
class MpiRequestWork : public WorkImpl {
 public:
  MpiRequestWork(MPI_Request req, std::string what) : req_(req), what_(std::move(what)) {}
  bool poll() override {
    int flag = 0;
    check_mpi(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), what_);
    return flag != 0;
  }
  std::string describe() const override { return what_; }

 private:
  MPI_Request req_;
  std::string what_;
};

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;  // cudaGetDeviceCount leaves it unwritten when it fails
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

NcclCommunicator::NcclCommunicator(MPI_Comm group, std::string name, int device,
                                   CommOptions options)
    : Communicator(group, std::move(name), options), device_(device) {
  const std::string where = "nccl set-up of " + describe();
  ncclUniqueId id{};
  if (rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    // The other members are about to wait for the id: end the job rather than leave them.
    if (r != ncclSuccess) abort_job(where + ": ncclGetUniqueId: " + ncclGetErrorString(r));
  }
  MPI_Request req;
  check_mpi(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, group, &req), where);
  Work(std::make_unique<MpiRequestWork>(req, where + ": broadcast of the unique id from member 0"),
       timeout_s(), {})
      .wait();
  MPI_Comm_free(&group);

  check_cuda(cudaSetDevice(device_), where + ": cudaSetDevice(" + std::to_string(device_) + ")");
  compute_stream_ = cuda::stream(device_);  // where every kernel and copy of the device runs
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where);
  check_cuda(cudaMalloc(&scratch_, sizeof(int)), where);
  check_cuda(cudaMemset(scratch_, 0, sizeof(int)), where);
  // Non-blocking, so that joining and every later call can be timed out.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
  OpInfo info;
  info.op = "ncclCommInitRank";
  settle(r, info);
}

NcclCommunicator::~NcclCommunicator() {
  // Finalising waits for the peers' side of queued operations: not while a failure unwinds
  // (see unwinding()); the communicator and its buffers are leaked, the job is ending.
  if (unwinding()) return;
  cudaSetDevice(device_);
  if (comm_) {
    // Flush what is queued, then release; errors no longer matter here.
    if (ncclCommFinalize(comm_) == ncclInProgress) {
      ncclResult_t r = ncclInProgress;
      const auto start = Clock::now();
      while (r == ncclInProgress &&
             std::chrono::duration<double>(Clock::now() - start).count() < timeout_s())
        ncclCommGetAsyncError(comm_, &r);
    }
    ncclCommDestroy(comm_);
  }
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::settle(ncclResult_t r, const OpInfo& info) {
  const auto start = Clock::now();
  for (long spins = 0; r == ncclInProgress; ++spins) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s()) {
      std::string msg = detail::concat("comm timeout after ", timeout_s(), " s: ", info.str(*this),
                                       " did not finish (a peer never posted its matching call, "
                                       "is stuck, or died)");
      ncclCommAbort(comm_);
      abort_job(msg);
    }
    pause(spins, waited);
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess) throw Error(info.str(*this) + ": " + nccl_text(r, comm_));
}

void NcclCommunicator::check_device(const OpInfo& info, const Buffer& b) const {
  MERAK_CHECK(b.device.index == device_, info.str(*this), ": buffer on ", b.device.str(),
              ", the communicator on cuda:", device_);
}

template <typename Issue>
std::unique_ptr<WorkImpl> NcclCommunicator::launch(const OpInfo& info, Issue issue) {
  check_cuda(cudaSetDevice(device_), info.str(*this));
  cudaEvent_t ready, done;
  check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), info.str(*this));
  check_cuda(cudaEventRecord(ready, compute_stream_), info.str(*this));
  check_cuda(cudaStreamWaitEvent(stream_, ready, 0), info.str(*this));
  cudaEventDestroy(ready);  // released once it has fired
  settle(issue(), info);
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), info.str(*this));
  check_cuda(cudaEventRecord(done, stream_), info.str(*this));
  return std::make_unique<NcclWork>(*this, info, done);
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_batch(const std::vector<P2P>& ops) {
  OpInfo info;
  std::vector<OpInfo> parts;
  for (const P2P& p : ops) {
    OpInfo one = op_info(p.kind == P2P::Send ? "send" : "recv", p.buffer);
    one.role = p.kind == P2P::Send ? "to" : "from";
    one.peer = p.peer;
    one.tag = p.tag;
    check_device(one, p.buffer);
    parts.push_back(one);
  }
  if (parts.size() == 1) {
    info = parts[0];
  } else {
    info.op = "batch";
    info.parts = parts;
  }
  // NCCL has no tags: a pair's sends and receives match in posting order.
  return launch(info, [&] {
    return grouped([&] {
      FirstError e;
      for (const P2P& p : ops) {
        const Buffer& b = p.buffer;
        e += p.kind == P2P::Send
                 ? ncclSend(b.data, size_t(b.numel), nccl_type(b.dtype), p.peer, comm_, stream_)
                 : ncclRecv(b.data, size_t(b.numel), nccl_type(b.dtype), p.peer, comm_, stream_);
      }
      return e.r;
    });
  });
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_all_reduce(const Buffer& b, ReduceOp op) {
  OpInfo info = op_info("all_reduce", b, reduce_op_name(op));
  check_device(info, b);
  return launch(info, [&] {
    return ncclAllReduce(b.data, b.data, size_t(b.numel), nccl_type(b.dtype), nccl_op(op), comm_,
                         stream_);
  });
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_all_gather(const Buffer& in, const Buffer& out,
                                                            const std::vector<int64_t>& counts) {
  OpInfo info = op_info("all_gather", out);
  check_device(info, in);
  check_device(info, out);
  const ncclDataType_t type = nccl_type(in.dtype);
  bool even = true;
  for (int64_t c : counts) even = even && c == counts[0];
  if (even) {
    return launch(info, [&] {
      return ncclAllGather(in.data, out.data, size_t(in.numel), type, comm_, stream_);
    });
  }
  // Uneven: every rank sends its piece to every other, in one group; its own piece is a copy.
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  const Buffer mine = out.slice(displs[rank()], in.numel);
  return launch(info, [&] {
    if (mine.data != in.data && in.numel > 0)
      check_cuda(cudaMemcpyAsync(mine.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice,
                                 stream_),
                 info.str(*this));
    return grouped([&] {
      FirstError e;
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) continue;
        if (in.numel > 0) e += ncclSend(in.data, size_t(in.numel), type, r, comm_, stream_);
        if (counts[r] > 0)
          e += ncclRecv(out.slice(displs[r], counts[r]).data, size_t(counts[r]), type, r, comm_,
                        stream_);
      }
      return e.r;
    });
  });
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_reduce_scatter(
    const Buffer& in, const Buffer& out, ReduceOp op, const std::vector<int64_t>& counts) {
  OpInfo info = op_info("reduce_scatter", in, reduce_op_name(op));
  check_device(info, in);
  check_device(info, out);
  const ncclDataType_t type = nccl_type(in.dtype);
  bool even = true;
  for (int64_t c : counts) even = even && c == counts[0];
  if (even) {
    return launch(info, [&] {
      return ncclReduceScatter(in.data, out.data, size_t(out.numel), type, nccl_op(op), comm_,
                               stream_);
    });
  }
  // Uneven: one reduce per segment, rooted at the rank that keeps it, all in one group (a
  // send/recv version would need a reduction kernel of our own).
  return launch(info, [&] {
    return grouped([&] {
      FirstError e;
      int64_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        if (counts[r] > 0)
          e += ncclReduce(in.slice(offset, counts[r]).data, r == rank() ? out.data : nullptr,
                          size_t(counts[r]), type, nccl_op(op), r, comm_, stream_);
        offset += counts[r];
      }
      return e.r;
    });
  });
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_broadcast(const Buffer& b, int root) {
  OpInfo info = op_info("broadcast", b);
  info.role = "from root";
  info.peer = root;
  check_device(info, b);
  return launch(info, [&] {
    return ncclBroadcast(b.data, b.data, size_t(b.numel), nccl_type(b.dtype), root, comm_,
                         stream_);
  });
}

std::unique_ptr<WorkImpl> NcclCommunicator::post_barrier() {
  OpInfo info;
  info.op = "barrier";
  return launch(info, [&] {
    return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
  });
}

CommFactory nccl_backend(CommOptions options, int device) {
  if (device < 0) {
    std::string why;
    const int n = cuda_device_count(&why);
    MERAK_CHECK(n > 0, "nccl backend: no CUDA device (", why, ")");
    device = local_rank() % n;
  }
  return [options, device](MPI_Comm group, const std::string& name) {
    return std::unique_ptr<Communicator>(new NcclCommunicator(group, name, device, options));
  };
}

}  // namespace merak::comm
