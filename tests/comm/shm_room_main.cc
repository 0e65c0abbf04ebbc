// Shared-memory windows against a small shared-memory file system (the test mounts one and
// points OMPI_MCA_osc_sm_backing_directory at it): a window that does not fit is not made and
// its user falls back to messages with the reason, on every member alike, instead of MPI failing
// (MPI_ERR_INTERN) or the first touch killing the process (SIGBUS). With 4 ranks: two
// data-parallel groups making windows at once, each fitting alone but not both, are both
// refused (each checks for the room of the two) where one of them could die.
//   shm_room_main MIB   (under mpirun, 2 or 4 ranks on one node; MIB: the file system's size)
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/node_communicator.h"
#include "merak/comm/node_sum.h"
#include "merak/comm/shared_array.h"

using namespace merak;
using namespace merak::comm;

namespace {

using Expect = std::function<void(bool ok, const std::string& what)>;

// Two ranks, one group: windows that do not fit alone, or beside one already made.
void one_group(int64_t fs_floats, const Expect& expect) {
  Grid g({2, 1, 1}, mpi_backend(CommOptions{30}));
  std::string why;
  {
    // Each fits on its own; together they do not. The first is filled once made.
    auto first = SharedArray::create(g.dp(), fs_floats * 3 / 4, &why);
    expect(first != nullptr, "a shared array of 3/4 of the room is made (" + why + ")");
    why.clear();
    auto second = SharedArray::create(g.dp(), fs_floats * 3 / 4, &why);
    expect(second == nullptr && why.find("MiB free, the window needs") != std::string::npos,
           "a second one is refused with the reason (" + why + ")");
  }
  why.clear();
  auto sum = NodeSum::create(dynamic_cast<MpiCommunicator&>(g.dp()), {fs_floats}, int64_t(1) << 30,
                             &why);
  expect(sum == nullptr && why.find("MiB free, the window needs") != std::string::npos,
         "a shared-memory sum larger than the room is refused with the reason (" + why + ")");
  {
    // Tensor parallelism through shared memory: a round the slots cannot grow to goes by
    // messages, with the right sum.
    GridOptions options;
    options.tp_shared_memory = true;
    Grid tp({1, 1, 2}, mpi_backend(CommOptions{30}), MPI_COMM_WORLD, options);
    for (int64_t n : {int64_t(1000), fs_floats}) {
      std::vector<float> v(size_t(n), float(tp.rank() + 1));
      tp.tp().all_reduce(Buffer(v.data(), n, DType::F32, Device::cpu()), ReduceOp::Sum);
      expect(v[0] == 3.0f && v[size_t(n - 1)] == 3.0f,
             "tp all_reduce of " + std::to_string(n) + " floats sums");
    }
  }
}

// Four ranks, two groups (the replicas {0, 2} and {1, 3} of two stages) making windows at once.
void two_groups(int64_t fs_floats, const Expect& expect) {
  Grid g({2, 2, 1}, mpi_backend(CommOptions{30}));
  std::string why;
  {
    auto both = SharedArray::create(g.dp(), fs_floats / 4, &why);
    expect(both != nullptr, "two groups' arrays of 1/4 of the room each are made (" + why + ")");
  }
  why.clear();
  auto either = SharedArray::create(g.dp(), fs_floats * 3 / 4, &why);
  expect(either == nullptr && why.find("for each of the node's 2 groups") != std::string::npos,
         "two groups' arrays of 3/4 of the room each are both refused (" + why + ")");
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 8;
  const int64_t fs_floats = (mib << 20) / 4;
  int failed = 0;
  const Expect expect = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::printf("FAIL [rank %d] %s\n", world_rank(), what.c_str());
  };
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 4)
    two_groups(fs_floats, expect);
  else
    one_group(fs_floats, expect);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank() == 0)
    std::printf("shm_room (%d ranks): %s\n", world, any ? "FAILED" : "every check passed");
  return any ? 1 : 0;
}
