// ZeRO-1 (ShardedAdamW) with parameter vectors so short that some members' segments are empty:
// after one step every element of every member's parameters must be updated, over shared memory
// and over MPI alike. Prints one line a failing rank; exit status 1 when any rank failed.
//   zero_segments_main   (under mpirun, any number of ranks on one node)
#include <cstdio>
#include <string>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/runtime/engine_zero.h"

using namespace merak;

namespace {

// One step with every gradient 1 from zeros: AdamW's first step moves each element by -lr.
// Returns how many elements were left at zero.
int64_t stale_after_step(comm::Communicator& dp, int64_t n, bool shared_memory,
                         std::string* transport) {
  Tensor w = Tensor::zeros({n}, DType::F32);
  Tensor v = Tensor::zeros({3}, DType::F32);  // a second parameter: segments cross parameters
  std::vector<optim::Param> params = {{"w", w, false}, {"v", v, false}};
  optim::AdamWOptions options;
  options.lr = 0.1;
  runtime::ShardedAdamW zero(dp, params, options, shared_memory);
  *transport = zero.transport();
  zero.reduce_scatter({Tensor::full({n}, 1.0, DType::F32), Tensor::full({3}, 1.0, DType::F32)});
  zero.step(0.1);
  int64_t stale = 0;
  for (const Tensor& t : {w, v})
    for (int64_t i = 0; i < t.numel(); ++i) stale += t.data<float>()[i] == 0.0f ? 1 : 0;
  return stale;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  comm::Grid grid({world, 1, 1}, comm::mpi_backend(comm::CommOptions{60}));
  int failed = 0;
  // 1 and 40 leave members with empty segments (they are cut at multiples of 16 over shared
  // memory); 4099 gives every member one.
  for (int64_t n : {int64_t(1), int64_t(40), int64_t(4099)}) {
    for (bool shared_memory : {true, false}) {
      std::string transport;
      const int64_t stale = stale_after_step(grid.dp(), n, shared_memory, &transport);
      // The shared-memory case must run over it: a silent fallback to messages tests nothing.
      if (shared_memory && transport != "shared memory") {
        ++failed;
        std::printf("FAIL [rank %d] %lld + 3 parameters: asked for shared memory, got %s\n",
                    grid.rank(), (long long)n, transport.c_str());
        continue;
      }
      if (stale == 0) continue;
      ++failed;
      std::printf("FAIL [rank %d] %lld + 3 parameters over %s: %lld never updated\n", grid.rank(),
                  (long long)n, transport.c_str(), (long long)stale);
    }
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (grid.rank() == 0)
    std::printf("zero_segments: %s\n", any ? "FAILED" : "every element updated");
  return any ? 1 : 0;
}
