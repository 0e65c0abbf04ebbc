// The shared-memory all-reduce (comm::NodeAllReduce) of tensor-parallel ranks on one node, MPI
// backend only. Rounds of awkward lengths, two of them past the slots' size (the slots grow, all
// members together), sums and maxima; every result must equal the members' inputs combined in
// rank order, in float, bit for bit (the inputs are not integers, so another order shows over
// 8 members). Then more rounds in flight than the ring has slots, posted before any is waited
// for, with one member late to post each: the ring's reuse must wait for the slow one's reads,
// and the results come out right whichever order they are waited in. Finally ready(), and the
// refusals (an average, a length past the limit).
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_communicator.h"
#include "merak/comm/node_all_reduce.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

// Exact in float (an integer times a power of two), of magnitudes far apart across members, so
// their float sum rounds differently in another order.
float input_value(int member, int64_t i, int round) {
  const float whole = float((i * 13 + round) % 101 + 1) * (member % 2 ? -1.0f : 1.0f);
  return std::ldexp(whole, 3 * member - 12);
}

// The members' inputs combined in rank order, in float.
float want_value(int members, int64_t i, int round, ReduceOp op) {
  float acc = input_value(0, i, round);
  for (int m = 1; m < members; ++m) {
    const float v = input_value(m, i, round);
    acc = op == ReduceOp::Sum ? acc + v : (v > acc ? v : acc);
  }
  return acc;
}

std::vector<float> inputs(int member, int64_t count, int round) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = input_value(member, i, round);
  return v;
}

// The first element whose bits differ from want_value, or -1.
int64_t first_wrong(const std::vector<float>& got, int members, int round, ReduceOp op) {
  for (int64_t i = 0; i < int64_t(got.size()); ++i) {
    const float want = want_value(members, i, round, op);
    if (std::memcmp(&got[size_t(i)], &want, sizeof(float)) != 0) return i;
  }
  return -1;
}

void check_rounds(Ctx& c, NodeAllReduce& reduce, const Communicator& group,
                  const std::string& label) {
  // 70000 and 300000 floats pass the first slots (65536) and their doubling.
  const std::vector<int64_t> lengths = {0, 1, 17, 70000, 5000, 300000, 33};
  int round = 0;
  for (int64_t n : lengths) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      ++round;
      std::vector<float> data = inputs(group.rank(), n, round);
      reduce.all_reduce(data.data(), n, op);
      const int64_t bad = first_wrong(data, group.size(), round, op);
      c.checks.expect(bad < 0, label + ": " + reduce_op_name(op) + " of " + std::to_string(n) +
                                   " floats (first wrong element " + std::to_string(bad) + ")");
    }
  }
}

// kSlots + 3 rounds posted before any wait; the last member posts each a little late.
void check_in_flight(Ctx& c, NodeAllReduce& reduce, const Communicator& group,
                     const std::string& label) {
  const int rounds = NodeAllReduce::kSlots + 3;
  const int64_t n = 4099;
  std::vector<std::vector<float>> data;
  std::vector<uint64_t> numbers;
  for (int r = 0; r < rounds; ++r) data.push_back(inputs(group.rank(), n, 100 + r));
  for (int r = 0; r < rounds; ++r) {
    if (group.rank() == group.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    numbers.push_back(reduce.post(data[size_t(r)].data(), n, ReduceOp::Sum));
  }
  for (int r = rounds - 1; r >= 0; --r) {
    reduce.wait(numbers[size_t(r)]);
    const int64_t bad = first_wrong(data[size_t(r)], group.size(), 100 + r, ReduceOp::Sum);
    c.checks.expect(bad < 0, label + ": round " + std::to_string(r) + " of " +
                                 std::to_string(rounds) + " in flight (first wrong element " +
                                 std::to_string(bad) + ")");
  }
  // ready(): true at the latest once every member has posted; then wait() has the sum.
  std::vector<float> last = inputs(group.rank(), n, 200);
  const uint64_t number = reduce.post(last.data(), n, ReduceOp::Sum);
  const auto start = std::chrono::steady_clock::now();
  while (!reduce.ready(number) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::yield();
  c.checks.expect(reduce.ready(number), label + ": ready once every member has posted");
  reduce.wait(number);
  c.checks.expect(first_wrong(last, group.size(), 200, ReduceOp::Sum) < 0,
                  label + ": the sum after ready");
}

void check_group(Ctx& c, const Communicator& group, const std::string& label) {
  std::string why;
  std::unique_ptr<NodeAllReduce> reduce = NodeAllReduce::create_if(true, group, &why);
  c.checks.expect(reduce != nullptr, label + ": created (" + why + ")");
  if (!reduce) return;
  check_rounds(c, *reduce, group, label);
  check_in_flight(c, *reduce, group, label);
  c.checks.expect(reduce->bytes() >= NodeAllReduce::kSlots * 300000 * int64_t(sizeof(float)),
                  label + ": its slots grew to the longest round (" +
                      std::to_string(reduce->bytes()) + " bytes)");
}

}  // namespace

void case_mpi_node_all_reduce(Ctx& c) {
  if (!c.kit.is_mpi()) return;
  Grid world_grid({c.world, 1, 1}, c.kit.factory(c.options));
  check_group(c, world_grid.dp(), "world");
  if (c.world % 2 == 0) {
    // Pairs (the tensor-parallel groups of a tp 2 grid) at once, each through its own window.
    Grid pairs({c.world / 2, 1, 2}, c.kit.factory(c.options));
    check_group(c, pairs.tp(), "pairs");
  }
  std::string why;
  c.checks.expect(NodeAllReduce::create_if(false, world_grid.dp(), &why) == nullptr &&
                      why == "turned off",
                  "not made when turned off (" + why + ")");
  std::unique_ptr<NodeAllReduce> reduce = NodeAllReduce::create_if(true, world_grid.dp(), &why);
  if (!reduce) return;
  c.checks.expect(!reduce->accepts(10, ReduceOp::Avg), "an average goes to messages");
  c.checks.expect(!reduce->accepts(NodeAllReduce::kMaxBytes, ReduceOp::Sum),
                  "a round past the size limit goes to messages");
  float x = 1;
  c.checks.expect_error([&] { reduce->post(&x, 1, ReduceOp::Avg); },
                        {"shared-memory all-reduce", "avg of 1 floats"},
                        "posting an average is refused, naming it");
}

}  // namespace merak::comm::test
