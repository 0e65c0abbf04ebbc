// The communicator interface every backend implements (MPI on CPU memory, NCCL on CUDA
// memory): tagged point to point, all_reduce, all_gather, reduce_scatter, broadcast, barrier.
// Each operation is posted asynchronously and returns a Work; the blocking form is the same
// call followed by wait(). Arguments are checked here, once for all backends, so a misuse
// fails with the same message whatever the backend.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "merak/comm/buffer.h"
#include "merak/comm/work.h"

namespace merak::comm {

struct CommOptions {
  // A wait() longer than this ends the job with a message naming the operation, group and peer.
  double timeout_s = 300;
  // The MPI backend's longest call, in elements (MPI counts are int): longer operations are
  // posted as several calls. Tests lower it to split small buffers.
  int64_t mpi_max_count = INT32_MAX;
};

// One point-to-point operation of a batch.
struct P2P {
  enum Kind { Send, Recv } kind;
  Buffer buffer;
  int peer;
  int tag;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& name() const { return name_; }  // "tp", "dp", "pp", "tied", "world"
  int rank() const { return rank_; }
  int size() const { return int(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // member i's world rank
  // "group 'tp' (rank 1 of 2, world ranks 4,5)"
  std::string describe() const;
  // "peer 1 (world rank 5)"
  std::string describe_peer(int peer) const;

  double timeout_s() const { return options_.timeout_s; }
  const CommOptions& options() const { return options_; }
  void set_timeout(double seconds);

  virtual const char* backend() const = 0;  // "mpi", "nccl"
  virtual DeviceType memory() const = 0;    // where buffers must live
  // Whether receives match sends by tag (MPI). NCCL matches a pair's operations in posting
  // order, and the tag only labels messages.
  virtual bool matches_tags() const = 0;
  // Bytes of shared memory this member holds for the group (a window no allocator counts).
  virtual int64_t shared_bytes() const { return 0; }

  // Asynchronous operations. Buffers must stay untouched until the Work finishes.
  Work isend(const Buffer& b, int peer, int tag);
  Work irecv(const Buffer& b, int peer, int tag);  // the message must fill b exactly (MPI checks)
  // Sends and receives posted together: operations that depend on each other (a ring, a
  // pipeline exchange) must go in one batch, since NCCL would serialise them otherwise.
  Work ibatch(const std::vector<P2P>& ops);
  // The same batch with its receives and sends as two handles, so that a receiver waits for no
  // more than it must: where operations progress each on their own (matches_tags: MPI) they are
  // posted as two batches; where a batch must run as one unit (NCCL) the one handle is
  // `receives` and `sends` is already finished.
  struct SplitBatch {
    Work receives, sends;
  };
  SplitBatch ibatch_split(const std::vector<P2P>& ops);
  Work iall_reduce(const Buffer& b, ReduceOp op);  // in place
  // out = the inputs of ranks 0..size-1 concatenated; all inputs the same size.
  Work iall_gather(const Buffer& in, const Buffer& out);
  // Uneven: rank i contributes counts[i] elements (counts[rank()] == in.numel).
  Work iall_gather(const Buffer& in, const Buffer& out, const std::vector<int64_t>& counts);
  // out = segment rank() of the reduction of every rank's in; all segments the same size.
  Work ireduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op);
  // Uneven: segment i has counts[i] elements (counts[rank()] == out.numel).
  Work ireduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op,
                       const std::vector<int64_t>& counts);
  Work ibroadcast(const Buffer& b, int root);
  Work ibarrier();

  // Blocking forms: post, then wait.
  template <typename... A> void send(A&&... a) { isend(std::forward<A>(a)...).wait(); }
  template <typename... A> void recv(A&&... a) { irecv(std::forward<A>(a)...).wait(); }
  template <typename... A> void batch(A&&... a) { ibatch(std::forward<A>(a)...).wait(); }
  template <typename... A> void all_reduce(A&&... a) { iall_reduce(std::forward<A>(a)...).wait(); }
  template <typename... A> void all_gather(A&&... a) { iall_gather(std::forward<A>(a)...).wait(); }
  template <typename... A> void reduce_scatter(A&&... a) {
    ireduce_scatter(std::forward<A>(a)...).wait();
  }
  template <typename... A> void broadcast(A&&... a) { ibroadcast(std::forward<A>(a)...).wait(); }
  void barrier() { ibarrier().wait(); }

 protected:
  // `group` gives the members (translated to world ranks once, for messages); backends keep
  // or free it as they need.
  Communicator(MPI_Comm group, std::string name, CommOptions options);
  // A group of this process alone, world rank 0, without MPI (SelfCommunicator).
  Communicator(std::string name, CommOptions options);
  // The group of `inner`, which the new communicator wraps: its name, members, rank, timeout.
  struct Wrapping {};
  Communicator(Wrapping, const Communicator& inner);

  // The backend's part: arguments are already checked. Even all_gather and reduce_scatter come
  // with equal counts.
  virtual std::unique_ptr<WorkImpl> post_batch(const std::vector<P2P>& ops) = 0;
  virtual std::unique_ptr<WorkImpl> post_all_reduce(const Buffer& b, ReduceOp op) = 0;
  virtual std::unique_ptr<WorkImpl> post_all_gather(const Buffer& in, const Buffer& out,
                                                    const std::vector<int64_t>& counts) = 0;
  virtual std::unique_ptr<WorkImpl> post_reduce_scatter(const Buffer& in, const Buffer& out,
                                                        ReduceOp op,
                                                        const std::vector<int64_t>& counts) = 0;
  virtual std::unique_ptr<WorkImpl> post_broadcast(const Buffer& b, int root) = 0;
  virtual std::unique_ptr<WorkImpl> post_barrier() = 0;

 private:
  void check_buffer(const char* op, const Buffer& b) const;
  void check_peer(const char* op, int peer, const char* role) const;
  void check_counts(const char* op, const std::vector<int64_t>& counts, int64_t mine,
                    int64_t total, const char* mine_name, const char* total_name) const;
  Work make_work(std::unique_ptr<WorkImpl> impl, std::vector<Tensor> keep) const;

  std::string name_;
  int rank_ = 0;
  std::vector<int> world_ranks_;
  CommOptions options_;
};

// The group's backend as reports name it: "MPI", "NCCL", "MPI staged through host memory".
std::string backend_name(const Communicator& c);

// Makes a backend's communicator over an MPI group (the Grid calls it once per group, on every
// member, in the same order). Takes ownership of `group`.
using CommFactory =
    std::function<std::unique_ptr<Communicator>(MPI_Comm group, const std::string& name)>;

// One operation, for messages; formatted only when a message needs it.
//   "all_reduce (sum) of 1024 f32 on group 'tp' (rank 0 of 2, world ranks 0,1)"
//   "send of 1024 f32 to peer 1 (world rank 5), tag 3 on group 'pp' (...)"
struct OpInfo {
  const char* op = "";
  int64_t count = -1;  // -1: no payload (barrier)
  DType dtype = DType::F32;
  const char* reduce = nullptr;  // "sum", "avg", "max"
  const char* role = nullptr;    // "to", "from", "from root"
  int peer = -1;
  int tag = -1;
  std::vector<OpInfo> parts;  // a batch's operations

  std::string str(const Communicator& c) const;
  std::string body(const Communicator& c) const;  // without the group
};

}  // namespace merak::comm
