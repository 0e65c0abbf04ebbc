// Sums fixed f32 regions over the members of a communicator that share one node, through a
// window of shared memory instead of messages. Region k is cut into one segment per member.
// Posting copies the segments other members add up into this member's slot (its own segment
// stays in the caller's memory); once every member has posted, member r adds up segment r
// (the members' inputs in rank order, so all members get the same bits) into the window's one
// copy of the results, where every member reads the whole sum in place (sum()) or copies it
// out (collect()). Per member that is (n-1)/n of the region copied in and 1/n of the additions:
// nothing waits on MPI's progress engine or its protocol, which is what makes it cheaper than
// messages between processes of one machine (data-parallel replicas on a CPU host).
//
// Rounds: each region is posted and read once per round (a training step). post(k) waits until
// every member is done with the previous round of region k (collected it, or released what it
// read in place), so a fast member never overwrites what a slow one still reads.
//
// The same window serves ZeRO-1 (a sharded optimizer): reduce_scatter() gives a member only
// its segment's sum, it updates its share of the parameters, writes them over its segment
// (own_segment) and all_gather() hands every member everyone's segments.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "merak/comm/mpi_communicator.h"

namespace merak::comm {

class NodeSum {
 public:
  // The shared memory a member may ask for by default; larger jobs use messages.
  static constexpr int64_t kMaxBytes = int64_t(1) << 30;

  // Collective over `group`. Returns nullptr, with the reason in *why_not, when the members do
  // not share one node or the regions exceed `max_bytes` a member (then use messages).
  static std::unique_ptr<NodeSum> create(const MpiCommunicator& group,
                                         const std::vector<int64_t>& region_floats,
                                         int64_t max_bytes, std::string* why_not);
  // create() within kMaxBytes when `wanted` and `group` is an MPI group; otherwise, or when
  // create() refuses, null with the reason ("turned off", "the nccl backend", ...).
  static std::unique_ptr<NodeSum> create_if(bool wanted, const Communicator& group,
                                            const std::vector<int64_t>& region_floats,
                                            std::string* why_not);
  ~NodeSum();
  NodeSum(const NodeSum&) = delete;
  NodeSum& operator=(const NodeSum&) = delete;

  int regions() const { return int(regions_.size()); }
  // This member's share of the window: its total (a slot a member, member 0's sums, the
  // counters) over the members, however MPI places the parts.
  int64_t bytes() const { return bytes_; }
  int64_t floats(int k) const { return regions_.at(size_t(k)).floats; }

  // Consecutive pieces of a member's input, together floats(k) values; data null: zeros.
  struct Piece {
    const float* data;
    int64_t count;
  };
  // Posts this member's input of region k. The pieces must stay unchanged until this member
  // has summed its segment (collect or reduce_scatter). Waits until every member has collected
  // the region's previous round.
  void post(int k, std::vector<Piece> pieces);
  // Adds up the segments this member owns of every region all members have posted; cheap when
  // there is nothing to do. Call it often while other work runs.
  void progress();
  // Waits for the sum of region k (adding up this member's segments meanwhile) and copies it,
  // `floats(k)` values, to `out`.
  void collect(int k, float* out);
  // Waits for the sum of region k like collect() and returns where it lies in the window,
  // `floats(k)` values, to read in place until release(k).
  const float* sum(int k);
  // This member is done with what sum(k) returned; no-op when it holds nothing of region k.
  void release(int k);

  // Member m's segment of region k: [segment_begin(k, m), segment_begin(k, m + 1)).
  int64_t segment_begin(int k, int member) const;
  // Waits until every member has posted region k and writes the sum of this member's segment
  // to `out` (the results are left as they are; nothing is shared yet).
  void reduce_scatter(int k, float* out);
  // This member's segment of the results, to overwrite with what all_gather() should share.
  float* own_segment(int k);
  // Shares this member's segment, waits for everyone's and hands each (this member's too) to
  // take(member, begin, values, count); ends the round. Segments may be empty, and an empty one
  // begins where the next does: tell them apart by member.
  void all_gather(int k,
                  const std::function<void(int, int64_t, const float*, int64_t)>& take);

 private:
  struct Region {
    int64_t offset = 0;  // floats from the start of a slot
    int64_t floats = 0;
  };
  // Counters a member writes and every member reads: how many rounds of region k it has
  // posted, added up (its segment) and collected.
  struct Counters {
    std::atomic<uint64_t>* posted;
    std::atomic<uint64_t>* summed;
    std::atomic<uint64_t>* collected;
  };

  NodeSum(const MpiCommunicator& group, std::vector<Region> regions);
  void sum_segment(int k, float* out);
  // Region floats [begin, begin + count) of this member's posted input, into dst.
  void copy_input(int k, int64_t begin, int64_t count, float* dst) const;
  void wait_posted(int k);
  // Waits until every member has added up its segment of region k's current round.
  void wait_summed(int k);
  // Waits until every member's `counter` of region k has reached `round`; `done` names the
  // step for the timeout's message ("posted").
  void wait_all(std::atomic<uint64_t>* Counters::*counter, int k, uint64_t round,
                const char* done);

  const MpiCommunicator& group_;
  std::vector<Region> regions_;
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<float*> slots_;        // per member: the inputs others add up
  float* results_ = nullptr;         // one for all, in member 0's part: the sums
  int64_t bytes_ = 0;
  std::vector<Counters> counters_;   // per member
  std::vector<uint64_t> round_;      // per region: rounds this member has posted
  std::vector<uint64_t> summed_;     // per region: rounds this member has added up
  std::vector<bool> lent_;           // per region: sum() handed out, not yet released
  std::vector<std::vector<Piece>> pieces_;  // per region: this member's input, this round
};

}  // namespace merak::comm
