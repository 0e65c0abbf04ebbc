// The shared-memory sum (comm::NodeSum) of data-parallel replicas on one node, MPI backend only:
// regions of awkward sizes summed over several rounds, posted all at once and collected (or
// read in place) out of order; the ZeRO-1 form (reduce_scatter, own segment overwritten,
// all_gather); a region posted again while its sum is still read in place, refused; the refusal
// when the regions exceed the allowed size. Values are small integers, so sums are exact.
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_communicator.h"
#include "merak/comm/node_sum.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

const std::vector<int64_t> kRegions = {0, 1, 17, 1000, 4099};

float input_value(int member, int k, int64_t i, int round) {
  return float((member + 1) * (i % 7 + 1) + k + round);
}

void check_sums(Ctx& c, const MpiCommunicator& group, const std::string& label) {
  std::string why;
  std::unique_ptr<NodeSum> sum = NodeSum::create(group, kRegions, int64_t(1) << 30, &why);
  c.checks.expect(sum != nullptr, label + ": created (" + why + ")");
  if (!sum) return;
  const int n = group.size();
  for (int round = 1; round <= 3; ++round) {
    // Each region's input in pieces of 100 floats (the first region's 0 floats: none), every
    // fifth piece a null one that stands for zeros.
    std::vector<std::vector<float>> inputs(kRegions.size());
    for (int k = 0; k < sum->regions(); ++k) {
      std::vector<float>& in = inputs[size_t(k)];
      for (int64_t i = 0; i < kRegions[size_t(k)]; ++i)
        in.push_back((i / 100) % 5 == 4 ? 0.0f : input_value(group.rank(), k, i, round));
      std::vector<NodeSum::Piece> pieces;
      for (int64_t i = 0; i < kRegions[size_t(k)]; i += 100)
        pieces.push_back({(i / 100) % 5 == 4 ? nullptr : in.data() + i,
                          std::min<int64_t>(100, kRegions[size_t(k)] - i)});
      sum->post(k, pieces);
      sum->progress();
    }
    // In reverse order; odd regions read in place (released once all are checked), even ones
    // copied out.
    for (int k = sum->regions() - 1; k >= 0; --k) {
      std::vector<float> copied(size_t(kRegions[size_t(k)]), -1.0f);
      const float* out = copied.data();
      if (k % 2) out = sum->sum(k);
      else sum->collect(k, copied.data());
      bool ok = true;
      int64_t bad = -1;
      for (int64_t i = 0; i < kRegions[size_t(k)] && ok; ++i) {
        double want = 0;
        for (int m = 0; m < n; ++m) want += (i / 100) % 5 == 4 ? 0 : input_value(m, k, i, round);
        ok = out[i] == float(want);
        if (!ok) bad = i;
      }
      c.checks.expect(ok, label + ": round " + std::to_string(round) + " region " +
                              std::to_string(k) + (k % 2 ? " sum in place" : " sum") +
                              " (first wrong element " + std::to_string(bad) + ")");
    }
    for (int k = 1; k < sum->regions(); k += 2) sum->release(k);
  }
}

// Every member reads a sum in place and posts the region again without releasing it: refused
// before anything is shared, so after release() the next round goes through.
void check_release(Ctx& c, const MpiCommunicator& group) {
  std::string why;
  std::unique_ptr<NodeSum> sum = NodeSum::create(group, {100}, int64_t(1) << 30, &why);
  c.checks.expect(sum != nullptr, "release: created (" + why + ")");
  if (!sum) return;
  std::vector<float> in(100);
  for (int round = 1; round <= 2; ++round) {
    for (int64_t i = 0; i < 100; ++i) in[size_t(i)] = input_value(group.rank(), 0, i, round);
    sum->post(0, {{in.data(), 100}});
    const float* out = sum->sum(0);
    bool ok = true;
    for (int64_t i = 0; i < 100; ++i) {
      double want = 0;
      for (int m = 0; m < group.size(); ++m) want += input_value(m, 0, i, round);
      ok = ok && out[i] == float(want);
    }
    c.checks.expect(ok, "release: round " + std::to_string(round) + " sum in place");
    if (round == 1) {
      std::string error;
      try {
        sum->post(0, {{in.data(), 100}});
      } catch (const Error& e) {
        error = e.what();
      }
      c.checks.expect(error.find("before its sum was collected or released") != std::string::npos,
                      "release: posting again while the sum is read in place is refused (" +
                          error + ")");
    }
    sum->release(0);
  }
}

void check_zero(Ctx& c, const MpiCommunicator& group) {
  std::string why;
  const int64_t total = 4099;
  std::unique_ptr<NodeSum> sum = NodeSum::create(group, {total}, int64_t(1) << 30, &why);
  c.checks.expect(sum != nullptr, "zero: created (" + why + ")");
  if (!sum) return;
  const int n = group.size(), me = group.rank();
  int64_t covered = 0;
  for (int m = 0; m < n; ++m) covered += sum->segment_begin(0, m + 1) - sum->segment_begin(0, m);
  c.checks.expect(sum->segment_begin(0, 0) == 0 && covered == total,
                  "zero: the segments cover the region");
  for (int round = 1; round <= 2; ++round) {
    std::vector<float> in(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) in[size_t(i)] = input_value(me, 0, i, round);
    sum->post(0, {{in.data(), total}});
    const int64_t lo = sum->segment_begin(0, me), hi = sum->segment_begin(0, me + 1);
    std::vector<float> mine(size_t(hi - lo));
    sum->reduce_scatter(0, mine.data());
    bool sums_ok = true;
    for (int64_t i = lo; i < hi; ++i) {
      double want = 0;
      for (int m = 0; m < n; ++m) want += input_value(m, 0, i, round);
      sums_ok = sums_ok && mine[size_t(i - lo)] == float(want);
    }
    c.checks.expect(sums_ok, "zero: round " + std::to_string(round) + " own segment's sum");
    // The "updated parameters": 1000 * member + index, shared back to everyone.
    float* own = sum->own_segment(0);
    for (int64_t i = lo; i < hi; ++i) own[i - lo] = float(1000 * me + i + round);
    std::vector<float> all(size_t(total), -1.0f);
    std::vector<int> members;
    sum->all_gather(0, [&](int m, int64_t begin, const float* values, int64_t count) {
      members.push_back(m);
      for (int64_t i = 0; i < count; ++i) all[size_t(begin + i)] = values[i];
    });
    bool every_member = int(members.size()) == n;
    for (int m = 0; m < int(members.size()); ++m) every_member = every_member && members[m] == m;
    c.checks.expect(every_member, "zero: all_gather hands each member's segment once, in order");
    bool gathered_ok = true;
    for (int m = 0; m < n; ++m)
      for (int64_t i = sum->segment_begin(0, m); i < sum->segment_begin(0, m + 1); ++i)
        gathered_ok = gathered_ok && all[size_t(i)] == float(1000 * m + i + round);
    c.checks.expect(gathered_ok, "zero: round " + std::to_string(round) + " gathered segments");
  }
}

}  // namespace

void case_mpi_node_sum(Ctx& c) {
  if (!c.kit.is_mpi()) return;
  Grid world_grid({c.world, 1, 1}, c.kit.factory(c.options));
  const auto& world = dynamic_cast<const MpiCommunicator&>(world_grid.dp());
  check_sums(c, world, "world");
  check_zero(c, world);
  check_release(c, world);
  if (c.world % 2 == 0) {
    // Pairs (the data-parallel groups of a dp 2 grid) at once, each through its own window.
    Grid pairs({2, 1, c.world / 2}, c.kit.factory(c.options));
    check_sums(c, dynamic_cast<const MpiCommunicator&>(pairs.dp()), "pairs");
  }
  std::string why;
  c.checks.expect(NodeSum::create(world, {1 << 20}, 1 << 20, &why) == nullptr &&
                      why.find("MiB") != std::string::npos,
                  "refused above the size limit, saying why (" + why + ")");
}

}  // namespace merak::comm::test
