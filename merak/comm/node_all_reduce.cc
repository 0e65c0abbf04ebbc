#include "merak/comm/node_all_reduce.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "merak/comm/mpi_env.h"
#include "merak/comm/node_wait.h"
#include "merak/core/error.h"
#include "merak/log/log.h"

namespace merak::comm {

namespace {

constexpr int64_t kLineBytes = 64;
constexpr int64_t kCounterBytes = 2 * kLineBytes;  // posted and finished, a line each
constexpr int64_t kAlignFloats = kLineBytes / int64_t(sizeof(float));
constexpr int64_t kFirstCapacity = int64_t(1) << 16;  // floats a slot holds at first
constexpr int64_t kBlockFloats = 2048;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

int64_t max_capacity() {
  return NodeAllReduce::kMaxBytes / NodeAllReduce::kSlots / int64_t(sizeof(float)) /
         kAlignFloats * kAlignFloats;
}

}  // namespace

std::unique_ptr<NodeAllReduce> NodeAllReduce::create_if(bool wanted, const Communicator& group,
                                                        std::string* why_not) {
  if (!wanted) {
    *why_not = "turned off";
    return nullptr;
  }
  const MpiCommunicator* mpi = as_mpi(group, why_not);
  if (!mpi) return nullptr;
  MPI_Comm node = one_node_comm(mpi->mpi_comm(), group.describe(), why_not);
  if (node == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<NodeAllReduce> reduce(new NodeAllReduce(*mpi));
  reduce->node_ = node;
  int node_rank = -1;
  MPI_Comm_rank(node, &node_rank);
  MERAK_CHECK(node_rank == group.rank(), group.describe(), ": its node communicator ranks it ",
              node_rank);  // equal keys keep the group's order
  reduce->limit_ = max_capacity();
  if (!node_window_fits(node, reduce->window_bytes(kFirstCapacity), why_not)) return nullptr;
  reduce->allocate(kFirstCapacity);
  return reduce;
}

NodeAllReduce::~NodeAllReduce() {
  // A member's mapping of the window outlives another's free, so no member waits here for the
  // others to finish reading its slots.
  free_node_window(&window_, &node_);
}

bool NodeAllReduce::accepts(int64_t count, ReduceOp op) {
  if ((op != ReduceOp::Sum && op != ReduceOp::Max) || count < 0 || count > limit_) return false;
  return count <= capacity_ || grow(count);
}

int64_t NodeAllReduce::window_bytes(int64_t capacity) {
  return kCounterBytes + kSlots * round_up(capacity, kAlignFloats) * int64_t(sizeof(float));
}

void NodeAllReduce::allocate(int64_t capacity) {
  capacity_ = round_up(capacity, kAlignFloats);
  bytes_ = window_bytes(capacity_);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part near its owner's memory
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(MPI_Aint(bytes_), 1, info, node_, &base, &window_);
  MPI_Info_free(&info);
  check_mpi(rc, group_.describe() + ": MPI_Win_allocate_shared of " + std::to_string(bytes_) +
                    " bytes");
  slots_.clear();
  counters_.clear();
  for (int m = 0; m < group_.size(); ++m) {
    MPI_Aint size = 0;
    int unit = 0;
    void* part = nullptr;
    check_mpi(MPI_Win_shared_query(window_, m, &size, &unit, &part),
              group_.describe() + ": MPI_Win_shared_query");
    char* at = static_cast<char*>(part);
    counters_.push_back({reinterpret_cast<std::atomic<uint64_t>*>(at),
                         reinterpret_cast<std::atomic<uint64_t>*>(at + kLineBytes)});
    slots_.push_back(reinterpret_cast<float*>(at + kCounterBytes));
  }
  // Round numbers carry on across a regrowth (callers may hold them); every member is at the
  // same round here.
  char* mine = static_cast<char*>(base);
  std::memset(mine, 0, size_t(bytes_));  // taken now (node_window_fits)
  new (mine) std::atomic<uint64_t>(posted_);
  new (mine + kLineBytes) std::atomic<uint64_t>(finished_);
  check_mpi(MPI_Barrier(node_), group_.describe() + ": barrier after the shared window");
}

bool NodeAllReduce::grow(int64_t count) {
  // Doubling, or at least the round's length when the file system has room for no more.
  int64_t capacity = std::min(limit_, std::max(count, 2 * capacity_));
  std::string why_not;
  bool fits = node_window_fits(node_, window_bytes(capacity) - bytes_, &why_not);
  if (!fits && capacity > count) {
    capacity = count;
    fits = node_window_fits(node_, window_bytes(capacity) - bytes_, &why_not);
  }
  if (!fits) {
    limit_ = capacity_;
    if (group_.rank() == 0)
      log::warn(detail::concat("shared-memory all-reduce over ", group_.describe(),
                               ": rounds over ", capacity_, " floats go by messages (", why_not,
                               ")"));
    return false;
  }
  while (!pending_.empty()) finish_next();
  // Nobody may still read the slots about to go: every member has finished every round.
  wait_all(&Counters::finished, posted_, "finished");
  check_mpi(MPI_Win_free(&window_), group_.describe() + ": MPI_Win_free");
  allocate(capacity);
  return true;
}

float* NodeAllReduce::slot(int member, uint64_t round) const {
  return slots_[size_t(member)] + int64_t((round - 1) % kSlots) * capacity_;
}

void NodeAllReduce::wait_all(std::atomic<uint64_t>* Counters::*counter, uint64_t round,
                             const char* done) {
  wait_for_members(
      group_, node_, "shared-memory all-reduce",
      [&](int m) {
        return (counters_[size_t(m)].*counter)->load(std::memory_order_acquire) >= round;
      },
      [&] { return detail::concat(done, " round ", round); });
}

uint64_t NodeAllReduce::post(float* data, int64_t count, ReduceOp op) {
  // Collective where it grows the window: every member posts the same rounds.
  const bool accepted = accepts(count, op);
  MERAK_CHECK(accepted, "shared-memory all-reduce over ", group_.describe(), ": ",
              reduce_op_name(op), " of ", count, " floats is not one it does");
  const uint64_t round = posted_ + 1;
  if (round > uint64_t(kSlots)) {
    // The slot was last used kSlots rounds ago: finish that round here (so a member never
    // waits on others while holding back what they wait for), then wait for everyone's.
    const uint64_t last_use = round - kSlots;
    while (!pending_.empty() && pending_.front().number <= last_use) finish_next();
    wait_all(&Counters::finished, last_use, "finished");
  }
  const int me = group_.rank();
  // An empty buffer may have no address: memcpy must not see a null pointer.
  if (count > 0) std::memcpy(slot(me, round), data, size_t(count) * sizeof(float));
  posted_ = round;
  counters_[size_t(me)].posted->store(round, std::memory_order_release);
  pending_.push_back({round, data, count, op});
  return round;
}

bool NodeAllReduce::ready(uint64_t round) const {
  if (round <= finished_) return true;
  for (const Counters& c : counters_)
    if (c.posted->load(std::memory_order_acquire) < round) return false;
  return true;
}

std::string NodeAllReduce::behind(uint64_t round) const {
  if (round <= finished_) return "";
  for (int m = 0; m < group_.size(); ++m)
    if (counters_[size_t(m)].posted->load(std::memory_order_acquire) < round)
      return detail::concat(group_.describe_peer(m), " has not posted round ", round);
  return "";
}

void NodeAllReduce::wait(uint64_t round) {
  MERAK_CHECK(round <= posted_, "shared-memory all-reduce over ", group_.describe(),
              ": round ", round, " waited for, ", posted_, " posted");
  while (finished_ < round) finish_next();
}

void NodeAllReduce::finish_next() {
  const Round r = pending_.front();
  wait_all(&Counters::posted, r.number, "posted");
  const int me = group_.rank();
  if (r.op == ReduceOp::Sum && (me == 0 || group_.size() == 2)) {
    // Adding the others' inputs to this member's in place is rank order here (a + b = b + a
    // bit for bit, so with two members for either of them).
    for (int m = 0; m < group_.size(); ++m) {
      if (m == me) continue;
      const float* src = slot(m, r.number);
      for (int64_t i = 0; i < r.count; ++i) r.data[i] += src[i];
    }
  } else {
    reduce_in_rank_order(r);
  }
  finished_ = r.number;
  counters_[size_t(me)].finished->store(r.number, std::memory_order_release);
  pending_.pop_front();
}

void NodeAllReduce::reduce_in_rank_order(const Round& r) const {
  const int me = group_.rank();
  alignas(64) float acc[kBlockFloats];
  for (int64_t b = 0; b < r.count; b += kBlockFloats) {
    const int64_t len = std::min(kBlockFloats, r.count - b);
    // Members' inputs in rank order, whoever reduces, so every member gets the same bits; this
    // member's own from its data (the same values as its slot, nearer).
    for (int m = 0; m < group_.size(); ++m) {
      const float* src = (m == me ? r.data : slot(m, r.number)) + b;
      if (m == 0)
        std::memcpy(acc, src, size_t(len) * sizeof(float));
      else if (r.op == ReduceOp::Sum)
        for (int64_t i = 0; i < len; ++i) acc[i] += src[i];
      else
        for (int64_t i = 0; i < len; ++i) acc[i] = src[i] > acc[i] ? src[i] : acc[i];
    }
    std::memcpy(r.data + b, acc, size_t(len) * sizeof(float));
  }
}

}  // namespace merak::comm
