// All-reduces of f32 arrays of any length among the members of a communicator that share one
// node, through a window of shared memory instead of messages: the tensor-parallel ranks of a
// CPU host reduce every layer's activations this way. MPI between processes of one machine
// copies each message through the kernel and its progress engine; here a member copies its
// input into its slot of the window and, once every member has posted, reads all slots and
// writes the reduction over its own input. Every member adds in rank order, so all get the
// same bits.
//
// Calls are rounds: every member posts the same lengths and ops in the same order (as MPI's
// collectives require). A member's slots form a ring of kSlots, so up to kSlots rounds may be
// in flight (the sub-pipelined mode posts two halves before waiting); a member reuses a slot
// only once every member has finished the round that last used it. The slots grow, all members
// together, when a round is longer than they are.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "merak/comm/buffer.h"
#include "merak/comm/mpi_communicator.h"

namespace merak::comm {

class NodeAllReduce {
 public:
  static constexpr int kSlots = 4;
  // The most shared memory a member may hold (its kSlots slots); longer rounds use messages.
  static constexpr int64_t kMaxBytes = int64_t(1) << 30;

  // Collective over `group`. Null, with the reason in *why_not, when not `wanted`, when `group`
  // is not an MPI group, when its members are on more than one node or when the first slots do
  // not fit in the shared-memory file system (node_window_fits).
  static std::unique_ptr<NodeAllReduce> create_if(bool wanted, const Communicator& group,
                                                  std::string* why_not);
  ~NodeAllReduce();
  NodeAllReduce(const NodeAllReduce&) = delete;
  NodeAllReduce& operator=(const NodeAllReduce&) = delete;

  // Whether a round of `count` floats with `op` goes through here: sum and max, within kMaxBytes
  // and within the slots the shared-memory file system has room to grow them to. Grows them
  // when it must, so collective then: every member asks about the same rounds in the same order
  // and gets the same answer, and all of them fall back to messages together.
  bool accepts(int64_t count, ReduceOp op);
  // Posts `count` floats at `data` (a round it accepts), reduced in place over the members once
  // the round is waited for; `data` must stay untouched until then. Returns the round's number.
  uint64_t post(float* data, int64_t count, ReduceOp op);
  // Whether wait(round) would return without waiting for another member.
  bool ready(uint64_t round) const;
  // Who wait(round) waits for, for a timeout's message: "peer 1 (world rank 3) has not posted
  // round 7" for the first member found behind, or "" when none is.
  std::string behind(uint64_t round) const;
  // Finishes every round of this member up to `round`: its result is in its `data`.
  void wait(uint64_t round);
  void all_reduce(float* data, int64_t count, ReduceOp op) { wait(post(data, count, op)); }

  int64_t bytes() const { return bytes_; }  // this member's part of the window

 private:
  struct Round {
    uint64_t number;
    float* data;
    int64_t count;
    ReduceOp op;
  };
  // Counters a member writes and every member reads, each on its own cache line.
  struct Counters {
    std::atomic<uint64_t>* posted;    // rounds whose input is in the member's slot
    std::atomic<uint64_t>* finished;  // rounds the member has read every slot of
  };

  explicit NodeAllReduce(const MpiCommunicator& group) : group_(group) {}
  // A member's part of a window with slots of `capacity` floats.
  static int64_t window_bytes(int64_t capacity);
  // (Re)makes the window with slots of `capacity` floats; collective; counters start at 0.
  void allocate(int64_t capacity);
  // Grows the slots to hold `count` floats, once every member is done with the current ones;
  // false, all members alike, when the shared-memory file system has no room for them (then
  // no round longer than the current slots comes here again).
  bool grow(int64_t count);
  // Finishes the oldest pending round: waits for every member's input, reduces into its data.
  void finish_next();
  // The general reduction: members' inputs in rank order through a block-sized accumulator.
  void reduce_in_rank_order(const Round& r) const;
  float* slot(int member, uint64_t round) const;
  // Waits until every member's `counter` has reached `round`.
  void wait_all(std::atomic<uint64_t>* Counters::*counter, uint64_t round, const char* done);

  const MpiCommunicator& group_;
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  int64_t capacity_ = 0;  // floats a slot holds
  int64_t limit_ = 0;     // floats a slot may grow to
  int64_t bytes_ = 0;
  std::vector<float*> slots_;  // per member: the first of its kSlots slots
  std::vector<Counters> counters_;
  uint64_t posted_ = 0;       // rounds this member has posted
  uint64_t finished_ = 0;     // rounds this member has finished
  std::deque<Round> pending_;  // posted, not finished, oldest first
};

}  // namespace merak::comm
