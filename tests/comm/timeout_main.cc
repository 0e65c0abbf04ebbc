// A job in which one rank never posts its side of an operation. The waiting rank must end the
// whole job within its timeout, naming the operation, group and peer.
//   timeout_main p2p SECONDS         rank 1 never receives rank 0's 4 MiB send
//   timeout_main collective SECONDS  the last rank skips an all_reduce on the tp group (the
//                                    others' roll call must name it)
//   timeout_main node_sum SECONDS    the last rank never posts its part of a shared-memory sum
//   timeout_main node_all_reduce SECONDS   ... nor its input of a shared-memory all-reduce
//   timeout_main unwind_work SECONDS     rank 0 throws with a receive in flight that no one
//                                        matches; main catches and ends the job with the error
//   timeout_main unwind_windows SECONDS  rank 0 throws holding shared-memory windows while the
//                                        others wait in a shared-memory sum it never posts
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/node_all_reduce.h"
#include "merak/comm/node_sum.h"
#include "merak/comm/shared_array.h"

using namespace merak;
using namespace merak::comm;

// One rank fails mid-step. The destructors its exception unwinds through must not wait for the
// others (who wait for it): the error reaches main's catch, like merak_train's, and ends the
// job with its message. SECONDS is every wait's timeout, long enough to tell a hang.
int unwind(const std::string& scenario, double timeout) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Grid g({1, 1, world}, mpi_backend(CommOptions{timeout}));
  const int rank = g.rank();
  try {
    std::string why;
    std::vector<float> data(1024, 1.0f);
    Buffer buf(data.data(), 1024, DType::F32, Device::cpu());
    if (scenario == "unwind_work") {
      Tensor held = Tensor::zeros({1024}, DType::F32);
      Work never = g.tp().irecv(held, (rank + 1) % world, 7);  // nobody sends it
      if (rank == 0) throw Error("rank 0 failed mid-step");
      g.tp().barrier();
    } else {
      auto array = SharedArray::create(g.tp(), 1024, &why);
      auto sum = NodeSum::create(dynamic_cast<MpiCommunicator&>(g.tp()), {1024}, 1 << 20, &why);
      auto reduce = NodeAllReduce::create_if(true, g.tp(), &why);
      if (!array || !sum || !reduce) throw Error("no shared memory: " + why);
      if (rank == 0) throw Error("rank 0 failed mid-step");
      sum->post(0, {{data.data(), 1024}});
      sum->collect(0, data.data());
    }
  } catch (const std::exception& e) {
    abort_job(std::string("caught: ") + e.what());
  }
  std::printf("rank %d: finished without the failure\n", rank);
  return 0;
}

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: %s p2p|collective|node_sum|node_all_reduce|unwind_work|unwind_windows "
                 "SECONDS\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  const double timeout = std::atof(argv[2]);
  if (scenario.rfind("unwind", 0) == 0) return unwind(scenario, timeout);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Grid g({1, 1, world}, mpi_backend(CommOptions{timeout}));
  const int rank = g.rank();
  // Ranks not meant to time out wait far longer, so the one message comes from the stuck op.
  auto park = [&] {
    g.world().set_timeout(60);
    g.world().barrier();
  };
  std::vector<float> data(1 << 20, 1.0f);  // 4 MiB: too big to be sent eagerly
  Buffer buf(data.data(), int64_t(data.size()), DType::F32, Device::cpu());
  if (scenario == "p2p") {
    if (rank == 0) g.world().send(buf, 1, 5);
    park();
  } else if (scenario == "collective") {
    // Every rank but the last times out in it: their roll call names the last as the one missing.
    if (rank != world - 1) g.tp().all_reduce(buf.slice(0, 1024), ReduceOp::Sum);
    park();
  } else if (scenario == "node_sum") {
    if (rank != 0) g.tp().set_timeout(60);
    std::string why;
    auto sum = NodeSum::create(dynamic_cast<MpiCommunicator&>(g.tp()), {1024}, 1 << 20, &why);
    if (!sum) {
      std::fprintf(stderr, "no shared-memory sum: %s\n", why.c_str());
      return 1;
    }
    if (rank != world - 1) {
      std::vector<float> out(1024, 1.0f);
      sum->post(0, {{out.data(), 1024}});
      sum->collect(0, out.data());
    }
    park();
  } else if (scenario == "node_all_reduce") {
    if (rank != 0) g.tp().set_timeout(60);
    std::string why;
    auto reduce = NodeAllReduce::create_if(true, g.tp(), &why);
    if (!reduce) {
      std::fprintf(stderr, "no shared-memory all-reduce: %s\n", why.c_str());
      return 1;
    }
    if (rank != world - 1) reduce->all_reduce(data.data(), 1024, ReduceOp::Sum);
    park();
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  std::printf("rank %d: finished without a timeout\n", rank);
  return 0;
}
