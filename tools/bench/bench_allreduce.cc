// all_reduce bandwidth and latency through merak::comm, in the nccl-tests convention:
//   time  = mean per operation over the timed iterations, on the slowest rank
//   algbw = size / time;  busbw = algbw * 2(n-1)/n  (what each rank's link carries in a ring)
// Each operation is the blocking all_reduce (post + wait), in place, f32 sum. With the MPI
// backend two last columns give plain blocking MPI_Allreduce on the same buffer, for reference,
// and the shared-memory sum data-parallel replicas on one node use (comm::NodeSum: copy in,
// post, collect into the buffer).
//
//   bench_allreduce [--ranks 2,8] [--min-bytes 4K] [--max-bytes 64M] [--backend mpi|nccl]
//                   [--iters N]
// Started by hand it runs itself under mpirun once per entry of --ranks; started by mpirun it
// measures on the job it is in.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/nccl_communicator.h"
#include "merak/comm/node_sum.h"

namespace {

using namespace merak;
using namespace merak::comm;

struct Options {
  std::string ranks = "2,8";
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  std::string backend = "mpi";
  int iters = 0;  // 0: about 256 MiB of traffic per size, between 3 and 200 iterations
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--ranks 2,8] [--min-bytes 4K] [--max-bytes 64M] [--backend mpi|nccl] "
               "[--iters N]\n",
               argv0);
  std::exit(2);
}

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  int64_t v = std::strtoll(s.c_str(), &end, 10);
  const std::string unit = end;
  if (unit == "K") v <<= 10;
  else if (unit == "M") v <<= 20;
  else if (unit == "G") v <<= 30;
  else if (!unit.empty()) v = -1;
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const std::string val = argv[++i];
    if (arg == "--ranks") o.ranks = val;
    else if (arg == "--min-bytes") o.min_bytes = parse_bytes(val);
    else if (arg == "--max-bytes") o.max_bytes = parse_bytes(val);
    else if (arg == "--backend") o.backend = val;
    else if (arg == "--iters") o.iters = std::atoi(val.c_str());
    else usage(argv[0]);
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 0 ||
      (o.backend != "mpi" && o.backend != "nccl"))
    usage(argv[0]);
  return o;
}

// Not under mpirun: run this binary under it once per rank count.
int launch(int argc, char** argv, const Options& o) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::fprintf(stderr, "bench_allreduce: cannot find its own path\n");
    return 1;
  }
  self[len] = 0;
  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(" '") + argv[i] + "'";
  int status = 0;
  size_t pos = 0;
  while (pos <= o.ranks.size()) {
    size_t comma = o.ranks.find(',', pos);
    if (comma == std::string::npos) comma = o.ranks.size();
    const int n = std::atoi(o.ranks.substr(pos, comma - pos).c_str());
    pos = comma + 1;
    if (n < 1) continue;
    // Shared memory only (no network probing); root allowed, cores oversubscribed if need be.
    const std::string cmd =
        "OMPI_MCA_btl=self,vader mpirun --allow-run-as-root --oversubscribe -np " +
        std::to_string(n) + " '" + self + "'" + args;
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) status = 1;
  }
  return status;
}

// Memory for one buffer on the backend's device.
struct Memory {
  bool cuda = false;
  int device = 0;
  void* data = nullptr;
  size_t bytes = 0;
  Memory(bool cuda_, int device_, size_t bytes_) : cuda(cuda_), device(device_), bytes(bytes_) {
    if (cuda) {
      cudaSetDevice(device);
      if (cudaMalloc(&data, bytes) != cudaSuccess) MERAK_FAIL("cudaMalloc of ", bytes, " bytes");
    } else {
      data = std::malloc(bytes);
    }
  }
  ~Memory() { cuda ? (void)cudaFree(data) : std::free(data); }
  void fill(float v) {
    std::vector<float> h(bytes / 4, v);
    if (cuda)
      cudaMemcpy(data, h.data(), bytes, cudaMemcpyHostToDevice);
    else
      std::copy(h.begin(), h.end(), static_cast<float*>(data));
  }
  float first() const {
    float v = 0;
    if (cuda)
      cudaMemcpy(&v, data, 4, cudaMemcpyDeviceToHost);
    else
      v = *static_cast<const float*>(data);
    return v;
  }
};

// Mean seconds per call over `iters`, on the slowest rank.
template <typename F>
double timed(int iters, F f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) f();
  double t = (MPI_Wtime() - start) / iters, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int run(const Options& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const bool cuda = o.backend == "nccl";
  int device = 0;
  CommFactory factory = mpi_backend();
  if (cuda) {
    std::string why;
    const int n = cuda_device_count(&why);
    if (n == 0) {
      if (rank == 0) std::printf("bench_allreduce: no CUDA device (%s)\n", why.c_str());
      return 1;
    }
    device = local_rank() % n;
    factory = nccl_backend({}, device);
  }
  Grid grid({world, 1, 1}, factory);
  Communicator& comm = grid.world();
  const MPI_Comm raw = cuda ? MPI_COMM_NULL : static_cast<MpiCommunicator&>(comm).mpi_comm();
  const Device dev = cuda ? Device::cuda(device) : Device::cpu();

  if (rank == 0) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    std::printf("# all_reduce, %s backend, %d ranks on %u cores%s; f32 sum, in place, blocking "
                "(post + wait)\n",
                o.backend.c_str(), world, cores,
                unsigned(world) > cores ? " (oversubscribed)" : "");
    std::printf("# time: mean per op, slowest rank; busbw = algbw * 2(n-1)/n\n");
    std::printf("# %10s %10s %6s %11s %12s %12s%s\n", "size(B)", "count", "iters", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", cuda ? "" : "  MPI_Allreduce(us)  shared memory(us)");
  }
  bool all_ok = true;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const int64_t count = bytes / 4;
    Memory mem(cuda, device, size_t(count) * 4);
    Buffer buf(mem.data, count, DType::F32, dev);
    // Once for correctness: every rank holds rank+1, the sum is n(n+1)/2.
    mem.fill(float(rank + 1));
    comm.all_reduce(buf, ReduceOp::Sum);
    const bool ok = mem.first() == float(world * (world + 1) / 2);
    all_ok = all_ok && ok;
    mem.fill(0);  // zeros stay zeros however often they are summed
    const int iters =
        o.iters ? o.iters : int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 3, 200));
    comm.all_reduce(buf, ReduceOp::Sum);  // warm-up
    const double t = timed(iters, [&] { comm.all_reduce(buf, ReduceOp::Sum); });
    double ref = 0, shared = -1;
    if (!cuda) {
      auto plain = [&] {
        MPI_Allreduce(MPI_IN_PLACE, mem.data, int(count), MPI_FLOAT, MPI_SUM, raw);
      };
      plain();
      ref = timed(iters, plain);
      std::string why;
      auto sum = NodeSum::create(static_cast<MpiCommunicator&>(comm), {count}, int64_t(1) << 30,
                                 &why);
      if (sum) {
        float* data = static_cast<float*>(mem.data);
        auto node_sum = [&] {
          sum->post(0, {{data, count}});
          sum->collect(0, data);
        };
        node_sum();
        shared = timed(iters, node_sum);
      }
    }
    if (rank == 0) {
      const double algbw = double(bytes) / t / 1e9;
      const double busbw = algbw * 2.0 * (world - 1) / world;
      std::printf("  %10lld %10lld %6d %11.1f %12.3f %12.3f", (long long)bytes, (long long)count,
                  iters, t * 1e6, algbw, busbw);
      if (!cuda) std::printf(" %18.1f %18.1f", ref * 1e6, shared * 1e6);
      std::printf("%s\n", ok ? "" : "  WRONG RESULT");
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return launch(argc, argv, o);
  MpiSession mpi(&argc, &argv);
  return run(o);
}
