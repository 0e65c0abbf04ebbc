#include "merak/comm/node_sum.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "merak/comm/mpi_env.h"
#include "merak/comm/node_wait.h"
#include "merak/core/error.h"

namespace merak::comm {

namespace {

constexpr int64_t kAlignFloats = 16;  // 64 bytes: segments never share a cache line
constexpr int64_t kBlockFloats = 2048;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

std::unique_ptr<NodeSum> NodeSum::create(const MpiCommunicator& group,
                                         const std::vector<int64_t>& region_floats,
                                         int64_t max_bytes, std::string* why_not) {
  std::vector<Region> regions;
  int64_t at = 0;
  for (int64_t n : region_floats) {
    MERAK_CHECK(n >= 0, "shared-memory sum over ", group.describe(), ": region of ", n,
                " floats");
    regions.push_back({at, n});
    at += round_up(n, kAlignFloats);
  }
  if (at * int64_t(sizeof(float)) > max_bytes) {
    *why_not = detail::concat("its ", at * int64_t(sizeof(float)) >> 20, " MiB a member exceed the ",
                              max_bytes >> 20, " MiB allowed in shared memory");
    return nullptr;
  }
  MPI_Comm node = one_node_comm(group.mpi_comm(), group.describe(), why_not);
  if (node == MPI_COMM_NULL) return nullptr;
  const int n = group.size();
  const size_t k = regions.size();
  const int64_t counter_bytes = round_up(int64_t(3 * k * sizeof(uint64_t)), 64);
  // Every part: counters, then the slot; member 0's also holds the results.
  const int64_t slot_bytes = at * int64_t(sizeof(float));
  const int64_t part_bytes = counter_bytes + slot_bytes * (group.rank() == 0 ? 2 : 1);
  if (!node_window_fits(node, part_bytes, why_not)) {
    MPI_Comm_free(&node);
    return nullptr;
  }
  std::unique_ptr<NodeSum> sum(new NodeSum(group, std::move(regions)));
  sum->node_ = node;
  int node_rank = -1;
  MPI_Comm_rank(node, &node_rank);
  MERAK_CHECK(node_rank == group.rank(), group.describe(), ": its node communicator ranks it ",
              node_rank);  // equal keys keep the group's order
  sum->bytes_ = (int64_t(n) * (counter_bytes + slot_bytes) + slot_bytes) / n;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part near its owner's memory
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(MPI_Aint(part_bytes), 1, info, node, &base,
                                         &sum->window_);
  MPI_Info_free(&info);
  check_mpi(rc, group.describe() + ": MPI_Win_allocate_shared of " +
                    std::to_string(part_bytes) + " bytes");
  for (int m = 0; m < n; ++m) {
    MPI_Aint size = 0;
    int unit = 0;
    void* part = nullptr;
    check_mpi(MPI_Win_shared_query(sum->window_, m, &size, &unit, &part),
              group.describe() + ": MPI_Win_shared_query");
    auto* c = static_cast<std::atomic<uint64_t>*>(part);
    sum->counters_.push_back({c, c + k, c + 2 * k});
    sum->slots_.push_back(reinterpret_cast<float*>(static_cast<char*>(part) + counter_bytes));
  }
  sum->results_ = sum->slots_[0] + at;
  auto* mine = static_cast<char*>(base);
  std::memset(mine, 0, size_t(part_bytes));  // taken now (node_window_fits)
  for (size_t i = 0; i < 3 * k; ++i)
    new (mine + i * sizeof(uint64_t)) std::atomic<uint64_t>(0);
  check_mpi(MPI_Barrier(node), group.describe() + ": barrier after the shared window");
  return sum;
}

std::unique_ptr<NodeSum> NodeSum::create_if(bool wanted, const Communicator& group,
                                            const std::vector<int64_t>& region_floats,
                                            std::string* why_not) {
  if (!wanted) {
    *why_not = "turned off";
    return nullptr;
  }
  const MpiCommunicator* mpi = as_mpi(group, why_not);
  return mpi ? create(*mpi, region_floats, kMaxBytes, why_not) : nullptr;
}

NodeSum::NodeSum(const MpiCommunicator& group, std::vector<Region> regions)
    : group_(group),
      regions_(std::move(regions)),
      round_(regions_.size(), 0),
      summed_(regions_.size(), 0),
      lent_(regions_.size(), false),
      pieces_(regions_.size()) {}

NodeSum::~NodeSum() { free_node_window(&window_, &node_); }

int64_t NodeSum::segment_begin(int k, int member) const {
  const int64_t n = regions_[size_t(k)].floats;
  if (member >= group_.size()) return n;
  return std::min(n, n * member / group_.size() / kAlignFloats * kAlignFloats);
}

void NodeSum::wait_all(std::atomic<uint64_t>* Counters::*counter, int k, uint64_t round,
                       const char* done) {
  wait_for_members(
      group_, node_, "shared-memory sum",
      [&](int m) {
        return (counters_[size_t(m)].*counter)[k].load(std::memory_order_acquire) >= round;
      },
      [&] { return detail::concat(done, " region ", k, " of round ", round); });
}

void NodeSum::post(int k, std::vector<Piece> pieces) {
  MERAK_CHECK(k >= 0 && k < regions(), "shared-memory sum: no region ", k, " of ", regions());
  const int me = group_.rank();
  const uint64_t round = round_[size_t(k)];
  MERAK_CHECK(counters_[size_t(me)].collected[k].load(std::memory_order_relaxed) == round,
              "shared-memory sum over ", group_.describe(), ": region ", k,
              " posted again before its sum was collected or released");
  int64_t total = 0;
  for (const Piece& p : pieces) total += p.count;
  MERAK_CHECK(total == floats(k), "shared-memory sum over ", group_.describe(), ": region ", k,
              " holds ", floats(k), " floats, posted ", total);
  pieces_[size_t(k)] = std::move(pieces);
  wait_all(&Counters::collected, k, round, "collected");
  // The other members' segments go where they will read them; this member's own stays put.
  float* slot = slots_[size_t(me)] + regions_[size_t(k)].offset;
  for (int m = 0; m < group_.size(); ++m) {
    if (m == me) continue;
    const int64_t lo = segment_begin(k, m), hi = segment_begin(k, m + 1);
    copy_input(k, lo, hi - lo, slot + lo);
  }
  round_[size_t(k)] = round + 1;
  counters_[size_t(me)].posted[k].store(round + 1, std::memory_order_release);
}

void NodeSum::copy_input(int k, int64_t begin, int64_t count, float* dst) const {
  int64_t at = 0;  // region offset of the current piece
  for (const Piece& p : pieces_[size_t(k)]) {
    const int64_t lo = std::max(at, begin), hi = std::min(at + p.count, begin + count);
    if (lo < hi) {
      if (p.data)
        std::memcpy(dst + (lo - begin), p.data + (lo - at), size_t(hi - lo) * sizeof(float));
      else
        std::fill(dst + (lo - begin), dst + (hi - begin), 0.0f);
    }
    at += p.count;
    if (at >= begin + count) break;
  }
}

void NodeSum::sum_segment(int k, float* out) {
  const int64_t lo = segment_begin(k, group_.rank()), hi = segment_begin(k, group_.rank() + 1);
  const int64_t off = regions_[size_t(k)].offset;
  float* dst = out - lo;
  alignas(64) float acc[kBlockFloats];
  alignas(64) float own[kBlockFloats];
  const size_t me = size_t(group_.rank());
  for (int64_t b = lo; b < hi; b += kBlockFloats) {
    const int64_t len = std::min(kBlockFloats, hi - b);
    // This member's input from the caller's pieces, the others' from their slots; added in
    // rank order, whoever adds, so every member's copy of the sum has the same bits.
    copy_input(k, b, len, own);
    for (size_t m = 0; m < slots_.size(); ++m) {
      const float* src = m == me ? own : slots_[m] + off + b;
      if (m == 0)
        std::memcpy(acc, src, size_t(len) * sizeof(float));
      else
        for (int64_t i = 0; i < len; ++i) acc[i] += src[i];
    }
    std::memcpy(dst + b, acc, size_t(len) * sizeof(float));
  }
}

void NodeSum::progress() {
  const int me = group_.rank();
  for (int k = 0; k < regions(); ++k) {
    const uint64_t round = round_[size_t(k)];
    if (summed_[size_t(k)] == round) continue;
    bool all_posted = true;
    for (const Counters& c : counters_)
      all_posted = all_posted && c.posted[k].load(std::memory_order_acquire) >= round;
    if (!all_posted) continue;
    sum_segment(k, own_segment(k));
    summed_[size_t(k)] = round;
    counters_[size_t(me)].summed[k].store(round, std::memory_order_release);
  }
}

void NodeSum::collect(int k, float* out) {
  const float* summed = sum(k);  // waits for the sum and lends it, even an empty one
  // An empty region may come with no buffer at all: memcpy must not see a null pointer.
  if (floats(k) > 0) std::memcpy(out, summed, size_t(floats(k)) * sizeof(float));
  release(k);
}

void NodeSum::release(int k) {
  MERAK_CHECK(k >= 0 && k < regions(), "shared-memory sum: no region ", k, " of ", regions());
  if (!lent_[size_t(k)]) return;
  lent_[size_t(k)] = false;
  counters_[size_t(group_.rank())].collected[k].store(round_[size_t(k)],
                                                      std::memory_order_release);
}

const float* NodeSum::sum(int k) {
  MERAK_CHECK(k >= 0 && k < regions(), "shared-memory sum: no region ", k, " of ", regions());
  const uint64_t round = round_[size_t(k)];
  wait_posted(k);
  wait_on_node(group_, node_, "shared-memory sum", [&] {
    progress();
    return summed_[size_t(k)] == round;
  }, [] { return std::string("this member's sum"); });
  wait_summed(k);
  lent_[size_t(k)] = true;
  return results_ + regions_[size_t(k)].offset;
}

void NodeSum::wait_summed(int k) {
  wait_all(&Counters::summed, k, round_[size_t(k)], "added up its part of");
}

void NodeSum::wait_posted(int k) {
  const uint64_t round = round_[size_t(k)];
  MERAK_CHECK(round > 0 && counters_[size_t(group_.rank())].collected[k].load(
                               std::memory_order_relaxed) < round,
              "shared-memory sum over ", group_.describe(), ": region ", k,
              " reduced before it was posted");
  wait_all(&Counters::posted, k, round, "posted");
}

void NodeSum::reduce_scatter(int k, float* out) {
  MERAK_CHECK(k >= 0 && k < regions(), "shared-memory sum: no region ", k, " of ", regions());
  wait_posted(k);
  sum_segment(k, out);
}

float* NodeSum::own_segment(int k) {
  return results_ + regions_[size_t(k)].offset + segment_begin(k, group_.rank());
}

void NodeSum::all_gather(int k,
                         const std::function<void(int, int64_t, const float*, int64_t)>& take) {
  MERAK_CHECK(k >= 0 && k < regions(), "shared-memory sum: no region ", k, " of ", regions());
  const int me = group_.rank();
  const uint64_t round = round_[size_t(k)];
  MERAK_CHECK(round > 0 && counters_[size_t(me)].collected[k].load(std::memory_order_relaxed) <
                               round,
              "shared-memory sum over ", group_.describe(), ": region ", k,
              " gathered before it was posted");
  summed_[size_t(k)] = round;
  counters_[size_t(me)].summed[k].store(round, std::memory_order_release);
  wait_summed(k);
  const float* results = results_ + regions_[size_t(k)].offset;
  for (int m = 0; m < group_.size(); ++m) {
    const int64_t lo = segment_begin(k, m), hi = segment_begin(k, m + 1);
    take(m, lo, results + lo, hi - lo);
  }
  counters_[size_t(me)].collected[k].store(round, std::memory_order_release);
}

}  // namespace merak::comm
