// comm::SharedArray, MPI backend only: one array every member of a group on one node reads and
// writes in place. Member 0's values reach everyone; each member then writes its own slice, the
// last one after a pause, and after barrier() every member must see every slice (the barrier
// waits for the slow member and makes its writes visible). Pairs hold arrays of their own.
#include <chrono>
#include <string>
#include <thread>

#include "merak/comm/grid.h"
#include "merak/comm/shared_array.h"
#include "tests/comm/suite.h"

namespace merak::comm::test {

namespace {

void check_array(Ctx& c, Communicator& group, const std::string& label) {
  const int n = group.size(), me = group.rank();
  const int64_t per = 1000, floats = per * n;
  std::string why;
  std::unique_ptr<SharedArray> array = SharedArray::create(group, floats, &why);
  c.checks.expect(array != nullptr && array->floats() == floats, label + ": created (" + why + ")");
  if (!array) return;
  float* data = array->data();
  if (me == 0)
    for (int64_t i = 0; i < floats; ++i) data[i] = float(i);
  array->barrier();
  bool seen = true;
  for (int64_t i = 0; i < floats; ++i) seen = seen && data[i] == float(i);
  c.checks.expect(seen, label + ": member 0's values seen by member " + std::to_string(me));
  array->barrier();  // everyone has read them before anyone overwrites
  if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int64_t i = 0; i < per; ++i) data[me * per + i] = float(-1000 * (me + 1) - i);
  array->barrier();
  bool all = true;
  for (int m = 0; m < n; ++m)
    for (int64_t i = 0; i < per; ++i) all = all && data[m * per + i] == float(-1000 * (m + 1) - i);
  c.checks.expect(all, label + ": every member's slice, the slow one's too, after the barrier");
}

}  // namespace

void case_mpi_shared_array(Ctx& c) {
  if (!c.kit.is_mpi()) return;
  Grid world_grid({c.world, 1, 1}, c.kit.factory(c.options));
  check_array(c, world_grid.dp(), "world");
  if (c.world % 2 == 0) {
    Grid pairs({2, 1, c.world / 2}, c.kit.factory(c.options));
    check_array(c, pairs.dp(), "pairs");
  }
}

}  // namespace merak::comm::test
